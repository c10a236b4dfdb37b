// Stragglers (docs/pprun.md, Outputs): the summary and --metrics give every rank's compute time
// per step and name the slowest rank when it takes at least 1.2 x the median. One rank slowed on
// purpose (--fault-slow R:F, a hidden testing flag: its compute actions take F times as long) is
// named, in the summary and in the metrics of the steps.
#include <fmt/format.h>

#include "e2e_util.h"

namespace {

using namespace pprun_e2e;

TEST(Straggler, ARankSlowedOnPurposeIsNamed) {
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const Proc p = pprun(concat(kModel, {"--plan", plan, "--steps", "6", "--threads", "1",
                                       "--fault-slow", "1:4", "--metrics", d.file("m.jsonl")}));
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      p.out, m,
      std::regex(R"(compute time per step by rank \(median of 5 steps\): 0 [0-9.]+, 1 [0-9.]+, )"
                 R"(2 [0-9.]+, 3 [0-9.]+ ms; straggler: rank 1, at ([0-9.]+) x the median)")))
      << p.out;
  EXPECT_GE(std::stod(m[1]), 2.0) << m[0];
  // Per step: every rank's time, and the straggler.
  int steps = 0, named = 0;
  for (const nlohmann::json& j : metrics_lines(d.file("m.jsonl"))) {
    ++steps;
    ASSERT_EQ(j.at("compute_s").size(), 4u) << j;
    for (const auto& t : j.at("compute_s")) EXPECT_GT(t.get<double>(), 0) << j;
    if (j.contains("straggler") && j["straggler"].at("rank") == 1) ++named;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_GE(named, 5) << "the slowed rank is named in (nearly) every step";
}

}  // namespace
