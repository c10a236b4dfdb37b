// LoopedBFS (breadth-first pipeline parallelism, Lamy-Poirier 2022): each rank runs every
// microbatch through its first local stage, then its second, ...; then the backwards from its last
// local stage to its first, microbatches in reverse order. Same order as PyTorch's
// ScheduleLoopedBFS.
#include "compiler/schedule.h"

namespace ppc {

RankOrders generate_looped_bfs(const ScheduleParams& p) {
  RankOrders orders(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    const auto& stages = p.placement->rank_stages[static_cast<size_t>(r)];
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(2 * stages.size() * static_cast<size_t>(p.microbatches));
    for (int s : stages)
      for (int mb = 0; mb < p.microbatches; ++mb)
        out.push_back(Action::compute(ActionKind::F, s, mb));
    for (auto it = stages.rbegin(); it != stages.rend(); ++it)
      for (int mb = p.microbatches - 1; mb >= 0; --mb)
        out.push_back(Action::compute(ActionKind::B, *it, mb));
  }
  return orders;
}

}  // namespace ppc
