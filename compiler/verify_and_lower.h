// The passes between building a plan (compile() or an importer) and emitting it, as ppcompile
// runs them: verify the compute order, lower it (unless it is lowered already), verify the lowered
// plan, and simulate it if the output needs that. Each replay of the plan runs once: under unit
// costs the lowering is also the compute order's check that it can run (the verifier's check 3),
// and the deadlock model's run of the lowered plan is also the simulator's.
//
// verify.h is the verifier itself (one plan in, a report out); this file is the pass order around
// it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace ppc {

enum class SimulationNeed : uint8_t {
  None,
  Summary,   // totals, bubbles and peaks, without per-action times (--emit stats)
  Timeline,  // everything simulate() returns (pictures)
};

struct VerifiedPlan {
  Plan plan;                      // lowered, unless the compute order failed verification
  VerifyReport report;            // of the lowered plan, or of the compute order if that failed
  std::optional<Simulation> sim;  // when asked for and the plan is valid
};

// Equal to: report = verify(compute order); if ok, plan = lower_for_model(plan, cost) (when not
// lowered yet) and report = verify(plan); if ok and asked, sim = simulate(plan, cost) (without
// times and memory points for Summary).
//
// `alongside` (either part may be empty) is work that needs only the plan, such as an emitter
// writing into memory: each part is called once with the final plan whenever its compute order
// passed verification, `compute_order` first, and what they make is only valid if the returned
// report is ok. For a plan lowered here (from that verified compute order, by
// lower_while_verifying, which verifies the lowered plan as lowering writes it) they run on another
// thread, overlapping the verification: `compute_order`, which reads the plan but its lowered order
// (lowering may be writing it meanwhile), from the start of lowering; `whole_plan` as soon as
// lowering is done and `compute_order` has returned. Otherwise they run after that verification.
// They may throw: the first exception reaches the caller after the verification ends, unless the
// plan failed it (a part after a throwing one is not called).
using AlongsideFn = std::function<void(const Plan&)>;
struct Alongside {
  AlongsideFn compute_order = {};  // reads the plan but its lowered order
  AlongsideFn whole_plan = {};     // reads the whole plan, lowered order included
};

// What verify_and_lower shows of each of its passes as it ends (ppcompile --dump-after; any may
// be empty), on the calling thread: `lowered` the plan once lowering has written it (or as it
// came, lowered already; the verifier may still be reading it), `verified` the report that
// decides (of the compute order if that failed), `simulated` the simulation.
struct AfterPasses {
  std::function<void(const Plan&)> lowered = {};
  std::function<void(const VerifyReport&)> verified = {};
  std::function<void(const Simulation&)> simulated = {};
};

VerifiedPlan verify_and_lower(Plan plan, const CostModel& cost, SimulationNeed need,
                              const Alongside& alongside = {}, const AfterPasses& after = {});

// verify(lower_send_recv(plan), opts) for a compute-only plan whose compute order passed verify(),
// lowering it in place (lower_in_place; plan.lowered is set) on the calling thread while a second
// thread verifies the lowered order as lowering writes it (verify_as_lowered, verify.h): the
// report (and opts.execution) are the ones verify() gives the lowered plan, except as
// verify_as_lowered says. `lowered`, if set, is called on the calling thread as soon as the
// lowered order is complete. Throws lowering's UserError (the plan then stays compute-only).
VerifyReport lower_while_verifying(Plan& plan, const VerifyOptions& opts,
                                   const std::function<void()>& lowered = {});

// verify_and_lower, and a plan that fails is an error: a UserError naming `imported_from` (the
// file it was read from) with one verifier message per line, or, when `imported_from` is empty
// (the plan was generated), an InternalError. The result's plan is lowered and valid.
VerifiedPlan verify_and_lower_or_throw(Plan plan, const CostModel& cost,
                                       const std::string& imported_from,
                                       SimulationNeed need = SimulationNeed::None,
                                       const Alongside& alongside = {},
                                       const AfterPasses& after = {});

}  // namespace ppc
