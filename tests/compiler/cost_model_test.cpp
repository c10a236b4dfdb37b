// The cost model: JSON files, the command-line flags, their errors (one line, exit code 2), and
// stage costs that come from the layout.
#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/simulate.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

const LayerCost& layer(const CostModel& m, LayerKind k) {
  return m.layer(k);
}

std::string parse_error(const std::string& text) {
  try {
    parse_cost_model(text, "cost.json");
  } catch (const UserError& e) {
    return e.format();
  }
  return "(no error)";
}

std::string flags_error(const CostFlags& f) {
  try {
    cost_model_from_flags(f);
  } catch (const UserError& e) {
    return e.format();
  }
  return "(no error)";
}

TEST(CostModel, ParsesLayersAndCommunication) {
  const CostModel m = parse_cost_model(R"({
    "layers": {"t": {"f": 2, "i": 3, "w": 1, "activation": 5, "params": 7},
               "E": {"f": 0.5, "b": 1},
               "L": {"f": 1, "b": 4, "w": 1}},
    "message_bytes": 100, "latency": 0.5, "bandwidth": 50, "overlap": 0.25, "weight_grad_memory": 0.5,
    "comment": "anything"})",
                                       "cost.json");
  EXPECT_FALSE(m.unit);
  EXPECT_TRUE(m.memory_in_bytes);
  const LayerCost& t = layer(m, LayerKind::Decoder);
  EXPECT_EQ(t.f, 2);
  EXPECT_EQ(t.i, 3);
  EXPECT_EQ(t.w, 1);
  EXPECT_EQ(t.backward(), 4);  // B = I + W unless given
  EXPECT_EQ(t.activation, 5);
  EXPECT_EQ(t.params, 7);
  EXPECT_EQ(layer(m, LayerKind::Embedding).i, 0.5);  // B alone: I = W = B/2
  EXPECT_EQ(layer(m, LayerKind::Embedding).w, 0.5);
  EXPECT_EQ(layer(m, LayerKind::Loss).i, 3);  // B and W: I = B - W
  EXPECT_EQ(layer(m, LayerKind::Loss).backward(), 4);
  EXPECT_EQ(layer(m, LayerKind::Mtp).f, 0);  // not listed: costs nothing
  EXPECT_EQ(m.empty_stage.f, 2);             // generic stages cost like t when "stage" is absent
  EXPECT_DOUBLE_EQ(message_time(m), 0.5 + 100.0 / 50);
  EXPECT_EQ(m.overlap, 0.25);
  EXPECT_EQ(m.weight_grad_memory, 0.5);
}

TEST(CostModel, ExplicitFullBackwardMayDifferFromIPlusW) {
  const CostModel m =
      parse_cost_model(R"({"layers": {"t": {"f": 1, "b": 1.8, "i": 1, "w": 1}}})", "c");
  EXPECT_EQ(layer(m, LayerKind::Decoder).backward(), 1.8);
  EXPECT_EQ(layer(m, LayerKind::Decoder).i, 1);
  // Only F: B = 2F, I = W = F.
  const CostModel f = parse_cost_model(R"({"stage": {"f": 3}})", "c");
  EXPECT_EQ(f.empty_stage.backward(), 6);
  EXPECT_FALSE(f.memory_in_bytes);
}

TEST(CostModel, FileErrorsAreOneLocatedLine) {
  EXPECT_EQ(parse_error("{\n  \"layers\": {\n    \"t\": {\"f\": 1,}\n  }\n}"),
            "cost.json:3:18: invalid JSON: syntax error while parsing object key - unexpected '}'; "
            "expected string "
            "literal");
  EXPECT_EQ(parse_error(R"({"layers": {"t": {"f": -1}}})"),
            "cost.json: layers.t.f: expected a non-negative number, got -1");
  EXPECT_EQ(parse_error(R"({"layers": {"t": {"f": "fast"}}})"),
            "cost.json: layers.t.f: expected a number, got \"fast\"");
  // A letter other than E, t, m, L is a model's own symbol (own_symbols_test.cpp); more is not.
  EXPECT_EQ(
      parse_error(R"({"layers": {"tt": {"f": 1}}})"),
      "cost.json: layers.tt: unknown field (known: E, t, m, L and a model's own symbols, each "
      "one ASCII letter)");
  EXPECT_EQ(
      parse_error(R"({"layers": {"t": {"f": 1, "fwd": 2}}})"),
      "cost.json: layers.t.fwd: unknown field (known: f, b, i, w, activation, params, optimizer, "
      "activation_selective, activation_full, recompute_selective, recompute_full, all_to_all)");
  EXPECT_EQ(parse_error(R"({"layers": {"t": {"b": 2}}})"),
            "cost.json: layers.t: missing field 'f' (forward time)");
  EXPECT_EQ(parse_error(R"({"layers": {"t": {"f": 1, "i": 2}}})"),
            "cost.json: layers.t.i: give both i and w, or b");
  EXPECT_EQ(parse_error(R"({"layers": {"t": {"f": 1, "b": 1, "w": 2}}})"),
            "cost.json: layers.t.w: 2 is more than the full backward time 1");
  EXPECT_EQ(parse_error(R"({"overlap": 2})"),
            "cost.json: overlap: expected a number between 0 and 1, got 2");
  EXPECT_EQ(parse_error(R"({"latncy": 2})"),
            "cost.json: latncy: unknown field (known: comment, layers, stage, latency, bandwidth, "
            "message_bytes, "
            "overlap, weight_grad_memory, layout, stages, boundaries, transport, post, lengths, "
            "host_bandwidth, top_k)");
  // A key with control characters (fuzz finding: the message's first line was blank).
  EXPECT_EQ(parse_error(R"({"\n\nlat\u0001": 2})"),
            "cost.json: \\x0a\\x0alat\\x01: unknown field (known: comment, layers, stage, latency, "
            "bandwidth, message_bytes, overlap, weight_grad_memory, layout, stages, boundaries, "
            "transport, post, lengths, "
            "host_bandwidth, top_k)");
  EXPECT_EQ(parse_error("[1, 2]"), "cost.json: expected a JSON object (see docs/cost-model.md)");
  EXPECT_EQ(parse_error(R"({"latency": 1e999})"),
            "cost.json: invalid JSON: [json.exception.out_of_range.406] number overflow parsing "
            "'1e999'");
  EXPECT_EQ(parse_error(""),
            "cost.json:1:1: invalid JSON: syntax error while parsing value - unexpected end of "
            "input; expected '[', '{', or a literal");
}

TEST(CostModel, FlagsGiveOneLayersCosts) {
  CostFlags fl;
  fl.f = 2;
  fl.b = 5;
  fl.w = 2;
  fl.latency = 0.1;
  const CostModel m = cost_model_from_flags(fl);
  for (LayerKind k : {LayerKind::Embedding, LayerKind::Decoder, LayerKind::Mtp, LayerKind::Loss,
                      own_layer('x')}) {
    const LayerCost& c = m.layer(k);
    EXPECT_EQ(c.f, 2);
    EXPECT_EQ(c.i, 3);
    EXPECT_EQ(c.w, 2);
    EXPECT_EQ(c.activation, 1);
  }
  EXPECT_EQ(m.empty_stage.i, 3);
  EXPECT_DOUBLE_EQ(message_time(m), 0.1);
  EXPECT_FALSE(m.memory_in_bytes);

  const CostModel unit = unit_layer_costs();
  EXPECT_EQ(unit.empty_stage.f, 1);
  EXPECT_EQ(unit.empty_stage.backward(), 2);

  CostFlags bad;
  bad.f = -1;
  EXPECT_EQ(flags_error(bad), "--cost-f: expected a non-negative number, got -1");
  bad = CostFlags{};
  bad.w = 1;
  EXPECT_EQ(flags_error(bad), "--cost-w: give both --cost-i and --cost-w, or --cost-b");
  bad = CostFlags{};
  bad.b = 1;
  bad.i = 2;
  EXPECT_EQ(flags_error(bad), "--cost-i: 2 is more than the full backward time 1");
  bad = CostFlags{};
  bad.overlap = 1.5;
  EXPECT_EQ(flags_error(bad), "--cost-overlap: expected a number between 0 and 1, got 1.5");
}

TEST(CostModel, MemorySizes) {
  EXPECT_EQ(parse_memory_size("80GiB", "--memory-limit"), 80.0 * (1 << 30));
  EXPECT_EQ(parse_memory_size("80GB", "--memory-limit"), 80e9);
  EXPECT_EQ(parse_memory_size("8e10", "--memory-limit"), 8e10);
  EXPECT_EQ(parse_memory_size("512M", "--memory-limit"), 512e6);
  EXPECT_EQ(parse_memory_size("12", "--memory-limit"), 12);
  try {
    parse_memory_size("lots", "--memory-limit");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.format(),
              "--memory-limit: expected a memory size such as 80GiB, 80GB or 8e10, got 'lots'");
  }
  EXPECT_EQ(format_memory(80.0 * (1 << 30), true), "80.0 GiB");
  EXPECT_EQ(format_memory(512, true), "512 B");
  EXPECT_EQ(format_memory(31, false), "31");
}

TEST(CostModel, StageCostsComeFromTheLayout) {
  // A stage with the embedding and three decoder layers costs what they cost.
  CompileOptions o;
  o.layout = parse_layout("Et*3|(tt|)*29,m|L");
  o.has_model = true;
  o.pp = 16;
  o.schedule = "Interleaved1F1B";
  o.microbatches = 16;
  const Plan plan = compile(o);
  const CostModel m = read_cost_model(pptest::source_path("examples/cost-deepseek-v3.json"));
  const auto sc = stage_costs(plan, m);
  EXPECT_DOUBLE_EQ(sc[0].f, 0.3 + 3 * 12.0);
  EXPECT_DOUBLE_EQ(sc[0].b, 0.6 + 3 * 24.0);
  EXPECT_DOUBLE_EQ(sc[1].f, 24.0);
  EXPECT_DOUBLE_EQ(sc[30].f, 14.0);  // m
  EXPECT_DOUBLE_EQ(sc[31].f, 19.0);  // L
  EXPECT_DOUBLE_EQ(sc[31].activation, 1.1e9);
  // The uneven layout shows its real bubble: rank 0 computes more than the others.
  const Simulation sim = simulate(lower_send_recv(plan, lowering_costs(plan, m)), m);
  EXPECT_GT(sim.busy[0], sim.busy[5]);
  EXPECT_LT(sim.rank_bubble[0], sim.rank_bubble[5]);
  // Unit costs ignore the layers (and stay what the golden files pin).
  for (const StageCost& c : stage_costs(plan, CostModel{})) EXPECT_EQ(c.f, 1);
}

TEST(CostModel, CliErrorsExitTwoWithOneLine) {
  pptest::TempDir dir;
  const std::string bad = dir.write("bad.json", "{\"layers\": {\"t\": {\"f\": 1, \"b\": }}}");
  const std::vector<std::string> base{"--stages",   "4",     "--pp",           "4",
                                      "--schedule", "ZB-H1", "--microbatches", "8"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return pptest::run_ppcompile(args);
  };
  struct Case {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{"--cost", bad},
       "ppcompile: error: " + bad +
           ":1:32: invalid JSON: syntax error while parsing value - "
           "unexpected '}'; expected '[', '{', or a literal\n"},
      {{"--cost", dir.file("missing.json")},
       "ppcompile: error: " + dir.file("missing.json") + ": cannot open '" +
           dir.file("missing.json") + "' for reading\n"},
      {{"--cost-f", "-2"}, "ppcompile: error: --cost-f: expected a non-negative number, got -2\n"},
      {{"--cost-i", "1"},
       "ppcompile: error: --cost-i: give both --cost-i and --cost-w, or --cost-b\n"},
      {{"--memory-limit", "big"},
       "ppcompile: error: --memory-limit: expected a memory size such as 80GiB, 80GB or 8e10, got "
       "'big'\n"},
  };
  for (const Case& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args[0];
    EXPECT_EQ(r.err, c.err);
    EXPECT_EQ(r.out, "");
  }
  // --cost and --cost-* exclude each other; CLI11 says so.
  const auto both = run({"--cost", bad, "--cost-f", "1"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
}

TEST(CostModel, StatsFollowTheCostModel) {
  const auto r = pptest::run_ppcompile({"--stages", "4", "--pp", "4", "--schedule", "1F1B",
                                        "--microbatches", "8", "--emit", "stats", "--cost-f", "2",
                                        "--cost-b", "4", "--memory-limit", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 1F1B under F=2, B=4 per stage: (m + p - 1)(F + B) = 11 * 6.
  EXPECT_NE(r.out.find("makespan      66\n"), std::string::npos) << r.out;
  EXPECT_NE(
      r.out.find(
          "memory limit  3: exceeded on rank 0 (peak 4 on rank 0: activations 4, parameters 0)"),
      std::string::npos)
      << r.out;
  // Without a cost model: unit costs, as the golden files pin.
  const auto u = pptest::run_ppcompile({"--stages", "4", "--pp", "4", "--schedule", "1F1B",
                                        "--microbatches", "8", "--emit", "stats"});
  EXPECT_NE(u.out.find("makespan      33\n"), std::string::npos) << u.out;
}

}  // namespace
}  // namespace ppc
