// compute_steps finds the terminal table's steps without lowering. They must be lowering's with
// every compute lasting one step and free transfers: checked here against lowering under those
// costs followed by the deadlock model's run of the lowered plan (deadlock_model.h), which records
// when each compute starts. The golden tables pin the same steps for the committed configurations.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compiler/compute_steps.h"
#include "compiler/deadlock_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/schedule.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

using Steps = std::vector<std::vector<int32_t>>;

double one_step(const Action&, int) {
  return 1;
}

LoweringCosts one_step_lowering() {
  LoweringCosts c;
  c.compute = one_step;
  c.max_integral_duration = 1;
  return c;
}

// When each compute of the lowered plan starts in the deadlock model's run, every compute taking
// one step and transfers free.
Steps steps_of_the_lowered_run(const Plan& plan) {
  const Plan lowered = lower_send_recv(plan, one_step_lowering());
  ExecCosts costs;
  costs.compute = one_step;
  const Execution ex = execute(lowered, &costs, true);
  EXPECT_TRUE(ex.finished()) << ex.failure();
  Steps steps(lowered.lowered.size());
  for (size_t r = 0; r < lowered.lowered.size(); ++r)
    for (size_t i = 0; i < lowered.lowered[r].size(); ++i)
      if (is_compute(lowered.lowered[r][i].kind))
        steps[r].push_back(static_cast<int32_t>(ex.times[r][i].start));
  return steps;
}

TEST(ComputeSteps, AHandWorkedOneF1BOrder) {
  // Rank 0 holds stage 0, rank 1 stage 1 (the last). Rank 0's F0 runs at 0 and its activation is
  // there at 1; the last stage's B needs only its own F; rank 0's B0 waits for rank 1's B0 (2).
  const Plan p = pptest::text_plan(2, 2, 2, {"0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"}, false);
  EXPECT_EQ(compute_steps(p), (Steps{{0, 1, 3, 5}, {1, 2, 3, 4}}));
}

TEST(ComputeSteps, EqualLoweringThenTheDeadlockModelForEverySchedule) {
  int plans = 0;
  for (const ScheduleInfo& s : pptest::generated_schedules())
    for (int pp = 1; pp <= 5; ++pp)
      for (int vpp = 1; vpp <= 3; ++vpp)
        for (int m : {1, 2, 3, 5, 8, 12}) {
          Plan p;
          try {
            p = pptest::generated_plan(s.name, pp, vpp, m);
          } catch (const UserError&) {
            continue;  // a configuration the schedule does not take
          }
          SCOPED_TRACE(s.name + " pp " + std::to_string(pp) + " vpp " + std::to_string(vpp) +
                       " m " + std::to_string(m));
          ASSERT_EQ(compute_steps(p), steps_of_the_lowered_run(p));
          ++plans;
        }
  EXPECT_GT(plans, 300);  // every schedule, at many sizes
}

// Orders with two actions of one rank swapped: many cannot run. compute_steps must then throw
// lowering's own message (under the same one-step costs), and otherwise give the same steps.
TEST(ComputeSteps, AnOrderThatCannotRunThrowsLoweringsMessage) {
  std::mt19937 rng(11);
  int stuck = 0, ran = 0;
  for (const ScheduleInfo& s : pptest::generated_schedules())
    for (int pp : {2, 3, 4})
      for (int trial = 0; trial < 12; ++trial) {
        Plan p;
        try {
          p = pptest::generated_plan(s.name, pp, s.vpp_rule == VppRule::One ? 1 : 2, 6);
        } catch (const UserError&) {
          continue;
        }
        auto& order = p.compute[rng() % static_cast<unsigned>(pp)];
        std::swap(order[rng() % order.size()], order[rng() % order.size()]);
        std::string lowering_error;
        try {
          lower_send_recv(p, one_step_lowering());
        } catch (const UserError& e) {
          lowering_error = e.message();
        }
        SCOPED_TRACE(s.name + " pp " + std::to_string(pp) + " trial " + std::to_string(trial));
        if (lowering_error.empty()) {
          ASSERT_EQ(compute_steps(p), steps_of_the_lowered_run(p));
          ++ran;
          continue;
        }
        try {
          compute_steps(p);
          ADD_FAILURE() << "no error; lowering says: " << lowering_error;
        } catch (const UserError& e) {
          EXPECT_EQ(e.message(), lowering_error);
        }
        ++stuck;
      }
  EXPECT_GT(stuck, 50);
  EXPECT_GT(ran, 20);
}

}  // namespace
}  // namespace ppc
