// Combined 1F1B (Megatron-core's combined_1f1b, issue 40): 1F1B whose steady state pairs one
// microbatch's forward with another's backward as one OVERLAP_F_B, so that the all-to-all of one
// hides behind the computation of the other. Rank r runs 1F1B's pp-1-r warm-up forwards and one
// more forward alone (the pair's backward must come from a microbatch whose forward is done), then
// (F f+1, B b) pairs, then the remaining backwards. It holds one microbatch's activations more
// than 1F1B (pp-r+1 in flight at most), as Megatron's does.
#include <algorithm>

#include "compiler/schedule.h"

namespace ppc {

RankOrders generate_combined_1f1b(const ScheduleParams& p) {
  RankOrders orders(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(2 * static_cast<size_t>(p.microbatches));
    const int alone = std::min(p.microbatches, p.pp - r);  // 1F1B's warm-up, and one more
    int f = 0, b = 0;
    for (; f < alone; ++f) out.push_back(Action::compute(ActionKind::F, r, f));
    for (; f < p.microbatches; ++f, ++b) out.push_back(Action::overlap(r, f, ActionKind::B, r, b));
    for (; b < p.microbatches; ++b) out.push_back(Action::compute(ActionKind::B, r, b));
  }
  return orders;
}

}  // namespace ppc
