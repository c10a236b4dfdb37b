// Microbatches of different lengths (lengths.h, order_microbatches.h): the lengths file, the cost
// of each part at a microbatch's length (linear, quadratic, fitted through measured lengths), the
// simulator's use of them, and the order that Auto chooses for them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lengths.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/order_microbatches.h"
#include "compiler/plan_json.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

Plan lowered(const std::string& schedule, int pp, int stages, int m, const CostModel& cost = {},
             const std::string& layout = "") {
  CompileOptions o;
  o.layout = layout.empty() ? generic_layout(stages) : parse_layout(layout, "layout");
  o.has_model = !layout.empty();
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  o.cost = &cost;
  Plan plan = compile(o);
  return lower_send_recv(plan, lowering_costs(plan, cost));
}

// Seeded long-tailed lengths (log-normal, as bench/README.md's figures use), 64 .. 8192 tokens.
std::vector<long long> long_tailed(int m, unsigned seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> d(6.5, 1.0);
  std::vector<long long> out;
  for (int k = 0; k < m; ++k)
    out.push_back(std::clamp(static_cast<long long>(std::llround(d(rng))), 64LL, 8192LL));
  return out;
}

CostModel cost_file(const std::string& text) {
  return parse_cost_model(text, "cost.json");
}

TEST(LengthsFile, OnePositiveIntegerPerLine) {
  EXPECT_EQ(parse_lengths("512\n\n  1024  # a comment\n# only a comment\n7", "l.txt", 3),
            (std::vector<long long>{512, 1024, 7}));
  // The errors say the file and line (the CLI's are in tests/compiler/errors/ppcompile.txt).
  auto message = [](const std::string& text, int m) {
    try {
      parse_lengths(text, "l.txt", m);
    } catch (const UserError& e) {
      return e.format();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("512\n0\n", 2),
            "l.txt:2: expected a positive integer length (tokens, at most 12 digits), got \"0\"");
  EXPECT_EQ(message("512\n-3\n", 2),
            "l.txt:2: expected a positive integer length (tokens, at most 12 digits), got \"-3\"");
  EXPECT_EQ(message("1.5\n", 1),
            "l.txt:1: expected a positive integer length (tokens, at most 12 digits), got \"1.5\"");
  EXPECT_EQ(message("512\n", 2),
            "l.txt: holds 1 length, but the plan has 2 microbatches (one length per microbatch, "
            "in data order)");
}

// Every microbatch at the mean length costs what the model says without lengths: the same run.
TEST(LengthCosts, EqualLengthsChangeNothing) {
  for (const char* schedule : {"1F1B", "ZB-H1", "DualPipe", "Interleaved1F1B"}) {
    const int stages = std::string(schedule) == "Interleaved1F1B" ? 8 : 4;
    CostFlags fl;
    fl.f = 1.5;
    fl.b = 3.5;
    fl.latency = 0.1;
    fl.message_bytes = 100;
    fl.bandwidth = 1000;
    CostModel model = cost_model_from_flags(fl);
    const Plan plan = lowered(schedule, 4, stages, 8, model);
    const Simulation blind = simulate(plan, model);
    model.microbatch_lengths.assign(8, 777);
    const Simulation at_mean = simulate(plan, model);
    EXPECT_DOUBLE_EQ(at_mean.makespan, blind.makespan) << schedule;
    EXPECT_EQ(at_mean.busy, blind.busy) << schedule;
    EXPECT_EQ(at_mean.peak_memory, blind.peak_memory) << schedule;
    EXPECT_DOUBLE_EQ(at_mean.comm_bytes, blind.comm_bytes) << schedule;
    EXPECT_NE(at_mean.lengths.find("8 microbatches of 777 .. 777 tokens"), std::string::npos)
        << at_mean.lengths;
  }
}

// Linear parts with T, attention (the `attention` share at seq_len) with T squared; activation
// memory linear; the busy time of each rank is the sum over its actions at their lengths.
TEST(LengthCosts, LinearAndQuadraticParts) {
  CostModel model = cost_file(
      R"({"layers": {"t": {"f": 2, "b": 4, "activation": 10}},
          "lengths": {"seq_len": 1000, "attention": 0.25}})");
  const Plan plan = lowered("1F1B", 2, 2, 4, model, "Ett|ttL");
  model.microbatch_lengths = {1000, 2000, 500, 3000};
  const Simulation sim = simulate(plan, model);
  // Per layer: F(x) = 2 (0.75 x + 0.25 x^2), B = 2 F; two layers a stage.
  double expect = 0;
  for (double x : {1.0, 2.0, 0.5, 3.0}) expect += 2 * 3 * 2 * (0.75 * x + 0.25 * x * x);
  EXPECT_DOUBLE_EQ(sim.busy[0], expect);
  EXPECT_DOUBLE_EQ(sim.busy[1], expect);
  // Activation: 20 a stage at 1000 tokens, linear in T; 1F1B on rank 1 holds one at a time.
  EXPECT_DOUBLE_EQ(sim.peak_memory[1], 20 * 3.0);
  // Every length the same and twice seq_len: the makespan of the length-blind plan times F(2).
  model.microbatch_lengths.assign(4, 2000);
  CostModel blind = model;
  blind.microbatch_lengths.clear();
  EXPECT_DOUBLE_EQ(simulate(plan, model).makespan,
                   simulate(plan, blind).makespan * (0.75 * 2 + 0.25 * 4));
}

// Entries measured at other lengths: through two points the curve p T + q T^2; through three or
// more the least-squares quadratic, exact on quadratic data.
TEST(LengthCosts, FittedThroughMeasuredLengths) {
  CostModel two = cost_file(
      R"({"layers": {"t": {"f": 1, "b": 2}},
          "lengths": {"seq_len": 1024, "measured": [{"seq_len": 2048, "layers": {"t": {"f": 2.5, "b": 5}}}]}})");
  const Plan plan = lowered("GPipe", 1, 1, 1, two);
  two.microbatch_lengths = {4096};
  // p + q = 1, 2p + 4q = 2.5: p = 0.75, q = 0.25; at x = 4: 3 + 4 = 7 (F), 14 (B).
  EXPECT_DOUBLE_EQ(simulate(plan, two).busy[0], 7 + 14);
  two.microbatch_lengths = {2048};
  EXPECT_DOUBLE_EQ(simulate(plan, two).busy[0], 2.5 + 5);

  // F = 1 + 0.5 x + 0.25 x^2 (x = T / 1000) measured at 1000, 2000, 4000 and 500.
  auto f = [](double x) { return 1 + 0.5 * x + 0.25 * x * x; };
  std::string measured;
  for (double x : {2.0, 4.0, 0.5})
    measured += fmt::format(R"({}{{"seq_len": {}, "layers": {{"t": {{"f": {}, "b": {}}}}}}})",
                            measured.empty() ? "" : ", ", x * 1000, f(x), 2 * f(x));
  CostModel four = cost_file(fmt::format(
      R"({{"layers": {{"t": {{"f": {}, "b": {}}}}}, "lengths": {{"seq_len": 1000, "measured": [{}]}}}})",
      f(1), 2 * f(1), measured));
  four.microbatch_lengths = {3000};
  EXPECT_NEAR(simulate(plan, four).busy[0], 3 * f(3), 1e-9);
  // Never below 0, however the curve bends.
  CostModel falling = cost_file(
      R"({"layers": {"t": {"f": 4}},
          "lengths": {"seq_len": 1000, "measured": [{"seq_len": 2000, "layers": {"t": {"f": 1}}}]}})");
  falling.microbatch_lengths = {8000};
  EXPECT_GE(simulate(plan, falling).busy[0], 0.0);
}

TEST(LengthCosts, CostFileErrors) {
  auto message = [](const std::string& text) {
    try {
      parse_cost_model(text, "cost.json");
    } catch (const UserError& e) {
      return e.format();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(R"({"lengths": {"attention": 2}})"),
            "cost.json: lengths.attention: expected a number between 0 and 1, got 2");
  EXPECT_EQ(message(R"({"lengths": {"seq_len": 0}})"),
            "cost.json: lengths.seq_len: expected a positive number, got 0");
  EXPECT_EQ(message(R"({"lengths": {"tokens": 5}})"),
            "cost.json: lengths.tokens: unknown field (known: seq_len, attention, measured)");
  EXPECT_EQ(message(R"({"lengths": {"measured": [{"seq_len": 5}]}})"),
            "cost.json: lengths.measured: entries at other lengths need the length of the "
            "file's own: add lengths.seq_len");
  EXPECT_EQ(message(R"({"lengths": {"seq_len": 5, "measured": [{"seq_len": 5}]}})"),
            "cost.json: lengths.measured[0].seq_len: 5 is lengths.seq_len, the length of the "
            "file's own entries");
  EXPECT_EQ(
      message(
          R"({"lengths": {"seq_len": 5, "measured": [{"seq_len": 6, "layers": {"t": {"f": -1}}}]}})"),
      "cost.json: lengths.measured[0]: layers.t.f: expected a non-negative number, got -1");
}

// Auto's order: never a longer step than data order, a permutation, the plan as verified as
// before, the step it reports the simulator's; on long-tailed lengths a shorter step.
TEST(OrderMicrobatches, ShortensTheStepOnLongTailedLengths) {
  CostModel model = cost_file(
      R"({"layers": {"t": {"f": 1, "b": 2}}, "lengths": {"seq_len": 1024, "attention": 0.15}})");
  for (const char* schedule : {"1F1B", "Interleaved1F1B", "ZB-H1", "DualPipe", "Auto"}) {
    const bool two = std::string(schedule) == "Interleaved1F1B";
    const Plan plan = lowered(schedule, 4, two ? 8 : 4, 16, model);
    const auto lengths = long_tailed(16, 7);
    const Plan ordered = plan_for_lengths(plan, model, lengths);
    std::vector<int> sorted = ordered.microbatch_order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> identity(16);
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(sorted, identity) << schedule;
    Plan same_actions = ordered;
    same_actions.microbatch_order.clear();
    EXPECT_EQ(same_actions, plan) << schedule;  // only the order changed
    EXPECT_TRUE(verify(ordered).ok()) << schedule;
    CostModel with = model;
    with.microbatch_lengths = lengths;
    const double data = simulate(plan, with).makespan;
    const double best = simulate(ordered, with).makespan;
    const OrderResult r = order_microbatches(plan, with);
    EXPECT_DOUBLE_EQ(r.data_order_step, data) << schedule;
    EXPECT_DOUBLE_EQ(r.step, best) << schedule;
    EXPECT_LT(best, data * 0.98) << schedule;
    EXPECT_LE(r.simulations, OrderOptions{}.simulations) << schedule;
    // Deterministic: every rank can plan its own step.
    EXPECT_EQ(plan_for_lengths(plan, model, lengths).microbatch_order, ordered.microbatch_order);
  }
}

// Under DualPipe the order chooses which microbatches go in each direction, and so the pairs of
// every OVERLAP_F_B: with an overlapping cost model the pairs matter.
TEST(OrderMicrobatches, ChoosesDualPipesPairs) {
  CostModel model = cost_file(
      R"({"layers": {"t": {"f": 1, "i": 1, "w": 1}}, "overlap": 0.8,
          "lengths": {"seq_len": 1024, "attention": 0.15}})");
  const Plan plan = lowered("DualPipe", 4, 4, 16, model);
  // Sorted lengths: data order puts every long microbatch in one direction.
  std::vector<long long> lengths = long_tailed(16, 3);
  std::sort(lengths.begin(), lengths.end());
  const Plan ordered = plan_for_lengths(plan, model, lengths);
  CostModel with = model;
  with.microbatch_lengths = lengths;
  EXPECT_LT(simulate(ordered, with).makespan, simulate(plan, with).makespan);
  // The overlapped pairs' lengths differ from data order's.
  auto pairs = [&](const Plan& p) {
    std::vector<std::pair<long long, long long>> out;
    auto data = [&](int mb) {
      return lengths[static_cast<size_t>(
          p.microbatch_order.empty() ? mb : p.microbatch_order[static_cast<size_t>(mb)])];
    };
    for (const auto& r : p.compute)
      for (const Action& a : r)
        if (a.kind == ActionKind::OverlapFB)
          out.emplace_back(data(a.microbatch), data(a.microbatch2));
    return out;
  };
  ASSERT_FALSE(pairs(plan).empty());
  EXPECT_NE(pairs(ordered), pairs(plan));
}

// The order travels in the JSON plan, and a plan without one is written as before.
TEST(OrderMicrobatches, JsonRoundTrip) {
  const Plan plan = lowered("1F1B", 2, 2, 4);
  VerifyReport report = verify(plan);
  std::ostringstream before;
  emit_json(plan, report, before);
  EXPECT_EQ(before.str().find("microbatch_order"), std::string::npos);
  Plan ordered = plan;
  ordered.microbatch_order = {2, 0, 3, 1};
  std::ostringstream after;
  emit_json(ordered, report, after);
  EXPECT_NE(after.str().find("\"microbatch_order\": [2,0,3,1],\n"), std::string::npos);
  EXPECT_EQ(read_plan_json(after.str(), "plan.json"), ordered);
  EXPECT_EQ(read_plan_json(before.str(), "plan.json"), plan);
}

}  // namespace
}  // namespace ppc
