// verify_and_lower runs each replay of a plan once; its results must equal the passes run one by
// one, as ppcompile ran them before: verify the compute order, lower_for_model, verify, simulate.
#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/deadlock_model.h"
#include "compiler/diagnostic.h"
#include "compiler/emit_text.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan_json.h"
#include "compiler/verify_and_lower.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

struct Separate {
  Plan plan;
  VerifyReport report;
  std::optional<Simulation> sim;
};

// The passes one by one.
Separate separate(const Plan& built, const CostModel& cost) {
  Separate s;
  s.plan = built;
  Plan compute_only = built;
  compute_only.lowered.clear();
  s.report = verify(compute_only);
  if (!s.report.ok()) return s;
  if (!s.plan.is_lowered()) s.plan = lower_for_model(s.plan, cost);
  s.report = verify(s.plan);
  if (s.report.ok()) s.sim = simulate(s.plan, cost);
  return s;
}

void expect_same_report(const VerifyReport& a, const VerifyReport& b) {
  EXPECT_EQ(a.errors, b.errors);
  EXPECT_EQ(a.truncated, b.truncated);
  EXPECT_EQ(a.checked_lowered, b.checked_lowered);
  EXPECT_EQ(a.peak_inflight, b.peak_inflight);
  EXPECT_EQ(a.compute_actions, b.compute_actions);
  EXPECT_EQ(a.comm_actions, b.comm_actions);
  EXPECT_EQ(a.batches, b.batches);
}

// Bit-for-bit equal simulations (no tolerance: the same additions in the same order).
void expect_same_sim(const Simulation& a, const Simulation& b, bool timeline) {
  EXPECT_EQ(a.makespan, b.makespan);
  EXPECT_EQ(a.busy, b.busy);
  EXPECT_EQ(a.rank_bubble, b.rank_bubble);
  EXPECT_EQ(a.bubble, b.bubble);
  EXPECT_EQ(a.peak_memory, b.peak_memory);
  EXPECT_EQ(a.comm_bytes, b.comm_bytes);
  EXPECT_EQ(a.messages, b.messages);
  EXPECT_EQ(a.unit, b.unit);
  EXPECT_EQ(a.first_start, b.first_start);
  EXPECT_EQ(a.last_end, b.last_end);
  EXPECT_EQ(a.steady_period, b.steady_period);
  EXPECT_EQ(a.steady_bubble, b.steady_bubble);
  EXPECT_EQ(a.param_memory, b.param_memory);
  if (!timeline) {
    EXPECT_TRUE(a.times.empty());
    EXPECT_TRUE(a.memory.empty());
    return;
  }
  ASSERT_EQ(a.times.size(), b.times.size());
  for (size_t r = 0; r < a.times.size(); ++r) {
    ASSERT_EQ(a.times[r].size(), b.times[r].size());
    for (size_t i = 0; i < a.times[r].size(); ++i) {
      EXPECT_EQ(a.times[r][i].start, b.times[r][i].start);
      EXPECT_EQ(a.times[r][i].end, b.times[r][i].end);
    }
  }
  ASSERT_EQ(a.memory.size(), b.memory.size());
  for (size_t r = 0; r < a.memory.size(); ++r) {
    ASSERT_EQ(a.memory[r].size(), b.memory[r].size());
    for (size_t i = 0; i < a.memory[r].size(); ++i) {
      EXPECT_EQ(a.memory[r][i].time, b.memory[r][i].time);
      EXPECT_EQ(a.memory[r][i].value, b.memory[r][i].value);
    }
  }
}

void expect_same(const Plan& built, const CostModel& cost) {
  const Separate want = separate(built, cost);
  for (SimulationNeed need :
       {SimulationNeed::None, SimulationNeed::Summary, SimulationNeed::Timeline}) {
    const VerifiedPlan got = verify_and_lower(built, cost, need);
    expect_same_report(got.report, want.report);
    if (!want.report.ok()) {
      EXPECT_FALSE(got.sim.has_value());
      continue;
    }
    EXPECT_EQ(got.plan, want.plan);
    ASSERT_EQ(got.sim.has_value(), need != SimulationNeed::None);
    if (got.sim) expect_same_sim(*got.sim, *want.sim, need == SimulationNeed::Timeline);
  }
}

using pptest::generated_plan;
using pptest::mixed_costs;

// `got`, verify_and_lower(built, cost, SimulationNeed::Summary) with an `alongside`, is what it
// gives without one.
void expect_same_as_without_alongside(const Plan& built, const CostModel& cost,
                                      const VerifiedPlan& got) {
  const VerifiedPlan plain = verify_and_lower(built, cost, SimulationNeed::Summary);
  EXPECT_EQ(got.plan, plain.plan);
  expect_same_report(got.report, plain.report);
  ASSERT_TRUE(got.sim && plain.sim);
  expect_same_sim(*got.sim, *plain.sim, false);
}

// A compute order that passes the verifier's checks but cannot run: rank 1 starts with the
// backward of a microbatch whose forward comes later.
Plan order_that_cannot_run() {
  return pptest::text_plan(
      2, 2, 4, {"0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1B3 1F0 1B0 1F1 1B1 1F2 1B2 1F3"}, false);
}

TEST(VerifyAndLower, EqualsThePassesOneByOneForEverySchedule) {
  struct Case {
    const char* schedule;
    int pp, vpp, m;
  };
  for (const Case& c :
       {Case{"GPipe", 4, 1, 6}, Case{"1F1B", 4, 1, 9}, Case{"ZB-H1", 3, 1, 7},
        Case{"ZB-H2", 4, 1, 8}, Case{"Interleaved1F1B", 4, 3, 8}, Case{"LoopedBFS", 2, 2, 5},
        Case{"InterleavedZeroBubble", 4, 2, 8}, Case{"ZBVZeroBubble", 4, 2, 8},
        Case{"DualPipeV", 4, 2, 10}, Case{"DualPipe", 4, 1, 10}}) {
    SCOPED_TRACE(c.schedule);
    const Plan built = generated_plan(c.schedule, c.pp, c.vpp, c.m);
    expect_same(built, CostModel{});
    expect_same(built, mixed_costs());
  }
}

TEST(VerifyAndLower, ImportedLoweredPlansAreVerifiedAsTheyAre) {
  Plan p = lower_send_recv(generated_plan("Interleaved1F1B", 2, 2, 4));
  expect_same(p, CostModel{});
  expect_same(p, mixed_costs());
}

TEST(VerifyAndLower, AComputeOrderThatCannotRunFailsWithTheVerifiersMessage) {
  const Plan p = order_that_cannot_run();
  const VerifiedPlan got = verify_and_lower(p, CostModel{}, SimulationNeed::Summary);
  ASSERT_EQ(got.report.errors.size(), 1u);
  EXPECT_EQ(got.report.errors[0].rfind("the compute order cannot run: rank 0 waits at", 0), 0u)
      << got.report.errors[0];
  expect_same(p, CostModel{});
  expect_same(p, mixed_costs());
}

TEST(VerifyAndLower, ABadComputeOrderIsNotLowered) {
  // Microbatch 1's forward appears twice and its backward never.
  const Plan p = pptest::text_plan(2, 2, 2, {"0F0 0F1 0F1 0B0", "1F0 1B0 1F1 1B1"}, false);
  const VerifiedPlan got = verify_and_lower(p, CostModel{}, SimulationNeed::None);
  EXPECT_FALSE(got.report.ok());
  EXPECT_FALSE(got.plan.is_lowered());
  expect_same(p, CostModel{});
}

TEST(VerifyAndLower, ADeadlockedLoweredPlanIsReportedAndNotSimulated) {
  const Plan p = pptest::text_plan(2, 2, 2,
                                   {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                    "1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F0 1F0 1B0 1SEND_B0"},
                                   true);
  const VerifiedPlan got = verify_and_lower(p, mixed_costs(), SimulationNeed::Timeline);
  ASSERT_FALSE(got.report.ok());
  EXPECT_EQ(got.report.errors[0].rfind("deadlock: ", 0), 0u);
  EXPECT_FALSE(got.sim.has_value());
  expect_same(p, mixed_costs());
}

// `alongside` sees the final plan once, whichever thread runs it, and changes nothing else.
TEST(VerifyAndLower, AlongsideSeesTheFinalPlanOnce) {
  const Plan generated = generated_plan("Interleaved1F1B", 4, 2, 8);        // lowered here, beside
  const Plan imported = lower_send_recv(generated_plan("ZB-H2", 4, 1, 8));  // verified, then called
  for (const Plan* built : {&generated, &imported}) {
    for (const CostModel& cost : {CostModel{}, mixed_costs()}) {
      int calls = 0;
      Plan seen;
      const VerifiedPlan got = verify_and_lower(*built, cost, SimulationNeed::Summary,
                                                {.whole_plan = [&](const Plan& p) {
                                                  ++calls;
                                                  seen = p;
                                                }});
      ASSERT_TRUE(got.report.ok());
      EXPECT_EQ(calls, 1);
      EXPECT_EQ(seen, got.plan);
      EXPECT_TRUE(seen.is_lowered());
      expect_same_as_without_alongside(*built, cost, got);
    }
  }
}

TEST(VerifyAndLower, AlongsideIsNotCalledForAnInvalidPlan) {
  // A bad compute order (microbatch 1's forward twice, its backward never), and an imported
  // lowered plan that deadlocks.
  const Plan bad_order = pptest::text_plan(2, 2, 2, {"0F0 0F1 0F1 0B0", "1F0 1B0 1F1 1B1"}, false);
  const Plan deadlocked = pptest::text_plan(2, 2, 2,
                                            {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                             "1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F0 1F0 1B0 1SEND_B0"},
                                            true);
  for (const Plan* p : {&bad_order, &deadlocked}) {
    int calls = 0;
    const VerifiedPlan got = verify_and_lower(*p, CostModel{}, SimulationNeed::None,
                                              {.compute_order = [&](const Plan&) { ++calls; },
                                               .whole_plan = [&](const Plan&) { ++calls; }});
    EXPECT_FALSE(got.report.ok());
    EXPECT_EQ(calls, 0);
  }
}

TEST(VerifyAndLower, AnExceptionFromAlongsideReachesTheCaller) {
  const Plan built = generated_plan("1F1B", 4, 1, 8);
  const auto fail = [](const Plan&) { throw std::runtime_error("alongside failed"); };
  EXPECT_THROW(verify_and_lower(built, CostModel{}, SimulationNeed::None, {.whole_plan = fail}),
               std::runtime_error);
  EXPECT_THROW(verify_and_lower(built, CostModel{}, SimulationNeed::None, {.compute_order = fail}),
               std::runtime_error);
  // A part after a throwing one is not called.
  bool second = false;
  EXPECT_THROW(
      verify_and_lower(built, CostModel{}, SimulationNeed::None,
                       {.compute_order = fail, .whole_plan = [&](const Plan&) { second = true; }}),
      std::runtime_error);
  EXPECT_FALSE(second);
}

// The compute order's part of `alongside` starts before lowering (beside it, for a plan
// lowered here): it sees the plan's compute order, and what the caller gets is what it gets
// without one. The table's rows are such a reader.
TEST(VerifyAndLower, AlongsideReadingTheComputeOrderSeesItOnceAndChangesNothing) {
  const Plan generated = generated_plan("Interleaved1F1B", 8, 2, 64);       // lowered here
  const Plan imported = lower_send_recv(generated_plan("ZB-H2", 4, 1, 8));  // verified, then called
  for (const Plan* built : {&generated, &imported}) {
    for (const CostModel& cost : {CostModel{}, mixed_costs()}) {
      int calls = 0;
      std::vector<std::vector<Action>> seen;
      std::string table;
      const VerifiedPlan got = verify_and_lower(*built, cost, SimulationNeed::Summary,
                                                {.compute_order = [&](const Plan& p) {
                                                  ++calls;
                                                  seen = p.compute;
                                                  std::ostringstream os;
                                                  emit_table_rows(p, os, TableOptions{});
                                                  table = os.str();
                                                }});
      ASSERT_TRUE(got.report.ok());
      EXPECT_EQ(calls, 1);
      EXPECT_EQ(seen, got.plan.compute);
      std::ostringstream want;
      emit_table_rows(got.plan, want, TableOptions{});
      EXPECT_EQ(table, want.str());
      expect_same_as_without_alongside(*built, cost, got);
    }
  }
}

// Started before lowering, that part also runs for a compute order that passes the
// verifier's checks but cannot run; the report is lowering's error, and the alongside's own
// failure (the table cannot be laid out either) does not reach the caller.
TEST(VerifyAndLower, AlongsideReadingTheComputeOrderOfAnOrderThatCannotRun) {
  const Plan p = order_that_cannot_run();
  int calls = 0;
  const VerifiedPlan got = verify_and_lower(p, CostModel{}, SimulationNeed::Summary,
                                            {.compute_order = [&](const Plan& plan) {
                                              ++calls;
                                              std::ostringstream os;
                                              // throws: the order cannot run
                                              emit_table_rows(plan, os, TableOptions{});
                                            }});
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(got.report.errors.size(), 1u);
  EXPECT_EQ(got.report.errors[0].rfind("the compute order cannot run: rank 0 waits at", 0), 0u)
      << got.report.errors[0];
  EXPECT_FALSE(got.plan.is_lowered());
  EXPECT_FALSE(got.sim.has_value());
}

// lower_while_verifying lowers on the calling thread while a second thread scans what lowering has
// written so far. Plans large enough that lowering publishes its orders many times over (every
// few thousand actions) must give what lowering, then verifying, gives.
TEST(LowerWhileVerifying, EqualsLoweringThenVerifyingOnLargePlans) {
  struct Case {
    const char* schedule;
    int pp, vpp, m;
  };
  for (const Case& c : {Case{"Interleaved1F1B", 16, 4, 96}, Case{"1F1B", 12, 1, 300},
                        Case{"ZBVZeroBubble", 8, 2, 200}, Case{"DualPipeV", 8, 2, 320},
                        Case{"DualPipe", 8, 1, 400}, Case{"InterleavedZeroBubble", 8, 2, 128}}) {
    SCOPED_TRACE(c.schedule);
    const Plan built = generated_plan(c.schedule, c.pp, c.vpp, c.m);
    const Plan want_plan = lower_send_recv(built);
    size_t lowered_actions = 0;
    for (const auto& r : want_plan.lowered) lowered_actions += r.size();
    ASSERT_GT(lowered_actions, 12000u);  // several publications (every 4096 actions here)

    const CostModel cost = mixed_costs();
    for (bool timed : {false, true}) {
      std::optional<SimulationRun> want_run, got_run;
      Execution want_ex, got_ex;
      VerifyOptions want_opts, got_opts;
      if (timed) {
        want_run.emplace(want_plan, cost, true);
        want_opts.costs = &want_run->costs();
        want_opts.record_times = true;
        want_opts.execution = &want_ex;
      }
      const VerifyReport want = verify(want_plan, want_opts);
      ASSERT_TRUE(want.ok());

      Plan plan = built;
      if (timed) {
        got_run.emplace(plan, cost, true);
        got_opts.costs = &got_run->costs();
        got_opts.record_times = true;
        got_opts.execution = &got_ex;
      }
      int calls = 0;
      const VerifyReport got = lower_while_verifying(plan, got_opts, [&] {
        ++calls;
        EXPECT_EQ(plan.lowered, want_plan.lowered);  // complete when the hook runs
      });
      EXPECT_EQ(calls, 1);
      EXPECT_EQ(plan, want_plan);
      expect_same_report(got, want);
      if (timed)
        expect_same_sim(got_run->finish(std::move(got_ex)), want_run->finish(std::move(want_ex)),
                        true);
    }
  }
}

TEST(LowerWhileVerifying, AComputeOrderThatCannotRunThrowsAndStaysComputeOnly) {
  Plan p = order_that_cannot_run();
  const Plan before = p;
  int calls = 0;
  try {
    lower_while_verifying(p, VerifyOptions{}, [&] { ++calls; });
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.message().rfind("the compute order cannot run: rank 0 waits at", 0), 0u)
        << e.message();
  }
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(p, before);
}

TEST(LowerWhileVerifying, AnExceptionFromTheHookReachesTheCaller) {
  Plan p = generated_plan("Interleaved1F1B", 8, 2, 64);
  EXPECT_THROW(lower_while_verifying(p, VerifyOptions{}, [] { throw std::runtime_error("hook"); }),
               std::runtime_error);
  EXPECT_TRUE(p.is_lowered());
}

// Both parts, as ppcompile's JSON uses them: the compute order's part has returned before the
// whole plan's part starts, which sees the lowered plan; the JSON made from the two equals
// emit_json_plan's, and what the caller gets is what it gets without them.
TEST(VerifyAndLower, AlongsideInTwoPartsRunsThemInOrder) {
  const Plan generated = generated_plan("Interleaved1F1B", 8, 2, 64);       // lowered here
  const Plan imported = lower_send_recv(generated_plan("ZB-H2", 4, 1, 8));  // verified, then called
  for (const Plan* built : {&generated, &imported}) {
    for (const CostModel& cost : {CostModel{}, mixed_costs()}) {
      std::vector<std::string> arrays;
      std::atomic<bool> first_done{false};
      bool in_order = false, lowered = false;
      std::string json;
      const VerifiedPlan got = verify_and_lower(*built, cost, SimulationNeed::Summary,
                                                {.compute_order =
                                                     [&](const Plan& p) {
                                                       arrays = json_compute_arrays(p);
                                                       first_done = true;
                                                     },
                                                 .whole_plan =
                                                     [&](const Plan& p) {
                                                       in_order = first_done;
                                                       lowered = p.is_lowered();
                                                       std::ostringstream os;
                                                       emit_json_plan(p, os, &arrays);
                                                       json = os.str();
                                                     }});
      ASSERT_TRUE(got.report.ok());
      EXPECT_TRUE(in_order);
      EXPECT_TRUE(lowered);
      std::ostringstream want;
      emit_json_plan(got.plan, want);
      EXPECT_EQ(json, want.str());
      expect_same_as_without_alongside(*built, cost, got);
    }
  }
}

}  // namespace
}  // namespace ppc
