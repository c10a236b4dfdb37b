// Validation under the pipeline (--eval-data, docs/pprun.md "Validation"), as real processes:
// the forward-only projection of a plan gives `pprun --reference`'s evaluation within 1e-5
// relative (eval_loss, and eval_mtp_loss with MTP) under a plain, a V-placed zero-bubble, an
// OVERLAP_F_B (DualPipeV, with MTP) and a two-copy (DualPipe) schedule; evaluating changes
// nothing of the training (the same losses and parameters, bit for bit); an evaluation-only run
// (--eval-only) of a fresh model under a plan equals the reference's, of a checkpoint equals the
// evaluation its training made at that step (bit for bit), and writes nothing but its metrics
// line; the flags' errors.
#include <cmath>
#include <random>

#include "e2e_dumps.h"
#include "e2e_util.h"

namespace {

using namespace pprun_e2e;

// A held-out file of uint16 tokens (.bin: read as uint16), `sequences` whole sequences of 16.
std::string held_out(const TempDir& d, int sequences, unsigned seed = 5) {
  const std::string path = d.file("held.bin");
  std::mt19937 rng(seed);
  std::vector<uint16_t> tokens(static_cast<size_t>(sequences) * 16 + 1);
  for (uint16_t& t : tokens) t = static_cast<uint16_t>(rng() % 256);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()),
             static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  return path;
}

// The values of `key` in the metrics, by step.
std::map<int, double> by_step(const std::string& metrics, const std::string& key) {
  std::map<int, double> out;
  for (const nlohmann::json& j : metrics_lines(metrics))
    if (j.contains(key)) out[j.at("step").get<int>()] = j.at(key).get<double>();
  return out;
}

struct EvalCase {
  std::string name, layout, schedule;
  int pp, microbatches;
};

void PrintTo(const EvalCase& c, std::ostream* os) {
  *os << c.layout << " " << c.schedule << " pp " << c.pp;
}

class EvalParity : public ::testing::TestWithParam<EvalCase> {};

TEST_P(EvalParity, PipelinedEqualsReference) {
  const EvalCase& c = GetParam();
  TempDir d;
  const std::string plan = compile(d, c.layout, c.pp, c.schedule, c.microbatches);
  // 3 steps, evaluated after steps 2 and 3 on one batch of 16 sequences (the default: the file
  // holds 24, one whole batch).
  const auto common = concat(kModel, {"--plan", plan, "--steps", "3", "--threads", "1",
                                      "--eval-data", held_out(d, 24), "--eval-every", "2"});
  const Proc pipe = pprun(concat(common, {"--metrics", d.file("p.jsonl")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  EXPECT_NE(pipe.out.find("validation on " + d.file("held.bin") +
                          ": 1 batch of 16 sequences, forward only, every 2 steps and after "
                          "the last"),
            std::string::npos)
      << pipe.out;
  const Proc ref = pprun(concat(common, {"--reference", "--metrics", d.file("r.jsonl")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const bool mtp = c.layout.find('m') != std::string::npos;
  for (const std::string key : {"eval_loss", "eval_mtp_loss"}) {
    const auto got = by_step(d.file("p.jsonl"), key), want = by_step(d.file("r.jsonl"), key);
    ASSERT_EQ(want.size(), key == "eval_loss" || mtp ? 2u : 0u) << key;
    ASSERT_EQ(got.size(), want.size()) << key;
    for (const auto& [step, w] : want) {
      EXPECT_TRUE(step == 2 || step == 3) << key << " at step " << step;
      EXPECT_LE(std::fabs(got.at(step) - w), 1e-5 * std::fabs(w)) << key << " step " << step;
    }
  }
  // The held-out sequences are random tokens: the loss stays near ln(256).
  EXPECT_NEAR(by_step(d.file("p.jsonl"), "eval_loss").at(3), std::log(256.0), 1.0);
}

std::string case_name(const ::testing::TestParamInfo<EvalCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Schedules, EvalParity,
                         ::testing::Values(EvalCase{"OneF1B", "Ettt|tL", "1F1B", 2, 4},
                                           EvalCase{"ZBV", "Et|tt|tt|tL", "ZBVZeroBubble", 2, 4},
                                           EvalCase{"DualPipeV_mtp", "Et|tt|t,m|L", "DualPipeV", 2,
                                                    4},
                                           EvalCase{"DualPipe_mtp", "Ettt|tmL", "DualPipe", 2, 4}),
                         case_name);

// Evaluating after every step changes nothing of the training: the same losses and parameters,
// bit for bit, as without it (ZB-H1: I/W splits, whose deferred work must stay untouched).
TEST(Eval, LeavesTrainingUnchanged) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tL", 2, "ZB-H1", 4);
  const auto common = concat(kSize, {"--plan", plan, "--steps", "3", "--threads", "1"});
  const Proc plain = pprun(concat(common, {"--metrics", d.file("a.jsonl"), "--dump-params",
                                           d.file("a"), "--progress", "none"}));
  ASSERT_EQ(plain.exit_code(), 0) << plain.out;
  const Proc evaluated = pprun(
      concat(common, {"--metrics", d.file("b.jsonl"), "--dump-params", d.file("b"), "--eval-data",
                      held_out(d, 40), "--eval-every", "1", "--progress", "lines"}));
  ASSERT_EQ(evaluated.exit_code(), 0) << evaluated.out;
  EXPECT_EQ(losses(d.file("a.jsonl")), losses(d.file("b.jsonl")));
  expect_dumps_within(d.file("a"), d.file("b"), 0.0);
  EXPECT_EQ(by_step(d.file("b.jsonl"), "eval_loss").size(), 3u);
  EXPECT_TRUE(by_step(d.file("a.jsonl"), "eval_loss").empty());
  // The default --eval-batches: the whole global batches the file holds (40 sequences: 2).
  EXPECT_NE(evaluated.out.find(": 2 batches of 16 sequences"), std::string::npos) << evaluated.out;
  // On the progress lines and the last one.
  EXPECT_NE(evaluated.out.find("step 2/3 loss "), std::string::npos) << evaluated.out;
  EXPECT_NE(evaluated.out.find(" eval-loss "), std::string::npos) << evaluated.out;
  EXPECT_NE(evaluated.out.find(", eval loss "), std::string::npos) << evaluated.out;
}

// --eval-only of a fresh model: under a plan (DualPipe, two model copies, with MTP) as under the
// reference; one metrics line at step 0, no step trained.
TEST(EvalOnly, AFreshModelUnderAPlanEqualsTheReference) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tmL", 2, "DualPipe", 4);
  const auto common = concat(
      kModel, {"--plan", plan, "--threads", "1", "--eval-data", held_out(d, 32), "--eval-only"});
  const Proc pipe = pprun(concat(common, {"--metrics", d.file("p.jsonl")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  EXPECT_NE(pipe.out.find("2 batches of 16 sequences, forward only, once, with no training step "
                          "(--eval-only)"),
            std::string::npos)
      << pipe.out;
  EXPECT_NE(pipe.out.find("pprun: eval loss "), std::string::npos) << pipe.out;
  EXPECT_NE(pipe.out.find(" after 0 steps"), std::string::npos) << pipe.out;
  EXPECT_EQ(pipe.out.find("step 1/"), std::string::npos) << pipe.out;
  const Proc ref = pprun(concat(common, {"--reference", "--metrics", d.file("r.jsonl")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const auto got = metrics_lines(d.file("p.jsonl")), want = metrics_lines(d.file("r.jsonl"));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_EQ(got[0].at("step"), 0);
  EXPECT_FALSE(got[0].contains("loss")) << got[0];
  for (const char* key : {"eval_loss", "eval_mtp_loss"}) {
    const double g = got[0].at(key), w = want[0].at(key);
    EXPECT_LE(std::fabs(g - w), 1e-5 * std::fabs(w)) << key;
    EXPECT_NEAR(g, std::log(256.0), 1.0) << key;  // a fresh model on random tokens
  }
}

// The names, sizes and modification times of everything under `dir`.
std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> snapshot(const std::string& dir) {
  std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out[e.path().string()] = {e.is_regular_file() ? e.file_size() : 0, e.last_write_time()};
  return out;
}

// --eval-only of a checkpoint (--resume auto, the way a job script evaluates its latest): the
// evaluation its training made after that step, bit for bit, and nothing of the checkpoint
// directory changes.
TEST(EvalOnly, ACheckpointEvaluatesAsItsTrainingDidAndStaysUnchanged) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tL", 2, "ZB-H1", 4);
  const std::string held = held_out(d, 16), ck = d.file("ck");
  const auto common = concat(kModel, {"--plan", plan, "--threads", "1", "--eval-data", held,
                                      "--steps", "4", "--save", ck, "--resume", "auto"});
  const Proc train = pprun(
      concat(common, {"--save-every", "2", "--eval-every", "2", "--metrics", d.file("t.jsonl")}));
  ASSERT_EQ(train.exit_code(), 0) << train.out;
  const auto before = snapshot(ck);
  const Proc only = pprun(concat(common, {"--eval-only", "--metrics", d.file("t.jsonl")}));
  ASSERT_EQ(only.exit_code(), 0) << only.out;
  EXPECT_NE(only.out.find("resuming from " + ck + "/step-00000004"), std::string::npos) << only.out;
  EXPECT_NE(only.out.find(" after 4 steps"), std::string::npos) << only.out;
  EXPECT_EQ(snapshot(ck), before) << "an evaluation-only run wrote to the checkpoints";
  // Appended to the training's metrics, after its lines up to the checkpoint's step.
  const auto lines = metrics_lines(d.file("t.jsonl"));
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[4].at("step"), 4);
  EXPECT_FALSE(lines[4].contains("loss")) << lines[4];
  EXPECT_EQ(lines[4].at("eval_loss"), lines[3].at("eval_loss"));
}

// Bad validation flags: one line, exit 2, nothing run.
TEST(Eval, FlagErrors) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tL", 2, "1F1B", 4);
  const std::string held = held_out(d, 4);
  std::ofstream(d.file("big.bin"), std::ios::binary).write("\xff\xff\x01\x00", 4);
  const struct {
    std::vector<std::string> flags;
    std::string message;
  } cases[] = {
      {{"--eval-every", "2"}, "pprun: error: --eval-every: needs --eval-data FILE"},
      {{"--eval-batches", "2"}, "pprun: error: --eval-batches: needs --eval-data FILE"},
      {{"--eval-data", held, "--eval-batches", "0"},
       "pprun: error: --eval-batches: must be at least 1, got 0"},
      {{"--eval-data", held, "--eval-every", "-1"},
       "pprun: error: --eval-every: must be at least 0"},
      {{"--eval-data", d.file("none.bin")}, d.file("none.bin")},
      {{"--eval-data", d.file("big.bin")}, d.file("big.bin")},
      {{"--eval-only"}, "pprun: error: --eval-only: needs --eval-data FILE"},
      {{"--eval-data", held, "--eval-only", "--eval-every", "2"},
       "pprun: error: --eval-every: --eval-only evaluates once, before any step"},
      {{"--eval-data", held, "--eval-only", "--trace", d.file("t.json")},
       "pprun: error: --trace: traces a training step, and --eval-only runs none"},
      {{"--steps", "0"},
       "pprun: error: --steps: must be at least 1, got 0 (the validation loss without training: "
       "--eval-only with --eval-data)"},
  };
  for (const auto& c : cases) {
    const Proc p =
        pprun(concat(concat(kModel, {"--plan", plan, "--metrics", d.file("m.jsonl")}), c.flags));
    EXPECT_EQ(p.exit_code(), 2) << p.out;
    EXPECT_NE(p.out.find(c.message), std::string::npos) << p.out;
    EXPECT_EQ(p.out.find("starting"), std::string::npos) << p.out;
    EXPECT_FALSE(std::filesystem::exists(d.file("m.jsonl")));
  }
}

}  // namespace
