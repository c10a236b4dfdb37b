#include "compiler/verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <thread>
#include <tuple>

#include "compiler/all_to_all.h"
#include "compiler/deadlock_model.h"
#include "compiler/dependencies.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/parallel.h"
#include "compiler/stuck.h"
#include "compiler/verifier.h"

namespace ppc {

namespace verifier {

void Verifier::run() {
  if (!prepare()) return;
  // One pass over every rank's order: ranges and ownership, counts, and (for a lowered plan)
  // that its compute actions are the compute order. Ranks are independent: each writes only
  // its own result and the counts of the stages it holds.
  std::vector<ScanResult> scans(static_cast<size_t>(plan_.pp()));
  size_t total = 0;
  for (const auto& r : order()) total += r.size();
  parallel_for(plan_.pp(), worth_threads(total),
               [&](int r) { scan_rank(r, scans[static_cast<size_t>(r)]); });
  finish(scans, nullptr);
}

void Verifier::run_streamed(const std::function<void(LoweringFeed*)>& lower) {
  if (!prepare()) return;
  LoweringFeed feed;
  std::vector<ScanResult> scans(static_cast<size_t>(plan_.pp()));
  std::optional<Execution> execution;  // the deadlock model's run, if the scan passed
  {
    std::jthread scanner([&] { scan_stream(feed, scans, execution); });
    // Ends the feed if `lower` leaves without lowering (before the scanner is joined).
    struct EndFeed {
      LoweringFeed& feed;
      ~EndFeed() {
        if (feed.state() == LoweringFeed::State::Pending) feed.end(false);
      }
    } end_feed{feed};
    lower(&feed);
  }
  finish(scans, execution ? &*execution : nullptr);
}

bool Verifier::prepare() {
  if (!check_shape() || !check_enough_actions()) return false;
  const int S = plan_.num_stages();
  next_rank_.assign(static_cast<size_t>(S), -1);
  prev_rank_.assign(static_cast<size_t>(S), -1);
  for (int st = 0; st < S; ++st) {
    if (const int n = plan_.next_stage(st); n >= 0) next_rank_[st] = plan_.rank_of(n);
    if (const int p = plan_.prev_stage(st); p >= 0) prev_rank_[st] = plan_.rank_of(p);
  }
  count_.assign(static_cast<size_t>(kNumKinds) * plan_.num_stages() * plan_.microbatches, 0);
  return true;
}

void Verifier::finish(std::vector<ScanResult>& scans, Execution* streamed) {
  for (auto& sc : scans) {
    rep_.compute_actions += sc.compute_actions;
    rep_.comm_actions += sc.comm_actions;
    for (auto& e : sc.errors) error(std::move(e));
    if (sc.truncated) rep_.truncated = true;
  }
  if (!rep_.ok()) return;
  check_counts();
  if (!rep_.ok()) return;
  if (lowered_) {
    run_deadlock_model(streamed);
  } else if (opts_.check_runs) {
    try {
      check_compute_order_runs(plan_);
    } catch (const UserError& e) {
      error(e.message());
    }
  }
}

bool Verifier::check_shape() {
  const int pp = plan_.pp();
  if (pp < 1 || plan_.num_stages() < 1 || plan_.microbatches < 1) {
    error(fmt::format("plan has pp {}, {} stages and {} microbatches; each must be at least 1", pp,
                      plan_.num_stages(), plan_.microbatches));
    return false;
  }
  if (plan_.copies < 1 || plan_.num_stages() % plan_.copies != 0) {
    error(fmt::format("plan has {} model copies for {} stages", plan_.copies, plan_.num_stages()));
    return false;
  }
  if (static_cast<int>(plan_.compute.size()) != pp) {
    error(fmt::format("plan has compute orders for {} ranks, expected pp = {}",
                      plan_.compute.size(), pp));
    return false;
  }
  if (lowered_ && !streamed_ && static_cast<int>(plan_.lowered.size()) != pp) {
    error(fmt::format("plan has lowered orders for {} ranks, expected pp = {}",
                      plan_.lowered.size(), pp));
    return false;
  }
  for (int s = 0; s < plan_.num_stages(); ++s) {
    int r = plan_.rank_of(s);
    if (r < 0 || r >= pp) {
      error(fmt::format("placement puts stage {} on rank {}, outside 0..{}", s, r, pp - 1));
      return false;
    }
  }
  return true;
}

bool Verifier::check_enough_actions() {
  size_t actions = 0;
  for (const auto& r : plan_.compute) actions += r.size();
  const size_t pairs = static_cast<size_t>(plan_.num_stages()) *
                       static_cast<size_t>(plan_.microbatches) / static_cast<size_t>(plan_.copies);
  if (actions >= pairs) return true;
  error(fmt::format(
      "the plan has {} compute actions, but its {} stages and {} microbatches need at least {} "
      "(a forward and a backward for each stage and microbatch)",
      actions, plan_.num_stages(), plan_.microbatches, pairs));
  return false;
}

void Verifier::check_part(int rank, size_t i, const Action& whole, const Action& a,
                          ScanResult& out) {
  if (!part_ok(rank, i, whole, a, out)) return;
  uint8_t& c = count_[cindex(a.kind, a.stage, a.microbatch)];
  if (c < 255) ++c;
}

Verifier::Fast Verifier::fast() {
  return Fast{static_cast<unsigned>(plan_.num_stages()),
              static_cast<unsigned>(plan_.microbatches),
              plan_.placement.stage_rank.data(),
              next_rank_.data(),
              prev_rank_.data(),
              plan_.copies == 1,
              count_.data()};
}

bool Verifier::passes(const Fast& f, int rank, const Action& a) const {
  const unsigned s = static_cast<unsigned>(a.stage), mb = static_cast<unsigned>(a.microbatch);
  if (s >= f.stages || mb >= f.microbatches || f.stage_rank[s] != rank) return false;
  if (!f.one_copy && !plan_.runs(a.stage, a.microbatch)) return false;
  if (!is_comm(a.kind)) return true;
  // comm_match: SEND_F and RECV_B exchange with the next stage, RECV_F and SEND_B the previous.
  const int peer = peer_is_next(a.kind) ? f.next_rank[s] : f.prev_rank[s];
  return peer >= 0 && peer != rank && (a.peer < 0 || a.peer == peer);
}

void Verifier::check_actions(const Fast f, int rank, const Action* const data, size_t begin,
                             size_t end, ScanResult& out) {
  size_t compute = 0, comm = 0;
  for (size_t i = begin; i < end; ++i) {  // locals: the count stores cannot change them
    const Action& a = data[i];
    if (is_compound(a.kind) || !passes(f, rank, a)) {
      check_action(rank, i, a, out);
      continue;
    }
    uint8_t& c = f.count[(static_cast<size_t>(a.kind) * f.stages + static_cast<unsigned>(a.stage)) *
                             f.microbatches +
                         static_cast<unsigned>(a.microbatch)];
    c = static_cast<uint8_t>(c + (c < 255));
    if (is_comm(a.kind))
      ++comm;
    else
      ++compute;
  }
  out.compute_actions += compute;
  out.comm_actions += comm;
}

bool Verifier::part_ok(int rank, size_t i, const Action& whole, const Action& a, ScanResult& out) {
  auto error = [&](std::string msg) { out.error(std::move(msg), max_errors_); };
  const int s = a.stage, mb = a.microbatch;
  if (s < 0 || s >= plan_.num_stages()) {
    error(fmt::format("{}: stage {} does not exist (the plan has stages 0..{})",
                      where(rank, i, whole), s, plan_.num_stages() - 1));
    return false;
  }
  if (mb < 0 || mb >= plan_.microbatches) {
    error(fmt::format("{}: microbatch {} does not exist (the plan has microbatches 0..{})",
                      where(rank, i, whole), mb, plan_.microbatches - 1));
    return false;
  }
  if (plan_.rank_of(s) != rank) {
    error(fmt::format("{}: stage {} is held by rank {}, not rank {}", where(rank, i, whole), s,
                      plan_.rank_of(s), rank));
    return false;
  }
  if (!plan_.runs(s, mb)) {
    error(fmt::format(
        "{}: microbatch {} goes through model copy {}, but stage {} belongs to copy {}",
        where(rank, i, whole), mb, plan_.copy_of_microbatch(mb), s, plan_.copy_of_stage(s)));
    return false;
  }
  if (!is_comm(a.kind)) return true;
  const CommMatch m = comm_match(plan_, a);
  if (m.stage < 0) {
    error(fmt::format("{}: stage {} has no {} stage to exchange with", where(rank, i, whole), s,
                      peer_is_next(a.kind) ? "next" : "previous"));
    return false;
  }
  if (m.rank == rank) {
    error(fmt::format(
        "{}: stages {} and {} are both on rank {}; they pass tensors locally, without SEND/RECV",
        where(rank, i, whole), s, m.stage, rank));
    return false;
  }
  if (a.peer >= 0 && a.peer != m.rank) {
    error(fmt::format("{}: peer is rank {}, but stage {} is on rank {}", where(rank, i, whole),
                      a.peer, m.stage, m.rank));
    return false;
  }
  return true;
}

void Verifier::check_action(int rank, size_t i, const Action& a, ScanResult& out) {
  if (is_compound(a.kind)) {
    check_part(rank, i, a, a.forward_part(), out);
    check_part(rank, i, a, a.backward_part(), out);
    ++out.compute_actions;
  } else {
    check_part(rank, i, a, a, out);
    if (is_comm(a.kind))
      ++out.comm_actions;
    else
      ++out.compute_actions;
  }
}

void Verifier::scan_rank(int r, ScanResult& out) {
  auto error = [&](std::string msg) { out.error(std::move(msg), max_errors_); };
  const auto& comp = plan_.compute[static_cast<size_t>(r)];
  const Fast f = fast();
  if (!lowered_) {
    check_actions(f, r, comp.data(), 0, comp.size(), out);
    return;
  }
  const auto& low = plan_.lowered[static_cast<size_t>(r)];
  check_actions(f, r, low.data(), 0, low.size(), out);
  OrderMatch match;
  match_compute_order(r, low.data(), 0, low.size(), match);
  end_compute_order(r, match);
  for (auto& e : match.errors) error(std::move(e));
}

void Verifier::match_compute_order(int r, const Action* low, size_t begin, size_t end,
                                   OrderMatch& m) {
  const auto& comp = plan_.compute[static_cast<size_t>(r)];
  for (size_t i = begin; i < end && m.same; ++i) {
    if (is_comm(low[i].kind)) continue;
    const size_t k = m.k++;
    if (k < comp.size() && comp[k] == low[i]) continue;
    m.errors.push_back(fmt::format(
        "{}: the lowered order's compute actions differ from the compute order{}",
        where(r, i, low[i]),
        k < comp.size() ? fmt::format(" (which has {} there)", to_string(comp[k])) : ""));
    m.same = false;
  }
}

void Verifier::end_compute_order(int r, OrderMatch& m) {
  const auto& comp = plan_.compute[static_cast<size_t>(r)];
  if (m.same && m.k < comp.size())
    m.errors.push_back(fmt::format("rank {}: the lowered order lacks compute action {} ({})", r,
                                   m.k, to_string(comp[m.k])));
}

void Verifier::scan_stream(const LoweringFeed& feed, std::vector<ScanResult>& scans,
                           std::optional<Execution>& execution) {
  if (feed.wait_until_started() == LoweringFeed::State::Failed) return;
  const int pp = plan_.pp();
  std::vector<const Action*> orders;
  std::vector<size_t> sizes;
  for (int r = 0; r < pp; ++r) {
    orders.push_back(feed.data(r));
    sizes.push_back(feed.final_size(r));
  }
  GrowingExecution model(plan_, opts_.costs, opts_.record_times, max_errors_, std::move(orders),
                         std::move(sizes));
  struct Progress {
    size_t done = 0;  // actions scanned
    OrderMatch match;
  };
  std::vector<Progress> at(static_cast<size_t>(pp));
  const Fast f = fast();
  bool clean = true;  // no action failed its checks: the model may run them
  while (true) {
    const unsigned version = feed.version();         // read first: see wait_for_change
    const LoweringFeed::State state = feed.state();  // Done: the sizes read next are final
    if (state == LoweringFeed::State::Failed) break;
    bool progressed = false;
    for (int r = 0; r < pp; ++r) {
      Progress& p = at[static_cast<size_t>(r)];
      const size_t n = feed.written(r);
      if (n == p.done) continue;
      ScanResult& out = scans[static_cast<size_t>(r)];
      const Action* low = feed.data(r);
      check_actions(f, r, low, p.done, n, out);
      match_compute_order(r, low, p.done, n, p.match);
      clean = clean && out.errors.empty() && !out.truncated;
      if (clean) model.extend(r, n);
      p.done = n;
      progressed = true;
    }
    if (state == LoweringFeed::State::Done) break;
    if (!progressed) feed.wait_for_change(version);  // asleep until lowering publishes more
  }
  for (int r = 0; r < pp; ++r) {
    Progress& p = at[static_cast<size_t>(r)];
    ScanResult& out = scans[static_cast<size_t>(r)];
    end_compute_order(r, p.match);
    for (auto& e : p.match.errors) out.error(std::move(e), max_errors_);
  }
  for (const auto& out : scans) clean = clean && out.errors.empty() && !out.truncated;
  if (clean && feed.state() == LoweringFeed::State::Done) execution.emplace(model.finish());
}

void Verifier::run_deadlock_model(Execution* streamed) {
  rep_.checked_lowered = true;
  Execution ex = streamed ? std::move(*streamed)
                          : execute(plan_, opts_.costs, opts_.record_times, max_errors_);
  rep_.batches = ex.batches;
  for (const auto& e : ex.errors) error(e);
  if (!ex.stuck.empty()) error("deadlock: " + explain_stuck(ex.stuck));
  if (opts_.execution) *opts_.execution = std::move(ex);
}

}  // namespace verifier

using verifier::Verifier;

std::vector<int> peak_inflight(const Plan& plan) {
  std::vector<int> peaks(static_cast<size_t>(plan.pp()), 0);
  for (int r = 0; r < plan.pp() && r < static_cast<int>(plan.compute.size()); ++r) {
    int cur = 0, peak = 0;
    for (const Action& a : plan.compute[static_cast<size_t>(r)])
      for_each_part(a, [&](const Action& p) {  // an OverlapFB's forward part runs first
        cur += inflight_change(p.kind);
        peak = std::max(peak, cur);
      });
    peaks[static_cast<size_t>(r)] = peak;
  }
  return peaks;
}

VerifyReport verify(const Plan& plan, size_t max_errors) {
  VerifyOptions opts;
  opts.max_errors = max_errors;
  return verify(plan, opts);
}

namespace {

// The report of `run(verifier)` on `plan` (which must have stages and microbatches for a
// Verifier to hold it), with the plan's peaks.
template <class Run>
VerifyReport report_of(const Plan& plan, const VerifyOptions& opts, bool streamed, Run&& run) {
  VerifyReport rep;
  if (plan.num_stages() >= 1 && plan.microbatches >= 1) {
    Verifier v(plan, rep, opts, streamed);
    run(v);
  } else {
    rep.errors.push_back(
        fmt::format("plan has {} stages and {} microbatches; each must be at least 1",
                    plan.num_stages(), plan.microbatches));
  }
  // The plan's memory modes (issue 42) name stages and layer kinds it has.
  if (!plan.memory.empty()) try {
      check_memory_policy(plan.memory, plan.layout, plan.num_stages(), "memory");
    } catch (const UserError& e) {
      rep.errors.push_back("memory: " + e.message());
    }
  // Expert parallelism (issue 40) where the plan has MoE layers.
  if (std::string bad = check_expert_parallel(plan); !bad.empty())
    rep.errors.push_back("expert_parallel: " + bad);
  rep.peak_inflight = peak_inflight(plan);
  return rep;
}

}  // namespace

VerifyReport verify_as_lowered(const Plan& plan, const VerifyOptions& opts,
                               const std::function<void(LoweringFeed*)>& lower) {
  PPC_INTERNAL_ASSERT(!plan.is_lowered() && !opts.compute_only,
                      "verify_as_lowered takes a compute-only plan and verifies its lowering");
  return report_of(plan, opts, true, [&](Verifier& v) { v.run_streamed(lower); });
}

VerifyReport verify(const Plan& plan, const VerifyOptions& opts) {
  return report_of(plan, opts, false, [](Verifier& v) { v.run(); });
}

}  // namespace ppc
