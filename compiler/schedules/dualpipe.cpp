// DualPipe (DeepSeek-V3 technical report; deepseek-ai/DualPipe): bidirectional pipeline over an
// even number of ranks with two copies of the model. Copy 0 runs layout stage k on rank k and
// takes microbatches 0 .. ceil(m/2)-1 from rank 0; copy 1 runs layout stage k on rank pp-1-k and
// takes the rest from rank pp-1. In plan terms (Plan::copies == 2, V placement over 2pp stages)
// rank r holds plan stage r (copy 0) and plan stage 2pp-1-r (copy 1, layout stage pp-1-r).
//
// Rank r runs the pattern of dualpipe_common.h at position h = min(r, pp-1-r) of pp/2, where
// phase 0 is the copy whose microbatches reach it first (copy 0 in the first half of the ranks,
// copy 1 in the second half). DeepSeek's implementation needs an even m >= 2pp; we lay the
// pattern out for max(ceil(m/2), pp) microbatches per copy and drop the actions of those that do
// not exist, which gives a valid order for every m >= 2 (m = 1 would leave copy 1 idle: rejected).
//
// The runtime holds parameters of two layout stages per rank (pp-1-r and r): each layout stage
// lives on two ranks, and their weight gradients must be summed across those two ranks (an
// all-reduce over the pair {k, pp-1-k}) before the optimizer step.
#include <algorithm>

#include <fmt/format.h>

#include "compiler/diagnostic.h"
#include "compiler/schedule.h"
#include "compiler/schedules/dualpipe_common.h"

namespace ppc {

void check_dualpipe(const ScheduleParams& p) {
  if (p.pp % 2 != 0)
    throw UserError(
        fmt::format("DualPipe needs an even number of ranks (they pair up from both ends), got {}",
                    p.pp),
        input_location("--pp"));
  // With one microbatch the second copy would hold parameters and never run (and a PyTorch CSV,
  // which has no notion of copies, could not show its stages).
  if (p.microbatches < 2)
    throw UserError(
        fmt::format("DualPipe needs at least 2 microbatches (one per direction), got {}",
                    p.microbatches),
        input_location("--microbatches"));
}

RankOrders generate_dualpipe(const ScheduleParams& p) {
  check_dualpipe(p);
  const int pp = p.pp, m = p.microbatches;
  const int half = pp / 2;
  const int count0 = (m + 1) / 2, count1 = m - count0;
  const int n = std::max(count0, pp);
  RankOrders orders(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    const int h = std::min(r, pp - 1 - r);
    const int copy0 = r, copy1 = 2 * pp - 1 - r;  // plan stages of the rank
    PhaseMap map = r < half ? PhaseMap{{copy0, copy1}, {0, count0}, {count0, count1}}
                            : PhaseMap{{copy1, copy0}, {count0, 0}, {count1, count0}};
    orders[static_cast<size_t>(r)] = materialize(dualpipe_ops(half, h, n), map);
  }
  return orders;
}

}  // namespace ppc
