#include "runtime/output/trace.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include <fmt/format.h>

#include "compiler/trace_writer.h"

namespace pprt {

namespace {

// --ep: the rank's all-to-alls on two threads of their own (docs/trace-format.md), tid 2 for the
// forward communicator's, tid 3 for the backward one's, each inside its part's slice where an
// OVERLAP_F_B ran its two parts concurrently. `us`: a step time (ns) in the trace's microseconds.
template <class Us>
void add_all_to_alls(const StepTiming& t, const Us& us, ppc::TraceRank& part) {
  if (t.all_to_all.empty()) return;
  part.threads = {{"all-to-all (forward)", {}}, {"all-to-all (backward)", {}}};
  auto slice = [&](int thread, std::string name, const char* cat, int64_t from, int64_t to,
                   std::string args) {
    part.threads[static_cast<size_t>(thread)].slices.push_back(
        {std::move(name), cat, us(from), static_cast<double>(to - from) / 1e3, std::move(args)});
  };
  for (const OverlapSpan& o : t.overlaps) {
    slice(0, "forward part", "overlap_part", o.begin, o.forward_end, "");
    slice(1, "backward part", "overlap_part", o.begin, o.backward_end, "");
  }
  for (const AllToAllSpan& a : t.all_to_all)
    slice(a.backward ? 1 : 0, a.counts ? "all-to-all counts" : "all-to-all", "all_to_all",
          a.start, a.end,
          fmt::format("\"direction\":\"{}\",\"sent_bytes\":{},\"received_bytes\":{},"
                      "\"rows\":{}",
                      a.backward ? "backward" : "forward", a.sent_bytes, a.received_bytes,
                      a.sent_rows));
  // Each thread's slices by start, the enclosing part first (viewers nest them in that order).
  for (ppc::TraceThread& th : part.threads)
    std::stable_sort(th.slices.begin(), th.slices.end(),
                     [](const ppc::TraceExtraSlice& x, const ppc::TraceExtraSlice& y) {
                       return x.ts < y.ts || (x.ts == y.ts && x.dur > y.dur);
                     });
}

}  // namespace

std::string chrome_trace(const ppc::Plan& plan, const std::vector<RankReport>& ranks) {
  // The step traced: the last one kept with its spans.
  int step = -1;
  for (const RankReport& r : ranks)
    for (const StepTiming& t : r.steps)
      if (t.spans.size() == t.actions) step = std::max(step, t.step);
  int64_t t0 = INT64_MAX;
  std::vector<const StepTiming*> at(ranks.size(), nullptr);
  for (size_t i = 0; i < ranks.size(); ++i)
    for (const StepTiming& t : ranks[i].steps)
      if (t.step == step && t.spans.size() == t.actions) {
        at[i] = &t;
        t0 = std::min(t0, t.begin_unix_us);
      }
  std::vector<ppc::TraceRank> parts(static_cast<size_t>(plan.pp()));
  double makespan = 0, busy = 0;
  for (size_t ri = 0; ri < ranks.size(); ++ri) {
    const StepTiming* t = at[ri];
    if (!t) continue;
    const auto& acts = plan.order()[static_cast<size_t>(ranks[ri].rank)];
    ppc::TraceRank& part = parts[static_cast<size_t>(ranks[ri].rank)];
    const double base = static_cast<double>(t->begin_unix_us - t0);
    auto us = [&](int64_t ns) { return base + static_cast<double>(ns) / 1e3; };
    makespan = std::max(makespan, us(t->wall_ns));
    std::vector<double> start(acts.size()), end(acts.size());
    part.slices.resize(acts.size());
    int activations = 0;
    part.memory.push_back({us(0), 0});
    for (size_t i = 0; i < acts.size(); ++i) {
      const ActionSpan& sp = t->spans[i];
      start[i] = us(sp.start);
      end[i] = us(sp.end);
      ppc::TraceSlice& s = part.slices[i];
      if (ppc::is_comm(acts[i].kind)) {
        s.done_us = end[i];  // nest_comm_slices places it
        continue;
      }
      s.ts = start[i];
      s.dur = static_cast<double>(sp.end - sp.start) / 1e3;
      if (sp.start > sp.wait) s.wait_us = static_cast<double>(sp.start - sp.wait) / 1e3;
      busy += s.dur;
      const int before = activations;
      if (acts[i].kind == ppc::ActionKind::F)
        ++activations;
      else if (ppc::is_backward_input(acts[i].kind))
        --activations;
      if (activations != before) part.memory.push_back({end[i], static_cast<double>(activations)});
    }
    ppc::nest_comm_slices(acts, start, end, ppc::CommNesting::BeforeNextBatch, us(t->wall_ns),
                          part.slices);
    add_all_to_alls(*t, us, part);
  }
  ppc::TraceInfo info;
  info.generator = "pprun";
  info.costs = "measured";
  info.makespan = makespan;
  info.bubble = makespan > 0 ? 1.0 - busy / (static_cast<double>(plan.pp()) * makespan) : 0;
  info.us_per_unit = 1;
  info.step = step + 1;
  std::ostringstream os;
  ppc::write_trace(plan, parts, info, os);
  return os.str();
}

}  // namespace pprt
