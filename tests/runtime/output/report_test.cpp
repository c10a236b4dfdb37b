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

// On Gloo (the eager message model) the check starts each rank when it began the step and
// charges its posting: reports made from such a run compare at 1, where the rendezvous model,
// which knows neither, is optimistic.
TEST(Report, UnderTheEagerModelRanksBeginWhenTheyBeganAndPostsTakeTime) {
  const ppc::Plan plan = rttest::compile("Ett|ttL", 2, "1F1B", 4);
  ppc::ExecCosts costs;
  costs.compute = [](const ppc::Action&, int) { return 1e6; };  // 1 ms each
  ppc::EagerOptions o;
  o.post = {2e5, 1e5};   // ns per SEND or RECV
  o.start = {0.0, 5e5};  // rank 1 begins 0.5 ms late
  const ppc::Execution ex = ppc::execute_eager(plan, costs, true, o);
  ASSERT_TRUE(ex.finished()) << ex.failure();
  std::vector<pprt::RankReport> reports;
  for (int r = 0; r < plan.pp(); ++r) {
    const size_t ru = static_cast<size_t>(r);
    pprt::RankReport rep;
    rep.rank = r;
    rep.peak_inflight = ppc::peak_inflight(plan)[ru];
    const auto& order = plan.order()[ru];
    for (int step = 0; step < 3; ++step) {
      pprt::StepTiming t;
      t.step = step;
      const auto begin = static_cast<int64_t>(o.start[ru]);
      t.begin_unix_us = 1000000 + step * 100000 + begin / 1000;
      t.actions = order.size();
      for (size_t i = 0; i < order.size(); ++i) {
        const auto s = static_cast<int64_t>(ex.times[ru][i].start) - begin;
        const auto e = static_cast<int64_t>(ex.times[ru][i].end) - begin;
        t.spans.push_back({s, s, e});
        if (ppc::is_comm(order[i].kind))
          t.post_ns += static_cast<int64_t>(o.post[ru]);
        else
          t.compute_ns += e - s;
      }
      t.wall_ns = static_cast<int64_t>(ex.end[ru]) - begin;
      t.wait_ns = t.wall_ns - t.compute_ns - t.post_ns;
      rep.steps.push_back(t);
    }
    reports.push_back(pprt::rank_report_from_json(pprt::to_json(rep)));
  }
  const pprt::TimingSummary eager = pprt::analyse(plan, reports, ppc::MessageModel::Eager);
  EXPECT_NEAR(eager.ratio, 1.0, 1e-6);
  const pprt::TimingSummary rendezvous = pprt::analyse(plan, reports);
  EXPECT_GT(rendezvous.ratio, 1.05);  // neither the late start nor the posts
}

// Per-rank compute time per step: the median over the steps, and the slowest rank against the
// median over the ranks.
TEST(Report, TheSlowestRankIsAStragglerFromOnePointTwoTimesTheMedian) {
  // Three steps of four ranks; rank 2 takes 1.3 x the others (its first step is an outlier the
  // median ignores).
  const pprt::ComputeBalance b = pprt::compute_balance(
      {{0.010, 0.010, 0.100, 0.011}, {0.010, 0.011, 0.013, 0.010}, {0.011, 0.010, 0.013, 0.010}});
  EXPECT_EQ(b.steps, 3);
  EXPECT_EQ(b.ms, std::vector<double>({10.0, 10.0, 13.0, 10.0}));
  EXPECT_EQ(b.slowest, 2);
  EXPECT_NEAR(b.ratio, 1.3, 1e-12);
  EXPECT_TRUE(b.straggler());
  EXPECT_EQ(pprt::balance_text(b),
            "compute time per step by rank (median of 3 steps): 0 10.00, 1 10.00, 2 13.00, 3 "
            "10.00 ms; straggler: rank 2, at 1.30 x the median");
  const pprt::ComputeBalance even = pprt::compute_balance({{0.010, 0.0115, 0.010}});
  EXPECT_FALSE(even.straggler());
  EXPECT_EQ(pprt::balance_text(even),
            "compute time per step by rank (median of 1 step): 0 10.00, 1 11.50, 2 10.00 ms; no "
            "straggler (the slowest, rank 1, at 1.15 x the median)");
  // Past 16 ranks: the fastest, the median and the slowest.
  std::vector<double> many(20, 0.010);
  many[7] = 0.009;
  many[13] = 0.030;
  EXPECT_EQ(pprt::balance_text(pprt::compute_balance({many})),
            "compute time per step by rank (median of 1 step): fastest rank 7 9.00 ms, median "
            "10.00 ms, slowest rank 13 30.00 ms; straggler: rank 13, at 3.00 x the median");
  EXPECT_EQ(pprt::compute_balance({}).steps, 0);
}

// Asynchronous saves: the pause, the background write, and the steps beside it.
TEST(Report, AsynchronousSavesReportTheirPauseAndTheirWrite) {
  std::vector<pprt::RankReport> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].save_seconds = {0.01, 0.02 + r * 0.01};
    ranks[r].save_bytes = {500'000'000, 500'000'000};
    ranks[r].save_write_seconds = {1.0 + r, 1.5};
    ranks[r].write_steps = 4;
    ranks[r].write_steps_s = 0.4 + r * 0.4;  // 100 or 200 ms a step
    ranks[r].other_steps = 10;
    ranks[r].other_steps_s = 0.9;
  }
  pprt::TimingSummary s;
  pprt::summarise_saves(ranks, s);
  EXPECT_TRUE(s.save_async);
  EXPECT_EQ(s.saves, 2);
  EXPECT_DOUBLE_EQ(s.save_pause_s, 0.03);  // (the upper median of the slowest ranks' pauses)
  EXPECT_DOUBLE_EQ(s.save_write_s, 2.0);
  EXPECT_DOUBLE_EQ(s.write_step_ms, 200);
  EXPECT_DOUBLE_EQ(s.other_step_ms, 90);
  EXPECT_EQ(pprt::saves_text(s),
            "checkpoints: 2 saved in the background, 1000.0 MB each; training paused 0.030 s per "
            "save (median, slowest rank), each written in 2.000 s: 500 MB/s\n"
            "steps during a background write: 200.00 ms (mean of 4), the others 90.00 ms (mean "
            "of 10; slowest rank)\n");
  // The report travels through the store as JSON.
  const pprt::RankReport back = pprt::rank_report_from_json(pprt::to_json(ranks[1]));
  EXPECT_EQ(back.save_write_seconds, ranks[1].save_write_seconds);
  EXPECT_EQ(back.write_steps, 4);
  EXPECT_DOUBLE_EQ(back.write_steps_s, 0.8);
}

// A save that waited for the previous one's write says so: its pause is mostly that wait.
TEST(Report, ABackgroundSaveThatWaitedForThePreviousWriteSaysHowLong) {
  std::vector<pprt::RankReport> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].save_seconds = {0.01, 0.9 + r * 0.1, 0.02};
    ranks[r].save_wait_seconds = {0, 0.88 + r * 0.1, 0};
    ranks[r].save_bytes = {500'000'000, 500'000'000, 500'000'000};
    ranks[r].save_write_seconds = {2.0, 2.0, 2.0};
  }
  pprt::TimingSummary s;
  pprt::summarise_saves(ranks, s);
  EXPECT_DOUBLE_EQ(s.save_pause_s, 0.02);  // the median save did not wait
  EXPECT_DOUBLE_EQ(s.save_wait_s, 0);
  ranks[0].save_seconds[2] = ranks[1].save_seconds[2] = 1.5;
  ranks[1].save_wait_seconds[2] = 1.4;
  summarise_saves(ranks, s);
  EXPECT_DOUBLE_EQ(s.save_pause_s, 1.0);
  EXPECT_DOUBLE_EQ(s.save_wait_s, 0.98);  // that save's slowest wait
  EXPECT_EQ(pprt::saves_text(s),
            "checkpoints: 3 saved in the background, 1000.0 MB each; training paused 1.000 s per "
            "save (median, slowest rank; 0.980 s of it waiting for the previous save's write: "
            "save less often), each written in 2.000 s: 500 MB/s\n");
  EXPECT_EQ(pprt::rank_report_from_json(pprt::to_json(ranks[1])).save_wait_seconds,
            ranks[1].save_wait_seconds);
}

}  // namespace
