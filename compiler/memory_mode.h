// What each stage does with the activations it keeps between a forward and its backward
// (issue 42): keep them (none), drop the cheap-to-recompute parts (selective), keep only each
// layer's input and rerun its forward before the backward (full), or move them to host memory
// between the two (offload).
//
// A MemoryPolicy is a list of rules, later rules overriding earlier ones; each names what it
// applies to: every stage, the layers of one kind (a layout symbol), or one plan stage. The
// same text is --recompute's and --offload's (pprun and ppcompile) and the plan's optional
// "memory" field (docs/plan-format.md), so that a plan's choice and a user's flag read alike:
//
//   --recompute full                  every layer of every stage: full
//   --recompute 't:selective,m:full'  decoder layers selective, MTP layers full
//   --recompute 'full,stage3:none'    every stage full except plan stage 3
//   --offload 'stage0,stage1'         plan stages 0 and 1 offload (the items name targets only)
//
// The canonical text (format_memory_policy) writes each rule as TARGET:MODE, joined by commas
// ("all:full,stage3:none"); parse_memory_policy reads it back unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/layout.h"

namespace ppc {

enum class MemoryMode : uint8_t { None, Selective, Full, Offload };

// "none", "selective", "full", "offload".
const char* memory_mode_name(MemoryMode mode);
std::optional<MemoryMode> parse_memory_mode(std::string_view name);

struct MemoryRule {
  enum class Target : uint8_t { All, Kind, Stage };
  Target target = Target::All;
  LayerKind kind = LayerKind::Decoder;  // Target::Kind
  int stage = 0;                        // Target::Stage: a plan stage
  MemoryMode mode = MemoryMode::None;

  bool operator==(const MemoryRule&) const = default;
};

struct MemoryPolicy {
  std::vector<MemoryRule> rules;

  bool empty() const { return rules.empty(); }
  // The mode of a layer of kind `kind` on plan stage `stage`: the last rule that names it, else
  // none.
  MemoryMode mode_of(int stage, LayerKind kind) const;
  // Whether any rule asks for `mode`.
  bool uses(MemoryMode mode) const;
  bool operator==(const MemoryPolicy&) const = default;
};

// --recompute's text: comma-separated items [TARGET:]MODE, TARGET one of "all", a layer symbol
// (an ASCII letter) or "stageN"; MODE one of none, selective, full, offload. `input` names the
// flag or field in the one-line UserError that bad text gives (an unknown mode lists the modes).
MemoryPolicy parse_memory_policy(std::string_view text, const std::string& input);
// --offload's text: comma-separated TARGETs, each given mode offload.
MemoryPolicy parse_offload_targets(std::string_view text, const std::string& input);
// The rules of `b` after those of `a` (b overrides a).
MemoryPolicy combine(const MemoryPolicy& a, const MemoryPolicy& b);
// Canonical text: TARGET:MODE items joined by commas; "" for an empty policy.
std::string format_memory_policy(const MemoryPolicy& policy);
// Checks each rule against a plan of `num_stages` stages: a stage index out of range, or a layer
// kind that no stage of `layout` holds, is a UserError naming `input`.
void check_memory_policy(const MemoryPolicy& policy, const Layout& layout, int num_stages,
                         const std::string& input);

}  // namespace ppc
