// pprun --trace (runtime/output/trace.h): every action once, flows paired, comm slices nested.

#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>

#include "compiler/action.h"
#include "fake_reports.h"
#include "runtime/output/trace.h"
#include "test_plans.h"

namespace {

TEST(Trace, TraceHasEveryActionOnceAndPairedFlows) {
  const ppc::Plan plan = rttest::compile("Et|tt|tt|tL", 2, "Interleaved1F1B", 4);
  const nlohmann::json t =
      nlohmann::json::parse(pprt::chrome_trace(plan, rttest::fake_reports(plan, 1000)));
  EXPECT_EQ(t["otherData"]["generator"], "pprun");
  EXPECT_EQ(t["otherData"]["step"], 3);
  std::map<int, std::vector<std::string>> names;
  std::map<int64_t, std::pair<int, int>> flows;  // id -> starts, finishes
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      names[e["pid"].get<int>()].push_back(e["name"]);
      EXPECT_EQ(
          e["tid"].get<int>(),
          ppc::is_comm(ppc::parse_action(e["name"].get<std::string>(), nullptr)->kind) ? 1 : 0);
    }
    if (e["ph"] == "s") ++flows[e["id"].get<int64_t>()].first;
    if (e["ph"] == "f") ++flows[e["id"].get<int64_t>()].second;
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> want;
    for (const auto& a : plan.lowered[static_cast<size_t>(r)]) want.push_back(ppc::to_string(a));
    auto got = names[r];
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "rank " << r;
  }
  EXPECT_EQ(flows.size(), 24u);  // one per transfer
  for (const auto& [id, sf] : flows) EXPECT_EQ(sf, std::make_pair(1, 1)) << "flow " << id;
}

TEST(Trace, CommSlicesOfOneThreadNest) {
  const ppc::Plan plan = rttest::compile("Ett|ttL", 2, "1F1B", 4);
  auto reports = rttest::fake_reports(plan, 1000);
  // Pretend every op was seen complete only at the end of the step (sends are waited for there).
  for (auto& r : reports)
    for (auto& step : r.steps)
      for (size_t i = 0; i < step.spans.size(); ++i)
        if (ppc::is_comm(plan.lowered[static_cast<size_t>(r.rank)][i].kind))
          step.spans[i].end = step.wall_ns;
  const nlohmann::json t = nlohmann::json::parse(pprt::chrome_trace(plan, reports));
  std::map<int, std::vector<std::pair<double, double>>> slices;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == 1)
      slices[e["pid"].get<int>()].emplace_back(e["ts"].get<double>(),
                                               e["ts"].get<double>() + e["dur"].get<double>());
  for (auto& [pid, v] : slices)
    for (const auto& a : v)
      for (const auto& b : v) {
        const bool disjoint = a.second <= b.first || b.second <= a.first;
        const bool nested = (a.first <= b.first && b.second <= a.second) ||
                            (b.first <= a.first && a.second <= b.second);
        EXPECT_TRUE(disjoint || nested) << "rank " << pid << ": [" << a.first << "," << a.second
                                        << ") and [" << b.first << "," << b.second << ")";
      }
}

}  // namespace
