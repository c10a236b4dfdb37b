// Lowering: inserts the SEND/RECV actions of a compute-only plan.
//
// Lowering replays the compute orders in simulated time under the deadlock model of
// docs/deadlock-model.md (a send waits until its receiver posts the receive in its current batch)
// and places each transfer where both ranks meet:
//  - when a rank finishes a compute whose output another rank needs, it posts the SEND right
//    after that compute;
//  - the receiver posts the RECV in the batch it is in now if it is between computes, else in the
//    batch that follows its running compute (the sender waits for it, as it would at run time);
//  - a rank starts its next compute once its current batch is complete and the compute's inputs
//    are there (received, or produced by an earlier local compute).
// Every op is thus matched as soon as both sides are between computes, and the running computes
// always finish, so no batch waits forever: the plan is deadlock-free by construction (and the
// verifier checks it again). Stages on the same rank pass tensors locally: no SEND/RECV.
//
// Durations default to unit costs (F=1, B=2, I=W=1 per stage, communication free); a cost model
// (simulate.h) makes the batches follow the real timing.
//
// Throws UserError if the compute order cannot run at all (ranks wait for each other's later
// actions); the message names the ranks, their actions and the cycle.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "compiler/plan.h"

namespace ppc {

struct LoweringCosts {
  std::function<double(const Action&, int rank)> compute;  // null = unit costs
  std::function<double(const Action& send)> transfer;      // null = free
  // Set when every duration (compute and transfer) is a whole number no larger than this:
  // lowering then uses a faster event queue. 0 = arbitrary durations. Unit costs (both functions
  // null) are whole numbers up to 3 by themselves.
  int max_integral_duration = 0;
  // Placement policy for a SEND whose receiver is computing. false (default): post it now; the
  // sender waits for the receiver's boundary. true: hold it back to the sender's next boundary
  // (the sender keeps computing) when the receiver's next compute does not need the data, or when
  // the receiver would then wait less than the sender would now. Neither is always faster under
  // blocking exchanges; lower_for_model (simulate.h) tries both.
  bool defer_sends = false;
};

Plan lower_send_recv(const Plan& plan, const LoweringCosts& costs = {});
Plan lower_send_recv(Plan&& plan, const LoweringCosts& costs = {});

// Runs the compute order as lower_send_recv(plan) does, without building the lowered order:
// throws the UserError lowering would throw. The verifier's check that a compute order can run.
void check_compute_order_runs(const Plan& plan);

// The time steps of the compute orders when every action takes one step (as in PyTorch's
// _format_pipeline_order): steps[r][i] is when rank r runs its i-th compute action. Used by the
// terminal table. Throws like lowering.
std::vector<std::vector<int32_t>> compute_steps(const Plan& plan);

// Unit cost of an action: F=1, B=2, I=1, W=1, OVERLAP_F_B = F + B.
double unit_cost(const Action& a);

}  // namespace ppc
