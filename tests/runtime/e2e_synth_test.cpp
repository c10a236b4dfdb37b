// Plans of --schedule Auto (synthesized from costs) run in pprun, as real processes, and train
// the model `pprun --reference` trains: every step's loss (and MTP loss) within 1e-5 relative,
// every parameter within 1e-4, each rank's peak of in-flight activations as the plan says. The
// cases cover what the synthesizer emits: loop and V placement, I/W splits, full backwards and
// OVERLAP_F_B pairs (DeepSeek-V3's costs overlap), a memory limit, an MTP layer.
#include "e2e_dumps.h"
#include "e2e_util.h"

namespace {

using namespace pprun_e2e;

struct SynthCase {
  std::string name;
  std::string layout;
  int pp;
  int microbatches;
  std::vector<std::string> cost;  // ppcompile flags: --cost FILE, --memory-limit ...
};

void PrintTo(const SynthCase& c, std::ostream* os) {
  *os << c.layout << " Auto pp " << c.pp;
}

std::string deepseek_costs() {
  return std::string(PP_SOURCE_DIR) + "/examples/cost-deepseek-v3.json";
}

// What the synthesized plan holds: its placement and whether it has pairs, splits, full B.
struct Shape {
  std::string placement;
  bool overlap = false, split = false, full = false;
};

Shape shape_of(const std::string& plan) {
  std::ifstream in(plan);
  const auto j = nlohmann::json::parse(in);
  Shape s;
  s.placement = j.at("placement").get<std::string>();
  for (const auto& r : j.at("ranks"))
    for (const auto& a : r.at("compute")) {
      const std::string t = a.get<std::string>();
      s.overlap |= t.find("OVERLAP_F_B") != std::string::npos;
      s.split |= t.find('W') != std::string::npos;
      s.full |= t.find('B') != std::string::npos && t.find("OVERLAP") == std::string::npos;
    }
  return s;
}

// ppcompile --schedule Auto on the case, its plan (JSON) written to `plan`.
Proc compile_auto(const SynthCase& c, const std::string& plan) {
  return ppcompile(
      concat({"--layout", c.layout, "--pp", std::to_string(c.pp), "--schedule", "Auto",
              "--microbatches", std::to_string(c.microbatches), "--emit", "json", "-o", plan},
             c.cost));
}

Shape run_case(const SynthCase& c) {
  TempDir d;
  const std::string plan = d.file("plan.json");
  const Proc p = compile_auto(c, plan);
  EXPECT_EQ(p.exit_code(), 0) << p.out;
  if (p.exit_code() != 0) return {};
  const int steps = 3;
  // One intra-op thread in both runs: a test's ranks share two cores with the other tests.
  const auto common =
      concat(kModel, {"--plan", plan, "--steps", std::to_string(steps), "--threads", "1"});
  const Proc pipe =
      pprun(concat(common, {"--metrics", d.file("p.jsonl"), "--dump-params", d.file("pd")}));
  EXPECT_EQ(pipe.exit_code(), 0) << pipe.out;
  const Proc ref = pprun(concat(
      common, {"--reference", "--metrics", d.file("r.jsonl"), "--dump-params", d.file("rd")}));
  EXPECT_EQ(ref.exit_code(), 0) << ref.out;
  if (pipe.exit_code() != 0 || ref.exit_code() != 0) return {};

  const bool mtp = c.layout.find('m') != std::string::npos;
  expect_metrics_of(d.file("p.jsonl"), d.file("r.jsonl"), size_t(steps), mtp, 1e-5);
  expect_dumps_within(d.file("pd"), d.file("rd"), 1e-4);

  expect_peak_inflight_as_predicted(pipe.out);
  return shape_of(plan);
}

const std::vector<SynthCase>& cases() {
  static const std::vector<SynthCase> c = {
      // Unit costs: no overlaps.
      {"unit_pp2", "Et|tt|tt|tL", 2, 4, {}},
      // DeepSeek-V3's costs (overlap 0.8): OVERLAP_F_B pairs, on V placement at two stages per
      // rank; with an MTP layer; and under a memory limit that holds few microbatches.
      {"deepseek_pp2", "Et|tt|t,m|L", 2, 4, {"--cost", deepseek_costs()}},
      // (16 microbatches: at 8 the loop placement's order is now the shorter one.)
      {"deepseek_pp4", "Et|t|t|t|t|t|tm|L", 4, 16, {"--cost", deepseek_costs()}},
      {"deepseek_pp4_limit",
       "Ett|tt|tt|tL",
       4,
       8,
       {"--cost", deepseek_costs(), "--memory-limit", "16GB"}},
  };
  return c;
}

class SynthParity : public ::testing::TestWithParam<SynthCase> {};

TEST_P(SynthParity, LossesAndParametersEqualTheReference) {
  run_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Auto, SynthParity, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<SynthCase>& info) {
                           return info.param.name;
                         });

// The cases above cover what they claim: both placements, pairs, I/W splits. (Compiling is
// quick; this does not run pprun.)
TEST(SynthParity, TheCasesCoverPlacementsPairsAndSplits) {
  std::set<std::string> placements;
  bool overlap = false, split = false;
  for (const SynthCase& c : cases()) {
    TempDir d;
    const std::string plan = d.file("plan.json");
    const Proc p = compile_auto(c, plan);
    ASSERT_EQ(p.exit_code(), 0) << p.out;
    const Shape s = shape_of(plan);
    placements.insert(s.placement);
    overlap |= s.overlap;
    split |= s.split;
  }
  EXPECT_EQ(placements, (std::set<std::string>{"loop", "v"}));
  EXPECT_TRUE(overlap);
  EXPECT_TRUE(split);
}

}  // namespace
