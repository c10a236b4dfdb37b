// The Chrome trace / Perfetto JSON: valid JSON with the fields the viewers need, every action a
// slice at its simulated time, slices of a thread properly nested, and each SEND -> RECV flow
// bound to the right slices (the innermost slice open at the flow's timestamp).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "compiler/visualization.h"
#include "compiler/viz_common.h"
#include "tests/compiler/test_util.h"
#include "tests/compiler/viz_test_util.h"

namespace {

using nlohmann::json;
using pptest::simulated;

json trace_of(const pptest::Simulated& s, double us_per_unit = 1000) {
  std::ostringstream os;
  ppc::emit_trace(s.plan, s.sim, os, ppc::TraceOptions{us_per_unit});
  return json::parse(os.str());  // throws on invalid JSON
}

struct Slice {
  std::string name;
  double ts, dur;
};

// The innermost slice of `slices` (one thread) open at `ts`.
const Slice* innermost(const std::vector<Slice>& slices, double ts) {
  const Slice* best = nullptr;
  for (const auto& s : slices)
    if (s.ts <= ts && ts < s.ts + s.dur && (!best || s.ts >= best->ts)) best = &s;
  return best;
}

TEST(VizTrace, FieldsThePerfettoAndChromeViewersNeed) {
  for (const auto& c : pptest::plan_cases()) {
    SCOPED_TRACE(pptest::case_name(c));
    const auto s = simulated(c.schedule, c.stages, c.pp, c.microbatches);
    const json t = trace_of(s);
    ASSERT_TRUE(t.is_object());
    EXPECT_EQ(t.at("displayTimeUnit"), "ms");
    const json& ev = t.at("traceEvents");
    ASSERT_TRUE(ev.is_array());

    std::map<int, std::string> process;
    std::map<std::pair<int, int>, std::string> thread;
    std::map<std::pair<int, int>, std::vector<Slice>> slices;  // (pid, tid) -> X slices
    std::map<int, std::set<std::string>> names;
    std::map<long, std::vector<json>> flows;
    size_t counters = 0;
    for (const json& e : ev) {
      ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
      const std::string ph = e.at("ph");
      const int pid = e.at("pid");
      if (ph == "M") {
        if (e.at("name") == "process_name") process[pid] = e.at("args").at("name");
        if (e.at("name") == "thread_name")
          thread[{pid, e.at("tid").get<int>()}] = e.at("args").at("name");
      } else if (ph == "X") {
        ASSERT_TRUE(e.at("ts").is_number() && e.at("dur").is_number() && e.contains("cat") &&
                    e.contains("tid"));
        EXPECT_GE(e.at("dur").get<double>(), 0);
        const int tid = e.at("tid");
        slices[{pid, tid}].push_back({e.at("name"), e.at("ts"), e.at("dur")});
        EXPECT_TRUE(names[pid].insert(e.at("name")).second) << e.at("name");
        const auto kind = ppc::parse_action(e.at("name").get<std::string>(), nullptr);
        ASSERT_TRUE(kind.has_value()) << e.at("name");
        EXPECT_EQ(tid, ppc::is_comm(kind->kind) ? 1 : 0);
        EXPECT_TRUE(e.at("args").contains("stage") && e.at("args").contains("microbatch"));
      } else if (ph == "s" || ph == "f") {
        flows[e.at("id").get<long>()].push_back(e);
      } else if (ph == "C") {
        ++counters;
      } else {
        ADD_FAILURE() << "unexpected phase " << ph;
      }
    }
    EXPECT_GT(counters, 0u);
    for (int r = 0; r < s.plan.pp(); ++r) {
      EXPECT_EQ(process[r], "rank " + std::to_string(r));
      EXPECT_EQ((thread[{r, 0}]), "compute");
      EXPECT_EQ((thread[{r, 1}]), "comm");
      std::set<std::string> expected;
      for (const auto& a : s.plan.lowered[static_cast<size_t>(r)])
        expected.insert(ppc::to_string(a));
      EXPECT_EQ(names[r], expected) << "rank " << r;
    }
    // Compute slices at their simulated times (1 unit = 1000 us).
    for (int r = 0; r < s.plan.pp(); ++r) {
      const auto& acts = s.plan.lowered[static_cast<size_t>(r)];
      size_t k = 0;
      for (size_t i = 0; i < acts.size(); ++i) {
        if (ppc::is_comm(acts[i].kind)) continue;
        const Slice& sl = slices[{r, 0}][k++];
        EXPECT_EQ(sl.name, ppc::to_string(acts[i]));
        EXPECT_NEAR(sl.ts, 1000 * s.sim.times[static_cast<size_t>(r)][i].start, 1e-3);
        EXPECT_NEAR(sl.ts + sl.dur, 1000 * s.sim.times[static_cast<size_t>(r)][i].end, 1e-3);
      }
    }
    // Slices of one thread nest properly (the viewers drop or misdraw slices that do not).
    for (auto& [key, list] : slices) {
      std::vector<Slice> sorted = list;
      std::stable_sort(sorted.begin(), sorted.end(), [](const Slice& a, const Slice& b) {
        return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
      });
      std::vector<double> open_end;
      for (const Slice& sl : sorted) {
        while (!open_end.empty() && open_end.back() <= sl.ts + 1e-9) open_end.pop_back();
        if (!open_end.empty()) {
          EXPECT_LE(sl.ts + sl.dur, open_end.back() + 1e-9) << sl.name;
        }
        open_end.push_back(sl.ts + sl.dur);
      }
    }
    // One flow per transfer, from the SEND's slice to the RECV's slice.
    const auto transfers = ppc::viz::transfers(s.plan);
    EXPECT_EQ(flows.size(), transfers.size());
    for (const auto& [id, pair] : flows) {
      ASSERT_EQ(pair.size(), 2u);
      const json& st = pair[0].at("ph") == "s" ? pair[0] : pair[1];
      const json& fi = pair[0].at("ph") == "s" ? pair[1] : pair[0];
      ASSERT_EQ(st.at("ph"), "s");
      ASSERT_EQ(fi.at("ph"), "f");
      EXPECT_EQ(fi.at("bp"), "e");
      EXPECT_EQ(st.at("cat"), fi.at("cat"));
      EXPECT_EQ(st.at("name"), fi.at("name"));
      EXPECT_EQ(st.at("tid"), 1);
      EXPECT_EQ(fi.at("tid"), 1);
      const Slice* from = innermost(slices[{st.at("pid").get<int>(), 1}], st.at("ts"));
      const Slice* to = innermost(slices[{fi.at("pid").get<int>(), 1}], fi.at("ts"));
      ASSERT_TRUE(from && to) << st.dump() << fi.dump();
      const auto send = ppc::parse_action(from->name, nullptr);
      const auto recv = ppc::parse_action(to->name, nullptr);
      ASSERT_TRUE(send && recv);
      EXPECT_TRUE(ppc::is_send(send->kind)) << from->name;
      EXPECT_TRUE(ppc::is_recv(recv->kind)) << to->name;
      EXPECT_EQ(send->microbatch, recv->microbatch);
      const ppc::CommMatch m = ppc::comm_match(s.plan, *send);
      EXPECT_EQ(m.kind, recv->kind);
      EXPECT_EQ(m.stage, recv->stage);
      EXPECT_EQ(m.rank, fi.at("pid").get<int>());
    }
  }
}

TEST(VizTrace, TimeScaleAndMetadata) {
  const auto s = simulated("1F1B", 2, 2, 4);
  const json t = trace_of(s, 2.5);
  EXPECT_EQ(t.at("otherData").at("us_per_unit"), 2.5);
  EXPECT_EQ(t.at("otherData").at("schedule"), "1F1B");
  EXPECT_EQ(t.at("otherData").at("makespan"), s.sim.makespan);
  for (const json& e : t.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("name") == "0B0") {
      EXPECT_EQ(e.at("dur").get<double>(), 5.0);  // B = 2 units
    }
}

TEST(VizTrace, CliWritesValidJson) {
  auto r = pptest::run_ppcompile({"--stages", "4", "--pp", "4", "--schedule", "DualPipe",
                                  "--microbatches", "4", "--emit", "trace"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json t = json::parse(r.out);
  EXPECT_GT(t.at("traceEvents").size(), 50u);
}

}  // namespace
