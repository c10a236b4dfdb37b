// Explaining why ranks cannot make progress (used by lowering, the verifier and the simulator).
#pragma once

#include <string>
#include <vector>

#include "compiler/action.h"
#include "compiler/dependencies.h"
#include "compiler/plan.h"

namespace ppc {

struct StuckRank {
  int rank = 0;
  int index = 0;          // position of the action it is stuck at, in the order being run
  std::string at;         // "its action 5 (4F0)" or "its actions 3-4 (batch 0SEND_F1, 0RECV_B0)"
  std::string waits_for;  // "the activation of stage 3 microbatch 0 from rank 3"
  int waits_on = -1;      // the rank that must act first; -1 if none will
};

// Describes a rank stuck at compute action `a` (position `index`), whose first unmet need
// (per `ev`, kNever = not happened) is what it waits for.
StuckRank describe_stuck_compute(const Plan& plan, const EventFlags& ev, int rank, int index,
                                 const Action& a);

// Lowering's error when the compute orders cannot run on (a UserError naming the stuck ranks and
// the cycle): `next[r]` is the position of rank r's next compute action, `ev` what has happened.
// Returns if every rank has run all of its order.
void throw_if_computes_stuck(const Plan& plan, const EventFlags& ev,
                             const std::vector<size_t>& next);

// "rank 0 waits at its action 5 (4F0) for ... from rank 3; rank 3 waits at ...; cycle: rank 0 ->
// rank 3 -> rank 0". Starts at the first stuck rank and follows waits_on.
std::string explain_stuck(const std::vector<StuckRank>& stuck);

// "the activation of stage 3 microbatch 0 (from rank 3)" for a need.
std::string describe_need(const Plan& plan, const Need& n, int rank);

}  // namespace ppc
