// The verifier: decides whether a plan is correct and runs to completion, for any plan
// (generated, lowered, or imported from CSV/JSON).
//
// Checks, in order:
//  1. Shape: one order per rank; every action's stage and microbatch in range, the stage held by
//     the rank that runs it, the microbatch one that the stage's model copy processes; peers of
//     SEND/RECV are the ranks of the neighbouring stages; no SEND/RECV between stages on one rank.
//  2. Counts: every (stage, microbatch) gets exactly one F and then exactly one B, or one I and
//     one W; every transfer between ranks has exactly one SEND and one matching RECV, and there is
//     none where no transfer is needed. If the plan is lowered, its compute actions are exactly
//     the compute order.
//  3. Execution under the deadlock model (docs/deadlock-model.md): each rank runs its actions in
//     order; a maximal run of consecutive SEND/RECV is one batch, which completes only when each
//     of its ops finds its matching op posted in the peer's current batch; a compute action needs
//     its inputs, received or produced locally before it. A compute-only plan is run as lowering
//     would run it. Failures name the rank, the action position and the waiting cycle.
// It also measures each rank's peak in-flight activations: (stage, microbatch) pairs whose F ran
// and whose B or I has not.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/plan.h"

namespace ppc {

struct VerifyReport {
  std::vector<std::string> errors;  // one line each; empty = the plan is correct
  bool truncated = false;           // more errors than max_errors were found
  bool checked_lowered = false;     // the deadlock model ran on the lowered order
  std::vector<int> peak_inflight;   // per rank
  size_t compute_actions = 0;
  size_t comm_actions = 0;
  size_t batches = 0;  // communication batches (lowered plans)

  bool ok() const { return errors.empty(); }
};

VerifyReport verify(const Plan& plan, size_t max_errors = 20);

struct ExecCosts;
struct Execution;

// verify() with the knobs the compile pipeline (verify_and_lower.h) uses to run every replay of a
// plan once.
struct VerifyOptions {
  size_t max_errors = 20;
  // Verify the compute order only, as if plan.lowered were empty (without copying the plan).
  bool compute_only = false;
  // Compute-only: check 3, running the compute order as lowering does. Off only for a caller that
  // lowers the plan with lower_send_recv (unit costs) right after: lowering runs the same replay
  // and throws the same UserError, which the caller adds to the report's errors.
  bool check_runs = true;
  // Lowered: run the deadlock model with these costs (SimulationRun::costs(): the same run then
  // simulates the plan), recording every action's times if asked, and hand the run back in
  // `execution` when it is set. Costs and times do not change what the model decides.
  const ExecCosts* costs = nullptr;
  bool record_times = false;
  Execution* execution = nullptr;
};
VerifyReport verify(const Plan& plan, const VerifyOptions& opts);

class LoweringFeed;  // lower_send_recv.h

// verify(plan, opts) of the lowered order that `lower` writes into `plan` while this runs: for a
// compute-only plan whose compute order passed verify(), `lower` lowers it in place through the
// feed it is handed (lower_in_place, lower_send_recv.h), on the calling thread, while a second
// thread verifies the lowered order as it is published: checks 1 and 2 per action, and check 3
// (the deadlock model, GrowingExecution) as far as each rank's written actions let it run, while
// every action so far passed. The counts of check 2 follow once both threads are done, and the
// model's run counts only if they pass: the report (and opts.execution) are the ones verify()
// gives the lowered plan (except, for a plan that fails check 3, the order of the ranks' errors
// and whether an input a rank lacks is said to come later or never: the rank runs before the rest
// of the plan is written). What `lower` throws reaches the caller. verify_and_lower.h's
// lower_while_verifying is the one caller.
VerifyReport verify_as_lowered(const Plan& plan, const VerifyOptions& opts,
                               const std::function<void(LoweringFeed*)>& lower);

// Peak in-flight activations per rank of a compute order (no checks).
std::vector<int> peak_inflight(const Plan& plan);

}  // namespace ppc
