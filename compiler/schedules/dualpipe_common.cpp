#include "compiler/schedules/dualpipe_common.h"

#include <deque>

namespace ppc {

std::vector<DualPipeOp> dualpipe_ops(int P, int r, int n) {
  std::vector<DualPipeOp> ops;
  ops.reserve(6 * static_cast<size_t>(n));
  std::deque<DualPipeOp> pending_w;  // W of the I that ran, oldest first
  auto plain = [&](ActionKind k, int phase, int chunk) {
    ops.push_back(DualPipeOp{k, phase, chunk});
    if (k == ActionKind::I) pending_w.push_back(DualPipeOp{ActionKind::W, phase, chunk});
  };
  auto overlap = [&](int f_phase, int f_chunk, int b_phase, int b_chunk) {
    ops.push_back(
        DualPipeOp{ActionKind::OverlapFB, f_phase, f_chunk, ActionKind::B, b_phase, b_chunk});
  };
  auto pop_w = [&] {
    ops.push_back(pending_w.front());
    pending_w.pop_front();
  };
  const int warmup = 2 * (P - r - 1);
  const int steady = n - 2 * P + r + 1;
  for (int j = 0; j < warmup; ++j) plain(ActionKind::F, 0, j);
  for (int j = 0; j <= r; ++j) {
    plain(ActionKind::F, 0, warmup + j);
    plain(ActionKind::F, 1, j);
  }
  for (int j = 0; j < P - r - 1; ++j) {
    plain(ActionKind::I, 1, j);
    pop_w();
    plain(ActionKind::F, 1, r + 1 + j);
  }
  for (int i = 0; i < steady; ++i) {
    const int f0 = 2 * P - r - 1 + i, b1 = P - r - 1 + i;
    if (i == 0 && r == P - 1) {
      plain(ActionKind::F, 0, f0);
      plain(ActionKind::B, 1, b1);
    } else {
      overlap(0, f0, 1, b1);
    }
    overlap(1, P + i, 0, i);
  }
  for (int j = 0; j < P - r - 1; ++j) {
    plain(ActionKind::B, 1, n - P + j);
    overlap(1, n - P + r + 1 + j, 0, steady + j);
  }
  bool split = false;
  for (int i = 0; i <= r; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) split = true;
    plain(split ? ActionKind::I : ActionKind::B, 1, n - r - 1 + i);
    if (i == (r + 1) / 2 && r % 2 == 0) split = true;
    plain(split ? ActionKind::I : ActionKind::B, 0, n - P + i);
  }
  for (int j = 0; j < P - r - 1; ++j) {
    pop_w();
    plain(ActionKind::I, 0, n - P + r + 1 + j);
  }
  while (!pending_w.empty()) pop_w();
  return ops;
}

std::vector<Action> materialize(const std::vector<DualPipeOp>& ops, const PhaseMap& map) {
  std::vector<Action> out;
  out.reserve(ops.size());
  auto exists = [&](int phase, int chunk) { return chunk < map.count[phase]; };
  auto part = [&](ActionKind k, int phase, int chunk) {
    return Action::compute(k, map.stage[phase], map.first_mb[phase] + chunk);
  };
  for (const DualPipeOp& op : ops) {
    if (op.kind != ActionKind::OverlapFB) {
      if (exists(op.phase, op.chunk)) out.push_back(part(op.kind, op.phase, op.chunk));
      continue;
    }
    const bool f = exists(op.phase, op.chunk), b = exists(op.b_phase, op.b_chunk);
    if (f && b) {
      out.push_back(Action::overlap(map.stage[op.phase], map.first_mb[op.phase] + op.chunk,
                                    op.b_kind, map.stage[op.b_phase],
                                    map.first_mb[op.b_phase] + op.b_chunk));
    } else if (f) {
      out.push_back(part(ActionKind::F, op.phase, op.chunk));
    } else if (b) {
      out.push_back(part(op.b_kind, op.b_phase, op.b_chunk));
    }
  }
  return out;
}

}  // namespace ppc
