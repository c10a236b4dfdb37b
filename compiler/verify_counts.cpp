// Check 2 of the verifier (verify.h): every (stage, microbatch) gets exactly one F and then one B,
// or one I and one W, and every transfer between ranks one SEND and one matching RECV; each wrong
// count is located by the actions that made it.
#include <fmt/format.h>

#include "compiler/verifier.h"

namespace ppc::verifier {

std::string Verifier::see(std::initializer_list<std::tuple<int, ActionKind, int>> what,
                          int mb) const {
  std::string out;
  int shown = 0;
  for (const auto& w : what) {
    const int rank = std::get<0>(w), stage = std::get<2>(w);
    const ActionKind kind = std::get<1>(w);
    const auto& ops = order()[static_cast<size_t>(rank)];
    for (size_t i = 0; i < ops.size(); ++i) {
      bool hit = false;
      for_each_part(ops[i], [&](const Action& p) {
        hit = hit || (p.kind == kind && p.stage == stage && p.microbatch == mb);
      });
      if (!hit) continue;
      if (shown++ == 4) return out + ", ...";
      out += (out.empty() ? "; see " : ", ") + where(rank, i, ops[i]);
    }
  }
  return out;
}

void Verifier::check_counts() {
  const int S = plan_.num_stages(), M = plan_.microbatches;
  const size_t plane = static_cast<size_t>(S) * static_cast<size_t>(M);
  for (int s = 0; s < S; ++s) {
    // The counts of stage s (and of the ops its neighbours exchange with it) per microbatch.
    auto row = [&](ActionKind k, int stage) {
      return count_.data() + cindex(k, stage < 0 ? s : stage, 0);
    };
    const uint8_t* f = row(ActionKind::F, s);
    const uint8_t* b = f + plane;  // the kinds are consecutive planes: F, B, I, W, ...
    const uint8_t* i = b + plane;
    const uint8_t* w = i + plane;
    const bool fwd = lowered_ && forward_crosses_ranks(plan_, s);
    const bool bwd = lowered_ && backward_crosses_ranks(plan_, s);
    const uint8_t* sf = row(ActionKind::SendF, s);
    const uint8_t* rf = row(ActionKind::RecvF, fwd ? plan_.next_stage(s) : -1);
    const uint8_t* sb = row(ActionKind::SendB, s);
    const uint8_t* rb = row(ActionKind::RecvB, bwd ? plan_.prev_stage(s) : -1);
    for (int mb = 0; mb < M; ++mb) {
      const size_t m = static_cast<size_t>(mb);
      const bool right = f[m] == 1 && (b[m] + i[m] == 1) && i[m] == w[m] &&
                         (!fwd || (sf[m] == 1 && rf[m] == 1)) &&
                         (!bwd || (sb[m] == 1 && rb[m] == 1));
      if (!right && plan_.runs(s, mb)) explain_counts(s, mb);
    }
    if (rep_.truncated) return;
  }
}

void Verifier::explain_counts(int s, int mb) {
  auto n = [&](ActionKind k, int stage, int m) {
    return static_cast<int>(count_[cindex(k, stage, m)]);
  };
  using K = ActionKind;
  const int f = n(K::F, s, mb), b = n(K::B, s, mb), i = n(K::I, s, mb), w = n(K::W, s, mb);
  const int r = plan_.rank_of(s);
  if (f != 1)
    error(fmt::format(
        "rank {}: stage {} microbatch {} has {} forwards (F), expected exactly 1{}", r, s, mb, f,
        f > 0 ? see({{r, K::F, s}}, mb) : see({{r, K::B, s}, {r, K::I, s}, {r, K::W, s}}, mb)));
  if (!((b == 1 && i == 0 && w == 0) || (b == 0 && i == 1 && w == 1)))
    error(fmt::format(
        "rank {}: stage {} microbatch {} has {} B, {} I and {} W; expected one B, or one I "
        "and one W{}",
        r, s, mb, b, i, w,
        b + i + w > 0 ? see({{r, K::B, s}, {r, K::I, s}, {r, K::W, s}}, mb)
                      : see({{r, K::F, s}}, mb)));
  if (!lowered_) return;
  if (forward_crosses_ranks(plan_, s)) {
    const int nx = plan_.next_stage(s), q = plan_.rank_of(nx);
    const int sf = n(K::SendF, s, mb), rf = n(K::RecvF, nx, mb);
    if (sf != 1 || rf != 1)
      error(
          fmt::format("activation of stage {} microbatch {} (rank {} -> rank {}): {} SEND_F and {} "
                      "RECV_F, expected one of each{}",
                      s, mb, r, q, sf, rf, see({{r, K::SendF, s}, {q, K::RecvF, nx}}, mb)));
  }
  if (backward_crosses_ranks(plan_, s)) {
    const int pv = plan_.prev_stage(s), q = plan_.rank_of(pv);
    const int sb = n(K::SendB, s, mb), rb = n(K::RecvB, pv, mb);
    if (sb != 1 || rb != 1)
      error(
          fmt::format("gradient of stage {} microbatch {} (rank {} -> rank {}): {} SEND_B and {} "
                      "RECV_B, expected one of each{}",
                      s, mb, r, q, sb, rb, see({{r, K::SendB, s}, {q, K::RecvB, pv}}, mb)));
  }
}

}  // namespace ppc::verifier
