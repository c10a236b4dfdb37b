#include "compiler/execute.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/dependencies.h"
#include "compiler/parallel.h"

namespace ppc {

std::string Execution::failure() const {
  if (!errors.empty()) return errors.front();
  if (!stuck.empty()) return "deadlock: " + explain_stuck(stuck);
  return "";
}

namespace {

class Engine {
 public:
  Engine(const Plan& plan, const ExecCosts* costs, bool record, size_t max_errors, Execution& out)
      : plan_(plan),
        costs_(costs),
        record_(record),
        timed_(costs != nullptr || record),
        observe_(costs != nullptr && costs->on_compute != nullptr),
        max_errors_(max_errors),
        out_(out),
        ev_(plan.num_stages(), plan.microbatches),
        batch_of_(plan.num_stages(), plan.microbatches) {}

  void run() {
    const int pp = plan_.pp();
    const auto& order = plan_.lowered;
    // Batches (maximal runs of communication actions) and, for every op, the batch holding its
    // counterpart. Ranks are independent here: each writes its own records and the entries of
    // its own stages in batch_of_.
    // Each rank writes its batch records into its own slice of batches_, sized by an upper bound
    // (a batch ends at a compute action or at the end); slack is never written nor read.
    base_.assign(static_cast<size_t>(pp), 0);
    std::vector<int32_t> count(static_cast<size_t>(pp), 0);
    std::vector<size_t> sends(static_cast<size_t>(pp), 0);
    size_t bound = 0;
    for (int r = 0; r < pp; ++r) {
      base_[static_cast<size_t>(r)] = static_cast<int32_t>(bound);
      bound += std::min(order[static_cast<size_t>(r)].size(),
                        plan_.compute[static_cast<size_t>(r)].size() + 1);
    }
    batches_.resize(bound);  // Batch's constructor leaves it uninitialised: no pass over the memory
    partner_.assign(static_cast<size_t>(pp), {});
    size_t total = 0;
    for (const auto& r : order) total += r.size();
    const bool threads = worth_threads(total);
    parallel_for(pp, threads, [&](int r) {
      const auto& acts = order[static_cast<size_t>(r)];
      Batch* batches = batches_.data() + base_[static_cast<size_t>(r)];
      int32_t n = 0;
      size_t sent = 0;
      bool in_batch = false;
      for (size_t i = 0; i < acts.size(); ++i) {
        if (!is_comm(acts[i].kind)) {
          in_batch = false;
          continue;
        }
        sent += is_send(acts[i].kind);
        if (!in_batch) batches[n++] = Batch(static_cast<int32_t>(i), static_cast<int32_t>(i), r, 0);
        in_batch = true;
        batches[n - 1].end = static_cast<int32_t>(i + 1);
        ++batches[n - 1].unmatched;
        // rank-local index; the global one is base_[r] + it
        batch_of_.at(event_of(acts[i].kind), acts[i].stage, acts[i].microbatch) = n - 1;
      }
      count[static_cast<size_t>(r)] = n;
      sends[static_cast<size_t>(r)] = sent;
    });
    parallel_for(pp, threads, [&](int r) {
      const auto& acts = order[static_cast<size_t>(r)];
      auto& partner = partner_[static_cast<size_t>(r)];
      partner.resize(acts.size());  // entries of compute actions are never written nor read
      for (size_t i = 0; i < acts.size(); ++i) {
        if (!is_comm(acts[i].kind)) continue;
        const CommMatch m = comm_match(plan_, acts[i]);
        partner[i].batch = base_[static_cast<size_t>(m.rank)] +
                           batch_of_.at(event_of(m.kind), m.stage, acts[i].microbatch);
      }
    });
    size_t num_batches = 0;
    for (int32_t c : count) num_batches += static_cast<size_t>(c);
    out_.batches = num_batches;
    for (size_t c : sends) out_.sends += c;
    if (timed_) {
      entry_.assign(bound, 0.0);
      done_.assign(bound, 0.0);
    }
    if (record_) {
      out_.times.assign(static_cast<size_t>(pp), {});
      for (int r = 0; r < pp; ++r)
        out_.times[static_cast<size_t>(r)].assign(order[static_cast<size_t>(r)].size(), {});
    }
    head_.assign(static_cast<size_t>(pp), 0);
    next_batch_ = base_;
    cur_batch_.assign(static_cast<size_t>(pp), -1);
    failed_.assign(static_cast<size_t>(pp), 0);
    now_.assign(static_cast<size_t>(pp), 0.0);

    std::vector<int> work;
    for (int r = pp - 1; r >= 0; --r) work.push_back(r);
    while (!work.empty()) {
      int r = work.back();
      work.pop_back();
      advance(r, work);
    }
    if (!out_.errors.empty()) return;
    if (costs_) out_.end = now_;
    for (int r = 0; r < pp; ++r)
      if (head_[static_cast<size_t>(r)] < order[static_cast<size_t>(r)].size())
        out_.stuck.push_back(describe_batch_wait(r));
  }

 private:
  std::string where(int rank, size_t i, const Action& a) const {
    return fmt::format("rank {}, action {} ({})", rank, i, to_string(a));
  }
  void error(std::string msg) {
    if (out_.errors.size() < max_errors_) out_.errors.push_back(std::move(msg));
  }

  // Position of the op (event, stage, mb) in its rank's order, found in the batch holding it;
  // -1 if there is none.
  int32_t position(Event e, int stage, int mb, int rank) const {
    const int32_t local = batch_of_.at(e, stage, mb);
    if (local == CommPositions::kNever) return -1;
    const Batch& b = batches_[static_cast<size_t>(base_[static_cast<size_t>(rank)] + local)];
    const auto& acts = plan_.lowered[static_cast<size_t>(rank)];
    for (int32_t j = b.begin; j < b.end; ++j) {
      const Action& op = acts[static_cast<size_t>(j)];
      if (event_of(op.kind) == e && op.stage == stage && op.microbatch == mb) return j;
    }
    return -1;
  }

  bool check_needs(int r, size_t i, const Action& whole, const Action& part) {
    bool ok = true;
    for_each_need(plan_, part, [&](const Need& n) {
      if (!ok || ev_.happened(n)) return;
      ok = false;
      if (n.event == Event::RecvF || n.event == Event::RecvB) {
        const int32_t p = position(n.event, n.stage, n.microbatch, r);
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

  void advance(int r, std::vector<int>& work) {
    const size_t ru = static_cast<size_t>(r);
    if (failed_[ru]) return;
    const auto& acts = plan_.lowered[ru];
    size_t& h = head_[ru];
    while (h < acts.size()) {
      const Action& a = acts[h];
      if (!is_comm(a.kind)) {
        // Parts in order: an OverlapFB's backward part may use what its forward part produced.
        bool ok = true;
        for_each_part(a, [&](const Action& p) {
          if (!ok || !(ok = check_needs(r, h, a, p))) return;
          ev_.at(event_of(p.kind), p.stage, p.microbatch) = 1;
        });
        if (!ok) return fail(r);
        if (timed_) {
          const double start = now_[ru];
          now_[ru] = start + compute_cost(a, r);
          if (record_) out_.times[ru][h] = {start, now_[ru]};
          if (observe_) costs_->on_compute(r, a, start, now_[ru]);
        }
        ++h;
        continue;
      }
      const int32_t b = next_batch_[ru];
      Batch& batch = batches_[static_cast<size_t>(b)];
      const size_t begin = static_cast<size_t>(batch.begin);
      const size_t end = static_cast<size_t>(batch.end);
      const auto& partner = partner_[ru];
      if (cur_batch_[ru] != b) {
        // Entering the batch. An op is matched when the second of the two batches holding it and
        // its counterpart is entered; a batch cannot complete before that, so each pair is
        // matched exactly once, here.
        cur_batch_[ru] = b;
        if (timed_) {
          entry_[static_cast<size_t>(b)] = now_[ru];
          done_[static_cast<size_t>(b)] = now_[ru];
        }
        for (size_t j = begin; j < end; ++j) {
          const Action& op = acts[j];
          if (is_send(op.kind) && !check_needs(r, j, op, op)) return fail(r);
          const int32_t qb = partner[j].batch;
          Batch& other = batches_[static_cast<size_t>(qb)];
          const int q = other.rank;
          if (cur_batch_[static_cast<size_t>(q)] != qb) continue;
          if (timed_) matched_times(r, j, op, b, qb, q);
          --batch.unmatched;
          if (--other.unmatched == 0) work.push_back(q);
        }
      }
      if (batch.unmatched > 0) {
        // Blocked until a peer arrives; fetch what this rank reads next meanwhile.
        if (end + 2 < acts.size()) {
          __builtin_prefetch(&acts[end + 2]);
          __builtin_prefetch(&partner[end + 4]);
        }
        return;
      }
      for (size_t j = begin; j < end; ++j)
        if (is_recv(acts[j].kind))
          ev_.at(event_of(acts[j].kind), acts[j].stage, acts[j].microbatch) = 1;
      cur_batch_[ru] = -1;
      if (timed_) now_[ru] = done_[static_cast<size_t>(b)];
      ++next_batch_[ru];
      h = end;
    }
  }

  // Times of a pair matched now: both ops end when the transfer is done.
  void matched_times(int r, size_t j, const Action& op, int32_t b, int32_t qb, int q) {
    const size_t bu = static_cast<size_t>(b), qbu = static_cast<size_t>(qb);
    const double met = std::max(entry_[bu], entry_[qbu]);
    const CommMatch m = comm_match(plan_, op);
    const int32_t jj = position(event_of(m.kind), m.stage, op.microbatch, q);
    const Action& peer_op = plan_.lowered[static_cast<size_t>(q)][static_cast<size_t>(jj)];
    const double done = met + transfer_cost(is_send(op.kind) ? op : peer_op);
    if (record_) {
      out_.times[static_cast<size_t>(r)][j] = {entry_[bu], done};
      out_.times[static_cast<size_t>(q)][static_cast<size_t>(jj)] = {entry_[qbu], done};
    }
    done_[bu] = std::max(done_[bu], done);
    done_[qbu] = std::max(done_[qbu], done);
  }

  void fail(int r) { failed_[static_cast<size_t>(r)] = 1; }

  StuckRank describe_batch_wait(int r) {
    const size_t ru = static_cast<size_t>(r);
    const auto& acts = plan_.lowered[ru];
    const size_t h = head_[ru];
    StuckRank s;
    s.rank = r;
    s.index = static_cast<int>(h);
    if (!is_comm(acts[h].kind)) {  // cannot happen: compute either runs or fails
      s.at = fmt::format("its action {} ({})", h, to_string(acts[h]));
      s.waits_for = "nothing";
      return s;
    }
    const Batch& batch = batches_[static_cast<size_t>(next_batch_[ru])];
    const size_t begin = static_cast<size_t>(batch.begin);
    const size_t end = static_cast<size_t>(batch.end);
    std::string ops;
    for (size_t j = begin; j < end && j < begin + 4; ++j) {
      if (j > begin) ops += ", ";
      ops += to_string(acts[j]);
    }
    if (end - begin > 4) ops += ", ...";
    s.at = end - begin == 1 ? fmt::format("its action {} ({})", begin, ops)
                            : fmt::format("its actions {}-{} (batch {})", begin, end - 1, ops);
    for (size_t j = begin; j < end; ++j) {
      // Unmatched: the counterpart's batch has not been entered yet.
      const int32_t qb = partner_[ru][j].batch;
      const Batch& other = batches_[static_cast<size_t>(qb)];
      const size_t q = static_cast<size_t>(other.rank);
      if (cur_batch_[q] == qb || static_cast<size_t>(other.begin) < head_[q]) continue;
      const CommMatch m = comm_match(plan_, acts[j]);
      const int32_t jj = position(event_of(m.kind), m.stage, acts[j].microbatch, m.rank);
      const Action& peer_op = plan_.lowered[static_cast<size_t>(m.rank)][static_cast<size_t>(jj)];
      s.waits_for =
          fmt::format("rank {} to post {} (its action {}), but rank {} is at its action {}", m.rank,
                      to_string(peer_op), jj, m.rank, head_[static_cast<size_t>(m.rank)]);
      s.waits_on = m.rank;
      break;
    }
    return s;
  }

  struct Batch {
    int32_t begin, end;  // positions [begin, end) in its rank's order
    int32_t rank;
    int32_t unmatched;  // ops whose counterpart's batch has not been entered yet
    Batch() {}          // uninitialised on purpose (see run())
    Batch(int32_t b, int32_t e, int32_t r, int32_t u) : begin(b), end(e), rank(r), unmatched(u) {}
  };
  struct Partner {
    int32_t batch;  // the batch holding the counterpart of a communication action
    Partner() {}    // uninitialised on purpose: compute actions have none
  };

  const Plan& plan_;
  const ExecCosts* costs_;
  bool record_;
  bool timed_;    // keep times (costs given, or times recorded)
  bool observe_;  // costs->on_compute is set
  size_t max_errors_;
  Execution& out_;
  EventFlags ev_;
  CommPositions batch_of_;  // per communication event: the rank-local index of its batch
  std::vector<Batch> batches_;
  std::vector<int32_t> base_;                  // rank r's batches are batches_[base_[r] ...]
  std::vector<std::vector<Partner>> partner_;  // per action (communication actions only)
  std::vector<double> entry_, done_;           // per batch, when timed: entered; transfers done
  std::vector<size_t> head_;
  std::vector<int32_t> next_batch_;  // per rank: its next (or current) batch
  std::vector<int32_t> cur_batch_;   // per rank: the batch it is in, or -1
  std::vector<uint8_t> failed_;
  std::vector<double> now_;
};

}  // namespace

Execution execute(const Plan& plan, const ExecCosts* costs, bool record_times, size_t max_errors) {
  Execution out;
  Engine(plan, costs, record_times, std::max<size_t>(max_errors, 1), out).run();
  return out;
}

}  // namespace ppc
