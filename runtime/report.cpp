#include "runtime/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "compiler/dependencies.h"
#include "compiler/execute.h"
#include "compiler/verify.h"

namespace pprt {

using nlohmann::json;

std::string to_json(const RankReport& r) {
  json steps = json::array();
  for (const StepTiming& s : r.steps) {
    json spans = json::array();
    for (const ActionSpan& a : s.spans) spans.push_back({a.wait, a.start, a.end});
    steps.push_back({{"step", s.step},
                     {"begin_unix_us", s.begin_unix_us},
                     {"wall_ns", s.wall_ns},
                     {"compute_ns", s.compute_ns},
                     {"wait_ns", s.wait_ns},
                     {"post_ns", s.post_ns},
                     {"optimizer_ns", s.optimizer_ns},
                     {"actions", s.actions},
                     {"spans", std::move(spans)}});
  }
  return json{{"rank", r.rank}, {"peak_inflight", r.peak_inflight}, {"steps", std::move(steps)}}.dump();
}

RankReport rank_report_from_json(const std::string& text) {
  const json j = json::parse(text);
  RankReport r;
  r.rank = j.at("rank").get<int>();
  r.peak_inflight = j.at("peak_inflight").get<int>();
  for (const json& s : j.at("steps")) {
    StepTiming t;
    t.step = s.at("step").get<int>();
    t.begin_unix_us = s.at("begin_unix_us").get<int64_t>();
    t.wall_ns = s.at("wall_ns").get<int64_t>();
    t.compute_ns = s.at("compute_ns").get<int64_t>();
    t.wait_ns = s.at("wait_ns").get<int64_t>();
    t.post_ns = s.at("post_ns").get<int64_t>();
    t.optimizer_ns = s.at("optimizer_ns").get<int64_t>();
    t.actions = s.at("actions").get<size_t>();
    for (const json& a : s.at("spans")) t.spans.push_back({a[0].get<int64_t>(), a[1].get<int64_t>(), a[2].get<int64_t>()});
    r.steps.push_back(std::move(t));
  }
  return r;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The simulated makespan (ns) of the plan when each compute action takes what it took in `step`.
double simulated_makespan(const ppc::Plan& plan, const std::vector<RankReport>& ranks, size_t k) {
  const auto& order = plan.order();
  std::vector<std::unordered_map<ppc::Action, double, ppc::ActionHash>> dur(static_cast<size_t>(plan.pp()));
  for (const RankReport& r : ranks) {
    const auto& acts = order[static_cast<size_t>(r.rank)];
    const auto& spans = r.steps[k].spans;
    for (size_t i = 0; i < acts.size() && i < spans.size(); ++i)
      if (!ppc::is_comm(acts[i].kind)) dur[static_cast<size_t>(r.rank)][acts[i]] = static_cast<double>(spans[i].end - spans[i].start);
  }
  ppc::ExecCosts costs;
  costs.compute = [&](const ppc::Action& a, int rank) {
    const auto& m = dur[static_cast<size_t>(rank)];
    auto it = m.find(a);
    return it == m.end() ? 0.0 : it->second;
  };
  const ppc::Execution ex = ppc::execute(plan, &costs, true);
  double makespan = 0;
  for (const auto& times : ex.times)
    for (const ppc::Interval& iv : times) makespan = std::max(makespan, iv.end);
  return makespan;
}

}  // namespace

TimingSummary analyse(const ppc::Plan& plan, const std::vector<RankReport>& ranks) {
  TimingSummary s;
  s.predicted_inflight = ppc::peak_inflight(plan);
  s.peak_inflight.assign(static_cast<size_t>(plan.pp()), 0);
  for (const RankReport& r : ranks) s.peak_inflight[static_cast<size_t>(r.rank)] = r.peak_inflight;
  if (ranks.empty() || ranks.front().steps.empty()) return s;
  const size_t nsteps = ranks.front().steps.size();
  for (const RankReport& r : ranks)
    if (r.steps.size() != nsteps) return s;
  // Skip the run's first step (allocations, first-touch) when there are others.
  const size_t first = (nsteps > 1 && ranks.front().steps.front().step == 0) ? 1 : 0;
  double overhead = 0, post = 0;
  size_t actions = 0, comm_actions = 0;
  std::vector<double> walls, sims, ratios;
  for (size_t k = first; k < nsteps; ++k) {
    double wall = 0;
    bool spans = true;
    for (const RankReport& r : ranks) {
      const StepTiming& t = r.steps[k];
      overhead += static_cast<double>(t.wall_ns - t.compute_ns - t.wait_ns - t.post_ns);
      post += static_cast<double>(t.post_ns);
      actions += t.actions;
      for (const ppc::Action& a : plan.order()[static_cast<size_t>(r.rank)]) comm_actions += ppc::is_comm(a.kind);
      wall = std::max(wall, static_cast<double>(t.wall_ns));
      spans = spans && t.spans.size() == t.actions;
    }
    if (!spans) continue;
    const double sim = simulated_makespan(plan, ranks, k);
    walls.push_back(wall);
    sims.push_back(sim);
    if (sim > 0) ratios.push_back(wall / sim);
  }
  s.analysed_steps = static_cast<int>(nsteps - first);
  s.overhead_us_per_action = actions ? overhead / static_cast<double>(actions) / 1e3 : 0;
  s.post_us_per_action = comm_actions ? post / static_cast<double>(comm_actions) / 1e3 : 0;
  s.step_ms = median(walls) / 1e6;
  s.simulated_ms = median(sims) / 1e6;
  s.ratio = median(ratios);
  return s;
}

std::string chrome_trace(const ppc::Plan& plan, const std::vector<RankReport>& ranks) {
  json events = json::array();
  int64_t t0 = INT64_MAX;
  for (const RankReport& r : ranks)
    for (const StepTiming& t : r.steps) t0 = std::min(t0, t.begin_unix_us);
  for (const RankReport& r : ranks) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r.rank}, {"args", {{"name", fmt::format("rank {}", r.rank)}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r.rank}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r.rank}, {"tid", 1}, {"args", {{"name", "communication"}}}});
    const auto& acts = plan.order()[static_cast<size_t>(r.rank)];
    for (const StepTiming& t : r.steps) {
      const double base = static_cast<double>(t.begin_unix_us - t0);
      auto us = [&](int64_t ns) { return base + static_cast<double>(ns) / 1e3; };
      for (size_t i = 0; i < acts.size() && i < t.spans.size(); ++i) {
        const ppc::Action& a = acts[i];
        const ActionSpan& sp = t.spans[i];
        const std::string name = ppc::to_string(a);
        const bool comm = ppc::is_comm(a.kind);
        if (!comm && sp.start > sp.wait)
          events.push_back({{"name", "wait " + name}, {"cat", "wait"}, {"ph", "X"}, {"pid", r.rank}, {"tid", 0},
                            {"ts", us(sp.wait)}, {"dur", static_cast<double>(sp.start - sp.wait) / 1e3},
                            {"args", {{"step", t.step + 1}}}});
        events.push_back({{"name", name}, {"cat", ppc::kind_name(a.kind)}, {"ph", "X"}, {"pid", r.rank},
                          {"tid", comm ? 1 : 0}, {"ts", us(sp.start)},
                          {"dur", static_cast<double>(sp.end - sp.start) / 1e3}, {"args", {{"step", t.step + 1}}}});
        if (!comm) continue;
        // Flow arrows from a SEND (at its post) to the matching RECV (at its completion).
        const bool send = ppc::is_send(a.kind);
        const bool fwd = a.kind == ppc::ActionKind::SendF || a.kind == ppc::ActionKind::RecvF;
        const int sender = send ? a.stage : ppc::comm_match(plan, a).stage;
        const std::string bind = fmt::format("send-recv-{}-{}-{}", sender, a.microbatch, fwd ? 'F' : 'B');
        json flow = {{"name", "send-recv"}, {"cat", "send-recv"}, {"ph", send ? "s" : "f"}, {"pid", r.rank}, {"tid", 1},
                     {"ts", send ? us(sp.start) : us(sp.end)}, {"id", fmt::format("{}@{}", bind, t.step + 1)},
                     {"bind_id", bind}};
        if (!send) flow["bp"] = "e";
        events.push_back(std::move(flow));
      }
      if (t.optimizer_ns > 0)
        events.push_back({{"name", "optimizer"}, {"cat", "optimizer"}, {"ph", "X"}, {"pid", r.rank}, {"tid", 0},
                          {"ts", us(t.wall_ns)}, {"dur", static_cast<double>(t.optimizer_ns) / 1e3},
                          {"args", {{"step", t.step + 1}}}});
    }
  }
  json out = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  return out.dump() + "\n";
}

std::string summary_text(const TimingSummary& s) {
  std::string out = fmt::format("peak in-flight activations per rank: {} (the plan predicts {}){}\n",
                                fmt::join(s.peak_inflight, " "), fmt::join(s.predicted_inflight, " "),
                                s.peak_inflight == s.predicted_inflight ? "" : "  MISMATCH");
  if (s.analysed_steps > 0)
    out += fmt::format(
        "timing over {} steps: runtime overhead {:.2f} us/action (posting to the transport {:.1f} us/op); "
        "step {:.2f} ms, simulated makespan from the measured action times {:.2f} ms, ratio {:.3f}\n",
        s.analysed_steps, s.overhead_us_per_action, s.post_us_per_action, s.step_ms, s.simulated_ms, s.ratio);
  return out;
}

}  // namespace pprt
