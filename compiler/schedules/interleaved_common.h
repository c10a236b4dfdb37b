// Pieces shared by the interleaved schedules (Interleaved1F1B, InterleavedZeroBubble).
#pragma once

#include <vector>

namespace ppc {

// Sizes of the microbatch groups: rounds = max(1, m div pp) groups, as equal as possible, larger
// first. When m is a multiple of rounds this is PyTorch's microbatches_per_round.
std::vector<int> microbatch_groups(int pp, int microbatches);

struct ChunkMicrobatch {
  int chunk;
  int microbatch;
};

// The k-th forward / backward of any rank, as (local chunk, microbatch): group by group, chunk by
// chunk (backwards: last chunk first), microbatches of the group in order.
struct InterleavedSequence {
  std::vector<ChunkMicrobatch> forward;
  std::vector<ChunkMicrobatch> backward;
};
InterleavedSequence interleaved_sequence(const std::vector<int>& groups, int vpp);

}  // namespace ppc
