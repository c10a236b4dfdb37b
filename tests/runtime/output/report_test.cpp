// The end-of-run report (runtime/output/report.h): measured step against the simulated makespan.

#include <gtest/gtest.h>

#include "fake_reports.h"
#include "runtime/output/report.h"
#include "test_plans.h"

namespace {

TEST(Report, AnalysisComparesTheStepWithTheSimulation) {
  const ppc::Plan plan = rttest::compile("Ett|ttL", 2, "1F1B", 4);
  const pprt::TimingSummary s = pprt::analyse(plan, rttest::fake_reports(plan, 1000000));
  EXPECT_EQ(s.peak_inflight, ppc::peak_inflight(plan));
  EXPECT_EQ(s.predicted_inflight, std::vector<int>({2, 1}));
  EXPECT_EQ(s.analysed_steps, 2);  // the first step is left out
  EXPECT_NEAR(s.overhead_us_per_action, 0.1, 1e-9);
  EXPECT_NEAR(s.ratio, 1.0, 1e-9);  // measured = simulated when actions took what they took
  EXPECT_NEAR(s.simulated_ms, 10.0,
              1e-9);  // 1F1B, pp 2, 4 microbatches, F = B = 1 ms: 2 (4 + 2 - 1) ms
  EXPECT_NE(pprt::summary_text(s).find("the plan predicts 2 1"), std::string::npos);
}

}  // namespace
