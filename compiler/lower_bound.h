// A lower bound on the simulated makespan of every plan of one configuration (layout, placement,
// microbatches, model copies) under a cost model: no order of any schedule, named or synthesized,
// simulates to less. docs/schedules.md ("The lower bound") proves it.
//
// Per rank r, with the durations of the cost model (simulate.h):
//   h   the earliest time any forward of one of r's stages can start (the forwards of every
//       stage before it, and a message per rank boundary on the way);
//   R   the earliest time any backward (B or I, or the backward part of an OVERLAP_F_B) of one of
//       r's stages can start (the first microbatch's forwards to the last stage, then the input
//       gradients back down, with their messages);
//   P   r's work without overlaps: per stage and microbatch F + min(B, I + W);
//   M   the most an overlap can save: OVERLAP_F_B(F, X) takes F + X - overlap * min(F, X), each F
//       and each backward in one pair at most, so the savings are at most overlap times the
//       best matching of the rank's forwards with its backwards by min(F, X) (sorted pairing is
//       optimal for that weight);
//   u   the forward work r can do before R, which no overlap can hide: min(R - h, sum of F).
// The bound for r is R + P - u - overlap * min(M, K - rho * u), where K is the sum over r's
// forwards of min(F, largest backward of r) and rho the smallest ratio min(F, largest
// backward) / F over r's stages (1 when every forward is at most the largest backward). The
// bound of the configuration is the largest over ranks. Without overlap (overlap 0) it is
// h + P: the busiest rank's work after its unavoidable start.
//
// The drain: the last forward a rank runs cannot end before h plus all its forward work (each
// forward part runs in an action of its own, at least F long), nor the last forward of a stage s
// before s's earliest forward start plus m F; that microbatch's backward at s then waits for its
// round trip (the forwards after s, the backwards back down to s, the messages) and takes min(B,
// I + W) (a B, or an I and later its W). The rank's bound is the larger of the two.
#pragma once

#include <vector>

#include "compiler/plan.h"
#include "compiler/simulate.h"

namespace ppc {

struct RankBound {
  double start = 0;           // h: earliest start of a forward
  double first_backward = 0;  // R: earliest start of a backward
  double work = 0;            // P: work without overlaps
  double max_saving = 0;      // overlap * M: what overlaps could save with every forward paired
  double unhidden = 0;        // u: forward work before R that no overlap hides
  double drain = 0;           // the drain bound (below)
  double bound = 0;           // the rank's bound: the larger of the two
};

struct LowerBound {
  double value = 0;  // max over ranks of ranks[r].bound
  int rank = 0;      // the rank that gives it (the lowest on a tie)
  std::vector<RankBound> ranks;
};

// `plan` needs its layout, placement, microbatches and copies; its orders are not read (a
// skeleton will do). Stage and message costs as simulate() takes them.
LowerBound makespan_lower_bound(const Plan& plan, const CostModel& model);

}  // namespace ppc
