#include "runtime/output/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "compiler/deadlock_model.h"
#include "compiler/dependencies.h"
#include "compiler/verify.h"
#include "runtime/output/median.h"

namespace pprt {

using nlohmann::json;

// The store's format of a report (written and read by the same pprun): a span as [wait, start,
// end], the rest as objects.
void to_json(json& j, const ActionSpan& a) {
  j = json::array({a.wait, a.start, a.end});
}
void from_json(const json& j, ActionSpan& a) {
  a = ActionSpan{j.at(0).get<int64_t>(), j.at(1).get<int64_t>(), j.at(2).get<int64_t>()};
}
void to_json(json& j, const AllToAllSpan& a) {
  j = json::array({a.start, a.end, a.sent_bytes, a.received_bytes, a.sent_rows,
                   (a.backward ? 1 : 0) + (a.counts ? 2 : 0)});
}
void from_json(const json& j, AllToAllSpan& a) {
  const int flags = j.at(5).get<int>();
  a = AllToAllSpan{j.at(0).get<int64_t>(), j.at(1).get<int64_t>(), j.at(2).get<int64_t>(),
                   j.at(3).get<int64_t>(), j.at(4).get<int64_t>(), (flags & 1) != 0,
                   (flags & 2) != 0};
}
void to_json(json& j, const OverlapSpan& o) {
  j = json::array({o.begin, o.forward_end, o.backward_end});
}
void from_json(const json& j, OverlapSpan& o) {
  o = OverlapSpan{j.at(0).get<int64_t>(), j.at(1).get<int64_t>(), j.at(2).get<int64_t>()};
}
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StepTiming, step, begin_unix_us, wall_ns, compute_ns, wait_ns,
                                   post_ns, optimizer_ns, own_ns, step_ns, actions, sent_bytes,
                                   sends, spans, all_to_all, overlaps)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DpReport, steps, bytes, buckets, span_ns, exposed_ns)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(RankReport, rank, peak_inflight, peak_activation_bytes,
                                   offloaded_bytes, allocator_peak_bytes, steps, save_seconds,
                                   save_bytes, save_write_seconds, save_wait_seconds, write_steps,
                                   other_steps, write_steps_s, other_steps_s, load_seconds,
                                   load_bytes, dp)

std::string to_json(const RankReport& r) {
  return json(r).dump();
}

RankReport rank_report_from_json(const std::string& text) {
  return json::parse(text).get<RankReport>();
}

void publish_report(Store& store, int rank, const RankReport& report) {
  store.set(fmt::format("report/{}", rank), to_json(report));
}

std::vector<RankReport> gather_reports(Store& store, const Topology& topology) {
  std::vector<RankReport> out;
  for (int r = 0; r < topology.pp(); ++r)
    out.push_back(
        rank_report_from_json(store.get(fmt::format("report/{}", topology.global(r, 0)))));
  return out;
}

namespace {

// When the first rank began step `k` (unix us).
int64_t first_begin_us(const std::vector<RankReport>& ranks, size_t k) {
  int64_t first = ranks.front().steps[k].begin_unix_us;
  for (const RankReport& r : ranks) first = std::min(first, r.steps[k].begin_unix_us);
  return first;
}

// The simulated makespan (ns) of the plan when each compute action takes what it took in `step`,
// its messages timed under `messages` (the transport's model). Under the eager model (Gloo) each
// rank also begins when it began in that step (ranks leave the previous step's optimizer at
// different times) and spends on posting each SEND or RECV what its posts took on average then;
// the makespan runs from the first rank's beginning.
double simulated_makespan(const ppc::Plan& plan, const std::vector<RankReport>& ranks, size_t k,
                          ppc::MessageModel messages) {
  const auto& order = plan.order();
  std::vector<std::unordered_map<ppc::Action, double, ppc::ActionHash>> dur(
      static_cast<size_t>(plan.pp()));
  for (const RankReport& r : ranks) {
    const auto& acts = order[static_cast<size_t>(r.rank)];
    const auto& spans = r.steps[k].spans;
    for (size_t i = 0; i < acts.size() && i < spans.size(); ++i)
      if (!ppc::is_comm(acts[i].kind))
        dur[static_cast<size_t>(r.rank)][acts[i]] =
            static_cast<double>(spans[i].end - spans[i].start);
  }
  ppc::ExecCosts costs;
  costs.compute = [&](const ppc::Action& a, int rank) {
    const auto& m = dur[static_cast<size_t>(rank)];
    auto it = m.find(a);
    return it == m.end() ? 0.0 : it->second;
  };
  if (messages == ppc::MessageModel::Eager) {
    ppc::EagerOptions opts;
    opts.start.assign(static_cast<size_t>(plan.pp()), 0.0);
    opts.post.assign(static_cast<size_t>(plan.pp()), 0.0);
    const int64_t first = first_begin_us(ranks, k);
    for (const RankReport& r : ranks) {
      const StepTiming& t = r.steps[k];
      const size_t ru = static_cast<size_t>(r.rank);
      opts.start[ru] = static_cast<double>(t.begin_unix_us - first) * 1e3;
      size_t ops = 0;
      for (const ppc::Action& a : order[ru]) ops += ppc::is_comm(a.kind);
      if (ops) opts.post[ru] = static_cast<double>(t.post_ns) / static_cast<double>(ops);
    }
    const ppc::Execution ex = ppc::execute_eager(plan, costs, false, opts);
    double makespan = 0;
    for (double e : ex.end) makespan = std::max(makespan, e);
    return makespan;
  }
  const ppc::Execution ex = ppc::execute(plan, &costs, true);
  double makespan = 0;
  for (const auto& times : ex.times)
    for (const ppc::Interval& iv : times) makespan = std::max(makespan, iv.end);
  return makespan;
}

}  // namespace

TimingSummary analyse(const ppc::Plan& plan, const std::vector<RankReport>& ranks,
                      ppc::MessageModel messages) {
  TimingSummary s;
  s.predicted_inflight = ppc::peak_inflight(plan);
  s.peak_inflight.assign(static_cast<size_t>(plan.pp()), 0);
  for (const RankReport& r : ranks) s.peak_inflight[static_cast<size_t>(r.rank)] = r.peak_inflight;
  s.peak_activation_bytes.assign(static_cast<size_t>(plan.pp()), 0);
  for (const RankReport& r : ranks)
    s.peak_activation_bytes[static_cast<size_t>(r.rank)] = r.peak_activation_bytes;
  s.offloaded_bytes.assign(static_cast<size_t>(plan.pp()), 0);
  for (const RankReport& r : ranks)
    s.offloaded_bytes[static_cast<size_t>(r.rank)] = r.offloaded_bytes;
  s.allocator_peak_bytes.assign(static_cast<size_t>(plan.pp()), -1);
  for (const RankReport& r : ranks)
    s.allocator_peak_bytes[static_cast<size_t>(r.rank)] = r.allocator_peak_bytes;
  if (ranks.empty() || ranks.front().steps.empty()) return s;
  for (const RankReport& r : ranks) {
    s.sent_bytes += r.steps.back().sent_bytes;
    s.sends += r.steps.back().sends;
  }
  const size_t nsteps = ranks.front().steps.size();
  for (const RankReport& r : ranks)
    if (r.steps.size() != nsteps) return s;
  // Skip the run's first step (allocations, first-touch) when there are others.
  const size_t first = (nsteps > 1 && ranks.front().steps.front().step == 0) ? 1 : 0;
  double overhead = 0, post = 0;
  size_t actions = 0, comm_actions = 0;
  std::map<std::string, std::pair<double, size_t>> kinds;  // total ns, count
  std::vector<double> walls, sims, ratios, wholes;
  for (size_t k = first; k < nsteps; ++k) {
    double wall = 0, whole = 0;
    bool spans = true;
    for (const RankReport& r : ranks) {
      const StepTiming& t = r.steps[k];
      whole = std::max(whole, static_cast<double>(t.step_ns));
      overhead += static_cast<double>(t.wall_ns - t.compute_ns - t.wait_ns - t.post_ns);
      post += static_cast<double>(t.post_ns);
      actions += t.actions;
      for (const ppc::Action& a : plan.order()[static_cast<size_t>(r.rank)])
        comm_actions += ppc::is_comm(a.kind);
      wall = std::max(wall, static_cast<double>(t.wall_ns));
      spans = spans && t.spans.size() == t.actions;
      const auto& acts = plan.order()[static_cast<size_t>(r.rank)];
      for (size_t i = 0; i < acts.size() && i < t.spans.size(); ++i) {
        if (ppc::is_comm(acts[i].kind)) continue;
        auto& k = kinds[ppc::kind_name(acts[i].kind)];
        k.first += static_cast<double>(t.spans[i].end - t.spans[i].start);
        ++k.second;
      }
    }
    if (!spans) continue;
    wholes.push_back(whole);
    const double sim = simulated_makespan(plan, ranks, k, messages);
    walls.push_back(wall);
    sims.push_back(sim);
    // Under the eager model the simulation starts each rank when it began: the measured time it
    // compares with runs from the first rank's beginning to the last rank's end.
    double measured = wall;
    if (messages == ppc::MessageModel::Eager) {
      const int64_t first = first_begin_us(ranks, k);
      measured = 0;
      for (const RankReport& r : ranks)
        measured = std::max(measured, static_cast<double>(r.steps[k].begin_unix_us - first) * 1e3 +
                                          static_cast<double>(r.steps[k].wall_ns));
    }
    if (sim > 0) ratios.push_back(measured / sim);
  }
  s.analysed_steps = static_cast<int>(nsteps - first);
  s.overhead_us_per_action = actions ? overhead / static_cast<double>(actions) / 1e3 : 0;
  s.post_us_per_action = comm_actions ? post / static_cast<double>(comm_actions) / 1e3 : 0;
  s.step_ms = median(walls) / 1e6;
  s.simulated_ms = median(sims) / 1e6;
  s.ratio = median(ratios);
  s.whole_step_ms = median(wholes) / 1e6;
  for (const char* k : {"F", "B", "I", "W", "OVERLAP_F_B"}) {
    auto it = kinds.find(k);
    if (it != kinds.end())
      s.mean_ms.emplace_back(k, it->second.first / static_cast<double>(it->second.second) / 1e6);
  }
  return s;
}

TimingSummary summarise(const ppc::Plan& plan, const std::vector<RankReport>& ranks, int replicas,
                        ppc::MessageModel messages) {
  TimingSummary s = analyse(plan, ranks, messages);
  summarise_saves(ranks, s);
  summarise_dp(ranks, replicas, s);
  return s;
}

std::string summary_text(const TimingSummary& s) {
  std::string out =
      fmt::format("peak in-flight activations per rank: {} (the plan predicts {}){}\n",
                  fmt::join(s.peak_inflight, " "), fmt::join(s.predicted_inflight, " "),
                  s.peak_inflight == s.predicted_inflight ? "" : "  MISMATCH");
  if (std::any_of(s.peak_activation_bytes.begin(), s.peak_activation_bytes.end(),
                  [](int64_t b) { return b > 0; }))
    out += fmt::format("peak activation bytes per rank: {} (held between forward and backward)\n",
                       fmt::join(s.peak_activation_bytes, " "));
  if (std::any_of(s.allocator_peak_bytes.begin(), s.allocator_peak_bytes.end(),
                  [](int64_t b) { return b >= 0; }))
    out += fmt::format(
        "device allocator peak bytes per rank: {} (allocated, the steps after the first)\n",
        fmt::join(s.allocator_peak_bytes, " "));
  if (std::any_of(s.offloaded_bytes.begin(), s.offloaded_bytes.end(),
                  [](int64_t b) { return b > 0; }))
    out += fmt::format("offloaded bytes per step per rank: {} (to host memory after forwards)\n",
                       fmt::join(s.offloaded_bytes, " "));
  if (s.analysed_steps > 0)
    out += fmt::format(
        "timing over {} steps: runtime overhead {:.2f} us/action (posting to the transport {:.1f} "
        "us/op); "
        "step {:.2f} ms, simulated makespan from the measured action times {:.2f} ms, ratio "
        "{:.3f}; whole step {:.2f} ms (the optimizer between steps included)\n",
        s.analysed_steps, s.overhead_us_per_action, s.post_us_per_action, s.step_ms, s.simulated_ms,
        s.ratio, s.whole_step_ms);
  if (!s.mean_ms.empty()) {
    std::string kinds;
    for (const auto& [k, ms] : s.mean_ms)
      kinds += fmt::format("{}{} {:.3f} ms", kinds.empty() ? "" : ", ", k, ms);
    out += "mean compute time per action: " + kinds + "\n";
  }
  if (s.sends > 0)
    out += fmt::format("transfers between stages: {} bytes per step in {} messages ({:.3f} MB)\n",
                       s.sent_bytes, s.sends, s.sent_bytes / 1e6);
  if (s.balance.steps > 0) out += balance_text(s.balance) + "\n";
  return out + saves_text(s);
}

ComputeBalance compute_balance(const std::vector<std::vector<double>>& steps) {
  ComputeBalance b;
  if (steps.empty() || steps.front().empty()) return b;
  const size_t ranks = steps.front().size();
  b.steps = static_cast<int>(steps.size());
  for (size_t r = 0; r < ranks; ++r) {
    std::vector<double> times;
    for (const auto& step : steps) times.push_back(r < step.size() ? step[r] * 1e3 : 0);
    b.ms.push_back(median(times));
  }
  b.slowest = static_cast<int>(std::max_element(b.ms.begin(), b.ms.end()) - b.ms.begin());
  const double mid = median(b.ms);
  b.ratio = mid > 0 ? b.ms[static_cast<size_t>(b.slowest)] / mid : 0;
  return b;
}

std::string balance_text(const ComputeBalance& b) {
  std::string times;
  const size_t n = b.ms.size();
  if (n <= 16) {
    for (size_t r = 0; r < n; ++r) times += fmt::format("{}{} {:.2f}", r ? ", " : "", r, b.ms[r]);
    times += " ms";
  } else {
    const size_t fastest =
        static_cast<size_t>(std::min_element(b.ms.begin(), b.ms.end()) - b.ms.begin());
    times = fmt::format("fastest rank {} {:.2f} ms, median {:.2f} ms, slowest rank {} {:.2f} ms",
                        fastest, b.ms[fastest], median(b.ms), b.slowest,
                        b.ms[static_cast<size_t>(b.slowest)]);
  }
  const std::string verdict =
      b.straggler() ? fmt::format("straggler: rank {}, at {:.2f} x the median", b.slowest, b.ratio)
                    : fmt::format("no straggler (the slowest, rank {}, at {:.2f} x the median)",
                                  b.slowest, b.ratio);
  return fmt::format("compute time per step by rank (median of {} step{}): {}; {}", b.steps,
                     b.steps == 1 ? "" : "s", times, verdict);
}

void summarise_dp(const std::vector<RankReport>& ranks, int replicas, TimingSummary& s) {
  s.replicas = replicas;
  int64_t span = 0, exposed = 0;
  int counted = 0;
  for (const RankReport& r : ranks) {
    if (r.dp.steps == 0) continue;
    s.dp_bytes += r.dp.bytes;
    s.dp_buckets += r.dp.buckets;
    span += r.dp.span_ns / r.dp.steps;
    exposed += r.dp.exposed_ns / r.dp.steps;
    ++counted;
  }
  if (counted == 0) return;
  s.dp_span_ms = span / 1e6 / counted;
  s.dp_exposed_ms = exposed / 1e6 / counted;
  s.dp_hidden = span > 0 ? std::max(0.0, 1.0 - static_cast<double>(exposed) / span) : 1.0;
}

std::string saves_text(const TimingSummary& s) {
  std::string out;
  if (s.replicas > 1 && s.dp_buckets > 0)
    out += fmt::format(
        "data parallelism: {} replicas; per step a pipeline's ranks all-reduce {:.2f} MB of "
        "gradients in {} buckets, {:.2f} ms per rank from the first bucket's start to the last "
        "one's end, {:.2f} ms of it waited for after the pipeline: {:.0f} % hidden\n",
        s.replicas, s.dp_bytes / 1e6, s.dp_buckets, s.dp_span_ms, s.dp_exposed_ms,
        100 * s.dp_hidden);
  if (s.load_bytes > 0)
    out += fmt::format(
        "resumed: read {:.1f} MB of checkpoint in {:.3f} s (slowest rank): {:.0f} MB/s\n",
        s.load_bytes / 1e6, s.load_s, s.load_mb_per_s);
  if (s.saves > 0 && !s.save_async)
    out += fmt::format(
        "checkpoints: {} saved, {:.1f} MB each; training paused {:.3f} s per save (median, "
        "slowest rank): {:.0f} MB/s\n",
        s.saves, s.save_bytes / 1e6, s.save_pause_s, s.save_mb_per_s);
  if (s.saves > 0 && s.save_async) {
    // A save that waited for the previous one: the saves come faster than a write takes.
    const std::string waited =
        s.save_wait_s >= 0.0005
            ? fmt::format("; {:.3f} s of it waiting for the previous save's write: save less often",
                          s.save_wait_s)
            : "";
    out += fmt::format(
        "checkpoints: {} saved in the background, {:.1f} MB each; training paused {:.3f} s per "
        "save (median, slowest rank{}), each written in {:.3f} s: {:.0f} MB/s\n",
        s.saves, s.save_bytes / 1e6, s.save_pause_s, waited, s.save_write_s, s.save_write_mb_per_s);
    if (s.write_steps > 0)
      out += fmt::format(
          "steps during a background write: {:.2f} ms (mean of {}), the others {:.2f} ms (mean "
          "of {}; slowest rank)\n",
          s.write_step_ms, s.write_steps, s.other_step_ms, s.other_steps);
  }
  return out;
}

void summarise_saves(const std::vector<RankReport>& ranks, TimingSummary& s) {
  for (const RankReport& r : ranks) {
    s.load_s = std::max(s.load_s, r.load_seconds);
    s.load_bytes += r.load_bytes;
  }
  if (s.load_s > 0) s.load_mb_per_s = s.load_bytes / 1e6 / s.load_s;
  size_t saves = 0;
  for (const RankReport& r : ranks) saves = std::max(saves, r.save_seconds.size());
  std::vector<double> pauses, waits;
  for (size_t i = 0; i < saves; ++i) {
    double pause = 0, wait = 0;
    uint64_t bytes = 0;
    for (const RankReport& r : ranks) {
      if (i < r.save_seconds.size()) pause = std::max(pause, r.save_seconds[i]);
      if (i < r.save_wait_seconds.size()) wait = std::max(wait, r.save_wait_seconds[i]);
      if (i < r.save_bytes.size()) bytes += r.save_bytes[i];
    }
    pauses.push_back(pause);
    waits.push_back(wait);
    s.save_bytes = bytes;
  }
  if (saves == 0) return;
  auto upper_median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  s.saves = static_cast<int>(saves);
  s.save_pause_s = upper_median(pauses);
  // The wait inside the median pause: that save's (the first save with that pause).
  const size_t median_save =
      static_cast<size_t>(std::find(pauses.begin(), pauses.end(), s.save_pause_s) - pauses.begin());
  const double median_wait = waits[median_save];
  // The rate of that save (the upper median of the rates would come from another save).
  s.save_mb_per_s = s.save_pause_s > 0 ? s.save_bytes / 1e6 / s.save_pause_s : 0;
  // Asynchronous saves: their background writes, and the steps they ran beside.
  std::vector<double> writes;
  for (size_t i = 0; i < saves; ++i) {
    double slowest = 0;
    for (const RankReport& r : ranks)
      if (i < r.save_write_seconds.size()) slowest = std::max(slowest, r.save_write_seconds[i]);
    if (slowest > 0) writes.push_back(slowest);
  }
  if (writes.empty()) return;
  s.save_async = true;
  s.save_wait_s = median_wait;
  s.save_write_s = upper_median(writes);
  s.save_write_mb_per_s = s.save_write_s > 0 ? s.save_bytes / 1e6 / s.save_write_s : 0;
  for (const RankReport& r : ranks) {
    if (r.write_steps > 0 && r.write_steps_s / r.write_steps * 1e3 >= s.write_step_ms) {
      s.write_step_ms = r.write_steps_s / r.write_steps * 1e3;
      s.write_steps = r.write_steps;
    }
    if (r.other_steps > 0 && r.other_steps_s / r.other_steps * 1e3 >= s.other_step_ms) {
      s.other_step_ms = r.other_steps_s / r.other_steps * 1e3;
      s.other_steps = r.other_steps;
    }
  }
}

}  // namespace pprt
