// Mutants of valid lowered plans, for testing the verifier (verify_mutation_test.cpp): the ways a
// plan goes wrong (two actions swapped, a RECV moved after its consumer, a SEND dropped or
// duplicated, a peer or a microbatch changed, a batch reversed, an op moved to another batch) and
// the deadlocking patterns of PyTorch #126419 and #127332 spliced in. Deterministic for a seed.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/action.h"
#include "compiler/plan.h"
#include "tests/compiler/deadlock_reference.h"

namespace mutants {

using ppc::Action;
using ppc::ActionKind;
using ppc::Plan;

// A valid lowered plan to mutate.
struct Base {
  std::string name;
  Plan plan;
};

struct Mutant {
  std::string op;    // the operator that made it
  std::string base;  // the plan it came from
  Plan plan;
};

inline bool is_comm(const Action& a) {
  return ppc::is_comm(a.kind);
}

// The compute orders follow the mutated lowered orders (the verifier's check that they agree is
// not what these mutants are about).
inline Plan with_lowered(const Plan& base, std::vector<std::vector<Action>> lowered) {
  Plan p = base;
  p.lowered = std::move(lowered);
  for (size_t r = 0; r < p.lowered.size(); ++r) {
    p.compute[r].clear();
    for (const Action& a : p.lowered[r])
      if (!is_comm(a)) p.compute[r].push_back(a);
  }
  return p;
}

// Batches of one rank: [begin, end) of each maximal run of SEND/RECV.
inline std::vector<std::pair<size_t, size_t>> batches(const std::vector<Action>& order) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < order.size(); ++i) {
    if (!is_comm(order[i])) continue;
    if (i == 0 || !is_comm(order[i - 1])) out.push_back({i, i});
    out.back().second = i + 1;
  }
  return out;
}

class Mutator {
 public:
  Mutator(const Base& base, uint64_t seed) : base_(base), rng_(seed) {}

  // Each returns nothing when the plan has no place for it.
  using Op = std::optional<Plan> (Mutator::*)();
  static const std::vector<std::pair<const char*, Op>>& ops() {
    static const std::vector<std::pair<const char*, Op>> all = {
        {"swap two actions", &Mutator::swap_any},
        {"swap neighbours", &Mutator::swap_adjacent},
        {"RECV after its consumer", &Mutator::recv_after_consumer},
        {"drop a SEND", &Mutator::drop_send},
        {"duplicate a SEND", &Mutator::duplicate_send},
        {"change a peer", &Mutator::change_peer},
        {"change a microbatch", &Mutator::change_microbatch},
        {"reverse a batch", &Mutator::reverse_batch},
        {"move an op to another batch", &Mutator::move_op},
        {"#126419 split crossed exchanges", &Mutator::split_crossing},
        {"#127332 ring of early receives", &Mutator::ring},
        {"#127332 batch a later RECV early", &Mutator::batch_recv_early},
    };
    return all;
  }

 private:
  const std::vector<std::vector<Action>>& orders() const { return base_.plan.lowered; }
  size_t pick(size_t n) { return static_cast<size_t>(rng_() % n); }
  int pick_rank() { return static_cast<int>(pick(orders().size())); }
  // A random position of rank r holding an action that satisfies `pred`.
  std::optional<size_t> pick_where(int r, const std::function<bool(const Action&)>& pred) {
    std::vector<size_t> hits;
    const auto& o = orders()[static_cast<size_t>(r)];
    for (size_t i = 0; i < o.size(); ++i)
      if (pred(o[i])) hits.push_back(i);
    if (hits.empty()) return std::nullopt;
    return hits[pick(hits.size())];
  }
  Plan make(std::vector<std::vector<Action>> lowered) const {
    return with_lowered(base_.plan, std::move(lowered));
  }

  std::optional<Plan> swap_any() {
    auto o = orders();
    const int r = pick_rank();
    auto& v = o[static_cast<size_t>(r)];
    if (v.size() < 2) return std::nullopt;
    size_t i = pick(v.size()), j = pick(v.size());
    if (i == j || v[i] == v[j]) return std::nullopt;
    std::swap(v[i], v[j]);
    return make(std::move(o));
  }
  std::optional<Plan> swap_adjacent() {
    auto o = orders();
    auto& v = o[static_cast<size_t>(pick_rank())];
    if (v.size() < 2) return std::nullopt;
    const size_t i = pick(v.size() - 1);
    std::swap(v[i], v[i + 1]);
    return make(std::move(o));
  }
  std::optional<Plan> recv_after_consumer() {
    const int r = pick_rank();
    const auto i = pick_where(r, [](const Action& a) { return ppc::is_recv(a.kind); });
    if (!i) return std::nullopt;
    auto o = orders();
    auto& v = o[static_cast<size_t>(r)];
    const refmodel::Judge j(base_.plan, 0, false);
    for (size_t k = *i + 1; k < v.size(); ++k)
      if (!is_comm(v[k]) && j.consumes(v[k], v[*i], r)) {
        const Action recv = v[*i];
        v.erase(v.begin() + static_cast<long>(*i));
        v.insert(v.begin() + static_cast<long>(k), recv);  // k - 1 is the consumer now
        return make(std::move(o));
      }
    return std::nullopt;
  }
  std::optional<Plan> drop_send() {
    const int r = pick_rank();
    const auto i = pick_where(r, [](const Action& a) { return ppc::is_send(a.kind); });
    if (!i) return std::nullopt;
    auto o = orders();
    auto& v = o[static_cast<size_t>(r)];
    v.erase(v.begin() + static_cast<long>(*i));
    return make(std::move(o));
  }
  std::optional<Plan> duplicate_send() {
    const int r = pick_rank();
    const auto i = pick_where(r, [](const Action& a) { return ppc::is_send(a.kind); });
    if (!i) return std::nullopt;
    auto o = orders();
    auto& v = o[static_cast<size_t>(r)];
    const size_t at = *i + 1 + pick(v.size() - *i);  // right after it, or anywhere later
    v.insert(v.begin() + static_cast<long>(at), v[*i]);
    return make(std::move(o));
  }
  std::optional<Plan> change_peer() {
    const int r = pick_rank();
    const auto i = pick_where(r, is_comm);
    const int pp = static_cast<int>(orders().size());
    if (!i || pp < 3) return std::nullopt;  // at pp 2 the only other rank is the right one
    auto o = orders();
    Action& a = o[static_cast<size_t>(r)][*i];
    int peer = a.peer;
    while (peer == a.peer) peer = static_cast<int>(pick(static_cast<size_t>(pp)));
    a.peer = static_cast<int16_t>(peer);
    return make(std::move(o));
  }
  std::optional<Plan> change_microbatch() {
    const int r = pick_rank();
    const auto i = pick_where(r, [](const Action&) { return true; });
    if (!i) return std::nullopt;
    auto o = orders();
    Action& a = o[static_cast<size_t>(r)][*i];
    const int m = base_.plan.microbatches;
    int mb = a.microbatch;
    while (mb == a.microbatch) mb = static_cast<int>(pick(static_cast<size_t>(m)));
    a.microbatch = mb;
    return make(std::move(o));
  }
  std::optional<Plan> reverse_batch() {
    auto o = orders();
    const int r = pick_rank();
    auto& v = o[static_cast<size_t>(r)];
    std::vector<std::pair<size_t, size_t>> multi;
    for (auto b : batches(v))
      if (b.second - b.first >= 2) multi.push_back(b);
    if (multi.empty()) return std::nullopt;
    const auto [b, e] = multi[pick(multi.size())];
    std::reverse(v.begin() + static_cast<long>(b), v.begin() + static_cast<long>(e));
    return make(std::move(o));
  }
  // A SEND or RECV moved into another batch of its rank (earlier or later).
  std::optional<Plan> move_op() {
    auto o = orders();
    const int r = pick_rank();
    auto& v = o[static_cast<size_t>(r)];
    const auto i = pick_where(r, is_comm);
    const auto bs = batches(v);
    if (!i || bs.size() < 2) return std::nullopt;
    const Action op = v[*i];
    v.erase(v.begin() + static_cast<long>(*i));
    const auto target = batches(v);
    if (target.empty()) return std::nullopt;
    const auto [b, e] = target[pick(target.size())];
    v.insert(v.begin() + static_cast<long>(b + pick(e - b + 1)), op);
    return make(std::move(o));
  }

  // Splits batch [b, e) of `v` (rank r): the RECVs whose partners sit on rank `peer` go after the
  // first later compute that needs none of them and can run there (it is moved up between the
  // two halves); without such a compute they go after the next compute. Returns false if the
  // batch has no such RECV.
  bool split_batch(std::vector<Action>& v, int r, size_t b, size_t e, int peer) {
    std::vector<Action> first, moved;
    for (size_t k = b; k < e; ++k)
      (ppc::is_recv(v[k].kind) && v[k].peer == peer ? moved : first).push_back(v[k]);
    if (moved.empty() || first.empty()) return false;
    const refmodel::Judge j(base_.plan, 0, false);
    std::optional<size_t> hoist;
    for (size_t k = e; k < v.size() && !hoist; ++k) {
      if (is_comm(v[k])) continue;
      bool needs = false;
      for (const Action& rv : moved) needs = needs || j.consumes(v[k], rv, r);
      if (needs) continue;
      std::vector<Action> trial(v.begin(), v.begin() + static_cast<long>(b));
      trial.push_back(v[k]);
      if (j.data_ok(trial, r)) hoist = k;
    }
    std::vector<Action> out(v.begin(), v.begin() + static_cast<long>(b));
    out.insert(out.end(), first.begin(), first.end());
    size_t rest = e;
    if (hoist) {
      out.push_back(v[*hoist]);
    } else {
      while (rest < v.size() && is_comm(v[rest])) out.push_back(v[rest++]);
      if (rest == v.size()) return false;
      out.push_back(v[rest++]);
    }
    out.insert(out.end(), moved.begin(), moved.end());
    for (size_t k = rest; k < v.size(); ++k)
      if (!hoist || k != *hoist) out.push_back(v[k]);
    v = std::move(out);
    return true;
  }

  // PyTorch #126419: two neighbouring ranks exchange in both directions in one batch each (rank
  // a sends to b and receives from b; b's batch holds the matching ops). Separate each rank's
  // receive from its send, the send first: each now waits for the other's receive.
  std::optional<Plan> split_crossing() {
    auto o = orders();
    const int a = pick_rank();
    auto& va = o[static_cast<size_t>(a)];
    std::vector<std::pair<size_t, int>> crossing;  // batch begin on a, peer b
    for (auto [b, e] : batches(va))
      for (size_t k = b; k < e; ++k)
        if (ppc::is_send(va[k].kind))
          for (size_t l = b; l < e; ++l)
            if (ppc::is_recv(va[l].kind) && va[l].peer == va[k].peer)
              crossing.push_back({b, va[k].peer});
    if (crossing.empty()) return std::nullopt;
    const auto [begin, peer] = crossing[pick(crossing.size())];
    // The batch on the peer that holds the match of the first RECV from it.
    size_t e = begin;
    while (e < va.size() && is_comm(va[e])) ++e;
    const Action* recv = nullptr;
    for (size_t k = begin; k < e && !recv; ++k)
      if (ppc::is_recv(va[k].kind) && va[k].peer == peer) recv = &va[k];
    auto& vb = o[static_cast<size_t>(peer)];
    const ActionKind sk = recv->kind == ActionKind::RecvF ? ActionKind::SendF : ActionKind::SendB;
    const int sstage = recv->kind == ActionKind::RecvF ? recv->stage - 1 : recv->stage + 1;
    std::optional<std::pair<size_t, size_t>> pb;
    for (auto [b, f] : batches(vb))
      for (size_t k = b; k < f; ++k)
        if (vb[k].kind == sk && vb[k].stage == sstage && vb[k].microbatch == recv->microbatch)
          pb = std::make_pair(b, f);
    if (!pb) return std::nullopt;
    const size_t be = e;
    if (!split_batch(vb, peer, pb->first, pb->second, a)) return std::nullopt;
    if (!split_batch(va, a, begin, be, peer)) return std::nullopt;
    return make(std::move(o));
  }

  // PyTorch #127332 (looped schedules, where the last rank sends to rank 0's next chunk): around
  // the ring, each rank batches a later receive from its predecessor into the batch where it
  // sends to its successor. Each batch then waits for a message its predecessor sends only after
  // its own batch completes.
  std::optional<Plan> ring() {
    auto o = orders();
    const int pp = static_cast<int>(o.size());
    if (base_.plan.placement.style != ppc::PlacementStyle::Loop) return std::nullopt;
    const size_t k = pick(3);  // the first, second or third such batch of each rank
    // Each rank's chosen batch: its k-th batch holding a SEND_F to its successor.
    std::vector<std::optional<std::pair<size_t, size_t>>> chosen(static_cast<size_t>(pp));
    for (int q = 0; q < pp; ++q) {
      const auto& v = o[static_cast<size_t>(q)];
      size_t seen = 0;
      for (auto be : batches(v)) {
        bool sends = false;
        for (size_t i = be.first; i < be.second; ++i)
          sends = sends || (v[i].kind == ActionKind::SendF && v[i].peer == (q + 1) % pp);
        if (sends && seen++ == k) {
          chosen[static_cast<size_t>(q)] = be;
          break;
        }
      }
    }
    // Into it, the first later RECV_F from the predecessor whose SEND_F comes after the
    // predecessor's chosen batch (so that the predecessor sends it only once that batch is done).
    bool any = false;
    for (int q = 0; q < pp; ++q) {
      const int pred = (q + pp - 1) % pp;
      const auto& mine = chosen[static_cast<size_t>(q)];
      const auto& theirs = chosen[static_cast<size_t>(pred)];
      if (!mine || !theirs) continue;
      auto& v = o[static_cast<size_t>(q)];
      const auto& pv = orders()[static_cast<size_t>(pred)];
      for (size_t i = mine->second; i < v.size(); ++i) {
        if (!(v[i].kind == ActionKind::RecvF && v[i].peer == pred)) continue;
        const auto send = std::find_if(pv.begin(), pv.end(), [&](const Action& a) {
          return a.kind == ActionKind::SendF && a.stage == v[i].stage - 1 &&
                 a.microbatch == v[i].microbatch;
        });
        if (static_cast<size_t>(send - pv.begin()) < theirs->second) continue;
        const Action recv = v[i];
        v.erase(v.begin() + static_cast<long>(i));
        v.insert(v.begin() + static_cast<long>(mine->second), recv);
        any = true;
        break;
      }
    }
    if (!any) return std::nullopt;
    return make(std::move(o));
  }

  // PyTorch #127332 (batched forward and backward of a step): a RECV joins the batch before the
  // compute that precedes it, so the rank waits there for a message its peer sends only later.
  std::optional<Plan> batch_recv_early() {
    auto o = orders();
    const int r = pick_rank();
    auto& v = o[static_cast<size_t>(r)];
    const auto bs = batches(v);
    std::vector<size_t> candidates;  // positions of RECVs with an earlier batch
    for (size_t n = 1; n < bs.size(); ++n)
      for (size_t k = bs[n].first; k < bs[n].second; ++k)
        if (ppc::is_recv(v[k].kind)) candidates.push_back(k);
    if (candidates.empty()) return std::nullopt;
    const size_t k = candidates[pick(candidates.size())];
    size_t prev_end = 0;
    for (auto [b, e] : bs)
      if (e <= k) prev_end = e;
    const Action recv = v[k];
    v.erase(v.begin() + static_cast<long>(k));
    v.insert(v.begin() + static_cast<long>(prev_end), recv);
    return make(std::move(o));
  }

  const Base& base_;
  std::mt19937_64 rng_;
};

// The lowered orders with the peers (which the text notation leaves out).
inline std::string key(const Plan& p) {
  std::string out;
  for (const auto& order : p.lowered) {
    for (const Action& a : order) out += fmt::format("{}@{} ", ppc::to_string(a), a.peer);
    out += '\n';
  }
  return out;
}

// Distinct mutants (a mutant equal to its base or to an earlier mutant is dropped).
inline std::vector<Mutant> corpus(const std::vector<Base>& bases, int per_op, uint64_t seed) {
  std::vector<Mutant> out;
  std::set<std::string> seen;
  for (size_t bi = 0; bi < bases.size(); ++bi) {
    Mutator m(bases[bi], seed * 1000003 + bi);
    seen.insert(bases[bi].name + key(bases[bi].plan));
    for (const auto& [name, op] : Mutator::ops())
      for (int k = 0; k < per_op; ++k)
        if (auto p = (m.*op)())
          if (seen.insert(bases[bi].name + key(*p)).second)
            out.push_back({name, bases[bi].name, std::move(*p)});
  }
  return out;
}

}  // namespace mutants
