// The time between steps (issue 30): the end-of-run report's whole step (report.h) and the
// profile's per-stage "optimizer" entries (profile.h), from rank reports as if measured.
#include <gtest/gtest.h>

#include "fake_reports.h"
#include "runtime/output/profile.h"
#include "runtime/output/report.h"
#include "test_plans.h"

namespace {

// The whole step: per analysed step the slowest rank's, then the median over the steps (the
// first step, which warms up, left out).
TEST(Report, TheWholeStepIsTheSlowestRanksMedian) {
  const ppc::Plan plan = rttest::compile("Ett|ttL", 2, "1F1B", 4);
  std::vector<pprt::RankReport> ranks = rttest::fake_reports(plan, 1000000);
  ranks[0].steps[0].step_ns = 900000000;  // step 0: left out
  ranks[1].steps[0].step_ns = 900000000;
  ranks[0].steps[1].step_ns = 20000000;
  ranks[1].steps[1].step_ns = 21000000;
  ranks[0].steps[2].step_ns = 24000000;
  ranks[1].steps[2].step_ns = 23000000;
  const pprt::TimingSummary s = pprt::analyse(plan, ranks);
  EXPECT_DOUBLE_EQ(s.whole_step_ms, 22.5);  // the median of 21 and 24
  EXPECT_NE(pprt::summary_text(s).find("whole step 22.50 ms"), std::string::npos)
      << pprt::summary_text(s);
}

// Each rank's own time between replays (the median over its analysed steps) is split over the
// stages it holds by their parameters; DualPipe's two copies of a stage are pooled (their mean).
TEST(Report, TheProfileSplitsEachRanksOptimizerTimeByParameters) {
  const ppc::Plan plan = rttest::compile("Ett|tt|tt|tL", 2, "Interleaved1F1B", 4);
  std::vector<pprt::RankReport> ranks = rttest::fake_reports(plan, 1000000);
  const int64_t ms = 1000000;
  // Rank 0 (stages 0 and 2): 5 ms, the median of 4 and 6; rank 1 (stages 1 and 3): 2 ms.
  ranks[0].steps[0].own_ns = 90 * ms;
  ranks[0].steps[1].own_ns = 4 * ms;
  ranks[0].steps[2].own_ns = 6 * ms;
  ranks[1].steps[0].own_ns = 90 * ms;
  ranks[1].steps[1].own_ns = 2 * ms;
  ranks[1].steps[2].own_ns = 2 * ms;
  const std::vector<int64_t> numel = {300, 100, 100, 100};
  const auto got = pprt::optimizer_ms(plan, numel, ranks);
  ASSERT_EQ(got.size(), 4u);
  for (const auto& g : got) ASSERT_TRUE(g.has_value());
  EXPECT_DOUBLE_EQ(*got[0], 3.75);
  EXPECT_DOUBLE_EQ(*got[2], 1.25);
  EXPECT_DOUBLE_EQ(*got[1], 1.0);
  EXPECT_DOUBLE_EQ(*got[3], 1.0);

  // DualPipe at pp 2: each rank holds a copy of each of the two stages.
  const ppc::Plan dual = rttest::compile("Ettt|tttL", 2, "DualPipe", 4);
  std::vector<pprt::RankReport> dranks = rttest::fake_reports(dual, 1000000);
  for (auto& r : dranks)
    for (auto& t : r.steps) t.own_ns = (r.rank == 0 ? 4 : 8) * ms;
  const auto pooled = pprt::optimizer_ms(dual, {100, 300}, dranks);
  ASSERT_EQ(pooled.size(), 2u);
  // Rank 0: stage 0 gets 1 ms, stage 1 3 ms; rank 1: 2 and 6 ms; the copies' mean.
  EXPECT_DOUBLE_EQ(*pooled[0], 1.5);
  EXPECT_DOUBLE_EQ(*pooled[1], 4.5);
}

}  // namespace
