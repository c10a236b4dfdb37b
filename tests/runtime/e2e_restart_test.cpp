// Restarts that resume by themselves (docs/pprun.md, Clusters): `--resume auto` starts fresh
// when --save's directory holds no checkpoint and goes on from its latest one otherwise, so that
// a job its launcher restarts continues by itself.
//  - pprun alone: a run stopped early, then the same command again, then once more when all the
//    steps are done (nothing to train).
//  - torchrun --max_restarts 2: a rank killed (SIGKILL) mid-run; torchrun restarts every rank,
//    which resume from the latest checkpoint, and the run ends with the parameters of an
//    uninterrupted run, bit for bit (as the soak shows for a manual resume), and with its
//    --metrics file.
//  - --metrics of a run killed mid-step holds the steps it finished; the same command resumed
//    drops the lines past its checkpoint (a half-written last line too) and appends, so that the
//    file is the uninterrupted run's: the same steps, the same losses bit for bit.
#include <fmt/format.h>

#include "e2e_dumps.h"
#include "e2e_util.h"

namespace {

using namespace pprun_e2e;
using namespace std::chrono_literals;

const std::vector<std::string> kRun = concat(kSize, {"--threads", "1", "--progress", "lines"});

std::vector<int> steps_of(const std::string& metrics) {
  std::vector<int> out;
  for (const nlohmann::json& j : metrics_lines(metrics)) out.push_back(j.at("step"));
  return out;
}

std::vector<int> one_to(int n) {
  std::vector<int> out;
  for (int s = 1; s <= n; ++s) out.push_back(s);
  return out;
}

// Two --metrics files of the same training: the same steps, and on each line the same values
// but for the times (which no two runs share).
void expect_same_training(const std::string& got, const std::string& want) {
  const auto g = metrics_lines(got), w = metrics_lines(want);
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i)
    for (const char* key : {"step", "loss", "lr", "grad_norm"})
      EXPECT_EQ(g[i].at(key), w[i].at(key)) << key << " on line " << i + 1;
}

TEST(ResumeAuto, MetricsOfAKilledRunGoOnAsOneRun) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const std::string ck = d.file("ck"), m = d.file("m.jsonl");
  const auto args = concat(kRun, {"--plan", plan, "--steps", "8", "--save", ck, "--save-every", "3",
                                  "--resume", "auto", "--metrics", m, "--timeout", "10"});
  // Rank 1 (the loss rank, which writes the metrics) killed in the middle of step 6.
  const Proc killed = pprun(concat(args, {"--fault-kill", "1:6"}));
  ASSERT_NE(killed.exit_code(), 0) << killed.out;
  ASSERT_EQ(checkpoint_step(ck), 3) << killed.out;
  EXPECT_EQ(steps_of(m), one_to(5)) << "every finished step, each appended as it ended";
  // A line cut short, as a kill in the middle of writing it leaves one: readers skip it.
  std::ofstream(m, std::ios::app) << R"({"step":6,"loss":5.41)";
  EXPECT_EQ(losses(m).size(), 5u);
  const Proc resumed = pprun(args);
  ASSERT_EQ(resumed.exit_code(), 0) << resumed.out;
  EXPECT_NE(resumed.out.find("resuming from " + ck + "/step-00000003"), std::string::npos)
      << resumed.out;
  EXPECT_EQ(steps_of(m), one_to(8));
  const Proc whole =
      pprun(concat(kRun, {"--plan", plan, "--steps", "8", "--metrics", d.file("w.jsonl")}));
  ASSERT_EQ(whole.exit_code(), 0) << whole.out;
  expect_same_training(m, d.file("w.jsonl"));
  // A fresh run (no checkpoint to resume) starts the file anew.
  const Proc fresh = pprun(concat(kRun, {"--plan", plan, "--steps", "2", "--metrics", m}));
  ASSERT_EQ(fresh.exit_code(), 0) << fresh.out;
  EXPECT_EQ(steps_of(m), one_to(2));
}

TEST(ResumeAuto, StartsFreshThenGoesOnFromTheLatestCheckpoint) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const std::string ck = d.file("ck");
  const auto args = concat(kRun, {"--plan", plan, "--steps", "6", "--save", ck, "--save-every", "2",
                                  "--resume", "auto"});
  const Proc first = pprun(concat(args, {"--stop-after", "3", "--metrics", d.file("a.jsonl")}));
  ASSERT_EQ(first.exit_code(), 0) << first.out;
  EXPECT_NE(first.out.find("no checkpoint in " + ck + " yet: starting from step 0 (--resume auto)"),
            std::string::npos)
      << first.out;
  const Proc second = pprun(concat(args, {"--metrics", d.file("b.jsonl")}));
  ASSERT_EQ(second.exit_code(), 0) << second.out;
  EXPECT_NE(second.out.find("resuming from " + ck +
                            "/step-00000003: 3 of 6 steps done (--resume "
                            "auto)"),
            std::string::npos)
      << second.out;
  EXPECT_NE(second.out.find("(steps 4-6 of 6)"), std::string::npos) << second.out;
  // Restarted once more after the end: nothing left to train, and that is a success.
  const Proc third = pprun(args);
  EXPECT_EQ(third.exit_code(), 0) << third.out;
  EXPECT_NE(third.out.find("has completed 6 steps (--steps): nothing to train"), std::string::npos)
      << third.out;
  // The two parts are the uninterrupted run.
  const Proc whole =
      pprun(concat(kRun, {"--plan", plan, "--steps", "6", "--metrics", d.file("w.jsonl")}));
  ASSERT_EQ(whole.exit_code(), 0) << whole.out;
  std::vector<double> parts = losses(d.file("a.jsonl"));
  const std::vector<double> rest = losses(d.file("b.jsonl"));
  parts.insert(parts.end(), rest.begin(), rest.end());
  EXPECT_EQ(parts, losses(d.file("w.jsonl")));
}

TEST(ResumeAuto, NeedsTheSaveDirectory) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const Proc p = pprun(concat(kRun, {"--plan", plan, "--resume", "auto"}));
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("pprun: error: --resume: auto resumes from the latest checkpoint of --save "
                       "DIR: give --save"),
            std::string::npos)
      << p.out;
}

TEST(Restart, TorchrunRestartsAKilledRankAndTheRunEndsAsAnUninterruptedOne) {
  if (std::string(TORCHRUN_BIN).empty() || !fs::exists(TORCHRUN_BIN))
    GTEST_SKIP() << "no torchrun (TORCHRUN_BIN)";
  constexpr int kSteps = 24;
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const std::string ck = d.file("ck");
  const auto args =
      concat(kRun, {"--plan", plan, "--steps", std::to_string(kSteps), "--log-every", "1",
                    "--timeout", "20", "--save", ck, "--save-every", "3", "--resume", "auto"});
  Proc tr = start(concat(
      {TORCHRUN_BIN, "--nnodes", "1", "--nproc_per_node", "4", "--max_restarts", "2",
       "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:" + std::to_string(free_port()),
       // the agent advertises this address, not the host name (which /etc/hosts may not name)
       "--local_addr", "127.0.0.1", "--monitor_interval", "1", "--no_python", PPRUN_BIN},
      concat(args, {"--dump-params", d.file("restarted"), "--metrics", d.file("m.jsonl")})));
  const auto t0 = Clock::now();
  ASSERT_TRUE(wait_until(
      tr,
      [&] {
        const int at = checkpoint_step(ck);
        return at >= 3 && last_step(tr.out, kSteps) > at;
      },
      120s))
      << tr.out;
  const auto ranks = rank_pids(tr.pid);
  ASSERT_EQ(ranks.size(), 4u) << tr.out;
  const int before = checkpoint_step(ck);
  kill(ranks.at(2), SIGKILL);
  finish(tr, 240s, t0);
  ASSERT_EQ(tr.exit_code(), 0) << tr.out;
  // The restarted ranks said where they went on from.
  EXPECT_NE(tr.out.find(fmt::format("resuming from {}/step-", ck)), std::string::npos) << tr.out;
  EXPECT_GE(checkpoint_step(ck), before);
  EXPECT_EQ(checkpoint_step(ck), kSteps);
  const Proc straight = pprun(
      concat(concat(kRun, {"--plan", plan}), {"--steps", std::to_string(kSteps), "--dump-params",
                                              d.file("straight"), "--metrics", d.file("w.jsonl")}));
  ASSERT_EQ(straight.exit_code(), 0) << straight.out;
  EXPECT_EQ(expect_dumps_within(d.file("restarted"), d.file("straight"), 0.0).cmp.compared, 75u);
  // The restarted ranks dropped the lines past the checkpoint and went on in the same file.
  EXPECT_EQ(steps_of(d.file("m.jsonl")), one_to(kSteps));
  expect_same_training(d.file("m.jsonl"), d.file("w.jsonl"));
}

}  // namespace
