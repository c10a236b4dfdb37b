// Per-stage and per-boundary entries of cost files (measured_costs.h, docs/cost-model.md
// "Measured costs"): parsed, checked, applied to the layout measured, to merges and to re-splits
// of it, and to generic stages; a plan timed by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/measured_costs.h"
#include "compiler/simulate.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

// Layers E t t t t L in three measured stages; the middle one not measured (per-layer costs:
// t is F = 2, so B = 4 and I = W = 2); message times per boundary.
constexpr const char* kProfile = R"({
  "layers": {"E": {"f": 1}, "t": {"f": 2}, "L": {"f": 3}},
  "layout": "Et|tt|tL",
  "stages": [{"f": 10, "b": 20, "activation": 5, "params": 7}, null, {"f": 30, "i": 25, "w": 5}],
  "boundaries": [{"message_bytes": 1000, "time": 0.5}, {"time": 2}],
  "latency": 0.1,
  "message_bytes": 10
})";

Plan plan_of(const std::string& layout, int pp, const std::string& schedule, int m,
             bool model = true) {
  CompileOptions o;
  o.layout = model ? parse_layout(layout) : generic_layout(std::stoi(layout));
  o.has_model = model;
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  return compile(o);
}

void expect_stage(const StageCost& c, double f, double b, double i, double w, double act,
                  double params, const std::string& what) {
  EXPECT_DOUBLE_EQ(c.f, f) << what;
  EXPECT_DOUBLE_EQ(c.b, b) << what;
  EXPECT_DOUBLE_EQ(c.i, i) << what;
  EXPECT_DOUBLE_EQ(c.w, w) << what;
  EXPECT_DOUBLE_EQ(c.activation, act) << what;
  EXPECT_DOUBLE_EQ(c.params, params) << what;
}

TEST(MeasuredCosts, TheLayoutMeasuredGetsItsEntries) {
  const CostModel m = parse_cost_model(kProfile, "profile.json");
  ASSERT_NE(m.measured, nullptr);
  EXPECT_TRUE(m.memory_in_bytes);
  const Plan p = plan_of("Et|tt|tL", 3, "1F1B", 1);
  const auto c = stage_costs(p, m);
  expect_stage(c[0], 10, 20, 10, 10, 5, 7, "stage 0 (B alone: I = W = B / 2)");
  expect_stage(c[1], 4, 8, 4, 4, 0, 0, "stage 1 (not measured: two t layers)");
  expect_stage(c[2], 30, 30, 25, 5, 0, 0, "stage 2 (I and W: B = I + W)");
  const MessageCosts msg = message_costs(p, m);
  EXPECT_DOUBLE_EQ(msg.time[0], 0.5);  // SEND_F(0)
  EXPECT_DOUBLE_EQ(msg.bytes[0], 1000);
  EXPECT_DOUBLE_EQ(msg.time[3], 0.5);  // SEND_B(1), to stage 0
  EXPECT_DOUBLE_EQ(msg.time[2], 2);    // SEND_F(1)
  EXPECT_DOUBLE_EQ(msg.bytes[2], 10);  // the file's message_bytes
  EXPECT_DOUBLE_EQ(msg.time[5], 2);    // SEND_B(2)
  EXPECT_FALSE(msg.uniform);
  // One microbatch through 1F1B by hand: F0 10, message 0.5, F1 4, message 2, F2 30, B2 30,
  // message 2, B1 8, message 0.5, B0 20.
  const Simulation sim = simulate(lower_for_model(p, m), m);
  EXPECT_DOUBLE_EQ(sim.makespan, 10 + 0.5 + 4 + 2 + 30 + 30 + 2 + 8 + 0.5 + 20);
  EXPECT_DOUBLE_EQ(sim.comm_bytes, 1000 + 10 + 10 + 1000);
  EXPECT_DOUBLE_EQ(sim.param_memory[0], 7);
}

TEST(MeasuredCosts, MergesSumAndResplitsShare) {
  const CostModel m = parse_cost_model(kProfile, "profile.json");
  // Stages 0 and 1 merged (as --compare merges): the sum; the boundary after them is measured.
  const Plan merged = plan_of("Ettt|tL", 2, "1F1B", 1);
  const auto c = stage_costs(merged, m);
  expect_stage(c[0], 14, 28, 14, 14, 5, 7, "merged stage 0");
  expect_stage(c[1], 30, 30, 25, 5, 0, 0, "stage 1");
  EXPECT_DOUBLE_EQ(message_costs(merged, m).time[0], 2);
  // A cut inside the unmeasured stage: layers take their kind's costs; the boundary is not a
  // measured one (latency 0.1, bandwidth infinite).
  const Plan cut = plan_of("Ett|ttL", 2, "1F1B", 1);
  const auto k = stage_costs(cut, m);
  EXPECT_DOUBLE_EQ(k[0].f, 12);
  EXPECT_DOUBLE_EQ(k[1].f, 32);
  EXPECT_DOUBLE_EQ(message_costs(cut, m).time[0], 0.1);
  // A cut inside a measured stage: shares by the per-layer F + B of t (2 + 4) and L (3 + 6).
  const Plan inside = plan_of("Et|tt|t|L", 4, "1F1B", 1);
  const auto s = stage_costs(inside, m);
  EXPECT_DOUBLE_EQ(s[2].f, 30 * 6.0 / 15);
  EXPECT_DOUBLE_EQ(s[3].f, 30 * 9.0 / 15);
  EXPECT_DOUBLE_EQ(s[2].i + s[3].i, 25);
  // The model's layers, as --balance splits them.
  const auto layers =
      model_layer_costs(m, {LayerKind::Embedding, LayerKind::Decoder, LayerKind::Decoder,
                            LayerKind::Decoder, LayerKind::Decoder, LayerKind::Loss});
  ASSERT_EQ(layers.size(), 6u);
  EXPECT_DOUBLE_EQ(layers[0].f + layers[1].f, 10);
  EXPECT_DOUBLE_EQ(layers[2].f, 2);
  EXPECT_DOUBLE_EQ(layers[5].f, 18);
  EXPECT_DOUBLE_EQ(min_message_time(m), 0.1);
}

TEST(MeasuredCosts, GenericStagesCountMeasuredStages) {
  const CostModel m = parse_cost_model(kProfile, "profile.json");
  // Six generic stages over three measured ones: half of one each; the unmeasured one costs the
  // generic stage (t's costs, as "stage" is absent).
  const Plan p = plan_of("6", 6, "1F1B", 1, false);
  const auto c = stage_costs(p, m);
  EXPECT_DOUBLE_EQ(c[0].f, 5);
  EXPECT_DOUBLE_EQ(c[1].f, 5);
  EXPECT_DOUBLE_EQ(c[2].f, 1);
  EXPECT_DOUBLE_EQ(c[5].f, 15);
  const MessageCosts msg = message_costs(p, m);
  EXPECT_DOUBLE_EQ(msg.time[2 * 1], 0.5);  // after generic stage 1: measured boundary 0
  EXPECT_DOUBLE_EQ(msg.time[2 * 3], 2);    // after stage 3: measured boundary 1
  EXPECT_DOUBLE_EQ(msg.time[2 * 0], 0.1);  // inside a measured stage
}

TEST(MeasuredCosts, EmptyStagesMatchEmptyStages) {
  const CostModel m = parse_cost_model(R"({
    "layers": {"E": {"f": 1}, "t": {"f": 1}, "L": {"f": 1}},
    "stage": {"f": 0.5},
    "layout": "Et||tL",
    "stages": [{"f": 2}, {"f": 0.25}, {"f": 2}]
  })",
                                       "p.json");
  const auto same = stage_costs(plan_of("Et||tL", 3, "1F1B", 1), m);
  EXPECT_DOUBLE_EQ(same[1].f, 0.25);
  const auto merged = stage_costs(plan_of("Et|tL", 2, "1F1B", 1), m);
  EXPECT_DOUBLE_EQ(merged[0].f, 2);
  EXPECT_DOUBLE_EQ(merged[1].f, 2.25);  // the empty stage goes with the layer at its place
  const auto other = stage_costs(plan_of("E|ttL|", 3, "1F1B", 1), m);
  EXPECT_DOUBLE_EQ(other[2].f, 0.5);  // an empty stage elsewhere: the "stage" entry
}

std::string error_of(const std::string& text) {
  try {
    parse_cost_model(text, "p.json");
  } catch (const UserError& e) {
    return e.format();
  }
  return "(no error)";
}

TEST(MeasuredCosts, FileErrorsAreOneLocatedLine) {
  EXPECT_EQ(error_of(R"({"stages": []})"),
            "p.json: stages: per-stage costs need the layout they were measured on: add "
            "\"layout\": \"...\"");
  EXPECT_EQ(error_of(R"({"layout": 3, "stages": []})"),
            "p.json: layout: expected a layout string, got 3");
  EXPECT_EQ(error_of(R"({"layout": "Et|L", "stages": [{"f": 1}]})"),
            "p.json: stages: expected an array of 2 entries (one per stage of the layout, null for "
            "one not measured), got 1 entries");
  EXPECT_EQ(error_of(R"({"layout": "Et|L", "stages": [{"f": 1}, {"f": -1}]})"),
            "p.json: stages[1].f: expected a non-negative number, got -1");
  EXPECT_EQ(error_of(R"({"layout": "Et|L", "stages": [{"f": 1}, {"i": 1}]})"),
            "p.json: stages[1]: missing field 'f' (forward time)");
  EXPECT_EQ(error_of(R"({"layout": "Et|L", "boundaries": [{"bytes": 1}]})"),
            "p.json: boundaries[0].bytes: unknown field (known: message_bytes, time)");
  EXPECT_EQ(error_of(R"({"layout": "Et|L", "boundaries": [null, null]})"),
            "p.json: boundaries: expected an array of 1 entries (one per boundary between stages "
            "k and k+1, null for one not measured), got 2 entries");
  EXPECT_NE(error_of(R"({"layout": "Et|?", "stages": [null, null]})").find("p.json: layout"),
            std::string::npos);
  // A letter is a layer of the model's own (docs/layout-language.md): a profile may hold one, and
  // a plan of another model is told apart below, by its layers.
  EXPECT_EQ(error_of(R"({"layout": "Et|X", "stages": [null, null]})"), "(no error)");
  // Used on another model: one line naming the file.
  const CostModel m = parse_cost_model(kProfile, "profile.json");
  try {
    stage_costs(plan_of("Ett|tL", 2, "1F1B", 1), m);
    FAIL() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.format(),
              "profile.json: layout: the stages were measured on a model of 6 layers (Et|tt|tL), "
              "but this model has 5 (EtttL); measured costs apply to the model they were measured "
              "on");
  }
}

TEST(MeasuredCosts, CommandLine) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / "ppc-measured-costs-test").string();
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/profile.json";
  std::ofstream(file) << kProfile;
  const auto r = pptest::run_ppcompile({"--layout", "Et|tt|tL", "--pp", "3", "--schedule", "1F1B",
                                        "--microbatches", "1", "--cost", file, "--emit", "stats"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("makespan      107\n"), std::string::npos) << r.out;
  const auto bad = pptest::run_ppcompile({"--layout", "Ett|tL", "--pp", "2", "--schedule", "1F1B",
                                          "--microbatches", "1", "--cost", file});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("ppcompile: error: " + file + ": layout: the stages were measured"),
            std::string::npos)
      << bad.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ppc
