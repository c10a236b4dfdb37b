// The per-rank pattern shared by DualPipe (DeepSeek-V3) and DualPipeV.
//
// A rank runs two "phases" (model chunks): phase 0 is the chunk whose microbatches reach it
// first, phase 1 the other. Seen from one rank, DualPipe's bidirectional pipeline over 2P ranks
// and DualPipeV's V over P ranks are the same pattern over P positions: DualPipe folds rank r
// and rank 2P-1-r onto position min(r, 2P-1-r), DualPipeV's rank r is position r. Each phase
// processes chunks (its microbatches) 0, 1, ..., n-1 in order.
#pragma once

#include <vector>

#include "compiler/action.h"

namespace ppc {

struct DualPipeOp {
  ActionKind kind;  // F, B, I, W, or OverlapFB
  int phase = 0;    // the action (OverlapFB: its forward part)
  int chunk = 0;
  ActionKind b_kind = ActionKind::B;  // OverlapFB: the backward part
  int b_phase = -1;
  int b_chunk = -1;
};

// The order of position r (0 <= r < P) with n >= 2P chunks per phase:
//  1. 2(P-r-1) forwards of phase 0;            2. r+1 pairs (F phase 0, F phase 1);
//  3. P-r-1 triples (I, W, F of phase 1);
//  4. n-2P+r+1 pairs (F phase 0 with B phase 1, F phase 1 with B phase 0), overlapped, except the
//     first F/B pair of position P-1, which runs as two actions;
//  5. P-r-1 pairs (B phase 1; F phase 1 with B phase 0);
//  6. r+1 pairs (backward phase 1, backward phase 0); from the middle pair on (the first
//     backward of it when r is odd, the second when r is even) they are I, earlier ones B;
//  7. P-r-1 pairs (W of the oldest pending I, I of phase 0);  8. the r+1 remaining W.
std::vector<DualPipeOp> dualpipe_ops(int P, int r, int n);

// Where a rank's phases live: phase p is `stage[p]`, its chunk c is microbatch first_mb[p] + c,
// and only chunks below count[p] exist (the pattern may be laid out for more chunks than there
// are microbatches).
struct PhaseMap {
  int stage[2];
  int first_mb[2];
  int count[2];
};

// The actions of `ops` on real microbatches: actions of chunks beyond the count are dropped, an
// OverlapFB that keeps one part becomes that part alone. Dropping actions of some microbatches
// from a valid order keeps it valid (no new dependency appears).
std::vector<Action> materialize(const std::vector<DualPipeOp>& ops, const PhaseMap& map);

}  // namespace ppc
