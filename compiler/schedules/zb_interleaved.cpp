// Zero-bubble schedules on loop placement: InterleavedZeroBubble (PyTorch's ZB1P) and ZB-H1 (the
// same schedule with one stage per rank, Qi et al. 2023, section 3.1).
//
// The backward is split into I (input gradient, on the critical path) and W (weight gradient,
// free to move). Each rank runs the interleaved sequence of Interleaved1F1B (groups of
// microbatches, chunk by chunk) with I in place of B, a shorter warm-up of
// (vpp-1)*g0 + (pp-1-r) forwards, and holds back its W: rank r runs the W of its k-th I right
// after its (k+r)-th I, and the last r W at the end. The W fill the slots where 1F1B waits for
// gradients, so ZB-H1 keeps 1F1B's in-flight activations (pp on rank 0) with a third of its
// bubble under equal F, I and W.
//
// PyTorch (ScheduleInterleavedZeroBubble) rejects m not a multiple of rounds = max(1, m div pp);
// there we split the microbatches into groups as Interleaved1F1B does (microbatch_groups).
#include <algorithm>

#include "compiler/schedule.h"
#include "compiler/schedules/interleaved_common.h"

namespace ppc {

RankOrders generate_interleaved_zero_bubble(const ScheduleParams& p) {
  const auto groups = microbatch_groups(p.pp, p.microbatches);
  const auto seq = interleaved_sequence(groups, p.vpp);
  const int total = static_cast<int>(seq.forward.size());
  RankOrders orders(static_cast<size_t>(p.pp));
  for (int r = 0; r < p.pp; ++r) {
    const auto& stages = p.placement->rank_stages[static_cast<size_t>(r)];
    auto act = [&](ActionKind k, const ChunkMicrobatch& cm) {
      return Action::compute(k, stages[static_cast<size_t>(cm.chunk)], cm.microbatch);
    };
    const int warmup = std::min(total, (p.vpp - 1) * groups.front() + (p.pp - 1 - r));
    auto& out = orders[static_cast<size_t>(r)];
    out.reserve(3 * static_cast<size_t>(total));
    for (int f = 0; f < warmup; ++f)
      out.push_back(act(ActionKind::F, seq.forward[static_cast<size_t>(f)]));
    for (int k = 0; k < total; ++k) {
      if (warmup + k < total)
        out.push_back(act(ActionKind::F, seq.forward[static_cast<size_t>(warmup + k)]));
      out.push_back(act(ActionKind::I, seq.backward[static_cast<size_t>(k)]));
      if (k >= r) out.push_back(act(ActionKind::W, seq.backward[static_cast<size_t>(k - r)]));
    }
    for (int k = std::max(0, total - r); k < total; ++k)
      out.push_back(act(ActionKind::W, seq.backward[static_cast<size_t>(k)]));
  }
  return orders;
}

}  // namespace ppc
