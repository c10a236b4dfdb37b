// --schedule Auto: an order synthesized from the costs and the memory limit (docs/schedules.md,
// "Auto: synthesized orders").
//
// Two parts:
//  - list_schedule (compiler/schedules/auto.cpp), the generator: one order from one policy. It
//    runs every rank in simulated time under the model lowering and the simulator use (each
//    SEND/RECV a rendezvous between two ranks that are between computes, then the message's
//    time; under the cost model's eager message model a SEND that never waits) and, whenever a rank
//    is free, picks what to run from what is ready: an OVERLAP_F_B of a forward and a backward
//    where overlapping saves time, a backward (I, or B), a forward, or a held-back W, by the
//    policy's priorities. A forward runs only if the memory it takes leaves every microbatch in the
//    pipeline able to finish within the limit (the banker's algorithm), so the order never exceeds
//    the limit and never waits for memory that cannot come.
//  - synthesize (compiler/synthesize.cpp), the search: list_schedule under a set of policies on
//    each placement that fits (loop, and V with two stages per rank), every order lowered and
//    simulated exactly as ppcompile does; the named one-copy schedules that run the same
//    configuration are candidates too. The best few are then improved by moving Ws (those that
//    outlast the pace-setting rank, and into the waits of the rank that ends last) and, where a
//    stage's whole backward is shorter than its I + W, by joining an I and its W into a B on the
//    rank that ends last, each change kept only if the simulated plan gets shorter. The best
//    order that fits the limit wins.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/plan.h"
#include "compiler/schedule.h"
#include "compiler/simulate.h"

namespace ppc {

// How list_schedule picks among ready actions.
struct ListPolicy {
  bool split_backward = true;  // I then W (W held back to fill idle time); false: B
  bool overlap = true;         // pair a forward with a backward in an OVERLAP_F_B when it saves
  // A pair's backward part: the one that saves the most (B, when it is longer than I and the
  // forward), else I.
  bool pair_full_backward = true;
  // A new microbatch's forward joins a pair only when no forward of a microbatch already in the
  // pipeline is ready (keeps those moving and saves the new one for a larger backward later).
  bool pair_new_last = false;
  // Among ready backwards: the deepest stage first (its gradient has the longest way to go);
  // false: the oldest microbatch first.
  bool backward_deepest_first = true;
  // Among ready forwards: the deepest stage first (depth first); false: the oldest microbatch.
  bool forward_deepest_first = true;
  // When only a W or a forward of a new microbatch is ready: the W first (keeps the forward for a
  // pair later, and memory low); false: the forward.
  bool w_before_new_forward = true;
  // Ws a rank may hold back: with this many waiting, a W runs before a lone forward or backward
  // (pairs still first); 0 = Ws only fill idle time.
  int max_held_w = 0;
  // Ranks whose lower bound is within this fraction of the largest hold every W back (they set
  // the pace); max_held_w applies to the others.
  double busiest_margin = 0.02;
  // On ranks other than the busiest, with overlaps: a lone backward or forward waits for a partner
  // (running Ws meanwhile) up to this many times its own duration; 0 = never waits.
  double partner_wait = 0;
  // On ranks other than the busiest: no lone forward starts while the input of a deeper stage's
  // forward or of a backward, from a compute running on another rank, would arrive before it ends
  // (the rank waits for it instead).
  bool lookahead = false;
  // With I/W split: on the busiest ranks, a lone backward of a stage whose B is shorter than its
  // I + W runs whole (a B). The rank that sets the pace has no idle time for a held-back W to fill,
  // so splitting there only adds the difference (measured profiles: a whole backward is rarely
  // exactly I + W).
  bool busiest_full_b = false;
  // Most microbatches in the pipeline at once (entered, last backward not done); 0 = no cap.
  int max_in_flight = 0;
  // With I/W split: every W runs as soon as its I ends, before anything else. The rank's work and
  // memory are then those of a B (nothing is held back), but the input gradient leaves after the
  // I: under a memory limit where what an I keeps for its W cannot wait (recomputation keeps less
  // than weight_grad_memory of the activation), the gradients still pass each rank an I's time
  // after they arrive instead of a B's.
  bool w_at_once = false;
  std::string describe() const;
};

struct ListScheduleInput {
  const Plan* skeleton = nullptr;  // layout, placement, microbatches (one model copy)
  const CostModel* cost = nullptr;
  // Per rank: the most activation memory it may hold (the limit less its parameters); empty = no
  // limit.
  std::vector<double> activation_budget;
};

struct ListSchedule {
  std::vector<std::vector<Action>> orders;  // per rank, compute actions only
  double makespan = 0;                      // in list_schedule's own run
};

// Throws UserError when the limit leaves no room for a single microbatch on some rank.
ListSchedule list_schedule(const ListScheduleInput& in, const ListPolicy& policy);

struct SynthesisOptions {
  Layout layout;
  bool has_model = false;
  std::optional<int> num_layers;
  int pp = 1;
  std::optional<int> vpp;  // stages per rank; the layout's stages / pp when absent
  int microbatches = 1;
  CostModel cost;                      // unit costs by default
  std::optional<double> memory_limit;  // per rank: activations + parameters
  // The memory modes of every candidate (issue 42); synthesize_choosing_memory (memory_choice.h)
  // tries several.
  MemoryPolicy memory;
  ExpertParallel expert_parallel;  // issue 40: the all-to-alls the costs count (expert_parallel.h)
  // Placements to try; empty = loop, and V when there are two stages per rank.
  std::vector<PlacementStyle> placements;
  // Also try the named one-copy schedules that run this configuration (the result is then never
  // worse than the best of them that fits).
  bool named_candidates = true;
};

struct SynthesisResult {
  Plan plan;               // compute order only; schedule "Auto"
  double makespan = 0;     // simulated (lower_for_model, then simulate)
  double peak_total = 0;   // max over ranks of peak activations + parameters
  bool fits = true;        // peak_total <= memory_limit
  double lower_bound = 0;  // makespan_lower_bound, the least over the placements tried
  std::string chosen;      // which candidate won ("list scheduling: ..." or "as ZB-H1")
  int candidates = 0;      // orders simulated
  // The best named schedule among the candidates (that fits, when one does): name and makespan.
  std::string best_named;
  double best_named_makespan = 0;
};

SynthesisResult synthesize(const SynthesisOptions& opts);

// The plan skeleton of Auto on `style`: what plan_skeleton checks, on that placement (the stages
// every synthesis, and the choice of memory modes, places its orders on).
Plan auto_skeleton(const SynthesisOptions& o, PlacementStyle style);

// The name of its row of the schedule table (schedules.cpp).
inline constexpr const char* kAuto = "Auto";

// compile() for --schedule Auto (its row's `synthesize`): synthesize() with the options' costs
// and limit.
Plan compile_auto(const CompileOptions& opts);

// One line for --emit stats: the lower bound and how far the plan is from it.
std::string describe_bound(const Plan& plan, const CostModel& cost, double makespan);

}  // namespace ppc
