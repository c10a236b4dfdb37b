// ppcompile --compare: compile, verify and simulate every schedule that can run a model at a
// pipeline size, and rank them by simulated makespan.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "compiler/layout.h"
#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"
#include "compiler/verify_and_lower.h"

namespace ppc {

struct CompareOptions {
  Layout layout;  // the model as given (its stage count fixes one vpp)
  bool has_model = false;
  int pp = 1;
  int microbatches = 1;
  CostModel cost;                      // unit costs by default
  std::optional<double> memory_limit;  // bytes (or activation units under unit costs) per rank
  ExpertParallel expert_parallel;      // --ep, --first-dense (issue 40): each plan's all-to-alls
};

struct CompareRow {
  std::string schedule;
  int vpp = 1;
  PlacementStyle placement = PlacementStyle::Loop;
  std::string layout_note;  // e.g. "stages merged in pairs" when the layout was re-split
  Plan plan;                // lowered and verified
  VerifyReport report;
  Simulation sim;
  double peak_memory = 0;  // max over ranks of sim.peak_memory
  int peak_rank = 0;       // the rank with that peak
  double comm_bytes = 0;
  bool fits = true;  // peak_total <= memory_limit (true when no limit)
  // Added with the implementation:
  size_t messages = 0;    // SEND actions (point-to-point messages)
  double peak_total = 0;  // max over ranks of peak activation + parameter memory
  int peak_total_rank = 0;
};

struct Skipped {
  std::string schedule;
  std::string reason;  // one line
};

struct Comparison {
  std::vector<CompareRow> rows;  // sorted by makespan, best first
  std::vector<Skipped> skipped;
};

Comparison compare_schedules(const CompareOptions& opts);

// One row of a comparison for a compiled (compute-only) plan: lowered for the cost model,
// verified (InternalError if not valid: plans here are generated), simulated, with its peaks and
// whether it fits `memory_limit`. Used by compare_schedules and by --autotune.
CompareRow measure_plan(Plan plan, const CostModel& cost, std::optional<double> memory_limit);
// The row of a plan that verify_and_lower passed, with a timeline simulation: its peaks and whether
// it fits `memory_limit`.
CompareRow compare_row(VerifiedPlan checked, std::optional<double> memory_limit);

// The comparison as a terminal table (one row per schedule, then the skipped configurations).
void emit_compare_table(const Comparison& cmp, const CompareOptions& opts, std::ostream& os);

}  // namespace ppc
