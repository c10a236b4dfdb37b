// The library as its users meet it (docs/library.md), in real processes: the GPT-2 example
// (examples/gpt2) trained through pprt::main under every schedule it names, its losses equal to its
// own unpipelined run (--reference) within 1e-5 relative and its parameters within 1e-4, the tied
// embedding held by the first and the last rank and equal there bit for bit; what its hooks give
// it (--dtype bf16 through autocast, its parameters checked before a run resumes); and the errors a
// user gets from a model that is wrong (one line naming the symbol or the stage and layer, exit 2).
// Its Hugging Face export is tests/torch/test_hf.py's Gpt2 (transformers loads it).
#include "e2e_dumps.h"
#include "e2e_util.h"
#include "runtime/output/param_dump.h"

namespace {

using namespace pprun_e2e;

Proc gpt2(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return run(concat({GPT2_BIN}, args), env);
}

struct Case {
  std::string schedule, layout;
  int pp;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule;
}

class Gpt2Example : public ::testing::TestWithParam<Case> {};

TEST_P(Gpt2Example, LossesEqualItsReference) {
  const Case& c = GetParam();
  TempDir d;
  const int steps = 3;
  const std::string plan = compile(d, c.layout, c.pp, c.schedule, 4);
  const auto common =
      std::vector<std::string>{"--plan",         plan,  "--steps",   std::to_string(steps),
                               "--global-batch", "8",   "--vocab",   "64",
                               "--seq-len",      "16",  "--threads", "1",
                               "--progress",     "none"};
  const Proc pipe =
      gpt2(concat(common, {"--metrics", d.file("p.jsonl"), "--dump-params", d.file("pd")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  const Proc ref = gpt2(concat(
      common, {"--reference", "--metrics", d.file("r.jsonl"), "--dump-params", d.file("rd")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  EXPECT_NE(ref.out.find("model 'gpt2'"), std::string::npos) << ref.out;

  const auto got = losses(d.file("p.jsonl")), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), size_t(steps));
  expect_losses_of(got, want);
  EXPECT_LT(got.back(), got.front());  // it learns

  // Reading the dump fails if two ranks' copies of the tied embedding differ in any bit.
  const auto dumps = expect_dumps_within(d.file("pd"), d.file("rd"), 1e-4);
  for (const char* name : {"wte.weight", "embed.0.wpe.weight", "h.0.attn.c_attn.bias",
                           "h.3.mlp.c_proj.weight", "head.0.ln_f.bias"})
    EXPECT_EQ(dumps.want.count(name), 1u) << name;
  std::set<int> holders;
  for (const auto& [r, params] : pprt::read_param_dump_by_rank(d.file("pd")))
    if (params.count("wte.weight")) holders.insert(r);
  // The first stage's rank and the last's: one rank under V placement, which puts both on rank 0.
  const bool v_placed = c.schedule == "ZBV" || c.schedule == "DualPipeV";
  const std::set<int> want_holders = v_placed ? std::set<int>{0} : std::set<int>{0, c.pp - 1};
  EXPECT_EQ(holders, want_holders);
}

// The zero-bubble schedules run I and W apart: the example's modules do not split their own
// backward, so these take the split through the autograd graph (docs/library-split.md).
INSTANTIATE_TEST_SUITE_P(
    Schedules, Gpt2Example,
    ::testing::Values(Case{"1F1B", "Et|tt|tL", 3}, Case{"Interleaved1F1B", "Et|t|t|tL", 2},
                      Case{"ZB-H2", "Et|tt|tL", 3}, Case{"ZBV", "Et|t|t|tL", 2},
                      Case{"DualPipeV", "Et|t|t|tL", 2}, Case{"DualPipe", "Ett|ttL", 2}),
    [](const auto& info) {
      std::string n = info.param.schedule;
      n.erase(std::remove(n.begin(), n.end(), '-'), n.end());
      return n;
    });

// Data parallelism and checkpoints, as pprun has them: two replicas of an interleaved plan train as
// the reference does, and a run stopped after 2 steps and resumed from its checkpoint goes on with
// exactly the losses of the run that was not stopped.
TEST(Gpt2Library, DataParallelismAndCheckpoints) {
  TempDir d;
  const std::string plan = compile(d, "Et|t|t|tL", 2, "Interleaved1F1B", 4);
  const auto common = std::vector<std::string>{
      "--plan",    plan, "--steps",   "4", "--global-batch", "16",  "--vocab", "64",
      "--seq-len", "16", "--threads", "1", "--progress",     "none"};
  const Proc whole = gpt2(concat(common, {"--dp", "2", "--metrics", d.file("w.jsonl")}));
  ASSERT_EQ(whole.exit_code(), 0) << whole.out;
  const Proc ref = gpt2(concat(common, {"--reference", "--metrics", d.file("r.jsonl")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const Proc first = gpt2(concat(common, {"--dp", "2", "--stop-after", "2", "--save",
                                          d.file("ckpt"), "--metrics", d.file("a.jsonl")}));
  ASSERT_EQ(first.exit_code(), 0) << first.out;
  const Proc rest = gpt2(
      concat(common, {"--dp", "2", "--resume", d.file("ckpt"), "--metrics", d.file("b.jsonl")}));
  ASSERT_EQ(rest.exit_code(), 0) << rest.out;

  const auto w = losses(d.file("w.jsonl")), r = losses(d.file("r.jsonl"));
  ASSERT_EQ(w.size(), 4u);
  ASSERT_EQ(r.size(), 4u);
  expect_losses_of(w, r);
  std::vector<double> resumed = losses(d.file("a.jsonl"));
  for (double x : losses(d.file("b.jsonl"))) resumed.push_back(x);
  EXPECT_EQ(resumed, w);  // bit for bit
}

// "transfers between stages: N bytes per step in M messages"
std::pair<long long, int> transfers(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m,
                         std::regex("transfers between stages: ([0-9]+) bytes per step in "
                                    "([0-9]+) messages")))
    return {-1, -1};
  return {std::stoll(m[1].str()), std::stoi(m[2].str())};
}

// --dtype bf16 through the model's hook (pprt::MixedPrecision::Autocast): pipelined, its losses are
// its bf16 reference's within 2e-3 relative, under 1F1B and ZBV (whose I/W split goes through the
// autograd graph, casts included); the bytes between stages halve, in as many messages; bf16 is
// not fp32 under another name.
TEST(Gpt2Library, MixedPrecisionThroughAutocast) {
  TempDir d;
  const auto common =
      std::vector<std::string>{"--steps",   "4",  "--global-batch", "8", "--vocab",    "64",
                               "--seq-len", "16", "--threads",      "1", "--progress", "none"};
  for (const auto& [schedule, layout] :
       {std::pair{"1F1B", "Ett|ttL"}, std::pair{"ZBV", "Et|t|t|tL"}}) {
    SCOPED_TRACE(schedule);
    const std::string plan = compile(d, layout, 2, schedule, 4);
    const auto bf16 = concat(common, {"--plan", plan, "--dtype", "bf16"});
    const Proc pipe = gpt2(concat(bf16, {"--metrics", d.file("p.jsonl")}));
    ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
    EXPECT_NE(pipe.out.find("bf16 (fp32 master weights)"), std::string::npos) << pipe.out;
    const Proc ref = gpt2(concat(bf16, {"--reference", "--metrics", d.file("r.jsonl")}));
    ASSERT_EQ(ref.exit_code(), 0) << ref.out;
    expect_metrics_of(d.file("p.jsonl"), d.file("r.jsonl"), 4, false, 2e-3);
    const Proc f32 = gpt2(concat(common, {"--plan", plan, "--metrics", d.file("f.jsonl")}));
    ASSERT_EQ(f32.exit_code(), 0) << f32.out;
    EXPECT_NE(losses(d.file("f.jsonl")), losses(d.file("p.jsonl")));
    const auto [f32_bytes, f32_messages] = transfers(f32.out);
    const auto [bf16_bytes, bf16_messages] = transfers(pipe.out);
    EXPECT_GT(f32_bytes, 0) << f32.out;
    EXPECT_EQ(bf16_messages, f32_messages) << pipe.out;
    EXPECT_EQ(bf16_bytes * 2, f32_bytes) << pipe.out;
  }
}

// The example lists its parameters (Model::parameters): a checkpoint of another model is refused
// before anything runs, naming the first parameter it lacks.
TEST(Gpt2Library, ResumeChecksTheParametersFirst) {
  TempDir d;
  const auto common =
      std::vector<std::string>{"--global-batch", "4", "--vocab",    "64",  "--seq-len", "16",
                               "--threads",      "1", "--progress", "none"};
  const Proc saved = gpt2(concat(common, {"--reference", "--layout", "EttL", "--microbatches", "2",
                                          "--steps", "2", "--save", d.file("ck")}));
  ASSERT_EQ(saved.exit_code(), 0) << saved.out;
  const std::string plan = compile(d, "Ett|tL", 2, "1F1B", 2);
  const Proc deeper =
      gpt2(concat(common, {"--plan", plan, "--steps", "4", "--resume", d.file("ck")}));
  EXPECT_EQ(deeper.exit_code(), 2) << deeper.out;
  EXPECT_NE(deeper.out.find("parameter 'h.2.ln_1.weight' of this model is not in the checkpoint"),
            std::string::npos)
      << deeper.out;
  EXPECT_EQ(deeper.out.find("starting"), std::string::npos) << deeper.out;  // nothing ran
}

bool one_line(const std::string& s) {
  return std::count(s.begin(), s.end(), '\n') <= 1;
}

TEST(LibraryErrors, ALayoutSymbolTheModelLacksIsOneLine) {
  const Proc p = gpt2({"--reference", "--layout", "Ettm|L", "--microbatches", "1", "--steps", "1"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_TRUE(one_line(p.out)) << p.out;
  EXPECT_NE(
      p.out.find("gpt2: error: layout: symbol 'm' (stage 0) has no layer in the model 'gpt2'"),
      std::string::npos)
      << p.out;
}

TEST(LibraryErrors, TheFlagsOfPprunsOwnModelAreNotTheExamples) {
  const Proc p = gpt2({"--reference", "--layout", "EtL", "--microbatches", "1", "--hidden", "8"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("--hidden"), std::string::npos) << p.out;
  const Proc help = gpt2({"--help"});
  EXPECT_EQ(help.exit_code(), 0);
  EXPECT_NE(help.out.find("gpt2: trains model 'gpt2'"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("--init-from"), std::string::npos) << help.out;
}

Proc faulty(const std::string& fault, const std::vector<std::string>& args) {
  return run(concat({FAULTY_MODEL_BIN}, args), {"FAULTY_MODEL=" + fault});
}

TEST(LibraryErrors, Bf16ForAModelWithoutMixedPrecisionIsOneLine) {
  const Proc p = faulty("", {"--reference", "--layout", "EttL", "--microbatches", "1", "--steps",
                             "1", "--dtype", "bf16"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("faulty_model: error: --dtype: bf16: model 'faulty' trains in fp32 only"),
            std::string::npos)
      << p.out;
}

TEST(LibraryErrors, AModuleThatBreaksItsDeclaredShapeIsOneLineNamingStageAndLayer) {
  const Proc p = faulty(
      "declared", {"--reference", "--layout", "EttL", "--microbatches", "1", "--steps", "1",
                   "--vocab", "32", "--seq-len", "8", "--global-batch", "2", "--progress", "none"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("faulty_model: error: the model, layer 't' #0 (h.0): its output is "
                       "[2, 8, 8], but its declared shape for an input [2, 8, 8] is [2, 8, 9]"),
            std::string::npos)
      << p.out;
}

TEST(LibraryErrors, AnOutputShapeThatVariesByMicrobatchIsOneLineNamingTheStage) {
  TempDir d;
  const std::string plan = compile(d, "Et|tL", 2, "1F1B", 2);
  const Proc p = faulty(
      "varies", {"--plan", plan, "--steps", "1", "--vocab", "32", "--seq-len", "8",
                 "--global-batch", "4", "--progress", "none", "--threads", "1", "--timeout", "20"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("error: stage 0 (layers 'E' #0 .. 't' #0): its output is [2, 7, 8] Float, "
                       "but the next stage receives [2, 8, 8] Float (the boundary's shape, "
                       "learned from one forward for every microbatch)"),
            std::string::npos)
      << p.out;
}

TEST(LibraryShapes, AModelWithoutDeclaredShapesTrainsPipelinedAsItsReference) {
  TempDir d;
  const std::string plan = compile(d, "Et|t|tL", 3, "1F1B", 2);
  const auto common = std::vector<std::string>{
      "--plan",         plan, "--steps",    "2",    "--vocab",   "32", "--seq-len", "8",
      "--global-batch", "4",  "--progress", "none", "--threads", "1"};
  const Proc pipe = faulty("", concat(common, {"--metrics", d.file("p.jsonl")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  const Proc ref = faulty("", concat(common, {"--reference", "--metrics", d.file("r.jsonl")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const auto got = losses(d.file("p.jsonl")), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), 2u);
  expect_losses_of(got, want);
}

}  // namespace
