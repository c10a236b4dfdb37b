// A second user model through the library, in real processes (issue 26's proof): branchy_model.cpp,
// a program of pprt::main whose blocks join two branches that call one submodule, and share one
// matrix across every block of the model (LayerInfo::shared). Under 1F1B, ZB-H1 and ZBV (the
// zero-bubble ones split its backward through the autograd graph), launched by itself and by
// torchrun (and by SLURM's srun, with e2e_cluster_test.cpp's cluster, as root), its losses equal
// its own --reference within 1e-5 and its parameters within 1e-4, and the ranks' copies of the
// shared matrix are equal bit for bit (under ZBV also with every shape declared, the head's from
// --vocab). A program of the library speaks with its own name. Its blocks' named auxiliary loss
// and metric (BRANCHY_AUX=1, on every stage) train and report as in its reference. And a model's
// mistakes in a pipelined run (faulty_model.cpp) stop every rank at once with one line naming the
// stage and the layer, exit code 2.
#include <cmath>
#include <fstream>

#include "e2e_cluster.h"
#include "e2e_dumps.h"
#include "runtime/output/param_dump.h"

namespace {

using namespace pprun_e2e;

// --lr 0.03: 3 steps of this small model learn in spite of each step's other data.
const std::vector<std::string> kArgs = {
    "--global-batch", "8", "--vocab", "48", "--seq-len", "12", "--lr", "0.03", "--threads", "1"};

Proc branchy(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return run(concat({BRANCHY_MODEL_BIN}, args), env);
}

// The run's per-step losses and dumped parameters equal the reference's (run here).
void expect_its_reference(const TempDir& d, const std::string& plan, int steps,
                          const std::string& metrics, const std::string& dump) {
  const Proc ref = branchy(concat(
      kArgs, {"--plan", plan, "--steps", std::to_string(steps), "--progress", "none", "--reference",
              "--metrics", d.file("r.jsonl"), "--dump-params", d.file("rd")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const auto got = losses(metrics), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), size_t(steps));
  expect_losses_of(got, want);
  EXPECT_LT(got.back(), got.front());  // it learns

  // Reading the dump fails if two ranks' copies of a parameter differ in any bit.
  const auto dumps = expect_dumps_within(dump, d.file("rd"), 1e-4);
  // The submodule both branches call is one module of its block; the shared matrix is one
  // parameter of the model, under its shared name.
  for (const char* name :
       {"shared.mix", "h.0.proj.fc.weight", "h.3.gate.bias", "head.0.out.weight"})
    EXPECT_EQ(dumps.want.count(name), 1u) << name;
  EXPECT_EQ(dumps.want.count("h.0.mix"), 0u);
}

struct Case {
  std::string schedule, layout;
  int pp;
  bool declared = false;  // BRANCHY_SHAPES=declared: every layer declares its output's shape
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule << (c.declared ? " declared" : "");
}

class BranchyModel : public ::testing::TestWithParam<Case> {};

TEST_P(BranchyModel, LossesEqualItsReference) {
  const Case& c = GetParam();
  TempDir d;
  const int steps = 3;
  const std::string plan = compile(d, c.layout, c.pp, c.schedule, 4);
  const Proc pipe =
      branchy(concat(kArgs, {"--plan", plan, "--steps", std::to_string(steps), "--progress", "none",
                             "--metrics", d.file("p.jsonl"), "--dump-params", d.file("pd")}),
              {c.declared ? "BRANCHY_SHAPES=declared" : "BRANCHY_SHAPES="});
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  expect_its_reference(d, plan, steps, d.file("p.jsonl"), d.file("pd"));
  // Every rank holds blocks, so each holds a copy of the shared matrix.
  std::set<int> holders;
  for (const auto& [r, params] : pprt::read_param_dump_by_rank(d.file("pd")))
    if (params.count("shared.mix")) holders.insert(r);
  EXPECT_EQ(holders, (std::set<int>{0, 1}));
}

INSTANTIATE_TEST_SUITE_P(Schedules, BranchyModel,
                         ::testing::Values(Case{"1F1B", "Ett|ttL", 2}, Case{"ZB-H1", "Ett|ttL", 2},
                                           Case{"ZBV", "Et|tt|tt|tL", 2},
                                           Case{"ZBV", "Et|tt|tt|tL", 2, true}),
                         [](const auto& info) {
                           std::string n = info.param.schedule;
                           n.erase(std::remove(n.begin(), n.end(), '-'), n.end());
                           return n + (info.param.declared ? "Declared" : "");
                         });

// A held-out file of uint16 tokens below the model's --vocab 48: `sequences` whole sequences of 12.
std::string held_out(const TempDir& d, int sequences) {
  std::vector<uint16_t> tokens(static_cast<size_t>(sequences) * 12 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7 + 3) % 48);
  const std::string path = d.file("held.bin");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  return path;
}

// Named auxiliary losses and metrics (pprt::Microbatch::add_loss, add_metric): every block, on
// whatever stage, adds the loss "smooth" (weighted into the loss: its gradient flows back from the
// stage that added it, through the autograd split under ZBV) and the metric "gate". Pipelined,
// every step's loss, smooth_loss and gate, the held-out eval_smooth_loss and eval_gate, and the
// parameters equal the reference's; and the loss trains the weights (without it they differ).
TEST(BranchyModel, NamedAuxiliaryLossesAndMetricsFromEveryStage) {
  TempDir d;
  const std::string held = held_out(d, 16);
  for (const auto& [schedule, layout] :
       {std::pair{"1F1B", "Ett|ttL"}, std::pair{"ZBV", "Et|tt|tt|tL"}}) {
    SCOPED_TRACE(schedule);
    const std::string plan = compile(d, layout, 2, schedule, 4);
    const auto common = concat(
        kArgs, {"--plan", plan, "--steps", "3", "--eval-data", held, "--data-format", "uint16"});
    const Proc pipe = branchy(concat(common, {"--progress", "lines", "--metrics", d.file("p.jsonl"),
                                              "--dump-params", d.file("pd")}),
                              {"BRANCHY_AUX=1"});
    ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
    const Proc ref = branchy(concat(common, {"--progress", "none", "--reference", "--metrics",
                                             d.file("r.jsonl"), "--dump-params", d.file("rd")}),
                             {"BRANCHY_AUX=1"});
    ASSERT_EQ(ref.exit_code(), 0) << ref.out;
    for (const std::string key :
         {"loss", "smooth_loss", "gate", "eval_loss", "eval_smooth_loss", "eval_gate"}) {
      const auto got = field(d.file("p.jsonl"), key), want = field(d.file("r.jsonl"), key);
      ASSERT_EQ(want.size(), key.starts_with("eval") ? 1u : 3u) << key;
      ASSERT_EQ(got.size(), want.size()) << key;
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_LE(std::fabs(got[i] - want[i]), 1e-5 * std::fabs(want[i])) << key << " " << i;
    }
    expect_dumps_within(d.file("pd"), d.file("rd"), 1e-4);
    const Proc plain = branchy(
        concat(common, {"--progress", "none", "--reference", "--dump-params", d.file("nd")}));
    ASSERT_EQ(plain.exit_code(), 0) << plain.out;
    const auto with = pprt::read_param_dump(d.file("rd")),
               without = pprt::read_param_dump(d.file("nd"));
    EXPECT_NE(with.at("h.0.proj.fc.weight").data, without.at("h.0.proj.fc.weight").data);
    // The progress lines show both by name (the last step's, after the evaluation, its too).
    EXPECT_NE(pipe.out.find(" smooth-loss "), std::string::npos) << pipe.out;
    EXPECT_NE(pipe.out.find(" gate "), std::string::npos) << pipe.out;
    EXPECT_NE(pipe.out.find(" eval-smooth-loss "), std::string::npos) << pipe.out;
  }
  // A name the model does not declare stops the run at the layer that adds it.
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const Proc bad = branchy(
      concat(kArgs, {"--plan", plan, "--steps", "1", "--progress", "none", "--timeout", "20"}),
      {"BRANCHY_AUX=undeclared"});
  EXPECT_EQ(bad.exit_code(), 2) << bad.out;
  EXPECT_NE(bad.out.find("error: stage 0, layer 't' #0 (h.0): it reports the auxiliary loss "
                         "'undeclared', which the model does not declare for this layout "
                         "(Model::aux_loss)"),
            std::string::npos)
      << bad.out;
}

TEST(BranchyModelLaunchers, TorchrunGivesItsReference) {
  if (std::string(TORCHRUN_BIN).empty() || !fs::exists(TORCHRUN_BIN))
    GTEST_SKIP() << "no torchrun (PP_TORCHRUN: the torch environment's)";
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "ZB-H1", 4);
  const Proc tr =
      run(concat({TORCHRUN_BIN, "--nnodes", "1", "--nproc_per_node", "2", "--master_addr",
                  "127.0.0.1", "--master_port", std::to_string(free_port()), "--monitor_interval",
                  "1", "--no_python", BRANCHY_MODEL_BIN},
                 concat(kArgs, {"--plan", plan, "--steps", "3", "--progress", "lines", "--metrics",
                                d.file("m.jsonl"), "--dump-params", d.file("dump")})));
  ASSERT_EQ(tr.exit_code(), 0) << tr.out;
  EXPECT_NE(tr.out.find("branchy_model: done: 3 steps"), std::string::npos) << tr.out;
  expect_its_reference(d, plan, 3, d.file("m.jsonl"), d.file("dump"));
}

// Named Slurm.* for the cluster tests' time limit (tests/runtime/CMakeLists.txt).
TEST(Slurm, AProgramOfTheLibraryUnderSrunGivesItsReference) {
  PPRUN_SKIP_UNLESS_ROOT();
  SlurmCluster slurm;
  ASSERT_TRUE(slurm.ok());
  TempDir d;
  const std::string plan = compile(d, "Et|tt|tt|tL", 2, "ZBV", 4);
  const Proc p = run(slurm.client(
      concat({"srun", "-n", "2", "--overcommit", BRANCHY_MODEL_BIN},
             concat(kArgs, {"--plan", plan, "--steps", "3", "--progress", "lines", "--metrics",
                            d.file("m.jsonl"), "--dump-params", d.file("dump")})),
      {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}));
  ASSERT_EQ(p.exit_code(), 0) << p.out << slurm.logs();
  EXPECT_NE(p.out.find("branchy_model: ZBVZeroBubble on 2 ranks"), std::string::npos) << p.out;
  expect_its_reference(d, plan, 3, d.file("m.jsonl"), d.file("dump"));
}

// --- A program's own name --------------------------------------------------------------------

std::vector<std::string> lines_of(const std::string& out) {
  std::vector<std::string> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(line);
  return v;
}

// Every line of `out` that is a message (not a progress or a metrics line) starts with `name:`.
void expect_no_pprun_lines(const std::string& out) {
  for (const std::string& line : lines_of(out))
    EXPECT_NE(line.rfind("pprun:", 0), 0u) << "a program of the library says 'pprun:':\n" << out;
}

TEST(LibraryProgramName, ItsStatusLinesCarryItsName) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "ZB-H1", 2);
  const Proc p = branchy(concat(kArgs, {"--plan", plan, "--steps", "1", "--progress", "lines"}));
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  EXPECT_NE(p.out.find("branchy_model: starting 2 ranks on this machine"), std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("branchy_model: ZB-H1 on 2 ranks"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("branchy_model: done: 1 step"), std::string::npos) << p.out;
  expect_no_pprun_lines(p.out);
}

TEST(LibraryProgramName, AFailedRankIsReportedUnderItsName) {
  TempDir d;
  const std::string plan = compile(d, "Et|tL", 2, "1F1B", 2);
  // faulty_model's FAULTY_MODEL=varies: rank 0 finds a stage output of another shape, exit 2.
  const Proc p =
      run(concat({FAULTY_MODEL_BIN}, {"--plan", plan, "--steps", "1", "--vocab", "32", "--seq-len",
                                      "8", "--global-batch", "4", "--progress", "none", "--threads",
                                      "1", "--timeout", "20"}),
          {"FAULTY_MODEL=varies"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("faulty_model: rank 0: error: stage 0 (layers 'E' #0 .. 't' #0)"),
            std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("faulty_model: rank 0 exited with code 2"), std::string::npos) << p.out;
  expect_no_pprun_lines(p.out);
}

TEST(LibraryProgramName, AnErrorBeforeTheRanksStartIsOneLineUnderItsName) {
  const Proc p = branchy({"--plan", "/nonexistent/plan.json"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_EQ(std::count(p.out.begin(), p.out.end(), '\n'), 1) << p.out;
  EXPECT_EQ(p.out.rfind("branchy_model: error: /nonexistent/plan.json", 0), 0u) << p.out;
}

// --- A model's mistakes in a pipelined run (docs/library.md: Errors) --------------------------

struct Fault {
  std::string name, want;  // FAULTY_MODEL, a line the output holds
};

void PrintTo(const Fault& f, std::ostream* os) {
  *os << f.name;
}

class PipelinedModelError : public ::testing::TestWithParam<Fault> {};

// Each mistake stops every rank with exit code 2 within seconds (not the --timeout the ranks
// waiting for the failed one would otherwise sit out), its message one line naming the stage and
// the layer, never LibTorch's own multi-line report.
TEST_P(PipelinedModelError, IsOneLineNamingStageAndLayerAndStopsEveryRank) {
  const Fault& f = GetParam();
  TempDir d;
  const std::string plan = compile(d, "Ett|tL", 2, "1F1B", 2);
  const Proc p =
      run(concat({FAULTY_MODEL_BIN}, {"--plan", plan, "--steps", "1", "--vocab", "32", "--seq-len",
                                      "8", "--global-batch", "4", "--progress", "none", "--threads",
                                      "1", "--timeout", "120"}),
          {"FAULTY_MODEL=" + f.name});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_LT(p.seconds, 60) << p.out;
  EXPECT_NE(p.out.find(f.want), std::string::npos) << p.out;
  for (const std::string& line : lines_of(p.out)) {
    EXPECT_EQ(line.find("Exception raised from"), std::string::npos) << p.out;
    EXPECT_EQ(line.find("terminate called"), std::string::npos) << p.out;
  }
  expect_no_pprun_lines(p.out);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, PipelinedModelError,
    ::testing::Values(
        Fault{"declared",
              "error: stage 0, layer 't' #0 (h.0): its output is [2, 8, 8], but its declared shape "
              "for an input [2, 8, 8] is [2, 8, 9]"},
        Fault{"libtorch",
              "error: stage 0, layer 't' #1 (h.1): its forward failed: mat1 and mat2 shapes "
              "cannot be multiplied (16x8 and 9x8)"},
        Fault{"scalar",
              "error: stage 1: the loss must be a scalar, but it is [2, 8, 32] (the last layer's "
              "output: give Model::loss)"},
        Fault{"prefix",
              "faulty_model: rank 0: error: stage 0, layer 't' #1 (block): parameter "
              "'block.fc.weight' exists already on this rank"},
        Fault{"own", "faulty_model: rank 0: error: h.1: this block wants an even stage"}),
    [](const auto& info) { return info.param.name; });

}  // namespace
