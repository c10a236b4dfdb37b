// 1F1B: rank r runs pp-1-r warm-up forwards, then alternates one forward and one backward, then
// runs the remaining backwards. With fewer microbatches than that, the warm-up is all of them.
#include <algorithm>

#include "compiler/schedule.h"

namespace ppc {

RankOrders generate_1f1b(const ScheduleParams& p) {
  RankOrders orders(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(2 * static_cast<size_t>(p.microbatches));
    const int warmup = std::min(p.microbatches, p.pp - 1 - r);
    int f = 0, b = 0;
    for (; f < warmup; ++f) out.push_back(Action::compute(ActionKind::F, r, f));
    for (; f < p.microbatches; ++f, ++b) {
      out.push_back(Action::compute(ActionKind::F, r, f));
      out.push_back(Action::compute(ActionKind::B, r, b));
    }
    for (; b < p.microbatches; ++b) out.push_back(Action::compute(ActionKind::B, r, b));
  }
  return orders;
}

}  // namespace ppc
