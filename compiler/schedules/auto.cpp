// The generator of --schedule Auto: list scheduling in simulated time (synthesize.h).
//
// Every rank runs in simulated time under the cost model. A SEND/RECV is a rendezvous as lowering
// places it (lower_send_recv.h): when a compute ends, each output another rank needs is sent
// right away if that rank is between computes; otherwise the sender waits for the receiver's
// boundary. The message's time then passes for both. (So this run times the order exactly as
// lowering's "post at once" placement does, unless the policy makes ranks wait for partners;
// ppcompile lowers it both ways and keeps the better.) Under the eager message model (a cost file
// from pprun on Gloo) a SEND never waits: its sender spends the posting time per message and the
// message arrives its time after the post.
// Whenever a rank is free it picks, from what is ready:
//   1. an OVERLAP_F_B of a ready forward and a ready backward, the pair that saves the most time
//      (overlap * min(F, X)), when the cost model overlaps;
//   2. a backward (I, or B without splitting): the deepest stage or the oldest microbatch first;
//   3. a forward of a microbatch already in the pipeline: the deepest stage or the oldest first;
//   4. a W or the forward that lets a new microbatch in, in the policy's order;
//   5. a W.
// Ranks that are not the busiest (by the lower bound) may run a W before a lone backward or
// forward once they hold many, may wait a while for a partner to pair a lone one with, and may
// wait for an input that outranks a lone forward when it arrives before that forward would end.
// A forward runs only if the memory it takes keeps the pipeline safe in the banker's sense (every
// microbatch in the pipeline can still finish, oldest first, within each rank's budget: the
// memory limit less its parameters), and a new microbatch enters only while fewer than
// max_in_flight are in the pipeline. A rank's activation memory thus never exceeds its budget,
// and the oldest microbatch can always go on: the run never waits for memory that cannot come.
#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "compiler/all_to_all_costs.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_bound.h"
#include "compiler/measured_costs.h"
#include "compiler/schedules/bankers_memory.h"
#include "compiler/synthesize.h"

namespace ppc {

namespace {

struct Candidate {
  int stage, mb;
  double ready;  // when its input is there
};

struct Transfer {
  int to;         // receiving rank
  bool forward;   // an activation for F(stage + 1), else a gradient for the backward of stage - 1
  int stage, mb;  // the sending stage
  double time;    // the message's time
};

struct RankState {
  bool computing = false;
  double end = 0;         // of the running compute
  double batch_done = 0;  // when the transfers of the open batch are done
  int unmatched = 0;      // SENDs waiting for their receiver's boundary
  std::vector<Candidate> fwd, bwd;
  std::vector<Candidate> w;  // W ready to run (their I ran here), oldest first
  size_t w_head = 0;
  Action running;
  std::vector<Action> order;
  double pending_wake = -1;  // a try-start event queued for this time and not yet run (-1: none)
  double wait_until = -1;    // waiting for a partner until then (-1: not waiting)
  size_t forwards_started = 0, backwards_started = 0;
};

struct Event {
  double time;
  int kind;  // 0: a compute ends; 1: try to start
  uint64_t seq;
  int rank;
  bool operator>(const Event& o) const {
    if (time != o.time) return time > o.time;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

class ListScheduler {
 public:
  ListScheduler(const ListScheduleInput& in, const ListPolicy& pol)
      : plan_(*in.skeleton),
        pol_(pol),
        S_(plan_.num_stages()),
        m_(plan_.microbatches),
        pp_(plan_.pp()),
        cost_(stage_costs(plan_, *in.cost)),
        msg_(message_costs(plan_, *in.cost)),
        ov_(in.cost->unit ? 0.0 : in.cost->overlap),
        wg_(in.cost->unit ? 0.0 : in.cost->weight_grad_memory),
        eager_(!in.cost->unit && in.cost->messages == MessageModel::Eager),
        post_(eager_ ? in.cost->post : 0.0),
        ranks_(static_cast<size_t>(pp_)),
        mem_(activation_needs(), in.activation_budget, m_) {
    PPC_INTERNAL_ASSERT(plan_.copies == 1, "list_schedule runs one model copy");
    // The busiest ranks (by their lower bound) hold their Ws back; the others may not hold more
    // than max_held_w.
    const LowerBound lb = makespan_lower_bound(plan_, *in.cost);
    busiest_.assign(static_cast<size_t>(pp_), false);
    for (int r = 0; r < pp_; ++r)
      busiest_[static_cast<size_t>(r)] =
          lb.ranks[static_cast<size_t>(r)].bound >= (1 - pol_.busiest_margin) * lb.value;
    for (int r = 0; r < pp_; ++r)
      if (mem_.need(r) > mem_.budget(r) * (1 + 1e-12))
        throw UserError(
            fmt::format(
                "no order fits: one microbatch needs {} of activation memory on rank {}, "
                "which has {} left after its parameters",
                format_memory(mem_.need(r), !in.cost->unit), r,
                format_memory(std::max(0.0, mem_.budget(r)), !in.cost->unit)),
            input_location("--memory-limit"));
  }

  ListSchedule run() {
    for (int r = 0; r < pp_; ++r) wake(r, 0);
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      if (e.kind == 0) {
        finish(e.rank, e.time);
      } else {
        // A wake at this same time from now on (a part of no duration ending, a message of no
        // cost arriving) must queue a new try-start: this one has run.
        if (st(e.rank).pending_wake == e.time) st(e.rank).pending_wake = -1;
        try_start(e.rank, e.time);
      }
    }
    // F, I and W of every stage and microbatch (a B counts as I and W).
    const size_t want = 3 * static_cast<size_t>(S_) * static_cast<size_t>(m_);
    PPC_INTERNAL_ASSERT(parts_done_ == want, "list scheduling stopped before every action ran");
    ListSchedule out;
    out.makespan = makespan_;
    for (RankState& st : ranks_) out.orders.push_back(std::move(st.order));
    return out;
  }

 private:
  const StageCost& c(int s) const { return cost_[static_cast<size_t>(s)]; }
  // What an I of stage s leaves for its W: the share weight_grad_memory of the whole activation,
  // which under a memory mode (memory_costs.h) can exceed what the stage keeps from its F (the I
  // then takes more than it frees).
  double for_w(int s) const {
    return c(s).transient == 0 ? c(s).activation * wg_ : wg_ * (c(s).activation + c(s).transient);
  }
  int rank(int s) const { return plan_.rank_of(s); }
  RankState& st(int r) { return ranks_[static_cast<size_t>(r)]; }

  void push(double t, int kind, int r) { events_.push(Event{t, kind, seq_++, r}); }
  void wake(int r, double t) {
    RankState& s = st(r);
    if (s.pending_wake == t) return;  // one queued try-start at t is enough
    s.pending_wake = t;
    push(t, 1, r);
  }

  double part_time(ActionKind k, int s) const { return c(s).time(k); }

  // --- what is ready -----------------------------------------------------------------------

  // Per rank: one microbatch's activations (what the banker's algorithm counts on).
  std::vector<double> activation_needs() const {
    std::vector<double> need(static_cast<size_t>(pp_), 0.0);
    for (int s = 0; s < S_; ++s) need[static_cast<size_t>(rank(s))] += c(s).activation;
    return need;
  }

  // --- memory: the banker's algorithm (bankers_memory.h) ------------------------------------
  bool can_admit() const {
    if (next_mb_ >= m_) return false;
    if (pol_.max_in_flight > 0 && in_flight_ >= pol_.max_in_flight) return false;
    return mem_.can_allocate(rank(0), next_mb_, c(0).activation, next_mb_);
  }

  bool can_forward(int r, const Candidate& k) const {
    return mem_.can_allocate(r, k.mb, c(k.stage).activation, next_mb_);
  }

  // Lower is better.
  std::pair<int, int> bwd_key(const Candidate& k) const {
    return pol_.backward_deepest_first ? std::pair{-k.stage, k.mb} : std::pair{k.mb, -k.stage};
  }
  std::pair<int, int> fwd_key(const Candidate& k) const {
    return pol_.forward_deepest_first ? std::pair{-k.stage, k.mb} : std::pair{k.mb, -k.stage};
  }

  // The backward part to run for (stage s) alongside a forward of duration f in a pair, and its
  // duration.
  ActionKind pair_kind(int s, double f) const {
    if (!pol_.split_backward) return ActionKind::B;
    if (pol_.pair_full_backward && std::min(f, c(s).b) > std::min(f, c(s).i) + 1e-12)
      return ActionKind::B;
    return ActionKind::I;
  }

  // The kind of a lone backward of `stage` on rank r: I (then a W) under the split, but a B on the
  // busiest ranks where the policy says so and the whole backward is the shorter.
  ActionKind lone_backward(int r, int stage) const {
    if (!pol_.split_backward) return ActionKind::B;
    if (pol_.busiest_full_b && busiest_[static_cast<size_t>(r)] &&
        c(stage).whole_backward_shorter())
      return ActionKind::B;
    return ActionKind::I;
  }

  // Picks and starts rank r's next compute at t; false if nothing is ready.
  bool start_next(int r, double t) {
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
        if (s.fwd[static_cast<size_t>(k)].ready <= t &&
            can_forward(r, s.fwd[static_cast<size_t>(k)]))
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

  // Will an input for rank r that outranks a forward of `stage` (a deeper stage's forward, or a
  // backward) arrive before `until`, from a compute running now on another rank?
  bool incoming_before(int r, int stage, double until) const {
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

  // Can a partner still come for a lone backward (a forward of this rank) or a lone forward (a
  // backward: once the first backward has run, more follow while this rank has some to run)?
  bool partner_may_come(int r, bool for_backward) const {
    const RankState& s = ranks_[static_cast<size_t>(r)];
    const size_t per_kind =
        plan_.placement.rank_stages[static_cast<size_t>(r)].size() * static_cast<size_t>(m_);
    if (for_backward) return s.forwards_started < per_kind;
    return any_backward_ && s.backwards_started < per_kind;
  }

  static Candidate take(std::vector<Candidate>& v, int k) {
    const Candidate x = v[static_cast<size_t>(k)];
    v[static_cast<size_t>(k)] = v.back();
    v.pop_back();
    return x;
  }

  // The next microbatch enters: it will take its activations on every rank.
  Candidate admit_next() {
    const int mb = next_mb_++;
    mem_.admit(mb);
    ++in_flight_;
    return Candidate{0, mb, 0};
  }

  void start(int r, double t, const Action& a) {
    RankState& s = st(r);
    double d = 0;
    if (a.kind == ActionKind::OverlapFB) {
      const double f = c(a.stage).f, x = part_time(a.sub_kind, a.stage2);
      d = overlapped_time(f, c(a.stage).all_to_all_f, x, c(a.stage2).all_to_all(a.sub_kind), ov_);
    } else {
      d = part_time(a.kind, a.stage);
    }
    if (a.kind == ActionKind::F || a.kind == ActionKind::OverlapFB) {
      mem_.allocate(r, a.microbatch, c(a.stage).activation);
      ++s.forwards_started;
    }
    if (a.kind != ActionKind::F && a.kind != ActionKind::W) {
      ++s.backwards_started;
      any_backward_ = true;
    }
    s.wait_until = -1;
    s.computing = true;
    s.running = a;
    s.end = t + d;
    s.order.push_back(a);
    push(s.end, 0, r);
  }

  // --- transfers ---------------------------------------------------------------------------

  void arrive(const Transfer& x, double when) {
    RankState& q = st(x.to);
    if (x.forward)
      q.fwd.push_back(Candidate{x.stage + 1, x.mb, when});
    else
      q.bwd.push_back(Candidate{x.stage - 1, x.mb, when});
    wake(x.to, when);
  }

  void match(int r, const Transfer& x, double t) {
    const double done = t + x.time;
    RankState& s = st(r);
    RankState& q = st(x.to);
    s.batch_done = std::max(s.batch_done, done);
    q.batch_done = std::max(q.batch_done, done);
    arrive(x, done);
  }

  // --- events ------------------------------------------------------------------------------

  void complete_part(int r, const Action& p, double t) {
    RankState& s = st(r);
    const int stage = p.stage, mb = p.microbatch;
    const double act = c(stage).activation;
    ++parts_done_;
    switch (p.kind) {
      case ActionKind::F: {
        if (stage + 1 < S_) {
          if (rank(stage + 1) == r)
            s.fwd.push_back(Candidate{stage + 1, mb, t});
          else
            outgoing_.push_back(Transfer{rank(stage + 1), true, stage, mb,
                                         msg_.time[2 * static_cast<size_t>(stage)]});
        } else {
          s.bwd.push_back(Candidate{stage, mb, t});
        }
        return;
      }
      case ActionKind::B:
      case ActionKind::I: {
        if (p.kind == ActionKind::B) {
          mem_.release(r, mb, act, next_mb_);
          ++parts_done_;  // B is I and W at once
        } else {
          mem_.release(r, mb, c(stage).transient == 0 ? act * (1 - wg_) : act - for_w(stage),
                       next_mb_);
          s.w.push_back(Candidate{stage, mb, t});
        }
        freed_ = true;
        if (stage > 0) {
          if (rank(stage - 1) == r)
            s.bwd.push_back(Candidate{stage - 1, mb, t});
          else
            outgoing_.push_back(Transfer{rank(stage - 1), false, stage, mb,
                                         msg_.time[2 * static_cast<size_t>(stage) + 1]});
        } else {
          --in_flight_;
        }
        return;
      }
      case ActionKind::W:
        mem_.release(r, mb, for_w(stage), next_mb_);
        freed_ = true;
        return;
      default:
        return;
    }
  }

  void finish(int r, double t) {
    RankState& s = st(r);
    s.computing = false;
    makespan_ = std::max(makespan_, t);
    outgoing_.clear();
    freed_ = false;
    for_each_part(s.running, [&](const Action& p) { complete_part(r, p, t); });
    // SENDs that waited for this boundary.
    std::vector<std::pair<Transfer, int>> waiting;
    waiting.swap(waiting_[static_cast<size_t>(r)]);
    for (const auto& [x, from] : waiting) {
      match(from, x, t);
      if (--st(from).unmatched == 0) wake(from, std::max(t, st(from).batch_done));
    }
    const std::vector<Transfer> out = outgoing_;
    double posted = t;
    for (const Transfer& x : out) {
      if (eager_) {  // posted and forgotten: it arrives its time after the post
        posted += post_;
        s.batch_done = std::max(s.batch_done, posted);
        arrive(x, posted + x.time);
      } else {
        post(r, x, t);
      }
    }
    if (s.unmatched == 0) wake(r, std::max(t, s.batch_done));
    if (freed_ && rank(0) != r) wake(rank(0), t);
  }

  // Posts a SEND at rank r's boundary t: matched at once if the receiver is between computes,
  // else r waits for the receiver's boundary (lowering's placement: lower_send_recv.h).
  void post(int r, const Transfer& x, double t) {
    if (!st(x.to).computing) {
      match(r, x, t);
      return;
    }
    waiting_[static_cast<size_t>(x.to)].emplace_back(x, r);
    ++st(r).unmatched;
  }

  void try_start(int r, double t) {
    RankState& s = st(r);
    if (s.computing || s.unmatched > 0) return;
    if (s.batch_done > t) {
      wake(r, s.batch_done);
      return;
    }
    start_next(r, t);  // or nothing is ready: an arrival or a freed microbatch wakes it
  }

  const Plan& plan_;
  const ListPolicy& pol_;
  const int S_, m_, pp_;
  const std::vector<StageCost> cost_;
  const MessageCosts msg_;
  const double ov_, wg_;
  // Pairs save time: the computations overlap, or a part's all-to-alls hide under the other's.
  const bool pairs_ = ov_ > 0 || hides_all_to_all(cost_);
  // The eager message model (a cost file from pprun on Gloo): a SEND never waits for its
  // receiver; the sender spends post_ per message.
  const bool eager_;
  const double post_;
  std::vector<RankState> ranks_;
  BankersMemory mem_;
  bool any_backward_ = false;  // some backward has started
  std::vector<bool> busiest_;
  // Per rank: SENDs to it (and their sender) waiting for its boundary.
  std::vector<std::vector<std::pair<Transfer, int>>> waiting_ =
      std::vector<std::vector<std::pair<Transfer, int>>>(ranks_.size());
  std::vector<Transfer> outgoing_;  // of the compute that just ended
  bool freed_ = false;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  int next_mb_ = 0, in_flight_ = 0;
  size_t parts_done_ = 0;
  double makespan_ = 0;
};

}  // namespace

ListSchedule list_schedule(const ListScheduleInput& in, const ListPolicy& policy) {
  return ListScheduler(in, policy).run();
}

}  // namespace ppc
