#include "compiler/memory_mode.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "compiler/split_list.h"

namespace ppc {

namespace {

constexpr MemoryMode kModes[] = {MemoryMode::None, MemoryMode::Selective, MemoryMode::Full,
                                 MemoryMode::Offload};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> items(std::string_view text) {
  std::vector<std::string_view> out = split_list(text);
  for (std::string_view& item : out) item = trim(item);
  return out;
}

[[noreturn]] void fail(const std::string& input, std::string_view text, std::string what) {
  throw UserError(fmt::format("'{}': {}", printable(text), what), input_location(input));
}

MemoryRule parse_target(std::string_view target, const std::string& input, std::string_view text) {
  MemoryRule rule;
  if (target == "all") return rule;
  if (target.size() == 1 && is_layer_symbol(target[0])) {
    rule.target = MemoryRule::Target::Kind;
    rule.kind = own_layer(target[0]);
    return rule;
  }
  if (target.starts_with("stage")) {
    const std::string_view digits = target.substr(5);
    int stage = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), stage);
    if (!digits.empty() && ec == std::errc() && end == digits.data() + digits.size() &&
        stage >= 0) {
      rule.target = MemoryRule::Target::Stage;
      rule.stage = stage;
      return rule;
    }
  }
  fail(input, text,
       fmt::format("unknown target \"{}\" (expected all, a layer symbol such as t, or stageN)",
                   printable(target)));
}

std::string target_text(const MemoryRule& rule) {
  switch (rule.target) {
    case MemoryRule::Target::All:
      return "all";
    case MemoryRule::Target::Kind:
      return std::string(1, layer_symbol(rule.kind));
    case MemoryRule::Target::Stage:
      return fmt::format("stage{}", rule.stage);
  }
  return "all";
}

bool names(const MemoryRule& rule, int stage, LayerKind kind) {
  switch (rule.target) {
    case MemoryRule::Target::All:
      return true;
    case MemoryRule::Target::Kind:
      return rule.kind == kind;
    case MemoryRule::Target::Stage:
      return rule.stage == stage;
  }
  return false;
}

}  // namespace

const char* memory_mode_name(MemoryMode mode) {
  switch (mode) {
    case MemoryMode::None:
      return "none";
    case MemoryMode::Selective:
      return "selective";
    case MemoryMode::Full:
      return "full";
    case MemoryMode::Offload:
      return "offload";
  }
  return "none";
}

std::optional<MemoryMode> parse_memory_mode(std::string_view name) {
  for (MemoryMode m : kModes)
    if (name == memory_mode_name(m)) return m;
  return std::nullopt;
}

MemoryMode MemoryPolicy::mode_of(int stage, LayerKind kind) const {
  for (auto it = rules.rbegin(); it != rules.rend(); ++it)
    if (names(*it, stage, kind)) return it->mode;
  return MemoryMode::None;
}

bool MemoryPolicy::uses(MemoryMode mode) const {
  return std::any_of(rules.begin(), rules.end(),
                     [mode](const MemoryRule& r) { return r.mode == mode; });
}

MemoryPolicy parse_memory_policy(std::string_view text, const std::string& input) {
  MemoryPolicy policy;
  for (std::string_view item : items(text)) {
    if (item.empty()) fail(input, text, "an empty item (expected [TARGET:]MODE, e.g. t:full)");
    const size_t colon = item.find(':');
    const std::string_view mode_text =
        colon == std::string_view::npos ? item : item.substr(colon + 1);
    MemoryRule rule = colon == std::string_view::npos
                          ? MemoryRule{}
                          : parse_target(trim(item.substr(0, colon)), input, text);
    const auto mode = parse_memory_mode(trim(mode_text));
    if (!mode)
      fail(input, text,
           fmt::format("unknown mode \"{}\" (expected none, selective, full or offload)",
                       printable(trim(mode_text))));
    rule.mode = *mode;
    policy.rules.push_back(rule);
  }
  return policy;
}

MemoryPolicy parse_offload_targets(std::string_view text, const std::string& input) {
  MemoryPolicy policy;
  for (std::string_view item : items(text)) {
    if (item.empty()) fail(input, text, "an empty item (expected all, a layer symbol or stageN)");
    MemoryRule rule = parse_target(item, input, text);
    rule.mode = MemoryMode::Offload;
    policy.rules.push_back(rule);
  }
  return policy;
}

MemoryPolicy combine(const MemoryPolicy& a, const MemoryPolicy& b) {
  MemoryPolicy out = a;
  out.rules.insert(out.rules.end(), b.rules.begin(), b.rules.end());
  return out;
}

std::string format_memory_policy(const MemoryPolicy& policy) {
  std::string out;
  for (const MemoryRule& rule : policy.rules) {
    if (!out.empty()) out += ',';
    out += target_text(rule);
    out += ':';
    out += memory_mode_name(rule.mode);
  }
  return out;
}

void check_memory_policy(const MemoryPolicy& policy, const Layout& layout, int num_stages,
                         const std::string& input) {
  const std::string text = format_memory_policy(policy);
  for (const MemoryRule& rule : policy.rules) {
    if (rule.target == MemoryRule::Target::Stage && rule.stage >= num_stages)
      fail(input, text,
           fmt::format("stage{} does not exist (the plan has {} stages: stage0 to stage{})",
                       rule.stage, num_stages, num_stages - 1));
    if (rule.target == MemoryRule::Target::Kind && layout.count(rule.kind) == 0)
      fail(input, text,
           fmt::format("no stage holds a layer '{}' (layout {})", layer_symbol(rule.kind),
                       printable(layout.source)));
  }
}

}  // namespace ppc
