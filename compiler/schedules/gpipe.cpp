// GPipe: every rank runs all forwards, then all backwards, microbatches in order.
#include "compiler/schedule.h"

namespace ppc {

RankOrders generate_gpipe(const ScheduleParams& p) {
  RankOrders orders(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(2 * static_cast<size_t>(p.microbatches));
    for (int mb = 0; mb < p.microbatches; ++mb)
      out.push_back(Action::compute(ActionKind::F, r, mb));
    for (int mb = 0; mb < p.microbatches; ++mb)
      out.push_back(Action::compute(ActionKind::B, r, mb));
  }
  return orders;
}

}  // namespace ppc
