// The plain parts of the model interface (model_facts.h, pprt/family.h): layouts as the hooks see
// them, a configuration's setup, and the values of a family's options.
#include "runtime/model/model_facts.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/fail.h"

namespace pprt {

LayoutInfo layout_info(const ppc::Layout& layout) {
  LayoutInfo info;
  info.text = layout.source;
  for (const auto& stage : layout.stages) {
    std::string s;
    for (ppc::LayerKind k : stage) s += ppc::layer_symbol(k);
    info.stages.push_back(std::move(s));
  }
  return info;
}

ModelSetup setup_of(const Config& config, const std::string& family) {
  auto field = [&](const char* name) {
    const auto it = config.find(name);
    if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() < 1 ||
        it->get<int64_t>() > (1 << 30))
      fail(fmt::format("model '{}'", family),
           fmt::format("its configuration has no positive integer \"{}\" (Family::configure "
                       "must give one)",
                       name));
    return it->get<int>();
  };
  ModelSetup s;
  s.vocab = field("vocab");
  s.seq_len = field("seq_len");
  return s;
}

std::optional<int> OptionValues::integer(const std::string& flag) const {
  const auto it = integers.find(flag);
  return it == integers.end() ? std::nullopt : it->second;
}

bool OptionValues::on(const std::string& flag) const {
  const auto it = switches.find(flag);
  return it != switches.end() && it->second;
}

std::string OptionValues::file(const std::string& flag) const {
  const auto it = files.find(flag);
  return it == files.end() ? std::string() : it->second;
}

std::vector<std::string> OptionValues::given() const {
  std::vector<std::string> out;
  for (const auto& [flag, v] : integers)
    if (v) out.push_back(flag);
  for (const auto& [flag, v] : switches)
    if (v) out.push_back(flag);
  for (const auto& [flag, v] : files)
    if (!v.empty()) out.push_back(flag);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace pprt
