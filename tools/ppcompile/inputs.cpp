// What ppcompile's flags say, checked (inputs.h).
#include "tools/ppcompile/inputs.h"

#include <fmt/format.h>

#include <iostream>
#include <string>

#include "compiler/diagnostic.h"

namespace ppcompile {

void require_sizes(const Options& o, bool schedule) {
  if (o.pp == -1) throw ppc::UserError("--pp is required");
  if (schedule && o.schedule.empty())
    throw ppc::UserError("--schedule is required (see --list-schedules)");
  if (o.microbatches_text.empty()) throw ppc::UserError("--microbatches is required");
}

std::pair<ppc::Layout, bool> load_model(const Options& o, const char* also) {
  if (!o.layout.empty()) return {ppc::parse_layout(o.layout, "layout", o.symbols), true};
  if (!o.layout_file.empty()) return {ppc::parse_layout_file(o.layout_file, o.symbols), true};
  if (o.stages != -1) {
    if (o.stages < 1 || o.stages > ppc::kMaxLayoutItems)
      throw ppc::UserError(
          fmt::format("--stages must be between 1 and {}, got {}", ppc::kMaxLayoutItems, o.stages));
    return {ppc::generic_layout(o.stages), false};
  }
  throw ppc::UserError(
      fmt::format("give the model as --layout STR, --layout-file FILE or --stages N{}", also));
}

void require_layout(const Options& o, const char* flag, const char* does) {
  if (!o.from_csv.empty() || !o.from_json.empty() || o.stages != -1)
    throw ppc::UserError(fmt::format("{} {} a model's layers: give --layout or --layout-file (not "
                                     "--stages, --from-csv or --from-json)",
                                     flag, does),
                         ppc::input_location(flag));
}

ppc::Layout model_to_split(const Options& o) {
  ppc::Layout layout = load_model(o, "").first;
  if (o.num_layers >= 0) ppc::check_model(layout, o.num_layers);
  return layout;
}

void note_uncosted(const ppc::CostModel& cost, const ppc::Layout& layout) {
  const std::string missing = ppc::uncosted_own_symbols(cost, layout);
  if (missing.empty()) return;
  std::string list;
  for (char c : missing) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", c);
  std::cerr << fmt::format(
      "ppcompile: note: the cost model has no entry for {}: {} as much as a decoder layer 't'\n",
      list, missing.size() == 1 ? "it costs" : "they cost");
}

ppc::CostModel cost_model(const Options& o) {
  if (!o.cost_file.empty()) return ppc::read_cost_model(o.cost_file);
  if (o.cost_flags.any()) return ppc::cost_model_from_flags(o.cost_flags);
  if (o.balance || o.autotune) return ppc::unit_layer_costs();
  return ppc::CostModel{};
}

std::optional<double> memory_limit(const Options& o) {
  if (o.memory_limit.empty()) return std::nullopt;
  return ppc::parse_memory_size(o.memory_limit, "--memory-limit");
}

ppc::MemoryPolicy memory_policy(const Options& o) {
  ppc::MemoryPolicy p;
  if (!o.recompute.empty()) p = ppc::parse_memory_policy(o.recompute, "--recompute");
  if (!o.offload.empty()) p = ppc::combine(p, ppc::parse_offload_targets(o.offload, "--offload"));
  return p;
}

}  // namespace ppcompile
