// The classic schedules: exact orders, equality with PyTorch's generators, and verification of
// every plan over a grid of configurations.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "compiler/compile.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

using pptest::generated_plan;

std::string compute_text(const Plan& p) {
  return pptest::orders_text(p.compute);
}

TEST(Schedules, GPipeOrder) {
  EXPECT_EQ(compute_text(generated_plan("GPipe", 2, 1, 3, false)),
            "0F0 0F1 0F2 0B0 0B1 0B2\n"
            "1F0 1F1 1F2 1B0 1B1 1B2\n");
}

TEST(Schedules, OneFOneBOrder) {
  // Rank r: pp-1-r warm-up forwards, then F,B pairs, then the remaining backwards.
  EXPECT_EQ(compute_text(generated_plan("1F1B", 3, 1, 4, false)),
            "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3\n"
            "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3\n"
            "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3\n");
  // Fewer microbatches than ranks: the warm-up is all of them.
  EXPECT_EQ(compute_text(generated_plan("schedule1f1b", 4, 1, 2, false)),
            "0F0 0F1 0B0 0B1\n"
            "1F0 1F1 1B0 1B1\n"
            "2F0 2F1 2B0 2B1\n"
            "3F0 3B0 3F1 3B1\n");
}

TEST(Schedules, LoopedBFSOrder) {
  // PyTorch's ScheduleLoopedBFS: forwards stage by stage, backwards from the last local stage,
  // microbatches in reverse.
  EXPECT_EQ(compute_text(generated_plan("LoopedBFS", 2, 2, 2, false)),
            "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0\n"
            "1F0 1F1 3F0 3F1 3B1 3B0 1B1 1B0\n");
}

TEST(Schedules, InterleavedOrderSmall) {
  // pp 2, 2 stages per rank, 4 microbatches: 2 rounds of 2. Rank 0 warms up with
  // (2-1)*2 + 2*(2-1-0) = 4 forwards.
  EXPECT_EQ(compute_text(generated_plan("Interleaved1F1B", 2, 2, 4, false)),
            "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3\n"
            "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3\n");
}

// An independent formulation of PyTorch's ScheduleInterleaved1F1B order (its structure: a timeline
// with idle slots, the stage of each step computed from the step index, microbatch counters per
// stage), used as the oracle for every configuration PyTorch accepts.
std::optional<std::vector<std::vector<Action>>> torch_interleaved(int pp, int n, int m) {
  const int rounds = std::max(1, m / pp);
  if (m % rounds != 0) return std::nullopt;  // PyTorch raises ValueError
  const int per_round = m / rounds;
  std::vector<std::vector<Action>> orders;
  for (int rank = 0; rank < pp; ++rank) {
    const int warmup = std::min((n - 1) * per_round + 2 * (pp - 1 - rank), m * n);
    const int steady = m * n - warmup;
    const int cooldown = m * n - steady;
    std::vector<std::optional<Action>> timeline(static_cast<size_t>(rank));
    std::map<int, int> next_f, next_b;
    auto fwd = [&](int step) {
      const int stage = ((step / per_round) % n) * pp + rank;
      timeline.push_back(Action::compute(ActionKind::F, stage, next_f[stage]++));
    };
    auto bwd = [&](int step) {
      const int stage = (n - 1 - ((step - warmup) / per_round) % n) * pp + rank;
      timeline.push_back(Action::compute(ActionKind::B, stage, next_b[stage]++));
    };
    for (int step = 0; step < warmup + steady + cooldown; ++step) {
      if (step < warmup) {
        fwd(step);
        if (step == warmup - 1)
          timeline.resize(timeline.size() +
                          std::max(0, n * pp + 2 * (pp - 1 - rank) - warmup - rank));
      } else if (step < warmup + steady) {
        fwd(step);
        bwd(step);
      } else {
        timeline.emplace_back();
        bwd(step);
      }
    }
    std::vector<Action> order;
    for (const auto& a : timeline)
      if (a) order.push_back(*a);
    orders.push_back(order);
  }
  return orders;
}

TEST(Schedules, InterleavedEqualsPyTorchWhereverPyTorchAccepts) {
  int compared = 0;
  for (int pp = 1; pp <= 8; ++pp)
    for (int n = 1; n <= 4; ++n)
      for (int m = 1; m <= 40; ++m) {
        auto expected = torch_interleaved(pp, n, m);
        if (!expected) continue;
        Plan p = generated_plan("Interleaved1F1B", pp, n, m, false);
        ASSERT_EQ(pptest::orders_text(p.compute), pptest::orders_text(*expected))
            << "pp " << pp << " n " << n << " m " << m;
        ++compared;
      }
  EXPECT_EQ(compared, 752);  // configurations PyTorch accepts in this grid
}

TEST(Schedules, InterleavedWherePyTorchRejects) {
  // PyTorch needs m to be a multiple of rounds = max(1, m div pp); we use unequal groups instead.
  for (int pp = 2; pp <= 8; ++pp)
    for (int n = 2; n <= 4; ++n)
      for (int m = pp; m <= 40; ++m) {
        if (torch_interleaved(pp, n, m)) continue;
        Plan p = generated_plan("Interleaved1F1B", pp, n, m, true);
        VerifyReport r = verify(p);
        ASSERT_TRUE(r.ok()) << "pp " << pp << " n " << n << " m " << m << ": " << r.errors.front();
      }
  // pp 4, 9 microbatches: rounds = 2 groups, 5 then 4.
  Plan p = generated_plan("Interleaved1F1B", 4, 2, 9, false);
  EXPECT_EQ(p.compute[3].size(), 36u);
}

TEST(Schedules, EveryClassicPlanVerifies) {
  int plans = 0;
  for (const char* s : {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS"})
    for (int pp = 1; pp <= 8; ++pp)
      for (int vpp = 1; vpp <= 4; ++vpp) {
        const ScheduleInfo* info = find_schedule(s);
        if (info->vpp_rule == VppRule::One && vpp != 1) continue;
        for (int m = 1; m <= 20; ++m) {
          Plan p = generated_plan(s, pp, vpp, m, true);
          VerifyReport r = verify(p);
          ASSERT_TRUE(r.ok()) << s << " pp " << pp << " vpp " << vpp << " m " << m << ": "
                              << r.errors.front();
          ASSERT_TRUE(r.checked_lowered);
          ++plans;
        }
      }
  EXPECT_EQ(plans, 2 * 8 * 20 + 2 * 8 * 4 * 20);
}

TEST(Schedules, LoweringIsDeadlockFreeForAnyCosts) {
  // Lowering follows the timing it is given; whatever the durations, the result must verify.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dur(0.1, 5.0);
  for (const char* s : {"1F1B", "Interleaved1F1B", "LoopedBFS", "GPipe"})
    for (int trial = 0; trial < 20; ++trial) {
      const int pp = 2 + trial % 5,
                vpp = find_schedule(s)->vpp_rule == VppRule::One ? 1 : 1 + trial % 3;
      const int m = 1 + (trial * 7) % 13;
      Plan p = generated_plan(s, pp, vpp, m, false);
      std::map<std::pair<int, int>, double> table;
      LoweringCosts costs;
      costs.compute = [&](const Action& a, int) {
        auto key = std::make_pair(a.stage, static_cast<int>(a.kind));
        if (!table.count(key)) table[key] = dur(rng);
        return table[key];
      };
      costs.transfer = [&](const Action&) { return 0.3; };
      for (bool defer : {false, true}) {
        costs.defer_sends = defer;
        Plan lowered = lower_send_recv(p, costs);
        VerifyReport r = verify(lowered);
        ASSERT_TRUE(r.ok()) << s << " trial " << trial << " defer " << defer << ": "
                            << r.errors.front();
      }
    }
}

TEST(Schedules, LoweringForACostModelKeepsTheFasterPlacement) {
  // F=1, I=1.2, W=0.8: boundaries of neighbouring ranks rarely line up, so where SENDs go matters.
  CostModel model;
  model.unit = false;
  model.empty_stage = LayerCost{1.0, 1.2, 0.8, std::nullopt, 1.0, 0.0};
  for (const char* s : {"1F1B", "Interleaved1F1B", "LoopedBFS"})
    for (int pp : {2, 3, 5})
      for (int m : {4, 9, 16}) {
        const int vpp = find_schedule(s)->vpp_rule == VppRule::One ? 1 : 2;
        Plan p = generated_plan(s, pp, vpp, m, false);
        Plan best = lower_for_model(p, model);
        ASSERT_TRUE(verify(best).ok());
        LoweringCosts eager = lowering_costs(p, model), held = eager;
        held.defer_sends = true;
        const double a = simulate(lower_send_recv(p, eager), model).makespan;
        const double b = simulate(lower_send_recv(p, held), model).makespan;
        EXPECT_DOUBLE_EQ(simulate(best, model).makespan, std::min(a, b))
            << s << " pp " << pp << " m " << m;
      }
}

TEST(Schedules, OneFOneBMakespanMatchesTheory) {
  // Unit costs F=1, B=2: 1F1B takes (m + p - 1) * 3 and idles (p-1)/(m+p-1) of it.
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 3 * p; ++m) {
      Simulation sim = simulate(generated_plan("1F1B", p, 1, m, true), CostModel{});
      EXPECT_DOUBLE_EQ(sim.makespan, 3.0 * (m + p - 1)) << "p " << p << " m " << m;
      EXPECT_NEAR(sim.bubble, double(p - 1) / (m + p - 1), 1e-12);
    }
}

TEST(Schedules, NamesAreCaseInsensitiveWithPyTorchAliases) {
  EXPECT_EQ(find_schedule("interleaved1f1b")->name, "Interleaved1F1B");
  EXPECT_EQ(find_schedule("ScheduleInterleaved1F1B")->name, "Interleaved1F1B");
  EXPECT_EQ(find_schedule("SCHEDULEGPIPE")->name, "GPipe");
  EXPECT_EQ(find_schedule("Schedule1F1B")->name, "1F1B");
  EXPECT_EQ(find_schedule("ScheduleLoopedBFS")->name, "LoopedBFS");
  EXPECT_EQ(find_schedule("nope"), nullptr);
}

TEST(Schedules, RejectsStagesPerRankTheScheduleCannotRun) {
  try {
    generated_plan("1F1B", 2, 2, 4, true);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.message(),
              "1F1B runs one stage per rank, but 4 stages on --pp 2 give 2 per rank; use "
              "Interleaved1F1B or "
              "LoopedBFS, or --pp 4");
  }
}

}  // namespace
}  // namespace ppc
