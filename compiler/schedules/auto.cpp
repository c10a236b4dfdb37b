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

#include "compiler/diagnostic.h"
#include "compiler/lower_bound.h"
#include "compiler/schedules/list_scheduler.h"

namespace ppc {

namespace list_scheduling {

ListScheduler::ListScheduler(const ListScheduleInput& in, const ListPolicy& pol)
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
          fmt::format("no order fits: one microbatch needs {} of activation memory on rank {}, "
                      "which has {} left after its parameters",
                      format_memory(mem_.need(r), !in.cost->unit), r,
                      format_memory(std::max(0.0, mem_.budget(r)), !in.cost->unit)),
          input_location("--memory-limit"));
}

ListSchedule ListScheduler::run() {
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

std::vector<double> ListScheduler::activation_needs() const {
  std::vector<double> need(static_cast<size_t>(pp_), 0.0);
  for (int s = 0; s < S_; ++s) need[static_cast<size_t>(rank(s))] += c(s).activation;
  return need;
}

void ListScheduler::start(int r, double t, const Action& a) {
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

void ListScheduler::arrive(const Transfer& x, double when) {
  RankState& q = st(x.to);
  if (x.forward)
    q.fwd.push_back(Candidate{x.stage + 1, x.mb, when});
  else
    q.bwd.push_back(Candidate{x.stage - 1, x.mb, when});
  wake(x.to, when);
}

void ListScheduler::match(int r, const Transfer& x, double t) {
  const double done = t + x.time;
  RankState& s = st(r);
  RankState& q = st(x.to);
  s.batch_done = std::max(s.batch_done, done);
  q.batch_done = std::max(q.batch_done, done);
  arrive(x, done);
}

void ListScheduler::complete_part(int r, const Action& p, double t) {
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

void ListScheduler::finish(int r, double t) {
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

void ListScheduler::post(int r, const Transfer& x, double t) {
  if (!st(x.to).computing) {
    match(r, x, t);
    return;
  }
  waiting_[static_cast<size_t>(x.to)].emplace_back(x, r);
  ++st(r).unmatched;
}

void ListScheduler::try_start(int r, double t) {
  RankState& s = st(r);
  if (s.computing || s.unmatched > 0) return;
  if (s.batch_done > t) {
    wake(r, s.batch_done);
    return;
  }
  start_next(r, t);  // or nothing is ready: an arrival or a freed microbatch wakes it
}

}  // namespace list_scheduling

ListSchedule list_schedule(const ListScheduleInput& in, const ListPolicy& policy) {
  return list_scheduling::ListScheduler(in, policy).run();
}

}  // namespace ppc
