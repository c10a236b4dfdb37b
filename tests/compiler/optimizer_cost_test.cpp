// The time between steps (issue 30, docs/cost-model.md "What the simulator computes"): the cost
// file's "optimizer" entries, per stage and per layer, make each rank begin the step at the sum of
// its stages' optimizer; both message models start each rank there, the makespan includes it, the
// lower bound keeps below it, --emit stats shows the starts, and Auto ranks under it. A profile
// measured under loop placement predicts the V-placed plan's larger start on the rank that holds
// both heavy ends of the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <regex>

#include "compiler/compare.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_bound.h"
#include "compiler/lower_for_model.h"
#include "compiler/measured_costs.h"
#include "compiler/schedule.h"
#include "compiler/simulate.h"
#include "compiler/synthesize.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

// A model whose first and last stages hold the big matrices (a large vocabulary): their optimizer
// costs 6, a middle stage's 1. Under loop placement at pp 2 each rank holds one end (starts 7 and
// 7); under V placement rank 0 holds both (12) and rank 1 the middle (2).
constexpr const char* kProfile = R"({
  "layout": "Et|tt|tt|tL",
  "stages": [{"f": 1, "b": 2, "params": 100, "optimizer": 6},
             {"f": 2, "b": 4, "params": 10, "optimizer": 1},
             {"f": 2, "b": 4, "params": 10, "optimizer": 1},
             {"f": 3, "b": 6, "params": 100, "optimizer": 6}],
  "boundaries": [{"time": 0.5}, {"time": 0.5}, {"time": 0.5}]
})";

// The same without the time between steps.
std::string without_optimizer() {
  return std::regex_replace(std::string(kProfile), std::regex(R"(, "optimizer": [0-9]+)"), "");
}

CostModel costs(const std::string& text, MessageModel messages) {
  CostModel m = parse_cost_model(text, "profile.json");
  m.messages = messages;
  return m;
}

Plan compiled(const std::string& schedule, int m = 6) {
  CompileOptions o;
  o.layout = parse_layout("Et|tt|tt|tL");
  o.has_model = true;
  o.pp = 2;
  o.schedule = schedule;
  o.microbatches = m;
  return compile(o);
}

const MessageModel kModels[] = {MessageModel::Rendezvous, MessageModel::Eager};
const char* name(MessageModel m) {
  return m == MessageModel::Eager ? "eager" : "rendezvous";
}

TEST(OptimizerCost, StageAndLayerEntriesAreRead) {
  const CostModel m = parse_cost_model(kProfile, "profile.json");
  const auto c = stage_costs(compiled("Interleaved1F1B"), m);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_DOUBLE_EQ(c[0].optimizer, 6);
  EXPECT_DOUBLE_EQ(c[1].optimizer, 1);
  EXPECT_DOUBLE_EQ(c[3].optimizer, 6);
  // Per layer: summed over a stage's layers; absent, 0.
  const CostModel l = parse_cost_model(
      R"({"layers": {"E": {"f": 1, "optimizer": 4}, "t": {"f": 1, "optimizer": 0.5},
                     "L": {"f": 1}}})",
      "layers.json");
  const auto lc = stage_costs(compiled("Interleaved1F1B"), l);
  EXPECT_DOUBLE_EQ(lc[0].optimizer, 4.5);
  EXPECT_DOUBLE_EQ(lc[1].optimizer, 1);
  EXPECT_DOUBLE_EQ(lc[3].optimizer, 0.5);
  // Unit costs: none, so every rank begins at 0 and nothing changes.
  EXPECT_TRUE(rank_starts(compiled("Interleaved1F1B"),
                          stage_costs(compiled("Interleaved1F1B"), CostModel{}))
                  .empty());
  try {
    parse_cost_model(R"({"layers": {"t": {"f": 1, "optimizer": -1}}})", "bad.json");
    ADD_FAILURE() << "a negative optimizer time was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.t.optimizer"), std::string::npos) << e.what();
  }
}

TEST(OptimizerCost, MergesSumItAndCutsShareIt) {
  const CostModel m = parse_cost_model(kProfile, "profile.json");
  CompileOptions o;
  o.layout = parse_layout("Ettttt|tL");  // the first three measured stages merged
  o.has_model = true;
  o.pp = 2;
  o.schedule = "1F1B";
  o.microbatches = 2;
  const auto merged = stage_costs(compile(o), m);
  EXPECT_DOUBLE_EQ(merged[0].optimizer, 6 + 1 + 1);
  EXPECT_DOUBLE_EQ(merged[1].optimizer, 6);
  // A cut through measured stage 1 (tt): each part takes its share (equal layers: half).
  o.layout = parse_layout("Ett|ttttL");
  const auto cut = stage_costs(compile(o), m);
  EXPECT_DOUBLE_EQ(cut[0].optimizer, 6 + 0.5);
  EXPECT_DOUBLE_EQ(cut[1].optimizer, 0.5 + 1 + 6);
}

// Loop placement: both ranks begin at 7, so every time moves by 7: the makespan is the one without
// the optimizer plus 7, under both message models.
TEST(OptimizerCost, EqualStartsShiftTheWholeStep) {
  for (const MessageModel mm : kModels) {
    SCOPED_TRACE(name(mm));
    const CostModel with = costs(kProfile, mm), without = costs(without_optimizer(), mm);
    const Plan p = lower_for_model(compiled("Interleaved1F1B"), without);
    const Simulation a = simulate(p, with), b = simulate(p, without);
    EXPECT_EQ(a.start, (std::vector<double>{7, 7}));
    EXPECT_TRUE(b.start.empty());
    EXPECT_NEAR(a.makespan, b.makespan + 7, 1e-9);
    EXPECT_DOUBLE_EQ(a.first_start[0], 7);
    for (size_t r = 0; r < 2; ++r) EXPECT_DOUBLE_EQ(a.busy[r], b.busy[r]);
  }
}

// V placement: rank 0 holds the embedding and the head, so it begins at 12 and rank 1, at 2,
// waits for its first forward. The prediction includes the late start; the loop-placed plan,
// whose starts are even, comes out ahead of it by more than without the optimizer.
TEST(OptimizerCost, TheVPlacementPaysForTheRankThatHoldsBothEnds) {
  for (const MessageModel mm : kModels) {
    SCOPED_TRACE(name(mm));
    const CostModel with = costs(kProfile, mm), without = costs(without_optimizer(), mm);
    const Plan v = lower_for_model(compiled("ZBV"), with);
    const Simulation s = simulate(v, with), s0 = simulate(v, without);
    EXPECT_EQ(s.start, (std::vector<double>{12, 2}));
    EXPECT_DOUBLE_EQ(s.first_start[0], 12);  // rank 0's first forward, at once
    EXPECT_GE(s.first_start[1], 12 + 1);     // rank 1 waits for it (F = 1 on stage 0)
    EXPECT_GE(s.makespan, 12 + s.busy[0]);
    EXPECT_GE(s.makespan, s0.makespan + 2);  // no rank begins before 2
    // The bound: valid, and at least rank 0's start and work.
    const LowerBound lb = makespan_lower_bound(compiled("ZBV"), with);
    EXPECT_LE(lb.value, s.makespan * (1 + 1e-12));
    EXPECT_GE(lb.value, 12 + s.busy[0] - 1e-9);
    // Against the loop placement: the optimizer widens the gap.
    const Plan loop = lower_for_model(compiled("Interleaved1F1B"), with);
    const double gap = s.makespan - simulate(loop, with).makespan;
    const double gap0 = s0.makespan - simulate(loop, without).makespan;
    EXPECT_GT(gap, gap0);
  }
}

// --schedule Auto and --compare rank under it: Auto is never worse than a named schedule that
// fits, under both message models, and no plan beats the bound.
TEST(OptimizerCost, AutoRanksUnderIt) {
  for (const MessageModel mm : kModels) {
    SCOPED_TRACE(name(mm));
    const CostModel with = costs(kProfile, mm);
    SynthesisOptions o;
    o.layout = parse_layout("Et|tt|tt|tL");
    o.has_model = true;
    o.pp = 2;
    o.microbatches = 6;
    o.cost = with;
    const SynthesisResult got = synthesize(o);
    const Simulation auto_sim = simulate(lower_for_model(got.plan, with), with);
    EXPECT_NEAR(got.makespan, auto_sim.makespan, 1e-9);
    EXPECT_FALSE(auto_sim.start.empty());
    int compared = 0;
    for (const ScheduleInfo& info : pptest::generated_schedules()) {
      if (info.copies != 1) continue;
      const std::string schedule = info.name;
      Plan p;
      try {
        p = compiled(schedule);
      } catch (const UserError&) {
        continue;  // not a schedule of two stages per rank
      }
      const CompareRow row = measure_plan(p, with, std::nullopt);
      EXPECT_LE(got.makespan, row.sim.makespan * (1 + 1e-12)) << schedule;
      EXPECT_LE(makespan_lower_bound(p, with).value, row.sim.makespan * (1 + 1e-12)) << schedule;
      ++compared;
    }
    EXPECT_GE(compared, 3);  // Interleaved1F1B, ZBV, ...
    EXPECT_LE(makespan_lower_bound(got.plan, with).value, got.makespan * (1 + 1e-12));
  }
}

// ppcompile --emit stats: the starts when any is non-zero, none otherwise.
TEST(OptimizerCost, StatsShowTheRankStarts) {
  pptest::TempDir d;
  const std::string with = d.write("with.json", kProfile),
                    without = d.write("without.json", without_optimizer());
  const std::vector<std::string> args = {"--layout",   "Et|tt|tt|tL", "--pp",           "2",
                                         "--schedule", "ZBV",         "--microbatches", "6",
                                         "--emit",     "stats"};
  auto run = [&](const std::string& cost) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--cost", cost});
    return pptest::run_ppcompile(a);
  };
  const pptest::CliResult a = run(with), b = run(without);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(a.out.find("rank starts   0: 12, 1: 2"), std::string::npos) << a.out;
  EXPECT_EQ(b.out.find("rank starts"), std::string::npos) << b.out;
  // The makespan it prints is the simulator's, starts included (verify_and_lower's run).
  const CostModel m = costs(kProfile, MessageModel::Rendezvous);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(a.out, match, std::regex(R"(makespan\s+([0-9.]+))"))) << a.out;
  const double printed = std::stod(match[1].str());
  EXPECT_NEAR(printed, simulate(lower_for_model(compiled("ZBV"), m), m).makespan, 1e-3);
}

}  // namespace
}  // namespace ppc
