// ZB-H2 (Qi et al. 2023, section 3.1): the zero-bubble schedule that spends up to about twice
// 1F1B's activation memory. One stage per rank.
//
// Rank r runs a sequence of slots x = 0, 1, ...; slot x holds, in this order,
//   F of microbatch x, I of microbatch x - 2(pp-1-r), W of microbatch x - 2(pp-1),
// each only if its microbatch exists. Rank 0 thus runs 2pp-1 forwards before its first I (its
// peak in-flight activations), the last rank alternates F and I from the start, and the W at the
// end form the parallelogram of the paper: under equal F, I and W every rank computes without a
// gap from its first action to its last, so back-to-back iterations have no bubble.
//
// Every dependency between ranks goes from a slot to the same slot (F from rank r-1 to r) or to
// a later one (I from rank r+1, two slots earlier), so the order never deadlocks, for any m.
#include "compiler/schedule.h"

namespace ppc {

RankOrders generate_zb_h2(const ScheduleParams& p) {
  const int m = p.microbatches;
  const int w_lag = 2 * (p.pp - 1);
  RankOrders orders(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    const int i_lag = 2 * (p.pp - 1 - r);
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(3 * static_cast<size_t>(m));
    for (int x = 0; x < m + w_lag; ++x) {
      if (x < m) out.push_back(Action::compute(ActionKind::F, r, x));
      if (x - i_lag >= 0 && x - i_lag < m)
        out.push_back(Action::compute(ActionKind::I, r, x - i_lag));
      if (x - w_lag >= 0 && x - w_lag < m)
        out.push_back(Action::compute(ActionKind::W, r, x - w_lag));
    }
  }
  return orders;
}

}  // namespace ppc
