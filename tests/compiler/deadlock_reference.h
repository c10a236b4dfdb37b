// An independent judge of lowered plans, for testing the verifier (verify_mutation_test.cpp).
//
// It is written from the documented semantics alone (docs/deadlock-model.md; the plan IR of
// compiler/plan.h and compiler/action.h) and shares no code with the verifier: nothing from
// compiler/verify.cpp, deadlock_model.cpp, dependencies.h, stuck.cpp or lower_send_recv.cpp. It
// decides the same question differently: by exploring every interleaving of the ranks (an
// exhaustive search of the state space, feasible for small plans), where the verifier runs one
// schedule of an event-driven engine.
//
// The rules, as the document states them:
//  - shape: each action's stage exists and is held by the rank that runs it, its microbatch
//    exists and goes through the stage's model copy; a SEND/RECV exchanges with the neighbouring
//    stage in its direction, which is on another rank, and names that rank as its peer;
//  - exactly once: every (stage, microbatch) a copy runs has one F and then one B, or one I and
//    one W; every transfer between ranks has one SEND and one matching RECV; the compute actions
//    of the lowered order are the compute order;
//  - data: a compute action needs its inputs, produced by an earlier action of its own rank: F the
//    activation (the local F of the previous stage, or a RECV_F), B and I the F of the same stage
//    and microbatch and the output gradient (the local B/I of the next stage, or a RECV_B), W the
//    I; a SEND needs what it sends (SEND_F the F, SEND_B the B/I). An OVERLAP_F_B runs its forward
//    part, then its backward part;
//  - execution: each rank runs its actions in order; a maximal run of SEND/RECV is one batch; a
//    batch completes once each of its ops has met its matching op, which happens while both ops'
//    batches are the current ones of their ranks (so once the peer has reached the batch holding
//    the matching op: the peer cannot leave that batch before the two ops met). A plan is correct
//    when no interleaving of the ranks' steps reaches a state where some rank cannot move and not
//    every rank has finished.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "compiler/action.h"
#include "compiler/plan.h"

namespace refmodel {

using ppc::Action;
using ppc::ActionKind;

enum class Outcome { Ok, Shape, Count, Data, Deadlock, TooBig };

inline const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Ok:
      return "ok";
    case Outcome::Shape:
      return "shape";
    case Outcome::Count:
      return "count";
    case Outcome::Data:
      return "data";
    case Outcome::Deadlock:
      return "deadlock";
    case Outcome::TooBig:
      return "too big";
  }
  return "?";
}

struct Verdict {
  Outcome outcome = Outcome::Ok;
  std::string why;
  size_t states = 0;  // states explored
  bool completion_reachable = false;
  bool deadlock_reachable = false;
  bool ok() const { return outcome == Outcome::Ok; }
};

class Judge {
 public:
  // `reduce`: explore only one order of the compute steps (each is always enabled and touches
  // only its own rank, so skipping the other orders loses no deadlock). Off = every interleaving.
  Judge(const ppc::Plan& plan, size_t max_states, bool reduce)
      : plan_(plan),
        max_states_(max_states),
        reduce_(reduce),
        S_(static_cast<int>(plan.placement.stage_rank.size())),
        M_(plan.microbatches),
        pp_(plan.placement.pp),
        copies_(plan.copies),
        per_copy_(S_ / copies_) {}

  Verdict run() {
    const auto& orders = plan_.lowered;
    if (static_cast<int>(orders.size()) != pp_) return fail(Outcome::Shape, "rank count");
    if (!shape() || !counts() || !data()) return verdict_;
    explore();
    return verdict_;
  }

 private:
  // --- topology, from the plan's data and the documented rules ----------------------------------
  int rank_of(int s) const { return plan_.placement.stage_rank[static_cast<size_t>(s)]; }
  int prev(int s) const { return s % per_copy_ == 0 ? -1 : s - 1; }
  int next(int s) const { return (s + 1) % per_copy_ == 0 ? -1 : s + 1; }
  int copy_of_stage(int s) const { return s / per_copy_; }
  int copy_of_mb(int mb) const { return copies_ == 1 ? 0 : (mb < (M_ + 1) / 2 ? 0 : 1); }
  // The stage a SEND/RECV exchanges with.
  int partner_stage(const Action& a) const {
    switch (a.kind) {
      case ActionKind::SendF:
      case ActionKind::RecvB:
        return next(a.stage);
      case ActionKind::RecvF:
      case ActionKind::SendB:
        return prev(a.stage);
      default:
        return -1;
    }
  }
  static ActionKind partner_kind(ActionKind k) {
    switch (k) {
      case ActionKind::SendF:
        return ActionKind::RecvF;
      case ActionKind::RecvF:
        return ActionKind::SendF;
      case ActionKind::SendB:
        return ActionKind::RecvB;
      default:
        return ActionKind::SendB;
    }
  }
  static bool comm(ActionKind k) {
    return k == ActionKind::SendF || k == ActionKind::RecvF || k == ActionKind::SendB ||
           k == ActionKind::RecvB;
  }
  static std::vector<Action> parts(const Action& a) {
    if (a.kind != ActionKind::OverlapFB) return {a};
    return {Action::compute(ActionKind::F, a.stage, a.microbatch),
            Action::compute(a.sub_kind, a.stage2, a.microbatch2)};
  }

  Verdict fail(Outcome o, std::string why) {
    verdict_.outcome = o;
    verdict_.why = std::move(why);
    return verdict_;
  }

  // --- shape ----------------------------------------------------------------------------------
  bool shape() {
    for (int r = 0; r < pp_; ++r) {
      const auto& order = plan_.lowered[static_cast<size_t>(r)];
      std::vector<Action> computes;
      for (size_t i = 0; i < order.size(); ++i) {
        const Action& a = order[i];
        if (!comm(a.kind)) computes.push_back(a);
        for (const Action& p : parts(a)) {
          if (p.stage < 0 || p.stage >= S_ || p.microbatch < 0 || p.microbatch >= M_) {
            fail(Outcome::Shape, fmt::format("rank {} action {}: out of range", r, i));
            return false;
          }
          if (rank_of(p.stage) != r || copy_of_stage(p.stage) != copy_of_mb(p.microbatch)) {
            fail(Outcome::Shape, fmt::format("rank {} action {}: wrong rank or copy", r, i));
            return false;
          }
          if (!comm(p.kind)) continue;
          const int q = partner_stage(p);
          if (q < 0 || rank_of(q) == r || (p.peer >= 0 && p.peer != rank_of(q))) {
            fail(Outcome::Shape, fmt::format("rank {} action {}: bad exchange", r, i));
            return false;
          }
        }
      }
      if (computes != plan_.compute[static_cast<size_t>(r)]) {
        fail(Outcome::Shape, fmt::format("rank {}: compute order differs", r));
        return false;
      }
    }
    return true;
  }

  // --- exactly once ---------------------------------------------------------------------------
  bool counts() {
    std::map<std::tuple<ActionKind, int, int>, int> n;
    for (const auto& order : plan_.lowered)
      for (const Action& a : order)
        for (const Action& p : parts(a)) ++n[{p.kind, p.stage, p.microbatch}];
    auto count = [&](ActionKind k, int s, int mb) {
      auto it = n.find({k, s, mb});
      return it == n.end() ? 0 : it->second;
    };
    for (int s = 0; s < S_; ++s)
      for (int mb = 0; mb < M_; ++mb) {
        if (copy_of_stage(s) != copy_of_mb(mb)) continue;
        const int f = count(ActionKind::F, s, mb), b = count(ActionKind::B, s, mb),
                  i = count(ActionKind::I, s, mb), w = count(ActionKind::W, s, mb);
        if (f != 1 || !((b == 1 && i == 0 && w == 0) || (b == 0 && i == 1 && w == 1))) {
          fail(Outcome::Count, fmt::format("stage {} microbatch {}: F/B/I/W counts", s, mb));
          return false;
        }
        const int nx = next(s);
        if (nx >= 0 && rank_of(nx) != rank_of(s) &&
            (count(ActionKind::SendF, s, mb) != 1 || count(ActionKind::RecvF, nx, mb) != 1)) {
          fail(Outcome::Count, fmt::format("activation {} {}: transfer counts", s, mb));
          return false;
        }
        const int pv = prev(s);
        if (pv >= 0 && rank_of(pv) != rank_of(s) &&
            (count(ActionKind::SendB, s, mb) != 1 || count(ActionKind::RecvB, pv, mb) != 1)) {
          fail(Outcome::Count, fmt::format("gradient {} {}: transfer counts", s, mb));
          return false;
        }
      }
    return true;
  }

  // --- data: what each action needs, from earlier actions of its own rank ----------------------
  enum Item { kAct, kGrad, kFwdDone, kBwdDone, kIDone };  // kAct/kGrad: received inputs of a stage
  using Key = std::tuple<int, int, int>;                  // item, stage, microbatch

  // The items `p` (a plain action) needs, and the one it produces (if any).
  std::vector<Key> needs(const Action& p, int rank) const {
    const int s = p.stage, mb = p.microbatch;
    std::vector<Key> out;
    switch (p.kind) {
      case ActionKind::F:
        if (prev(s) >= 0)
          out.push_back(rank_of(prev(s)) == rank ? Key{kFwdDone, prev(s), mb} : Key{kAct, s, mb});
        break;
      case ActionKind::B:
      case ActionKind::I:
        out.push_back({kFwdDone, s, mb});
        if (next(s) >= 0)
          out.push_back(rank_of(next(s)) == rank ? Key{kBwdDone, next(s), mb} : Key{kGrad, s, mb});
        break;
      case ActionKind::W:
        out.push_back({kIDone, s, mb});
        break;
      case ActionKind::SendF:
        out.push_back({kFwdDone, s, mb});
        break;
      case ActionKind::SendB:
        out.push_back({kBwdDone, s, mb});
        break;
      default:
        break;
    }
    return out;
  }
  static std::vector<Key> produces(const Action& p) {
    switch (p.kind) {
      case ActionKind::F:
        return {{kFwdDone, p.stage, p.microbatch}};
      case ActionKind::B:
        return {{kBwdDone, p.stage, p.microbatch}};
      case ActionKind::I:
        return {{kBwdDone, p.stage, p.microbatch}, {kIDone, p.stage, p.microbatch}};
      case ActionKind::RecvF:
        return {{kAct, p.stage, p.microbatch}};
      case ActionKind::RecvB:
        return {{kGrad, p.stage, p.microbatch}};
      default:
        return {};
    }
  }

 public:
  // Whether `order` (one rank's actions) has every input before it is used.
  bool data_ok(const std::vector<Action>& order, int rank, std::string* why = nullptr) const {
    std::set<Key> have;
    for (size_t i = 0; i < order.size(); ++i)
      for (const Action& p : parts(order[i])) {
        for (const Key& k : needs(p, rank))
          if (!have.count(k)) {
            if (why) *why = fmt::format("rank {} action {} lacks an input", rank, i);
            return false;
          }
        for (const Key& k : produces(p)) have.insert(k);
      }
    return true;
  }
  // Whether action `a` on `rank` needs what RECV `recv` delivers.
  bool consumes(const Action& a, const Action& recv, int rank) const {
    for (const Action& p : parts(a))
      for (const Key& k : needs(p, rank))
        for (const Key& g : produces(recv))
          if (k == g) return true;
    return false;
  }

 private:
  bool data() {
    for (int r = 0; r < pp_; ++r) {
      std::string why;
      if (!data_ok(plan_.lowered[static_cast<size_t>(r)], r, &why)) {
        fail(Outcome::Data, why);
        return false;
      }
    }
    return true;
  }

  // --- execution: every interleaving ------------------------------------------------------------
  struct Step {
    bool batch = false;
    std::vector<std::pair<int, int>> partners;  // per op of a batch: (rank, step index there)
  };

  void explore() {
    // Steps per rank: a compute action, or a batch. Each op's partner: where it sits.
    std::vector<std::vector<Step>> steps(static_cast<size_t>(pp_));
    std::map<std::tuple<ActionKind, int, int>, std::pair<int, int>> where;  // op -> (rank, step)
    for (int r = 0; r < pp_; ++r) {
      const auto& order = plan_.lowered[static_cast<size_t>(r)];
      auto& st = steps[static_cast<size_t>(r)];
      for (size_t i = 0; i < order.size(); ++i) {
        const Action& a = order[i];
        if (!comm(a.kind)) {
          st.push_back(Step{});
          continue;
        }
        if (i == 0 || !comm(order[i - 1].kind)) st.push_back(Step{true, {}});
        where[{a.kind, a.stage, a.microbatch}] = {r, static_cast<int>(st.size()) - 1};
      }
    }
    for (int r = 0; r < pp_; ++r) {
      const auto& order = plan_.lowered[static_cast<size_t>(r)];
      auto& st = steps[static_cast<size_t>(r)];
      int k = -1;
      for (size_t i = 0; i < order.size(); ++i) {
        const Action& a = order[i];
        if (!comm(a.kind) || i == 0 || !comm(order[i - 1].kind)) ++k;
        if (!comm(a.kind)) continue;
        st[static_cast<size_t>(k)].partners.push_back(
            where.at({partner_kind(a.kind), partner_stage(a), a.microbatch}));
      }
    }
    if (pp_ > 8) {
      fail(Outcome::TooBig, "more than 8 ranks");
      return;
    }
    for (const auto& st : steps)
      if (st.size() > 254) {
        fail(Outcome::TooBig, "more than 254 steps on a rank");
        return;
      }

    using State = std::vector<int>;  // per rank: index of its next step
    auto encode = [&](const State& s) {
      uint64_t v = 0;
      for (int x : s) v = (v << 8) | static_cast<uint64_t>(x);
      return v;
    };
    auto enabled = [&](const State& s, int r) {
      const auto& st = steps[static_cast<size_t>(r)];
      const int h = s[static_cast<size_t>(r)];
      if (h >= static_cast<int>(st.size())) return false;
      for (const auto& [q, qi] : st[static_cast<size_t>(h)].partners)
        if (s[static_cast<size_t>(q)] < qi) return false;  // the peer has not reached it yet
      return true;
    };
    std::unordered_set<uint64_t> seen;
    std::vector<State> stack{State(static_cast<size_t>(pp_), 0)};
    seen.insert(encode(stack.back()));
    while (!stack.empty()) {
      State s = std::move(stack.back());
      stack.pop_back();
      std::vector<int> moves;
      for (int r = 0; r < pp_; ++r)
        if (enabled(s, r)) {
          const bool compute = !steps[static_cast<size_t>(r)][static_cast<size_t>(s[r])].batch;
          if (reduce_ && compute) {
            moves.assign(1, r);
            break;
          }
          moves.push_back(r);
        }
      if (moves.empty()) {
        bool done = true;
        for (int r = 0; r < pp_; ++r)
          done = done && s[static_cast<size_t>(r)] == static_cast<int>(steps[r].size());
        (done ? verdict_.completion_reachable : verdict_.deadlock_reachable) = true;
        continue;
      }
      for (int r : moves) {
        State t = s;
        ++t[static_cast<size_t>(r)];
        if (seen.insert(encode(t)).second) stack.push_back(std::move(t));
      }
      if (seen.size() > max_states_) {
        verdict_.states = seen.size();
        fail(Outcome::TooBig, "state space too large");
        return;
      }
    }
    verdict_.states = seen.size();
    if (verdict_.deadlock_reachable) fail(Outcome::Deadlock, "a reachable state is stuck");
  }

  const ppc::Plan& plan_;
  size_t max_states_;
  bool reduce_;
  int S_, M_, pp_, copies_, per_copy_;
  Verdict verdict_;
};

inline Verdict judge(const ppc::Plan& plan, size_t max_states = 2'000'000, bool reduce = false) {
  return Judge(plan, max_states, reduce).run();
}

}  // namespace refmodel
