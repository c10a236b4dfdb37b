// Compiling a model's layout for a schedule: the placement of its stages on the ranks and the
// schedule's compute order (a plan without SEND/RECV). Lowering (lower_send_recv.h,
// lower_for_model.h) and verification (verify.h, verify_and_lower.h) are the passes after it.
#pragma once

#include <optional>
#include <string>

#include "compiler/layout.h"
#include "compiler/plan.h"
#include "compiler/schedule.h"

namespace ppc {

struct CostModel;  // simulate.h

struct CompileOptions {
  Layout layout;           // from parse_layout / parse_layout_file, or generic_layout(N)
  bool has_model = false;  // check_model() applies
  std::optional<int> num_layers;
  int pp = 1;
  std::optional<int> vpp;  // inferred from the layout when absent; must agree when given
  std::string schedule;
  int microbatches = 1;
  // --schedule Auto synthesizes its order for these costs (null: unit costs) and this memory
  // limit per rank (synthesize.h); the named schedules ignore them.
  const CostModel* cost = nullptr;
  std::optional<double> memory_limit;
  // --recompute and --offload (issue 42): the plan's memory policy, checked against its stages
  // (a UserError names `memory_input`). Empty: Auto under a memory limit chooses one
  // (memory_choice.h); the named schedules keep everything.
  MemoryPolicy memory;
  std::string memory_input = "--recompute";
  // --ep and --first-dense (issue 40): the plan's expert parallelism (expert_parallel.h).
  ExpertParallel expert_parallel;
};

// Limits that keep a plan's tables in memory (documented in docs/ppcompile.md).
inline constexpr int kMaxPp = 4096;
inline constexpr int kMaxMicrobatches = 1 << 20;
inline constexpr long long kMaxComputeActions = 64LL << 20;

// Checks the options, places the layout and generates the schedule's compute order (the plan is
// not lowered): generate(plan_skeleton(opts, resolve_schedule(opts.schedule)), opts, ...). Throws
// UserError for anything the user must change.
Plan compile(const CompileOptions& opts);

// compile()'s steps, for a driver that runs them one by one (ppcompile's, which can show the plan
// after each):
// The row of the schedule table named `name` (or one of its aliases); UserError naming --schedule
// when there is none.
const ScheduleInfo& resolve_schedule(const std::string& name);
// The schedule's plan skeleton (everything but the orders): checks the options and the vpp rule
// and builds the placement. Also used by importers.
Plan plan_skeleton(const CompileOptions& opts, const ScheduleInfo& info);
// The skeleton with the schedule's compute order. A synthesized schedule (Auto) makes its plan
// from the options anew, and may place its stages otherwise than the skeleton does.
Plan generate(Plan skeleton, const CompileOptions& opts, const ScheduleInfo& info);

}  // namespace ppc
