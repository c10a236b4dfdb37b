// The all-to-alls in the cost model and the simulator (issue 40, section 3): each MoE layer's
// dispatch and combine in its stage's F, B and I, measured or derived; an OVERLAP_F_B hides one
// part's all-to-alls under the other part's computation, and the simulated step is shorter by
// exactly what it hides; Auto pairs for it even where computations do not overlap.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/all_to_all_costs.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/lower_for_model.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace ppc {
namespace {

CostModel file_costs(const std::string& t, double overlap = 0) {
  return parse_cost_model(
      "{\"layers\": {\"t\": " + t + "}, \"overlap\": " + std::to_string(overlap) + "}", "c.json");
}

// "Ett|ttL" on one rank (two stages: decoder 0 dense, 1-3 MoE), two microbatches, in the order
// given.
Plan one_rank(const std::vector<std::string>& order, int ep) {
  CompileOptions o;
  o.layout = parse_layout("Ett|ttL");
  o.has_model = true;
  o.pp = 1;
  o.schedule = "Interleaved1F1B";
  o.microbatches = 2;
  o.expert_parallel = {ep, 1};
  Plan p = compile(o);
  p.compute[0].clear();
  std::string err;
  for (const std::string& a : order) p.compute[0].push_back(*parse_action(a, &err));
  return p;
}

// The simulation of a plan as ppcompile runs it: lowered under the costs.
double makespan(const Plan& p, const CostModel& c) {
  return simulate(lower_for_model(p, c), c).makespan;
}

const std::vector<std::string> kPaired{"0F0", "1F0", "(0F1;1B0)OVERLAP_F_B", "1F1", "1B1",
                                       "0B0", "0B1"};
const std::vector<std::string> kApart{"0F0", "1F0", "0F1", "1B0", "1F1", "1B1", "0B0", "0B1"};

TEST(AllToAllCosts, OverlappedTime) {
  // Without all-to-alls: the overlap of the computations as before.
  EXPECT_DOUBLE_EQ(overlapped_time(3, 0, 5, 0, 0), 8);
  EXPECT_DOUBLE_EQ(overlapped_time(3, 0, 5, 0, 0.5), 6.5);
  // Each part's all-to-alls under the other's computation: 8 + 16 computing, 2 + 4 hidden.
  EXPECT_DOUBLE_EQ(overlapped_time(10, 2, 20, 4, 0), 24);
  // All-to-alls longer than the other part's computation: the pair lasts the longer part alone
  // or both all-to-alls in a row.
  EXPECT_DOUBLE_EQ(overlapped_time(28, 20, 56, 40, 0), 60);
  EXPECT_DOUBLE_EQ(overlapped_time(28, 20, 6, 1, 0), 28);
}

TEST(AllToAllCosts, StagesCountTheirMoeLayers) {
  const CostModel c = file_costs(R"({"f": 4, "i": 4, "w": 4, "all_to_all": 1})");
  const std::vector<StageCost> s = stage_costs(one_rank(kApart, 2), c);
  // Stage 0: two decoder layers, one MoE (2 all-to-alls each way); stage 1: two MoE.
  EXPECT_DOUBLE_EQ(s[0].all_to_all_f, 2);
  EXPECT_DOUBLE_EQ(s[0].f, 10);
  EXPECT_DOUBLE_EQ(s[0].b, 18);
  EXPECT_DOUBLE_EQ(s[0].i, 10);
  EXPECT_DOUBLE_EQ(s[0].w, 8) << "a W has no all-to-all";
  EXPECT_DOUBLE_EQ(s[1].all_to_all_b, 4);
  EXPECT_DOUBLE_EQ(s[1].f, 12);
  // Full recomputation reruns the forward's all-to-alls inside the backward.
  Plan full = one_rank(kApart, 2);
  full.memory = parse_memory_policy("full", "--recompute");
  EXPECT_DOUBLE_EQ(stage_costs(full, c)[1].all_to_all_b, 8);
  EXPECT_DOUBLE_EQ(stage_costs_keeping_all(full, c)[1].all_to_all_b, 4);
  // Without expert parallelism (every plan before issue 40) the costs are as they were.
  const std::vector<StageCost> dense = stage_costs(one_rank(kApart, 1), c);
  EXPECT_DOUBLE_EQ(dense[1].f, 8);
  EXPECT_DOUBLE_EQ(dense[1].all_to_all_f, 0);
}

TEST(AllToAllCosts, DerivedFromTheMessageWhenNotMeasured) {
  // latency + message_bytes * top_k * (ep - 1) / ep / bandwidth = 0.5 + 1000 * 4 * 3/4 / 100.
  const CostModel c = parse_cost_model(
      R"({"layers": {"t": {"f": 4}}, "message_bytes": 1000, "bandwidth": 100, "latency": 0.5,
          "top_k": 4})",
      "c.json");
  EXPECT_DOUBLE_EQ(all_to_all_time(one_rank(kApart, 4), c), 30.5);
  EXPECT_DOUBLE_EQ(all_to_all_time(one_rank(kApart, 1), c), 0);
  EXPECT_DOUBLE_EQ(all_to_all_time(one_rank(kApart, 4), CostModel{}), 0) << "unit costs";
}

// The simulated step with the overlap is shorter than with the same actions apart by exactly the
// all-to-all time the overlap hides (one rank: no waiting, the step is the sum of its actions).
TEST(AllToAllCosts, OverlapShortensTheStepByWhatItHides) {
  for (const char* t : {R"({"f": 4, "i": 4, "w": 4, "all_to_all": 1})",
                        R"({"f": 4, "i": 4, "w": 4, "all_to_all": 10})"}) {
    const CostModel c = file_costs(t);
    const Plan paired = one_rank(kPaired, 2), apart = one_rank(kApart, 2);
    ASSERT_TRUE(verify(paired).ok());
    ASSERT_TRUE(verify(apart).ok());
    const double hidden = hidden_all_to_all(paired.compute[0][2], stage_costs(paired, c), c);
    EXPECT_GT(hidden, 0) << t;
    EXPECT_DOUBLE_EQ(makespan(apart, c) - makespan(paired, c), hidden) << t;
    // Without expert parallelism there is nothing to hide, and no overlap of computations here.
    EXPECT_DOUBLE_EQ(makespan(one_rank(kApart, 1), c), makespan(one_rank(kPaired, 1), c)) << t;
  }
  const CostModel c = file_costs(R"({"f": 4, "i": 4, "w": 4, "all_to_all": 1})");
  // --emit stats' line: 12 in the forwards, 12 in the backwards, 6 of them hidden.
  EXPECT_EQ(describe_all_to_alls(one_rank(kPaired, 2), c),
            "all-to-alls   ep 2, first 1 decoder layers dense: 1 each; 24 per step over the ranks, "
            "6 (25.0 %) hidden by OVERLAP_F_B\n");
  EXPECT_EQ(describe_all_to_alls(one_rank(kPaired, 1), c), "");
  EXPECT_DOUBLE_EQ(hidden_all_to_all(one_rank(kPaired, 2).compute[0][2],
                                     stage_costs(one_rank(kPaired, 2), c), c),
                   6);
}

// Auto pairs a forward with a backward for the all-to-alls alone (the costs' overlap is 0), and
// its plan is no longer than 1F1B's under the same costs.
TEST(AllToAllCosts, AutoPairsToHideAllToAlls) {
  const CostModel c = file_costs(R"({"f": 4, "i": 4, "w": 4, "all_to_all": 2})");
  CompileOptions o;
  o.layout = parse_layout("Et|tt|tt|tL");
  o.has_model = true;
  o.pp = 4;
  o.microbatches = 8;
  o.cost = &c;
  o.expert_parallel = {2, 0};
  o.schedule = "Auto";
  const Plan a = compile(o);
  ASSERT_TRUE(verify(a).ok());
  bool paired = false;
  for (const auto& order : a.compute)
    for (const Action& x : order) paired |= x.kind == ActionKind::OverlapFB;
  EXPECT_TRUE(paired);
  o.schedule = "1F1B";
  EXPECT_LE(makespan(a, c), makespan(compile(o), c));
}

}  // namespace
}  // namespace ppc
