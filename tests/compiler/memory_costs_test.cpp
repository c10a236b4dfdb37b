// Issue 42's compiler half: what each memory mode costs (memory_costs.h), the simulator's times
// and memory under a plan's modes, and Auto's choice of modes under a memory limit
// (memory_choice.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_bound.h"
#include "compiler/lower_for_model.h"
#include "compiler/memory_choice.h"
#include "compiler/memory_costs.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"
#include "tests/compiler/error_cases.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

// f = 1, b = 2 (i = w = 1) per layer; 10 bytes of activation, messages of 2 bytes.
CostModel small_costs() {
  CostFlags fl;
  fl.f = 1;
  fl.b = 2;
  fl.activation = 10;
  fl.message_bytes = 2;
  return cost_model_from_flags(fl);
}

Plan compiled(const std::string& schedule, const std::string& layout, int pp, int m,
              const std::string& recompute, const CostModel& cost) {
  CompileOptions co;
  co.layout = parse_layout(layout, "layout");
  co.has_model = true;
  co.pp = pp;
  co.schedule = schedule;
  co.microbatches = m;
  co.cost = &cost;
  if (!recompute.empty()) co.memory = parse_memory_policy(recompute, "--recompute");
  return compile(co);
}

Simulation simulated(const Plan& plan, const CostModel& cost) {
  Plan lowered = lower_for_model(plan, cost);
  EXPECT_TRUE(verify(lowered).ok());
  return simulate(lowered, cost);
}

TEST(MemoryCosts, DefaultsDeriveFromTheLayersOtherNumbers) {
  const CostModel cost = small_costs();
  const LayerCost& t = cost.layer(LayerKind::Decoder);
  const LayerModeCost none = layer_mode_cost(t, cost, MemoryMode::None);
  EXPECT_EQ(none.kept, 10);
  EXPECT_EQ(none.recompute, 0);
  const LayerModeCost full = layer_mode_cost(t, cost, MemoryMode::Full);
  EXPECT_EQ(full.kept, 2);  // the layer's input: one message
  EXPECT_EQ(full.rebuilt, 8);
  EXPECT_EQ(full.recompute, 1);  // its forward again
  const LayerModeCost sel = layer_mode_cost(t, cost, MemoryMode::Selective);
  EXPECT_EQ(sel.kept, 6);  // halfway
  EXPECT_DOUBLE_EQ(sel.recompute, 0.1);
  const LayerModeCost off = layer_mode_cost(t, cost, MemoryMode::Offload);
  EXPECT_EQ(off.kept, 0);
  EXPECT_EQ(off.offloaded, 10);
}

TEST(MemoryCosts, CostFileFieldsOverrideTheDefaultsAndOldFilesReadTheSame) {
  const CostModel given = parse_cost_model(
      R"({"layers": {"t": {"f": 2, "activation": 100, "activation_selective": 40,
          "activation_full": 5, "recompute_selective": 0.5, "recompute_full": 1.5}},
          "host_bandwidth": 50})",
      "cost.json");
  const LayerCost& t = given.layer(LayerKind::Decoder);
  EXPECT_EQ(layer_mode_cost(t, given, MemoryMode::Selective).kept, 40);
  EXPECT_EQ(layer_mode_cost(t, given, MemoryMode::Selective).recompute, 0.5);
  EXPECT_EQ(layer_mode_cost(t, given, MemoryMode::Full).kept, 5);
  EXPECT_EQ(layer_mode_cost(t, given, MemoryMode::Full).recompute, 1.5);
  EXPECT_EQ(given.host_bandwidth, 50);
  const CostModel old =
      parse_cost_model(R"({"layers": {"t": {"f": 2, "activation": 100}}})", "cost.json");
  EXPECT_FALSE(old.host_bandwidth.has_value());
  EXPECT_EQ(layer_mode_cost(old.layer(LayerKind::Decoder), old, MemoryMode::Full).kept, 12.5);
  EXPECT_EQ(pptest::message_of([] {
              parse_cost_model(
                  R"({"layers": {"t": {"f": 1, "activation": 4, "activation_full": 5}}})",
                  "cost.json");
            }),
            "cost.json: layers.t.activation_full: 5 is more than the activation 4 that keeping "
            "everything keeps");
  EXPECT_EQ(pptest::message_of([] {
              parse_cost_model(
                  R"({"layout": "t|t", "stages": [{"f": 1, "recompute_full": 1}, null]})",
                  "cost.json");
            }),
            "cost.json: stages[0].recompute_full: unknown field (known: f, b, i, w, activation, "
            "params, optimizer)");
}

TEST(MemoryCosts, RecomputationLengthensTheBackwardAndTheInputGradientOnly) {
  const CostModel cost = small_costs();
  const Plan keep = compiled("ZB-H1", "Et|tL", 2, 4, "", cost);
  const Plan full = compiled("ZB-H1", "Et|tL", 2, 4, "full,stage1:none", cost);
  const std::vector<StageCost> a = stage_costs(keep, cost), b = stage_costs(full, cost);
  EXPECT_EQ(b[0].f, a[0].f);
  EXPECT_EQ(b[0].i, a[0].i + 2);  // an I recomputes both layers' forwards once
  EXPECT_EQ(b[0].b, a[0].b + 2);
  EXPECT_EQ(b[0].w, a[0].w);  // its W reuses what the I kept
  EXPECT_EQ(b[0].activation, 4);
  EXPECT_EQ(b[0].transient, 16);
  EXPECT_EQ(b[1].i, a[1].i);  // stage 1 keeps everything
  EXPECT_EQ(b[1].activation, 20);
  // The lower bound counts the recomputation.
  EXPECT_GT(makespan_lower_bound(full, cost).value, makespan_lower_bound(keep, cost).value);
}

// A measured stage holds less than its layers' entries add up to: each entry counts the layer's
// output, which the next layer frees when it does not keep its input (pprun's `t` and `L` keep
// their normalized inputs, not the inputs). A fully recomputed layer keeps its input: the stage
// then holds each layer's output (`activation_full`), what pprun measures (bench/README.md,
// issue 42 section 4: 1F1B full on `Etttt` predicted 0.80x of the measured peak before).
TEST(MemoryCosts, AMeasuredStageUnderFullRecomputationKeepsItsLayersOutputs) {
  // Hidden states of 2 bytes. Ett: E 2 + t 10 + t 10, the two t free their inputs: 18. ttL: the
  // first t's input is the message (not the forward's), so 10 + 10 + 6 less two inputs: 22.
  const CostModel cost = parse_cost_model(
      R"({"layout": "Ett|ttL",
          "stages": [{"f": 1, "b": 2, "activation": 18}, {"f": 1, "b": 2, "activation": 22}],
          "layers": {"E": {"f": 0.1, "activation": 2, "activation_full": 2},
                     "t": {"f": 0.4, "activation": 10, "activation_full": 2},
                     "L": {"f": 0.2, "activation": 6, "activation_full": 1}}})",
      "cost.json");
  const Plan full = compiled("1F1B", "Ett|ttL", 2, 4, "full", cost);
  const std::vector<StageCost> c = stage_costs(full, cost);
  EXPECT_DOUBLE_EQ(c[0].activation, 6);  // E's output and each t's (the last, the stage's)
  EXPECT_DOUBLE_EQ(c[0].transient, 12);
  EXPECT_DOUBLE_EQ(c[1].activation, 5);  // the two t's outputs and the loss
  EXPECT_DOUBLE_EQ(c[1].transient, 17);
  // 1F1B: rank 0 holds two microbatches between F and B.
  EXPECT_DOUBLE_EQ(simulated(full, cost).peak_held[0], 12);
  // L keeping everything frees its input, the second t's output: the first t's output (which
  // the second t keeps) and L's 6.
  const Plan mixed = compiled("1F1B", "Ett|ttL", 2, 4, "full,L:none", cost);
  EXPECT_DOUBLE_EQ(stage_costs(mixed, cost)[1].activation, 8);
  // Keeping everything: the measured stages.
  const Plan none = compiled("1F1B", "Ett|ttL", 2, 4, "", cost);
  EXPECT_DOUBLE_EQ(stage_costs(none, cost)[0].activation, 18);
  EXPECT_DOUBLE_EQ(stage_costs(none, cost)[1].activation, 22);
  // Offloading: what goes to the host is what the stage no longer keeps (its activation less the
  // offloaded layers' entries, at least nothing: t:offload keeps 18 - 20 -> 0 and 22 - 20 = 2), so
  // a B rebuilds nothing: all of its transient comes back from the host.
  for (const char* policy : {"t:offload", "offload"}) {
    const Plan off = compiled("1F1B", "Ett|ttL", 2, 4, policy, cost);
    const std::vector<StageCost> o = stage_costs(off, cost);
    for (size_t k = 0; k < o.size(); ++k) {
      EXPECT_DOUBLE_EQ(o[k].forward_transient, o[k].transient) << policy << " stage " << k;
      EXPECT_DOUBLE_EQ(o[k].activation + o[k].transient, k == 0 ? 18 : 22) << policy;
    }
  }
  EXPECT_DOUBLE_EQ(
      stage_costs(compiled("1F1B", "Ett|ttL", 2, 4, "t:offload", cost), cost)[1].activation, 2);
}

TEST(MemoryCosts, SimulatorTimesTheRecomputeAndCountsKeptBytesAndTheTransient) {
  const CostModel cost = small_costs();
  // 1F1B, pp 2: rank 0 holds two microbatches before its first backward.
  const Simulation keep = simulated(compiled("1F1B", "Et|tL", 2, 4, "", cost), cost);
  EXPECT_EQ(keep.peak_memory[0], 40);
  const Simulation full = simulated(compiled("1F1B", "Et|tL", 2, 4, "full", cost), cost);
  // Two microbatches' inputs (2 x 2 layers x 2 bytes) and one microbatch rebuilt (2 x 8).
  EXPECT_EQ(full.peak_memory[0], 24);
  // Held between F and B, the rebuilt transient left out (what pprun measures): the two inputs.
  EXPECT_EQ(full.peak_held[0], 8);
  EXPECT_EQ(keep.peak_held, keep.peak_memory);
  // Timed as a plan whose backward is longer by the forward: b = 2 + 1 per layer.
  CostFlags longer;
  longer.f = 1;
  longer.b = 3;
  longer.activation = 10;
  longer.message_bytes = 2;
  const CostModel slow = cost_model_from_flags(longer);
  const Simulation same = simulated(compiled("1F1B", "Et|tL", 2, 4, "", slow), slow);
  EXPECT_DOUBLE_EQ(full.makespan, same.makespan);
  EXPECT_GT(full.makespan, keep.makespan);
}

TEST(MemoryCosts, OffloadHidesItsTransfersUnlessTheHostLinkIsSlow) {
  CostModel cost = small_costs();
  const Simulation keep = simulated(compiled("1F1B", "Et|tL", 2, 4, "", cost), cost);
  cost.host_bandwidth = 1000;  // 20 bytes in 0.02 each way: hidden behind F + B = 6
  const Plan off = compiled("1F1B", "Et|tL", 2, 4, "offload", cost);
  const Simulation fast = simulated(off, cost);
  EXPECT_DOUBLE_EQ(fast.makespan, keep.makespan);
  // Nothing kept between F and B, but a B's activation comes back when the action before it
  // starts (pprun's prefetch, runtime/train/slot_offload.h): the first rank holds two
  // microbatches' during an F (its own, and the next B's on its way back) and during its last two
  // Bs, as many as keeping everything at pp 2; the last rank runs each B right after its F, so
  // that one stays (one microbatch's, as keeping everything).
  EXPECT_EQ(keep.peak_memory[0], 40);
  EXPECT_EQ(fast.peak_memory[0], 40);
  EXPECT_EQ(fast.peak_memory[1], keep.peak_memory[1]);
  EXPECT_EQ(fast.peak_held[1], keep.peak_held[1]);
  // Deeper, the first rank keeps four microbatches' and, offloading, two at most.
  const Simulation keep4 = simulated(compiled("1F1B", "Et|t|t|tL", 4, 8, "", cost), cost);
  const Simulation fast4 = simulated(compiled("1F1B", "Et|t|t|tL", 4, 8, "offload", cost), cost);
  EXPECT_EQ(keep4.peak_memory[0], 80);
  EXPECT_EQ(fast4.peak_memory[0], 40);
  cost.host_bandwidth = 2;  // 10 each way, 20 both: 14 exposed in each B
  const std::vector<StageCost> c = stage_costs(off, cost);
  EXPECT_EQ(c[0].offload, 10);
  EXPECT_EQ(c[0].exposed, 14);
  EXPECT_GT(simulated(off, cost).makespan, keep.makespan + 14);
}

// DeepSeek-V3's costs at pp 4 under a limit that throttles the order that keeps everything.
SynthesisOptions deepseek_pp4(double limit) {
  SynthesisOptions o;
  o.layout = parse_layout("Ettttttt|tttttttt|tttttttt|ttttttmL", "layout");
  o.has_model = true;
  o.pp = 4;
  o.microbatches = 16;
  o.cost = read_cost_model(pptest::source_path("examples/cost-deepseek-v3.json"));
  o.cost.host_bandwidth.reset();  // recomputation only
  o.memory_limit = limit;
  return o;
}

TEST(MemoryChoice, AutoChoosesModesThatBeatKeepingEverythingUnderALimit) {
  SynthesisOptions o = deepseek_pp4(0);
  o.memory_limit.reset();
  const SynthesisResult free = synthesize(o);
  const double limit = 0.6 * free.peak_total;
  o.memory_limit = limit;
  const SynthesisResult keep = synthesize(o);  // every stage keeps everything: throttled
  const SynthesisResult chosen = synthesize_choosing_memory(o);
  EXPECT_FALSE(chosen.plan.memory.empty());
  EXPECT_TRUE(chosen.fits);
  EXPECT_LT(chosen.makespan, keep.makespan);
  // The plan records the modes, and they are what its simulation counts.
  const Plan lowered = lower_for_model(chosen.plan, o.cost);
  const Simulation sim = simulate(lowered, o.cost);
  EXPECT_DOUBLE_EQ(sim.makespan, chosen.makespan);
  for (size_t r = 0; r < sim.peak_memory.size(); ++r)
    EXPECT_LE(sim.peak_memory[r] + sim.param_memory[r], limit * (1 + 1e-9));
  // Without a limit, or with --recompute given, nothing is chosen.
  o.memory_limit.reset();
  EXPECT_TRUE(synthesize_choosing_memory(o).plan.memory.empty());
}

TEST(MemoryChoice, ALimitNoModeMeetsSaysTheSmallestThatWorks) {
  SynthesisOptions o = deepseek_pp4(1e9);
  const std::string msg = pptest::message_of([&] { synthesize_choosing_memory(o); });
  const std::string head = "--memory-limit: no memory mode fits one microbatch on rank ";
  ASSERT_EQ(msg.substr(0, head.size()), head) << msg;
  // The limit it names works.
  const size_t at = msg.find("works is ") + 9;
  const std::string smallest = msg.substr(at, msg.find(" GiB", at) - at);
  o.memory_limit = std::stod(smallest) * 1.001 * (1 << 30) + (1 << 21);
  EXPECT_TRUE(synthesize_choosing_memory(o).fits);
}

TEST(MemoryCosts, VerifyChecksThePlansModes) {
  Plan plan = compiled("1F1B", "Et|tL", 2, 4, "full", small_costs());
  EXPECT_TRUE(verify(plan).ok());
  plan.memory = parse_memory_policy("full,stage2:none", "memory");
  const VerifyReport rep = verify(plan);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.errors.front(),
            "memory: 'all:full,stage2:none': stage2 does not exist (the plan has 2 stages: stage0 "
            "to stage1)");
}

TEST(MemoryChoice, PpcompileRecordsForcedModesAndRejectsBadOnes) {
  const auto ok = pptest::run_ppcompile({"--layout", "Et|tL", "--pp", "2", "--schedule", "1F1B",
                                         "--microbatches", "4", "--recompute", "full", "--offload",
                                         "stage1", "--emit", "json"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"memory\": \"all:full,stage1:offload\""), std::string::npos);
  const auto bad = pptest::run_ppcompile({"--layout", "Et|tL", "--pp", "2", "--schedule", "1F1B",
                                          "--microbatches", "4", "--recompute", "stage7:full"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

}  // namespace
}  // namespace ppc
