// ppcompile's outputs: one emitter per value of --emit, each writing a verified plan (the
// library's emit_* passes), and how the chosen one runs beside verification.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/balance.h"
#include "compiler/cost_model.h"
#include "compiler/emit_text.h"
#include "compiler/verify_and_lower.h"
#include "compiler/visualization.h"
#include "tools/ppcompile/options.h"
#include "tools/ppcompile/output.h"

namespace ppcompile {

// Whether the table is coloured (--color, NO_COLOR, TERM, a terminal on stdout).
bool use_color(const Options& o);
// The terminal's width when the table goes to one (the table turns compact if wider), else 0.
int terminal_columns(const Options& o);
// The SVG/HTML timeline's options from --arrows and --width.
ppc::TimelineOptions timeline_options(const Options& o, const ppc::CostModel& cost);

// What an emitter's parts share while one plan is written.
struct Emit {
  const Options& o;
  const ppc::CostModel& cost;
  std::optional<double> limit;
  const ppc::BalanceResult* balanced = nullptr;  // --balance's search (--emit stats shows it)
  ppc::TableOptions table = {};
  HeldText early = {};  // written beside verification; reaches the output once the plan is valid
  int table_steps = 0;
  std::vector<std::string> json_compute = {};
};

// The values of --emit (a name with a space is another flag's variant of one).
std::vector<std::string> emit_names();

// Emits the plan that `verified` makes valid (it runs `alongside` on it, maybe beside its
// verification), as --emit asks.
using Verifier = std::function<ppc::VerifiedPlan(ppc::SimulationNeed, const ppc::Alongside&)>;
int emit(Emit& e, const Verifier& verified);

}  // namespace ppcompile
