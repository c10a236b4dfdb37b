// Building small plans from text, for tests: one string of space-separated actions per rank; and
// plans and layouts written back as text.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "compiler/action.h"
#include "compiler/dependencies.h"
#include "compiler/layout.h"
#include "compiler/plan.h"

namespace pptest {

inline std::vector<ppc::Action> parse_actions(const std::string& text) {
  std::vector<ppc::Action> out;
  std::istringstream ss(text);
  std::string tok, err;
  while (ss >> tok) {
    auto a = ppc::parse_action(tok, &err);
    if (!a) throw std::runtime_error("bad action in test: " + tok + ": " + err);
    out.push_back(*a);
  }
  return out;
}

// A plan over `stages` generic stages in loop placement. If `lowered` is true, `ranks` are the
// lowered orders (the compute orders are derived from them) and peers are filled in.
inline ppc::Plan text_plan(int pp, int stages, int microbatches,
                           const std::vector<std::string>& ranks, bool lowered,
                           ppc::PlacementStyle style = ppc::PlacementStyle::Loop) {
  ppc::Plan p;
  p.layout = ppc::generic_layout(stages);
  p.placement = ppc::make_placement(stages, pp, style);
  p.schedule = "test";
  p.microbatches = microbatches;
  for (const auto& r : ranks) {
    auto acts = parse_actions(r);
    std::vector<ppc::Action> compute;
    for (auto& a : acts) {
      if (ppc::is_comm(a.kind))
        a.peer = ppc::comm_match(p, a).rank;
      else
        compute.push_back(a);
    }
    p.compute.push_back(compute);
    if (lowered) p.lowered.push_back(acts);
  }
  return p;
}

inline std::string orders_text(const std::vector<std::vector<ppc::Action>>& orders) {
  std::string out;
  for (const auto& r : orders) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (i) out += ' ';
      out += ppc::to_string(r[i]);
    }
    out += "\n";
  }
  return out;
}

// A layout's stages as compact strings: {"Et", "tttt", "", "tL"}.
inline std::vector<std::string> compact(const ppc::Layout& layout) {
  std::vector<std::string> out;
  for (const auto& stage : layout.stages) {
    out.emplace_back();
    for (ppc::LayerKind k : stage) out.back() += ppc::layer_symbol(k);
  }
  return out;
}

}  // namespace pptest
