// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual pipeline).
//
// Microbatches are processed in groups. Within a group, a rank runs the group's forwards through
// its first local stage, then through its second, ...; backwards go through the local stages in
// reverse. Rank r warms up with (vpp-1)*g0 + 2*(pp-1-r) forwards (g0: size of the first group),
// then alternates one forward and one backward, then runs the remaining backwards.
//
// PyTorch (ScheduleInterleaved1F1B) uses rounds = max(1, m div pp) groups of m/rounds microbatches
// and rejects m not a multiple of rounds; for every m it accepts, this produces exactly its order.
// For the m it rejects, we split the microbatches into `rounds` groups as equal as possible
// (the larger groups first); see microbatch_groups() and docs/schedules.md.
#include <algorithm>

#include "compiler/schedule.h"
#include "compiler/schedules/interleaved_common.h"

namespace ppc {

std::vector<int> microbatch_groups(int pp, int microbatches) {
  const int rounds = std::max(1, microbatches / pp);
  std::vector<int> groups(static_cast<size_t>(rounds), microbatches / rounds);
  for (int i = 0; i < microbatches % rounds; ++i) ++groups[static_cast<size_t>(i)];
  return groups;
}

InterleavedSequence interleaved_sequence(const std::vector<int>& groups, int vpp) {
  InterleavedSequence seq;
  int first_mb = 0;
  for (int g : groups) {
    for (int c = 0; c < vpp; ++c)
      for (int mb = first_mb; mb < first_mb + g; ++mb) {
        seq.forward.push_back({c, mb});
        seq.backward.push_back({vpp - 1 - c, mb});
      }
    first_mb += g;
  }
  return seq;
}

RankOrders generate_interleaved_1f1b(const ScheduleParams& p) {
  const auto groups = microbatch_groups(p.pp, p.microbatches);
  const auto seq = interleaved_sequence(groups, p.vpp);
  const int total = static_cast<int>(seq.forward.size());
  RankOrders orders(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    const auto& stages = p.placement->rank_stages[static_cast<size_t>(r)];
    auto fwd = [&](int k) {
      const auto [c, mb] = seq.forward[static_cast<size_t>(k)];
      return Action::compute(ActionKind::F, stages[static_cast<size_t>(c)], mb);
    };
    auto bwd = [&](int k) {
      const auto [c, mb] = seq.backward[static_cast<size_t>(k)];
      return Action::compute(ActionKind::B, stages[static_cast<size_t>(c)], mb);
    };
    const int warmup = std::min(total, (p.vpp - 1) * groups.front() + 2 * (p.pp - 1 - r));
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(2 * static_cast<size_t>(total));
    int f = 0, b = 0;
    for (; f < warmup; ++f) out.push_back(fwd(f));
    for (; f < total; ++f, ++b) {
      out.push_back(fwd(f));
      out.push_back(bwd(b));
    }
    for (; b < total; ++b) out.push_back(bwd(b));
  }
  return orders;
}

}  // namespace ppc
