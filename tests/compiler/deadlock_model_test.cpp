// GrowingExecution runs the deadlock model over orders that arrive piece by piece (as
// lower_while_verifying's scanner hands them over), indexing each piece as it comes. Whatever the
// pieces and the order in which ranks get them, the run must equal execute()'s on the whole plan:
// the same times, the same counts, the same deadlock.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "compiler/deadlock_model.h"
#include "compiler/simulate.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

// Hands every rank its order in random pieces (sometimes empty, sometimes ending inside a batch)
// in a random rank order, then finishes.
Execution grown(const Plan& plan, const ExecCosts* costs, unsigned seed) {
  std::vector<const Action*> orders;
  std::vector<size_t> sizes;
  for (const auto& o : plan.lowered) {
    orders.push_back(o.data());
    sizes.push_back(o.size());
  }
  GrowingExecution run(plan, costs, true, 20, orders, sizes);
  std::mt19937 rng(seed);
  std::vector<size_t> given(sizes.size(), 0);
  while (true) {
    std::vector<int> open;
    for (size_t r = 0; r < sizes.size(); ++r)
      if (given[r] < sizes[r]) open.push_back(static_cast<int>(r));
    if (open.empty() || rng() % 50 == 0) break;  // sometimes finish with pieces left out
    const int r = open[rng() % open.size()];
    const size_t ru = static_cast<size_t>(r);
    given[ru] = std::min(sizes[ru], given[ru] + rng() % 9);
    run.extend(r, given[ru]);
  }
  for (size_t r = 0; r < sizes.size(); ++r)
    if (given[r] < sizes[r]) run.extend(static_cast<int>(r), sizes[r]);
  return run.finish();
}

void expect_same(const Execution& got, const Execution& want) {
  EXPECT_EQ(got.errors, want.errors);
  ASSERT_EQ(got.stuck.size(), want.stuck.size());
  for (size_t i = 0; i < got.stuck.size(); ++i) {
    EXPECT_EQ(got.stuck[i].rank, want.stuck[i].rank);
    EXPECT_EQ(got.stuck[i].index, want.stuck[i].index);
    EXPECT_EQ(got.stuck[i].at, want.stuck[i].at);
    EXPECT_EQ(got.stuck[i].waits_for, want.stuck[i].waits_for);
  }
  EXPECT_EQ(got.batches, want.batches);
  EXPECT_EQ(got.sends, want.sends);
  EXPECT_EQ(got.end, want.end);
  EXPECT_EQ(got.busy, want.busy);
  EXPECT_EQ(got.first_start, want.first_start);
  EXPECT_EQ(got.last_end, want.last_end);
  ASSERT_EQ(got.times.size(), want.times.size());
  for (size_t r = 0; r < got.times.size(); ++r) {
    ASSERT_EQ(got.times[r].size(), want.times[r].size());
    for (size_t i = 0; i < got.times[r].size(); ++i) {
      EXPECT_EQ(got.times[r][i].start, want.times[r][i].start) << "rank " << r << " action " << i;
      EXPECT_EQ(got.times[r][i].end, want.times[r][i].end) << "rank " << r << " action " << i;
    }
  }
}

TEST(GrowingExecution, EqualsTheWholeRunWhateverThePieces) {
  const CostModel cost = pptest::mixed_costs();
  for (const char* schedule : {"1F1B", "Interleaved1F1B", "ZBVZeroBubble", "DualPipeV"}) {
    SCOPED_TRACE(schedule);
    const Plan plan = std::string(schedule) == "1F1B"
                          ? pptest::generated_plan(schedule, 4, 1, 12, true)
                          : pptest::generated_plan(schedule, 4, 2, 16, true);
    SimulationRun sim(plan, cost, false);
    const Execution want = execute(plan, &sim.costs(), true);
    ASSERT_TRUE(want.finished());
    for (unsigned seed = 0; seed < 20; ++seed) {
      SCOPED_TRACE(seed);
      expect_same(grown(plan, &sim.costs(), seed), want);
    }
  }
}

TEST(GrowingExecution, FindsTheSameDeadlock) {
  // Rank 1 receives microbatch 1 first while rank 0 sends microbatch 0 first.
  const Plan plan = pptest::text_plan(2, 2, 2,
                                      {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                       "1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F0 1F0 1B0 1SEND_B0"},
                                      true);
  const Execution want = execute(plan, nullptr, true);
  ASSERT_FALSE(want.stuck.empty());
  for (unsigned seed = 0; seed < 20; ++seed) {
    SCOPED_TRACE(seed);
    expect_same(grown(plan, nullptr, seed), want);
  }
}

}  // namespace
}  // namespace ppc
