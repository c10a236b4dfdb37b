#include "compiler/lower_send_recv.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <queue>

#include "compiler/dependencies.h"
#include "compiler/diagnostic.h"
#include "compiler/stuck.h"
#include "compiler/transfers.h"

namespace ppc {

double unit_cost(const Action& a) {
  // The kind's row as a constant; a compound action's parts' rows.
  double cost = 0;
  visit_kind(a.kind, [&](auto kind) {
    if constexpr (constexpr ActionKind k = decltype(kind)::value; is_compound(k))
      cost = unit_cost_of(ActionKind::F) + unit_cost_of(a.sub_kind);
    else
      cost = unit_cost_of(k);
  });
  return cost;
}

LoweringFeed::State LoweringFeed::wait_until_started() const {
  while (true) {
    const unsigned v = version();  // before the state: a change after this read ends the wait
    const State s = state();
    if (s != State::Pending) return s;
    wait_for_change(v);
  }
}

void LoweringFeed::start(const std::vector<std::vector<Action>>& orders) {
  data_.clear();
  final_size_.clear();
  for (const auto& o : orders) {
    data_.push_back(o.data());
    final_size_.push_back(o.capacity());
  }
  written_ = std::make_unique<std::atomic<size_t>[]>(orders.size());
  for (size_t r = 0; r < orders.size(); ++r) written_[r].store(orders[r].size());
  state_.store(State::Writing, std::memory_order_release);
  changed();
}

void LoweringFeed::publish(const std::vector<std::vector<Action>>& orders) {
  for (size_t r = 0; r < orders.size(); ++r)
    written_[r].store(orders[r].size(), std::memory_order_release);
  changed();
}

namespace {

struct PendingRecv {
  Action recv;
  int sender;
};

struct RankState {
  size_t pos = 0;  // next compute action
  bool computing = false;
  double busy_until = 0;             // end of the running compute
  int unmatched = 0;                 // SENDs of the open batch whose RECV is not posted yet
  double batch_done = 0;             // when the open batch's transfers are done
  std::vector<PendingRecv> pending;  // RECVs to post when the running compute ends
  std::vector<Transfer> deferred;    // SENDs held back to this rank's next boundary
};

class Lowerer {
 public:
  Lowerer(const Plan& plan, const LoweringCosts& costs, bool emit, LoweringFeed* feed = nullptr)
      : plan_(plan),
        costs_(costs),
        emit_(emit),
        feed_(feed),
        cross_(plan),
        ev_(plan.num_stages(), plan.microbatches),
        ranks_(static_cast<size_t>(plan.pp())),
        events_(!costs.compute && !costs.transfer ? 3 : costs.max_integral_duration) {}

  void run(Plan* out) {
    const int pp = plan_.pp();
    out_ = out;
    if (emit_) {
      out_->lowered.assign(static_cast<size_t>(pp), {});
      // Exact sizes: each output that crosses ranks adds a SEND here and a RECV at the peer.
      std::vector<size_t> size(static_cast<size_t>(pp));
      for (int r = 0; r < pp; ++r) {
        const auto& order = plan_.compute[static_cast<size_t>(r)];
        size[static_cast<size_t>(r)] += order.size();
        for (const Action& a : order)
          for_each_part(a, [&](const Action& p) {
            if (const int q = cross_.peer(p); q >= 0) {
              ++size[static_cast<size_t>(r)];
              ++size[static_cast<size_t>(q)];
            }
          });
      }
      for (int r = 0; r < pp; ++r)
        out_->lowered[static_cast<size_t>(r)].reserve(size[static_cast<size_t>(r)]);
      if (feed_) {
        for (int r = 0; r < pp; ++r)  // the feed's reader relies on the orders never moving
          PPC_INTERNAL_ASSERT(
              out_->lowered[static_cast<size_t>(r)].capacity() == size[static_cast<size_t>(r)],
              "lowering's output reserved at other than its final size");
        feed_->start(out_->lowered);
        publish_stride_ = std::max<size_t>(4096, 16 * static_cast<size_t>(pp));
        next_publish_ = publish_stride_;
      }
    }
    for (int r = 0; r < pp; ++r) touched_.push_back(r);
    double now = 0;
    start_touched(now);
    while (!events_.empty()) {
      now = events_.next_time();
      while (!events_.empty() && events_.next_time() == now) {
        const QueueEvent e = events_.pop();
        if (e.finish)
          finish(e.rank, now);
        else
          touched_.push_back(e.rank);
      }
      start_touched(now);
      if (feed_ && appended_ >= next_publish_) {
        feed_->publish(out_->lowered);
        next_publish_ = appended_ + publish_stride_;
      }
    }
    if (feed_) feed_->publish(out_->lowered);
    std::vector<size_t> next(static_cast<size_t>(pp));
    for (int r = 0; r < pp; ++r) next[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)].pos;
    throw_if_computes_stuck(plan_, ev_, next);
  }

 private:
  struct QueueEvent {
    double time;
    uint64_t seq;
    int rank;
    bool finish;  // compute ends (else: retry starting)
    bool operator>(const QueueEvent& o) const {
      return time != o.time ? time > o.time : seq > o.seq;
    }
  };

  double duration(const Action& a, int r) const {
    return costs_.compute ? costs_.compute(a, r) : unit_cost(a);
  }
  double transfer(const Action& send) const {
    return costs_.transfer ? costs_.transfer(send) : 0.0;
  }
  void push(double t, int r, bool finish) { events_.push(QueueEvent{t, seq_++, r, finish}); }

  // Events in (time, push order). With small integral durations (unit costs, the default) a ring
  // of per-time buckets replaces the heap: same order, constant time per event.
  class EventQueue {
   public:
    explicit EventQueue(int max_integral_duration)
        : ring_(max_integral_duration > 0 ? max_integral_duration + 1 : 0) {}
    bool empty() const { return size_ == 0; }
    void push(const QueueEvent& e) {
      ++size_;
      if (ring_.empty()) {
        heap_.push(e);
        return;
      }
      const long long t = static_cast<long long>(e.time);
      const long long window = static_cast<long long>(ring_.size());
      PPC_INTERNAL_ASSERT(
          static_cast<double>(t) == e.time && t > cur_time_ - window && t < cur_time_ + window,
          "event time outside the integral queue's window");
      if (t < cur_time_) {
        // next_time() looked past empty buckets to the next pending event (at most a duration
        // ahead), and a compute started now ends before it: step back. The buckets in between are
        // empty and every pending event is within a duration of now, so the window still holds
        // them.
        cur_time_ = t;
        cur_ = static_cast<size_t>(t) % ring_.size();
        head_pos_ = 0;
      }
      ring_[static_cast<size_t>(t) % ring_.size()].push_back(e);
    }
    double next_time() {
      if (ring_.empty()) return heap_.top().time;
      while (head_pos_ >= ring_[cur_].size()) {  // advance to the next non-empty bucket
        ring_[cur_].clear();
        head_pos_ = 0;
        cur_ = (cur_ + 1) % ring_.size();
        ++cur_time_;
      }
      return static_cast<double>(cur_time_);
    }
    QueueEvent pop() {
      --size_;
      if (ring_.empty()) {
        QueueEvent e = heap_.top();
        heap_.pop();
        return e;
      }
      next_time();
      return ring_[cur_][head_pos_++];
    }

   private:
    std::priority_queue<QueueEvent, std::vector<QueueEvent>, std::greater<QueueEvent>> heap_;
    std::vector<std::vector<QueueEvent>> ring_;
    size_t cur_ = 0, head_pos_ = 0, size_ = 0;
    long long cur_time_ = 0;
  };
  void append(int r, const Action& a) {
    if (!emit_) return;
    out_->lowered[static_cast<size_t>(r)].push_back(a);
    ++appended_;
  }

  // Tries to start a compute on every rank something happened to. Trying may post held-back
  // SENDs and so touch other ranks: repeat until nothing changes at this time.
  void start_touched(double now) {
    while (!touched_.empty()) {
      todo_.swap(touched_);
      ++pass_;
      for (int r : todo_) {
        uint64_t& seen = tried_[static_cast<size_t>(r)];
        if (seen == pass_) continue;  // already tried in this pass
        seen = pass_;
        try_start(r, now);
      }
      todo_.clear();
    }
  }

  void try_start(int r, double now) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    if (st.computing) return;
    if (!can_start(r, now)) {
      // Between computes for now: SENDs held back cannot wait any longer.
      if (!st.deferred.empty()) {
        std::vector<Transfer> held;
        held.swap(st.deferred);
        for (const Transfer& t : held) post(r, t, now, false);
      }
      if (st.unmatched == 0 && st.batch_done > now &&
          st.pos < plan_.compute[static_cast<size_t>(r)].size() && next_ready(r))
        push(st.batch_done, r, false);  // transfers of the open batch still in flight
      return;
    }
    const auto& order = plan_.compute[static_cast<size_t>(r)];
    const Action& a = order[st.pos];
    append(r, a);
    const double end = now + duration(a, r);
    for_each_part(a, [&](const Action& p) { ev_.set(event_of(p.kind), p.stage, p.microbatch); });
    st.computing = true;
    st.busy_until = end;
    st.batch_done = end;
    ++st.pos;
    // Ranks are visited in turn, so each rank's next action is a cache miss by the time it is
    // read: fetch it (and make room for the output) while the other ranks run.
    if (st.pos + 2 < order.size()) __builtin_prefetch(&order[st.pos + 2]);
    if (emit_) {
      auto& dst = out_->lowered[static_cast<size_t>(r)];
      if (dst.size() + 4 < dst.capacity()) __builtin_prefetch(dst.data() + dst.size() + 4, 1);
    }
    push(end, r, true);
  }

  // Has every input of rank r's next compute been produced locally or posted as a RECV?
  bool next_ready(int r) const {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    return inputs_ready(plan_, ev_, plan_.compute[static_cast<size_t>(r)][st.pos]);
  }

  bool can_start(int r, double now) const {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    return st.unmatched == 0 && st.pos < plan_.compute[static_cast<size_t>(r)].size() &&
           next_ready(r) && st.batch_done <= now;
  }

  // Does rank q's next compute (after the one it is running) consume what `recv` receives?
  bool needed_next(int q, const Action& recv) const {
    const RankState& st = ranks_[static_cast<size_t>(q)];
    const auto& order = plan_.compute[static_cast<size_t>(q)];
    if (st.pos >= order.size()) return true;
    const Need want{event_of(recv.kind), recv.stage, recv.microbatch};
    bool needed = false;
    for_each_part(order[st.pos], [&](const Action& p) {
      for_each_need(plan_, p, [&](const Need& n) {
        needed |= n.event == want.event && n.stage == want.stage && n.microbatch == want.microbatch;
      });
    });
    return needed;
  }

  // Hold the SEND back? Yes if the receiver's next compute does not need it; if it does, only when
  // the receiver would wait less for this rank's next boundary than this rank would wait for the
  // receiver's.
  bool should_defer(int r, const Transfer& t, double now) const {
    if (!needed_next(t.peer, t.recv)) return true;
    const RankState& st = ranks_[static_cast<size_t>(r)];
    const auto& order = plan_.compute[static_cast<size_t>(r)];
    if (st.pos >= order.size() || st.unmatched > 0 || !next_ready(r)) return false;
    const double peer_end = ranks_[static_cast<size_t>(t.peer)].busy_until;
    const double my_end = now + duration(order[st.pos], r);
    return my_end - peer_end < peer_end - now;
  }

  void finish(int r, double now) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    st.computing = false;
    touched_.push_back(r);
    // RECVs whose senders have been waiting for this rank to finish its compute.
    for (const PendingRecv& p : st.pending) {
      append(r, p.recv);
      const double done = now + transfer(p.recv);
      st.batch_done = std::max(st.batch_done, done);
      RankState& s = ranks_[static_cast<size_t>(p.sender)];
      s.batch_done = std::max(s.batch_done, done);
      if (--s.unmatched == 0) touched_.push_back(p.sender);
    }
    st.pending.clear();
    if (!st.deferred.empty()) {
      std::vector<Transfer> held;
      held.swap(st.deferred);
      for (const Transfer& t : held) post(r, t, now, true);
    }
    for_each_part(plan_.compute[static_cast<size_t>(r)][st.pos - 1], [&](const Action& part) {
      if (auto t = cross_.transfer(r, part)) post(r, *t, now, costs_.defer_sends);
    });
  }

  // Posts a transfer at rank r's boundary `now`. If the receiver is between computes, both ops go
  // into the current batches and match at once. If it is computing: when its next compute needs
  // the data (or may_defer is off), the SEND is posted now and r waits for the receiver's
  // boundary; otherwise the SEND is held back to r's next boundary, so r keeps computing.
  void post(int r, const Transfer& t, double now, bool may_defer) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    RankState& peer = ranks_[static_cast<size_t>(t.peer)];
    if (peer.computing) {
      if (may_defer && should_defer(r, t, now)) {
        st.deferred.push_back(t);
        return;
      }
      append(r, t.send);
      ev_.set(event_of(t.recv.kind), t.recv.stage,
              t.recv.microbatch);  // posted; usable after its batch
      peer.pending.push_back({t.recv, r});
      ++st.unmatched;
      return;
    }
    append(r, t.send);
    ev_.set(event_of(t.recv.kind), t.recv.stage, t.recv.microbatch);
    append(t.peer, t.recv);
    const double done = now + transfer(t.send);
    st.batch_done = std::max(st.batch_done, done);
    peer.batch_done = std::max(peer.batch_done, done);
    touched_.push_back(t.peer);
  }

  const Plan& plan_;
  const LoweringCosts& costs_;
  bool emit_;
  LoweringFeed* feed_;
  size_t appended_ = 0, next_publish_ = 0, publish_stride_ = 0;  // actions written; feed
  Plan* out_ = nullptr;
  CrossRank cross_;
  EventFlags ev_;  // produced locally or RECV posted
  std::vector<RankState> ranks_;
  EventQueue events_;
  uint64_t seq_ = 0;
  std::vector<int> touched_, todo_;
  std::vector<uint64_t> tried_ =
      std::vector<uint64_t>(ranks_.size(), 0);  // pass in which each rank was tried
  uint64_t pass_ = 0;
};

}  // namespace

Plan lower_send_recv(const Plan& plan, const LoweringCosts& costs) {
  return lower_send_recv(Plan(plan), costs);
}

Plan lower_send_recv(Plan&& plan, const LoweringCosts& costs) {
  lower_in_place(plan, costs, nullptr);
  return std::move(plan);
}

void lower_in_place(Plan& plan, const LoweringCosts& costs, LoweringFeed* feed) {
  Plan view;  // the lowerer reads plan and writes into view.lowered
  try {
    Lowerer(plan, costs, true, feed).run(&view);
  } catch (...) {
    if (feed) feed->fail(std::move(view.lowered));
    throw;
  }
  if (feed) feed->end(true);
  plan.lowered = std::move(view.lowered);  // moves the orders' storage: the feed's pointers hold
}

void check_compute_order_runs(const Plan& plan) {
  Lowerer(plan, LoweringCosts{}, false).run(nullptr);
}

}  // namespace ppc
