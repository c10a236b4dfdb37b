#include "compiler/deadlock_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/dependencies.h"
#include "compiler/diagnostic.h"
#include "compiler/parallel.h"

namespace ppc {

std::string Execution::failure() const {
  if (!errors.empty()) return errors.front();
  if (!stuck.empty()) return "deadlock: " + explain_stuck(stuck);
  return "";
}

namespace {

// Where the counterpart of each communication action is: what the model looks up as ranks enter
// their batches.
struct CommPartner {
  int32_t position;  // where the counterpart is in the peer's order
  CommPartner() {}   // uninitialised on purpose: compute actions have none
};
struct CommIndex {
  CommPositions position;                         // of every communication action
  std::vector<std::vector<CommPartner>> partner;  // per rank and action (communication only)
  size_t batches = 0;                             // maximal runs of communication actions
  size_t sends = 0;                               // SEND actions
  CommIndex(int num_stages, int microbatches) : position(num_stages, microbatches) {}
};

// Each rank is at most in one batch at a time, and an op can only be matched while the batches
// of both its ranks are current: the engine keeps the state of each rank's current batch (its
// range, unmatched ops, entry and transfer times) and finds the batches themselves as the ranks
// reach them. What it needs in advance is, for every op, where its counterpart is in the peer's
// order (the CommIndex); whether the peer is in that batch now is then a range check on the peer.
class Engine {
 public:
  // `orders`: each rank's actions, `sizes` how many (the final count, once the plan is written).
  Engine(const Plan& plan, const ExecCosts* costs, bool record, size_t max_errors, Execution& out,
         const CommIndex& index, std::vector<const Action*> orders, std::vector<size_t> sizes)
      : plan_(plan),
        costs_(costs),
        record_(record),
        timed_(costs != nullptr || record),
        observe_(costs != nullptr && costs->on_compute != nullptr),
        max_errors_(max_errors),
        out_(out),
        ev_(plan.num_stages(), plan.microbatches),
        index_(index),
        acts_(std::move(orders)),
        size_(std::move(sizes)) {
    const size_t ranks = static_cast<size_t>(plan.pp());
    if (record_) {
      out_.times.assign(ranks, {});
      for (size_t r = 0; r < ranks; ++r) out_.times[r].assign(size_[r], {});
    }
    head_.assign(ranks, 0);
    in_batch_.assign(ranks, 0);
    batch_begin_.assign(ranks, 0);
    batch_end_.assign(ranks, 0);
    unmatched_.assign(ranks, 0);
    entry_.assign(ranks, 0.0);
    done_.assign(ranks, 0.0);
    failed_.assign(ranks, 0);
    now_.assign(ranks, 0.0);
    if (costs_ && !costs_->begin.empty()) {
      PPC_INTERNAL_ASSERT(costs_->begin.size() == ranks, "ExecCosts::begin: one per rank");
      now_ = costs_->begin;
    }
    if (costs_) {
      out_.busy.assign(ranks, 0.0);
      out_.first_start.assign(ranks, 0.0);
      out_.last_end.assign(ranks, 0.0);
      began_.assign(ranks, 0);
    }
    available_.assign(ranks, 0);
  }

  // The whole plan at once.
  void run() {
    for (size_t r = 0; r < size_.size(); ++r) available_[r] = size_[r];
    complete();
  }

  // Rank r's actions below `available` are there (and in the index): run what they let run. A
  // batch at the end of them may grow, so it waits for more, or for complete().
  void extend(int r, size_t available) {
    available_[static_cast<size_t>(r)] = available;
    work_.push_back(r);
    drain();
  }

  // Every action is there: run to the end, and report the ranks that cannot finish.
  void complete() {
    complete_ = true;
    const int pp = plan_.pp();
    for (int r = pp - 1; r >= 0; --r) work_.push_back(r);
    drain();
    out_.batches += index_.batches;
    out_.sends += index_.sends;
    if (!out_.errors.empty()) return;
    if (costs_) out_.end = now_;
    for (int r = 0; r < pp; ++r)
      if (head_[static_cast<size_t>(r)] < size_[static_cast<size_t>(r)])
        out_.stuck.push_back(describe_batch_wait(r));
  }

 private:
  std::string where(int rank, size_t i, const Action& a) const {
    return fmt::format("rank {}, action {} ({})", rank, i, to_string(a));
  }
  void error(std::string msg) {
    if (out_.errors.size() < max_errors_) out_.errors.push_back(std::move(msg));
  }

  // Position of the op (event, stage, mb) in its rank's order; -1 if there is none.
  int32_t position(Event e, int stage, int mb) const {
    const int32_t p = index_.position.at(e, stage, mb);
    return p == CommPositions::kNever ? -1 : p;
  }

  // The rank of the op's counterpart.
  int peer_of(const Action& op) const {
    return op.peer >= 0 ? op.peer : comm_match(plan_, op).rank;
  }

  // Has everything `part` needs happened? (check_needs, without the words.)
  bool needs_met(const Action& part) const {
    bool met = true;
    for_each_need(plan_, part, [&](const Need& n) { met = met && ev_.happened(n); });
    return met;
  }

  // Reports the first need of `part` that has not happened; false if there is one.
  bool check_needs(int r, size_t i, const Action& whole, const Action& part) {
    bool ok = true;
    for_each_need(plan_, part, [&](const Need& n) {
      if (!ok || ev_.happened(n)) return;
      ok = false;
      if (n.event == Event::RecvF || n.event == Event::RecvB) {
        const int32_t p = position(n.event, n.stage, n.microbatch);
        const std::string later =
            p >= 0 && static_cast<size_t>(p) > i
                ? fmt::format(", but rank {} receives it only later, at its action {}", r, p)
                : fmt::format(", which rank {} never receives", r);
        error(fmt::format("{}: needs {}{}", where(r, i, whole), describe_need(plan_, n, r), later));
      } else {
        error(fmt::format(
            "{}: needs the {} of stage {} microbatch {} on this rank, which has not run before it",
            where(r, i, whole), event_description(n.event), n.stage, n.microbatch));
      }
    });
    return ok;
  }

  double compute_cost(const Action& a, int r) const {
    return costs_ && costs_->compute ? costs_->compute(a, r) : 0.0;
  }
  double transfer_cost(const Action& send) const {
    return costs_ && costs_->transfer ? costs_->transfer(send) : 0.0;
  }

  // Is position p of rank q's order in the batch q is in now?
  bool in_current_batch(int q, int32_t p) const {
    const size_t qu = static_cast<size_t>(q);
    return in_batch_[qu] && p >= batch_begin_[qu] && p < batch_end_[qu];
  }

  void drain() {
    while (!work_.empty()) {
      const int r = work_.back();
      work_.pop_back();
      advance(r, work_);
    }
  }

  void advance(int r, std::vector<int>& work) {
    const size_t ru = static_cast<size_t>(r);
    if (failed_[ru]) return;
    const Action* const acts = acts_[ru];
    const size_t available = available_[ru];
    const auto& partner = index_.partner[ru];
    size_t& h = head_[ru];
    while (h < available) {
      const Action& a = acts[h];
      if (!is_comm(a.kind)) {
        // Parts in order: an OverlapFB's backward part may use what its forward part produced.
        bool ok = true;
        for_each_part(a, [&](const Action& p) {
          if (!ok || !(ok = needs_met(p) || check_needs(r, h, a, p))) return;
          ev_.set(event_of(p.kind), p.stage, p.microbatch);
        });
        if (!ok) return fail(r);
        if (timed_) {
          const double start = now_[ru];
          now_[ru] = start + compute_cost(a, r);
          if (record_) out_.times[ru][h] = {start, now_[ru]};
          if (costs_) {
            out_.busy[ru] += now_[ru] - start;
            if (!began_[ru]) {
              began_[ru] = 1;
              out_.first_start[ru] = start;
            }
            out_.last_end[ru] = now_[ru];
          }
          if (observe_) costs_->on_compute(r, a, start, now_[ru]);
        }
        ++h;
        continue;
      }
      if (!in_batch_[ru]) {
        // Entering the batch: the maximal run of ops from here. An op is matched when the second
        // of the two batches holding it and its counterpart is entered; a batch cannot complete
        // before that, so each pair is matched exactly once, here.
        size_t end = h + 1;
        while (end < available && is_comm(acts[end].kind)) ++end;
        if (end == available && !complete_ && available < size_[ru]) return;  // may grow
        in_batch_[ru] = 1;
        batch_begin_[ru] = static_cast<int32_t>(h);
        batch_end_[ru] = static_cast<int32_t>(end);
        unmatched_[ru] = static_cast<int32_t>(end - h);
        entry_[ru] = now_[ru];
        done_[ru] = now_[ru];
        for (size_t j = h; j < end; ++j) {
          const Action& op = acts[j];
          if (is_send(op.kind) && !needs_met(op) && !check_needs(r, j, op, op)) return fail(r);
          const int32_t p = partner[j].position;
          const int q = peer_of(op);
          if (!in_current_batch(q, p)) continue;
          if (timed_) matched_times(r, j, op, q, p);
          --unmatched_[ru];
          if (--unmatched_[static_cast<size_t>(q)] == 0) work.push_back(q);
        }
      }
      const size_t end = static_cast<size_t>(batch_end_[ru]);
      if (unmatched_[ru] > 0) {
        // Blocked until a peer arrives. The ranks run by turns, so by the time this one goes on,
        // its next actions have left the cache and, with one stream per rank, no hardware
        // prefetcher follows them: fetch the next few lines meanwhile.
        for (size_t k = end; k < end + 12 && k < available; k += 3) {
          __builtin_prefetch(&acts[k]);
          __builtin_prefetch(&partner[k]);
        }
        return;
      }
      for (size_t j = h; j < end; ++j)
        if (is_recv(acts[j].kind))
          ev_.set(event_of(acts[j].kind), acts[j].stage, acts[j].microbatch);
      in_batch_[ru] = 0;
      if (timed_) now_[ru] = done_[ru];
      h = end;
    }
  }

  // Times of a pair matched now (rank r's op j, its counterpart at position p of rank q): both
  // ops end when the transfer is done.
  void matched_times(int r, size_t j, const Action& op, int q, int32_t p) {
    const size_t ru = static_cast<size_t>(r), qu = static_cast<size_t>(q);
    const double met = std::max(entry_[ru], entry_[qu]);
    double cost;
    if (is_send(op.kind))
      cost = transfer_cost(op);
    else if (costs_ && costs_->transfer)
      cost = transfer_cost(acts_[qu][static_cast<size_t>(p)]);  // the SEND
    else
      cost = 0.0;
    const double done = met + cost;
    if (record_) {
      out_.times[ru][j] = {entry_[ru], done};
      out_.times[qu][static_cast<size_t>(p)] = {entry_[qu], done};
    }
    done_[ru] = std::max(done_[ru], done);
    done_[qu] = std::max(done_[qu], done);
  }

  void fail(int r) { failed_[static_cast<size_t>(r)] = 1; }

  StuckRank describe_batch_wait(int r) {
    const size_t ru = static_cast<size_t>(r);
    const Action* const acts = acts_[ru];
    const size_t h = head_[ru];
    StuckRank s;
    s.rank = r;
    s.index = static_cast<int>(h);
    if (!is_comm(acts[h].kind) || !in_batch_[ru]) {  // cannot happen: compute runs or fails
      s.at = fmt::format("its action {} ({})", h, to_string(acts[h]));
      s.waits_for = "nothing";
      return s;
    }
    const size_t begin = static_cast<size_t>(batch_begin_[ru]);
    const size_t end = static_cast<size_t>(batch_end_[ru]);
    std::string ops;
    for (size_t j = begin; j < end && j < begin + 4; ++j) {
      if (j > begin) ops += ", ";
      ops += to_string(acts[j]);
    }
    if (end - begin > 4) ops += ", ...";
    s.at = end - begin == 1 ? fmt::format("its action {} ({})", begin, ops)
                            : fmt::format("its actions {}-{} (batch {})", begin, end - 1, ops);
    for (size_t j = begin; j < end; ++j) {
      // Unmatched: the counterpart's batch has not been entered yet (it is not current, and it
      // is not behind the peer).
      const int32_t p = index_.partner[ru][j].position;
      const int q = peer_of(acts[j]);
      if (in_current_batch(q, p) || static_cast<size_t>(p) < head_[static_cast<size_t>(q)])
        continue;
      const Action& peer_op = acts_[static_cast<size_t>(q)][static_cast<size_t>(p)];
      s.waits_for =
          fmt::format("rank {} to post {} (its action {}), but rank {} is at its action {}", q,
                      to_string(peer_op), p, q, head_[static_cast<size_t>(q)]);
      s.waits_on = q;
      break;
    }
    return s;
  }

  const Plan& plan_;
  const ExecCosts* costs_;
  bool record_;
  bool timed_;    // keep times (costs given, or times recorded)
  bool observe_;  // costs->on_compute is set
  size_t max_errors_;
  Execution& out_;
  EventFlags ev_;
  const CommIndex& index_;
  std::vector<const Action*> acts_;  // per rank: its order
  std::vector<size_t> size_;         // per rank: its length
  std::vector<size_t> available_;    // per rank: how much of it is there (extend)
  bool complete_ = false;            // all of it is there
  std::vector<int> work_;            // ranks to advance
  // Per rank: the next action; the batch it is in (if in_batch_): its range [begin, end), its
  // ops not matched yet, when it was entered and when its transfers are done.
  std::vector<size_t> head_;
  std::vector<int32_t> in_batch_;  // not bytes: see EventFlags
  std::vector<int32_t> batch_begin_, batch_end_, unmatched_;
  std::vector<double> entry_, done_;
  std::vector<int32_t> failed_;
  std::vector<int32_t> began_;  // with costs: a compute action has run
  std::vector<double> now_;
};

// The index of a whole lowered plan: the position of every op in its rank's order, then the
// position of every op's counterpart (threads for large plans).
CommIndex build_comm_index(const Plan& plan) {
  // Ranks are independent here: each writes its own records and the entries of its own stages in
  // the positions.
  const int pp = plan.pp();
  const size_t ranks = static_cast<size_t>(pp);
  const auto& order = plan.lowered;
  CommIndex index(plan.num_stages(), plan.microbatches);
  std::vector<size_t> batches(ranks, 0), sends(ranks, 0);
  size_t total = 0;
  for (const auto& r : order) total += r.size();
  const bool threads = worth_threads(total);
  parallel_for(pp, threads, [&](int r) {
    const auto& acts = order[static_cast<size_t>(r)];
    size_t n = 0, sent = 0;
    bool in_batch = false;
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      if (!is_comm(a.kind)) {
        in_batch = false;
        continue;
      }
      n += !in_batch;
      in_batch = true;
      sent += is_send(a.kind);
      index.position.at(event_of(a.kind), a.stage, a.microbatch) = static_cast<int32_t>(i);
    }
    batches[static_cast<size_t>(r)] = n;
    sends[static_cast<size_t>(r)] = sent;
  });
  index.partner.assign(ranks, {});
  parallel_for(pp, threads, [&](int r) {
    const auto& acts = order[static_cast<size_t>(r)];
    auto& partner = index.partner[static_cast<size_t>(r)];
    partner.resize(acts.size());  // entries of compute actions are never written nor read
    for (size_t i = 0; i < acts.size(); ++i) {
      if (!is_comm(acts[i].kind)) continue;
      const CommMatch m = comm_match(plan, acts[i]);
      partner[i].position = index.position.at(event_of(m.kind), m.stage, acts[i].microbatch);
    }
  });
  for (size_t r = 0; r < ranks; ++r) {
    index.batches += batches[r];
    index.sends += sends[r];
  }
  return index;
}

// Adds rank r's actions [begin, end) to an index built as the orders are written, in one pass: an
// op's counterpart is found by whichever of the two is written second (until then an op's entry
// is kNever). `in_batch`: the rank's last indexed action is a communication action.
void index_written(const Plan& plan, int r, const Action* acts, size_t begin, size_t end,
                   bool& in_batch, CommIndex& ix) {
  auto& partner = ix.partner[static_cast<size_t>(r)];
  for (size_t i = begin; i < end; ++i) {
    const Action& a = acts[i];
    if (!is_comm(a.kind)) {
      in_batch = false;
      continue;
    }
    ix.batches += !in_batch;
    in_batch = true;
    ix.sends += is_send(a.kind);
    const int32_t pos = static_cast<int32_t>(i);
    ix.position.at(event_of(a.kind), a.stage, a.microbatch) = pos;
    const CommMatch m = comm_match(plan, a);
    const int32_t p = ix.position.at(event_of(m.kind), m.stage, a.microbatch);
    partner[i].position = p;
    if (p == CommPositions::kNever) continue;  // the counterpart comes later, and names this op
    ix.partner[static_cast<size_t>(m.rank)][static_cast<size_t>(p)].position = pos;
  }
}

}  // namespace

Execution execute(const Plan& plan, const ExecCosts* costs, bool record_times, size_t max_errors) {
  Execution out;
  const CommIndex index = build_comm_index(plan);
  std::vector<const Action*> orders;
  std::vector<size_t> sizes;
  for (const auto& o : plan.lowered) {
    orders.push_back(o.data());
    sizes.push_back(o.size());
  }
  Engine(plan, costs, record_times, std::max<size_t>(max_errors, 1), out, index, std::move(orders),
         std::move(sizes))
      .run();
  return out;
}

struct GrowingExecution::State {
  const Plan& plan;
  std::vector<const Action*> orders;
  Execution out;
  CommIndex index;            // of the actions written so far
  std::vector<size_t> given;  // per rank: actions written so far
  std::vector<uint8_t> in_batch;
  Engine engine;
  State(const Plan& p, const ExecCosts* costs, bool record_times, size_t max_errors,
        std::vector<const Action*> acts, std::vector<size_t> sizes)
      : plan(p),
        orders(std::move(acts)),
        index(p.num_stages(), p.microbatches),
        given(sizes.size(), 0),
        in_batch(sizes.size(), 0),
        engine(p, costs, record_times, std::max<size_t>(max_errors, 1), out, index, orders, sizes) {
    index.partner.resize(sizes.size());
    for (size_t r = 0; r < sizes.size(); ++r) index.partner[r].resize(sizes[r]);
  }
};

GrowingExecution::GrowingExecution(const Plan& plan, const ExecCosts* costs, bool record_times,
                                   size_t max_errors, std::vector<const Action*> orders,
                                   std::vector<size_t> final_sizes)
    : state_(std::make_unique<State>(plan, costs, record_times, max_errors, std::move(orders),
                                     std::move(final_sizes))) {}

GrowingExecution::~GrowingExecution() = default;

void GrowingExecution::extend(int rank, size_t available) {
  State& s = *state_;
  const size_t r = static_cast<size_t>(rank);
  bool in_batch = s.in_batch[r];
  index_written(s.plan, rank, s.orders[r], s.given[r], available, in_batch, s.index);
  s.in_batch[r] = in_batch;
  s.given[r] = available;
  s.engine.extend(rank, available);
}

Execution GrowingExecution::finish() {
  state_->engine.complete();
  return std::move(state_->out);
}

}  // namespace ppc
