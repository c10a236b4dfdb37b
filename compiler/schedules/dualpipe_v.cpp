// DualPipeV (PyTorch's ScheduleDualPipeV, after DeepSeek's DualPipe): DualPipe folded onto a V.
// Exactly two stages per rank on V placement: rank r holds stage r (phase 0) and stage
// 2pp-1-r (phase 1). In the steady state a rank overlaps the forward of one of its stages with
// the backward of the other (OVERLAP_F_B), so the all-to-all of one hides behind the compute of
// the other; see dualpipe_common.h for the pattern.
//
// PyTorch rejects m < 2pp (its pattern needs a full steady state). We lay the pattern out for
// 2pp microbatches and drop the actions of the microbatches that do not exist, which gives a
// valid order for every m >= 1. For m >= 2pp the order equals PyTorch's.
#include <algorithm>

#include "compiler/schedule.h"
#include "compiler/schedules/dualpipe_common.h"

namespace ppc {

RankOrders generate_dualpipe_v(const ScheduleParams& p) {
  const int P = p.pp, m = p.microbatches;
  const int n = std::max(m, 2 * P);
  RankOrders orders(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    const auto& stages = p.placement->rank_stages[static_cast<size_t>(r)];
    const PhaseMap map{{stages[0], stages[1]}, {0, 0}, {m, m}};
    orders[static_cast<size_t>(r)] = materialize(dualpipe_ops(P, r, n), map);
  }
  return orders;
}

}  // namespace ppc
