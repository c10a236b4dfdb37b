// The policy of --schedule Auto's list scheduler (list_scheduler.h): whenever a rank is free, what
// it starts from what is ready (auto.cpp's overview lists the order of preference), and whether
// the banker's algorithm lets a forward or a new microbatch take its memory.
#include <algorithm>

#include "compiler/schedules/list_scheduler.h"

namespace ppc::list_scheduling {

bool ListScheduler::can_admit() const {
  if (next_mb_ >= m_) return false;
  if (pol_.max_in_flight > 0 && in_flight_ >= pol_.max_in_flight) return false;
  return mem_.can_allocate(rank(0), next_mb_, c(0).activation, next_mb_);
}

bool ListScheduler::can_forward(int r, const Candidate& k) const {
  return mem_.can_allocate(r, k.mb, c(k.stage).activation, next_mb_);
}

std::pair<int, int> ListScheduler::bwd_key(const Candidate& k) const {
  return pol_.backward_deepest_first ? std::pair{-k.stage, k.mb} : std::pair{k.mb, -k.stage};
}

std::pair<int, int> ListScheduler::fwd_key(const Candidate& k) const {
  return pol_.forward_deepest_first ? std::pair{-k.stage, k.mb} : std::pair{k.mb, -k.stage};
}

ActionKind ListScheduler::pair_kind(int s, double f) const {
  if (!pol_.split_backward) return ActionKind::B;
  if (pol_.pair_full_backward && std::min(f, c(s).b) > std::min(f, c(s).i) + 1e-12)
    return ActionKind::B;
  return ActionKind::I;
}

ActionKind ListScheduler::lone_backward(int r, int stage) const {
  if (!pol_.split_backward) return ActionKind::B;
  if (pol_.busiest_full_b && busiest_[static_cast<size_t>(r)] && c(stage).whole_backward_shorter())
    return ActionKind::B;
  return ActionKind::I;
}

bool ListScheduler::start_next(int r, double t) {
  RankState& s = st(r);
  int fi = -1, bi = -1;  // best ready forward (in s.fwd; -2: a new microbatch), backward
  for (int k = 0; k < static_cast<int>(s.fwd.size()); ++k) {
    const Candidate& x = s.fwd[static_cast<size_t>(k)];
    if (x.ready > t || !can_forward(r, x)) continue;
    if (fi < 0 || fwd_key(x) < fwd_key(s.fwd[static_cast<size_t>(fi)])) fi = k;
  }
  for (int k = 0; k < static_cast<int>(s.bwd.size()); ++k) {
    const Candidate& x = s.bwd[static_cast<size_t>(k)];
    if (x.ready > t) continue;
    if (bi < 0 || bwd_key(x) < bwd_key(s.bwd[static_cast<size_t>(bi)])) bi = k;
  }
  const bool admit = r == rank(0) && can_admit();
  if (pol_.w_at_once && s.w_head < s.w.size()) {  // the W of the I that just ended
    const Candidate wc = s.w[s.w_head++];
    start(r, t, Action::compute(ActionKind::W, wc.stage, wc.mb));
    return true;
  }
  // 1. An overlapped pair: the one that saves the most; on a tie, by the priorities.
  if (pairs_ && pol_.overlap && bi >= 0 && (fi >= 0 || admit)) {
    double best = 0;
    int pf = -1, pb = -1;
    std::vector<int> fs;
    for (int k = 0; k < static_cast<int>(s.fwd.size()); ++k)
      if (s.fwd[static_cast<size_t>(k)].ready <= t && can_forward(r, s.fwd[static_cast<size_t>(k)]))
        fs.push_back(k);
    std::sort(fs.begin(), fs.end(), [&](int a, int b) {
      return fwd_key(s.fwd[static_cast<size_t>(a)]) < fwd_key(s.fwd[static_cast<size_t>(b)]);
    });
    if (admit && !(pol_.pair_new_last && !fs.empty())) fs.push_back(-2);
    std::vector<int> bs;
    for (int k = 0; k < static_cast<int>(s.bwd.size()); ++k)
      if (s.bwd[static_cast<size_t>(k)].ready <= t) bs.push_back(k);
    std::sort(bs.begin(), bs.end(), [&](int a, int b) {
      return bwd_key(s.bwd[static_cast<size_t>(a)]) < bwd_key(s.bwd[static_cast<size_t>(b)]);
    });
    for (int b : bs)
      for (int f : fs) {
        const int fs_stage = f == -2 ? 0 : s.fwd[static_cast<size_t>(f)].stage;
        const double fd = c(fs_stage).f;
        const int bs_stage = s.bwd[static_cast<size_t>(b)].stage;
        const double xd = part_time(pair_kind(bs_stage, fd), bs_stage);
        const ActionKind xk = pair_kind(bs_stage, fd);
        const double saving =
            fd + xd -
            overlapped_time(fd, c(fs_stage).all_to_all_f, xd, c(bs_stage).all_to_all(xk), ov_);
        if (saving > best * (1 + 1e-12) + 1e-15) {
          best = saving;
          pf = f;
          pb = b;
        }
      }
    if (pb >= 0) {
      const Candidate fc = pf == -2 ? admit_next() : take(s.fwd, pf);
      const Candidate bc = take(s.bwd, pb);
      const ActionKind bk = pair_kind(bc.stage, c(fc.stage).f);
      start(r, t, Action::overlap(fc.stage, fc.mb, bk, bc.stage, bc.mb));
      return true;
    }
  }
  // A rank that is not among the busiest does not start a lone forward while the input of a
  // deeper stage's forward or of a backward is on its way and would arrive before that forward
  // ends: it waits for it (the rendezvous would hold its sender meanwhile).
  if (pol_.lookahead && bi < 0 && (fi >= 0 || admit) && !busiest_[static_cast<size_t>(r)]) {
    const int stage = fi >= 0 ? s.fwd[static_cast<size_t>(fi)].stage : 0;
    if (incoming_before(r, stage, t + c(stage).f)) return true;
  }
  const bool have_w = s.w_head < s.w.size();
  if (have_w && pol_.max_held_w > 0 && !busiest_[static_cast<size_t>(r)] &&
      s.w.size() - s.w_head >= static_cast<size_t>(pol_.max_held_w) && (bi >= 0 || fi >= 0)) {
    const Candidate wc = s.w[s.w_head++];
    start(r, t, Action::compute(ActionKind::W, wc.stage, wc.mb));
    return true;
  }
  // A rank that is not among the busiest would rather pair a lone backward or forward: it runs
  // a W meanwhile, or waits a while for a partner that may still come.
  if ((bi >= 0 || fi >= 0) && pairs_ && pol_.overlap && pol_.partner_wait > 0 &&
      !busiest_[static_cast<size_t>(r)] && partner_may_come(r, bi >= 0)) {
    if (have_w) {
      const Candidate wc = s.w[s.w_head++];
      start(r, t, Action::compute(ActionKind::W, wc.stage, wc.mb));
      return true;
    }
    const double d = bi >= 0 ? part_time(lone_backward(r, s.bwd[static_cast<size_t>(bi)].stage),
                                         s.bwd[static_cast<size_t>(bi)].stage)
                             : c(s.fwd[static_cast<size_t>(fi)].stage).f;
    if (s.wait_until < 0) {
      s.wait_until = t + pol_.partner_wait * d;
      wake(r, s.wait_until);
      return true;
    }
    if (t < s.wait_until) return true;
  }
  // 2. A backward.
  if (bi >= 0) {
    const Candidate bc = take(s.bwd, bi);
    start(r, t, Action::compute(lone_backward(r, bc.stage), bc.stage, bc.mb));
    return true;
  }
  // 3. A forward of a microbatch in the pipeline.
  if (fi >= 0) {
    const Candidate fc = take(s.fwd, fi);
    start(r, t, Action::compute(ActionKind::F, fc.stage, fc.mb));
    return true;
  }
  // 4, 5. A W, or a new microbatch.
  if (admit && !(have_w && pol_.w_before_new_forward)) {
    const Candidate fc = admit_next();
    start(r, t, Action::compute(ActionKind::F, fc.stage, fc.mb));
    return true;
  }
  if (have_w) {
    const Candidate wc = s.w[s.w_head++];
    start(r, t, Action::compute(ActionKind::W, wc.stage, wc.mb));
    return true;
  }
  return false;
}

bool ListScheduler::incoming_before(int r, int stage, double until) const {
  for (int q = 0; q < pp_; ++q) {
    const RankState& o = ranks_[static_cast<size_t>(q)];
    if (q == r || !o.computing) continue;
    bool found = false;
    for_each_part(o.running, [&](const Action& p) {
      if (p.kind == ActionKind::F && p.stage + 1 < S_ && rank(p.stage + 1) == r &&
          p.stage + 1 > stage)
        found |= o.end + msg_.time[2 * static_cast<size_t>(p.stage)] < until;
      if ((p.kind == ActionKind::I || p.kind == ActionKind::B) && p.stage > 0 &&
          rank(p.stage - 1) == r)
        found |= o.end + msg_.time[2 * static_cast<size_t>(p.stage) + 1] < until;
    });
    if (found) return true;
  }
  return false;
}

bool ListScheduler::partner_may_come(int r, bool for_backward) const {
  const RankState& s = ranks_[static_cast<size_t>(r)];
  const size_t per_kind =
      plan_.placement.rank_stages[static_cast<size_t>(r)].size() * static_cast<size_t>(m_);
  if (for_backward) return s.forwards_started < per_kind;
  return any_backward_ && s.backwards_started < per_kind;
}

Candidate ListScheduler::take(std::vector<Candidate>& v, int k) {
  const Candidate x = v[static_cast<size_t>(k)];
  v[static_cast<size_t>(k)] = v.back();
  v.pop_back();
  return x;
}

Candidate ListScheduler::admit_next() {
  const int mb = next_mb_++;
  mem_.admit(mb);
  ++in_flight_;
  return Candidate{0, mb, 0};
}

}  // namespace ppc::list_scheduling
