// Expert parallelism's all-to-alls as a step measured them (report.h: StepTiming::all_to_all and
// ::overlaps): their total time, and how much of it was exposed - the rank waited in an all-to-all
// while none of its threads of computation computed (docs/pprun.md, "All-to-all time").
//
// An all-to-all's exposed time is the part of its span not covered by the other thread's
// computation: outside an OVERLAP_F_B whose parts ran concurrently, all of it (the replay has one
// thread); inside one, the part during which the other part had not begun or had ended, or was
// itself waiting in one of its own all-to-alls (the forward part's all-to-alls are those of the
// forward communicator, the backward part's those of the backward one). A part's other waits (a
// received input) count as computation. A step's exposed time is the sum over its all-to-alls, so
// two all-to-alls exposed at once count twice (the per-all-to-all figure: hidden = 1 - exposed /
// total, both sums). Its wall time is the union of those exposed parts: the time of the step
// during which the rank was in an all-to-all and none of its threads computed, each instant once
// (the figure to set against the step and against --overlap off). No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/output/report.h"

namespace pprt {

struct AllToAllStep {
  int count = 0;                // all-to-alls (split-size exchanges included)
  int64_t total_ns = 0;         // the sum of their spans
  int64_t exposed_ns = 0;       // the sum of their exposed parts (above)
  int64_t exposed_wall_ns = 0;  // the union of their exposed parts: each instant once
  int64_t sent_bytes = 0;       // to the other ranks of the group
};

// One rank's step.
AllToAllStep all_to_all_step(const StepTiming& t);

// Over one replica's ranks (`ranks`) and the steps they kept (the first of the run left out when
// there are others): the per-rank mean of each step's figures, then the median over the steps.
struct AllToAllSummary {
  int steps = 0;  // 0: no all-to-all measured
  double count = 0, total_ms = 0, exposed_ms = 0, exposed_wall_ms = 0, sent_mb = 0;
  double hidden() const { return total_ms > 0 ? 1.0 - exposed_ms / total_ms : 0; }
};
AllToAllSummary summarise_all_to_all(const std::vector<RankReport>& ranks);

// The summary's line (empty when nothing was measured):
//   all-to-alls: 24 per step per rank, 7.10 ms (1.23 MB sent), 2.30 ms exposed (67.6 % hidden;
//   2.10 ms of the step with no thread computing)
std::string all_to_all_text(const AllToAllSummary& s);

// --profile: the mean time of one dispatch or combine (its split sizes' exchange counted in the
// dispatch) over the steps after the first and `ranks`, in ms, and the tokens' mean experts per
// token (the rows a dispatch sends over the tokens it sends them for: `tokens_per_microbatch`);
// zeros when nothing was measured.
struct AllToAllProfile {
  double ms = 0;
  double top_k = 0;
};
AllToAllProfile profile_all_to_all(const std::vector<RankReport>& ranks,
                                   int64_t tokens_per_microbatch);

}  // namespace pprt
