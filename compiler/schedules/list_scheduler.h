// The list scheduler behind --schedule Auto (list_schedule, synthesize.h), shared by its files:
// auto.cpp (the run in simulated time: events, transfers, what a finished compute frees and sends)
// and auto_pick.cpp (the policy: what a free rank starts next, and whether memory lets it).
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "compiler/all_to_all_costs.h"
#include "compiler/cost_model.h"
#include "compiler/measured_costs.h"
#include "compiler/plan.h"
#include "compiler/schedules/bankers_memory.h"
#include "compiler/synthesize.h"

namespace ppc::list_scheduling {

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
  ListScheduler(const ListScheduleInput& in, const ListPolicy& pol);

  ListSchedule run();

 private:
  // The policy, can_admit to admit_next, is defined in auto_pick.cpp; the rest in auto.cpp.
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
  std::vector<double> activation_needs() const;

  // --- memory: the banker's algorithm (bankers_memory.h) ------------------------------------
  bool can_admit() const;

  bool can_forward(int r, const Candidate& k) const;

  // Lower is better.
  std::pair<int, int> bwd_key(const Candidate& k) const;
  std::pair<int, int> fwd_key(const Candidate& k) const;

  // The backward part to run for (stage s) alongside a forward of duration f in a pair, and its
  // duration.
  ActionKind pair_kind(int s, double f) const;

  // The kind of a lone backward of `stage` on rank r: I (then a W) under the split, but a B on the
  // busiest ranks where the policy says so and the whole backward is the shorter.
  ActionKind lone_backward(int r, int stage) const;

  // Picks and starts rank r's next compute at t; false if nothing is ready.
  bool start_next(int r, double t);

  // Will an input for rank r that outranks a forward of `stage` (a deeper stage's forward, or a
  // backward) arrive before `until`, from a compute running now on another rank?
  bool incoming_before(int r, int stage, double until) const;

  // Can a partner still come for a lone backward (a forward of this rank) or a lone forward (a
  // backward: once the first backward has run, more follow while this rank has some to run)?
  bool partner_may_come(int r, bool for_backward) const;

  static Candidate take(std::vector<Candidate>& v, int k);

  // The next microbatch enters: it will take its activations on every rank.
  Candidate admit_next();

  void start(int r, double t, const Action& a);

  // --- transfers ---------------------------------------------------------------------------

  void arrive(const Transfer& x, double when);

  void match(int r, const Transfer& x, double t);

  // --- events ------------------------------------------------------------------------------

  void complete_part(int r, const Action& p, double t);

  void finish(int r, double t);

  // Posts a SEND at rank r's boundary t: matched at once if the receiver is between computes,
  // else r waits for the receiver's boundary (lowering's placement: lower_send_recv.h).
  void post(int r, const Transfer& x, double t);

  void try_start(int r, double t);

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

}  // namespace ppc::list_scheduling
