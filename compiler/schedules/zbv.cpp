// ZBVZeroBubble (Qi et al. 2023, section 6; PyTorch's ScheduleZBVZeroBubble): zero bubble on V
// placement, exactly two stages per rank. Rank r holds stage r (chunk 0, on the way down the V)
// and stage 2pp-1-r (chunk 1, on the way back up), so the first and the last stage share rank 0.
//
// Rank r: 2(pp-r)-1 forwards of chunk 0; r pairs (F chunk 1, F chunk 0); pp-r triples
// (F, I, W of chunk 1); then the steady state (F0, I0, W0, F1, I1, W1) until every forward has
// run; then r pairs (I0, I1), pp-r pairs (I0, W0) and the remaining W of chunk 1, then chunk 0.
// The schedule is laid out for n = max(2pp-1, m) microbatches and the actions of microbatches
// m..n-1 are dropped, as PyTorch does; dropping actions never creates a cycle, so the order is
// valid for every m >= 1. Its compute order equals PyTorch's for every configuration.
#include <algorithm>

#include "compiler/schedule.h"

namespace ppc {

RankOrders generate_zbv(const ScheduleParams& p) {
  const int P = p.pp, m = p.microbatches;
  const int n = std::max(2 * P - 1, m);
  RankOrders orders(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    const auto& stages = p.placement->rank_stages[static_cast<size_t>(r)];
    const int s0 = stages[0], s1 = stages[1];
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(6 * static_cast<size_t>(m));
    auto emit = [&](ActionKind k, int stage, int mb) {
      if (mb < m) out.push_back(Action::compute(k, stage, mb));
    };
    const int down = 2 * (P - r) - 1;  // forwards of chunk 0 before chunk 1 starts
    for (int j = 0; j < down; ++j) emit(ActionKind::F, s0, j);
    for (int j = 0; j < r; ++j) {
      emit(ActionKind::F, s1, j);
      emit(ActionKind::F, s0, down + j);
    }
    for (int j = 0; j < P - r; ++j) {
      emit(ActionKind::F, s1, r + j);
      emit(ActionKind::I, s1, j);
      emit(ActionKind::W, s1, j);
    }
    for (int t = 0; t < n - P; ++t) {
      if (down + r + t < n) emit(ActionKind::F, s0, down + r + t);
      emit(ActionKind::I, s0, t);
      emit(ActionKind::W, s0, t);
      emit(ActionKind::F, s1, P + t);
      emit(ActionKind::I, s1, P - r + t);
      emit(ActionKind::W, s1, P - r + t);
    }
    for (int j = 0; j < r; ++j) {
      emit(ActionKind::I, s0, n - P + j);
      emit(ActionKind::I, s1, n - r + j);
    }
    for (int j = 0; j < P - r; ++j) {
      emit(ActionKind::I, s0, n - P + r + j);
      emit(ActionKind::W, s0, n - P + j);
    }
    for (int j = n - r; j < n; ++j) emit(ActionKind::W, s1, j);
    for (int j = n - r; j < n; ++j) emit(ActionKind::W, s0, j);
  }
  return orders;
}

}  // namespace ppc
