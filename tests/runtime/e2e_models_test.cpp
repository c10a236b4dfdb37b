// pprun end to end on every kind of model a plan can describe, as real processes: multi-token
// prediction (m on its own stage, with the loss, several depths), tied embeddings, DualPipe's two
// model copies, DeepSeek-V3's own layout at pp 16. For each: every step's main and MTP losses
// equal `pprun --reference` within 1e-5 relative, every parameter within 1e-4, the copies of a
// parameter held by several ranks are bit-identical after the run (read_param_dump refuses
// copies that differ), and each rank's peak of in-flight activations is the plan's.
#include "e2e_dumps.h"
#include "e2e_util.h"
#include "runtime/output/param_dump.h"

namespace {

using namespace pprun_e2e;

struct ModelCase {
  std::string name;
  std::string layout;
  std::string schedule;
  int pp;
  int microbatches;
  std::vector<std::string> flags;               // e.g. --tie-embeddings
  std::map<std::string, std::set<int>> shared;  // parameter -> the ranks expected to hold it
};

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.layout << " " << c.schedule << " pp " << c.pp;
}

// `env`: added to both runs' environment.
void expect_parity(const ModelCase& c, int steps = 3, const std::vector<std::string>& env = {}) {
  TempDir d;
  const std::string plan = compile(d, c.layout, c.pp, c.schedule, c.microbatches);
  // One intra-op thread in both runs: a test's ranks share two cores with the other tests.
  const auto common = concat(concat(kModel, c.flags),  // 16 sequences a step
                             {"--plan", plan, "--steps", std::to_string(steps), "--threads", "1"});
  const Proc pipe =
      pprun(concat(common, {"--metrics", d.file("p.jsonl"), "--dump-params", d.file("pd")}), env);
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  const Proc ref = pprun(concat(common, {"--reference", "--metrics", d.file("r.jsonl"),
                                         "--dump-params", d.file("rd")}),
                         env);
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;

  const bool mtp = c.layout.find('m') != std::string::npos;
  expect_metrics_of(d.file("p.jsonl"), d.file("r.jsonl"), size_t(steps), mtp, 1e-5);

  // Reading the dump fails if two ranks' copies of a shared parameter differ in any bit.
  const auto dumps = expect_dumps_within(d.file("pd"), d.file("rd"), 1e-4);
  EXPECT_EQ(dumps.got.count("head.out.weight"),
            std::count(c.flags.begin(), c.flags.end(), "--tie-embeddings") ? 0u : 1u);

  const auto by_rank = pprt::read_param_dump_by_rank(d.file("pd"));
  for (const auto& [name, ranks] : c.shared) {
    std::set<int> holders;
    for (const auto& [r, params] : by_rank)
      if (params.count(name)) holders.insert(r);
    EXPECT_EQ(holders, ranks) << name;
  }

  expect_peak_inflight_as_predicted(pipe.out);
}

class ModelParity : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelParity, LossesParametersAndSharedCopies) {
  expect_parity(GetParam());
}

// Small MTP layouts under every schedule, at pp 2 and 4: m on its own stage, m with L, m after a
// decoder layer, two depths.
std::vector<ModelCase> mtp_cases() {
  struct Shape {
    std::string schedule;
    std::string pp2, pp4;  // layouts with the stage count the schedule wants
  };
  const std::vector<Shape> shapes = {
      {"GPipe", "Ettt|tmL", "Ett|tt|m|L"},
      {"1F1B", "Ettt|tmL", "Ett|tt|m|mL"},
      {"Interleaved1F1B", "Et|tt|t,m|L", "Et|t|t|t|t|t|tm|mL"},
      {"LoopedBFS", "Et|tt|tm|L", "Et|t|t|t|t|t|t|mL"},
      {"ZB-H1", "Ettt|tmmL", "Ett|tt|tm|L"},
      {"ZB-H2", "Ettt|mL", "Ett|tt|t,m|L"},
      {"InterleavedZeroBubble", "Et|tt|t,m|L", "Et|t|t|t|t|t|t|mmL"},
      {"ZBVZeroBubble", "Et|tt|tm|mL", "Et|t|t|t|t|t|t,m|L"},
      {"DualPipeV", "Et|tt|t,m|L", "Et|t|t|t|t|t|tm|mL"},
      {"DualPipe", "Ettt|tmL", "Ett|tt|t,m|L"},
      {"Combined1F1B", "Ettt|tmL", "Ett|tt|m|mL"},
  };
  std::vector<ModelCase> out;
  for (const Shape& s : shapes) {
    out.push_back({s.schedule + "_pp2", s.pp2, s.schedule, 2, 4, {}, {}});
    out.push_back({s.schedule + "_pp4", s.pp4, s.schedule, 4, 8, {}, {}});
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<ModelCase>& info) {
  std::string name = info.param.name;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Mtp, ModelParity, ::testing::ValuesIn(mtp_cases()), case_name);

// The built-in model with the input/weight split through autograd forced on it
// (docs/library-split.md): an MTP layout with tied embeddings under ZBV, pprun as a whole.
TEST(ModelParity, GenericSplitForcedOnTheBuiltinModel) {
  expect_parity({"generic", "Et|tt|tm|mL", "ZBVZeroBubble", 2, 4, {"--tie-embeddings"}, {}}, 3,
                {"PPRUN_GENERIC_SPLIT=1"});
}

TEST(ModelParity, EveryScheduleOfPpcompileRunsAnMtpLayout) {
  std::set<std::string> covered;
  for (const ModelCase& c : mtp_cases()) covered.insert(c.schedule);
  covered.insert("Auto");  // synthesized plans, an MTP layout among them: e2e_synth_test.cpp
  for (const std::string& s : schedules_of_ppcompile())
    EXPECT_TRUE(covered.count(s)) << s << " has no MTP parity test";
}

// Tied embeddings: one rank; E and L on two ranks; E, m and L on three of four.
INSTANTIATE_TEST_SUITE_P(
    Tied, ModelParity,
    ::testing::Values(
        ModelCase{"pp1", "EttL", "1F1B", 1, 2, {"--tie-embeddings"}, {}},
        ModelCase{"pp2", "Ettt|tL", "1F1B", 2, 4, {"--tie-embeddings"}, {{"embed.weight", {0, 1}}}},
        ModelCase{"pp4_mtp",
                  "Ett|tt|tm|L",
                  "ZB-H1",
                  4,
                  8,
                  {"--tie-embeddings"},
                  {{"embed.weight", {0, 2, 3}}}}),
    case_name);

// DualPipe: layout stage k runs on ranks k and pp-1-k, so every parameter has two copies.
INSTANTIATE_TEST_SUITE_P(
    DualPipe, ModelParity,
    ::testing::Values(
        ModelCase{"pp2", "Ettt|ttL", "DualPipe", 2, 4, {}, {{"embed.weight", {0, 1}}}},
        ModelCase{"pp4",
                  "Et|tt|tt|tL",
                  "DualPipe",
                  4,
                  8,
                  {},
                  {{"embed.weight", {0, 3}}, {"layers.2.attn.wq.weight", {1, 2}}}},
        ModelCase{"pp8",
                  "Et|t|t|t|t|t|t|tL",
                  "DualPipe",
                  8,
                  8,
                  {},
                  {{"embed.weight", {0, 7}}, {"layers.4.mlp.w2.weight", {3, 4}}}}),
    case_name);

// DeepSeek-V3's layout (61 layers, the MTP layer on its own stage, the loss alone) at pp 16 x
// vpp 2, and the variant with m beside L, tied, as 16 real processes (tiny width).
INSTANTIATE_TEST_SUITE_P(DeepSeekV3, ModelParity,
                         ::testing::Values(ModelCase{"mission_layout",
                                                     "Et*3|(tt|)*29,m|L",
                                                     "Interleaved1F1B",
                                                     16,
                                                     16,
                                                     {},
                                                     {{"embed.weight", {0, 14}}}},
                                           ModelCase{"m_with_the_loss_tied",
                                                     "Et*2|(tt|)*29,t|mL",
                                                     "InterleavedZeroBubble",
                                                     16,
                                                     16,
                                                     {"--tie-embeddings"},
                                                     {{"embed.weight", {0, 15}}}}),
                         case_name);

// Bad input for these models: one line, exit 2, nothing run.
TEST(ModelParity, MtpNeedsALongerSequenceThanItsDepths) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tmmL", 2, "1F1B", 4);
  const Proc p = pprun({"--plan", plan, "--seq-len", "2"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("pprun: error: --seq-len: is 2, but the layout's 2 MTP depths need at "
                       "least 3 tokens per sequence"),
            std::string::npos)
      << p.out;
  const Proc w = pprun(concat(kModel, {"--plan", plan, "--mtp-loss-weight", "-1"}));
  EXPECT_EQ(w.exit_code(), 2) << w.out;
  EXPECT_NE(w.out.find("pprun: error: --mtp-loss-weight: must be at least 0"), std::string::npos)
      << w.out;
}

}  // namespace
