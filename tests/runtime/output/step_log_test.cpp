// What a run prints as it trains (runtime/output/step_log.h): the metrics line and the progress
// lines; the metrics file as it grows (runtime/output/metrics_file.h).

#include <gtest/gtest.h>
#include <cstdio>
#include <cstdlib>

#include "file_test_util.h"
#include "runtime/output/metrics_file.h"
#include "runtime/output/step_log.h"

namespace {

// Each line reaches the file as it is appended; the file is opened at the first line only (a run
// that stops before it leaves the file as it was); a fresh run empties it; a resumed one keeps
// the lines up to its step and drops the rest, a half-written or unreadable line and what follows
// it too.
TEST(StepLog, MetricsFileAppendsEachLineAndKeepsWhatAResumeKeeps) {
  filetest::TempDir d;
  const std::string old = "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4,\"lo";
  const std::string path = d.write("m.jsonl", old);
  {
    pprt::MetricsFile fresh(path, -1);
    EXPECT_EQ(filetest::read_file(path), old) << "opened before its first line";
    fresh.append(R"({"step":1,"loss":5.5})");
    EXPECT_EQ(filetest::read_file(path), "{\"step\":1,\"loss\":5.5}\n");
    fresh.append(R"({"step":2,"loss":5.4})");
    fresh.sync();
    EXPECT_EQ(filetest::read_file(path), "{\"step\":1,\"loss\":5.5}\n{\"step\":2,\"loss\":5.4}\n");
  }
  d.write("m.jsonl", old);
  {
    pprt::MetricsFile resumed(path, 2);  // from a checkpoint of step 2
    resumed.append(R"({"step":3})");
    EXPECT_EQ(filetest::read_file(path), "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  }
  d.write("m.jsonl", old);
  {
    pprt::MetricsFile resumed(path, 3);  // the cut line goes, with nothing after it
    resumed.append(R"({"step":4})");
    EXPECT_EQ(filetest::read_file(path),
              "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":4}\n");
  }
  d.write("m.jsonl", "{\"step\":1}\nnot json\n{\"step\":2}\n");
  {
    pprt::MetricsFile resumed(path, 5);  // a line that does not parse: it and the rest go
    resumed.append(R"({"step":6})");
    EXPECT_EQ(filetest::read_file(path), "{\"step\":1}\n{\"step\":6}\n");
  }
  {
    pprt::MetricsFile created(d.file("new.jsonl"), 3);  // resumed, no file yet
    created.append(R"({"step":4})");
    EXPECT_EQ(filetest::read_file(d.file("new.jsonl")), "{\"step\":4}\n");
  }
  pprt::MetricsFile pipe("/dev/null", -1);  // not a regular file: only appended to
  pipe.append("{}");
  pprt::MetricsFile nowhere(d.file("no/such/dir/m.jsonl"), -1);
  EXPECT_EQ(
      filetest::user_error([&] { nowhere.append("{}"); }),
      "--metrics: cannot open '" + d.file("no/such/dir/m.jsonl") + "': No such file or directory");
}

TEST(StepLog, MetricsLineAndProgressLines) {
  pprt::StepMetrics m{3, 2.5, 1e-3, 0.75, 0.5, 2048, 1.5, {}, {}, -1, 0, {}, {}, {}};
  EXPECT_EQ(
      pprt::metrics_json(m),
      R"({"step":3,"loss":2.5,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5})");
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  pprt::Progress p(pprt::ProgressMode::Lines, 4, 2, f);
  for (int s = 1; s <= 4; ++s)
    p.update(pprt::StepMetrics{s, 5.0 - s, 1e-3, 1, 0.5, 2048, 0.5 * s, {}, {}, -1, 0, {}, {}, {}});
  p.finish();
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  EXPECT_EQ(out,
            "step 1/4 loss 4.0000 lr 0.001 grad-norm 1.000 tok/s 2.0k eta 0:02\n"
            "step 2/4 loss 3.0000 lr 0.001 grad-norm 1.000 tok/s 2.0k eta 0:01\n"
            "step 4/4 loss 1.0000 lr 0.001 grad-norm 1.000 tok/s 2.0k eta 0:00\n");
  // Every rank's compute time, and the straggler when there is one.
  pprt::StepMetrics c = m;
  c.compute_s = {0.01, 0.03, 0.011};
  EXPECT_EQ(
      pprt::metrics_json(c),
      R"({"step":3,"loss":2.5,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5,"compute_s":[0.01,0.03,0.011]})");
  c.straggler = 1;
  c.straggler_ratio = 2.5;
  EXPECT_EQ(
      pprt::metrics_json(c),
      R"({"step":3,"loss":2.5,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5,"compute_s":[0.01,0.03,0.011],"straggler":{"rank":1,"ratio":2.5}})");
  // With multi-token prediction (pprun's auxiliary loss "mtp"): its loss beside the main one, in
  // the file and on the line.
  m.reported = {{"mtp_loss", 2.75}};
  m.step = 4;
  EXPECT_EQ(
      pprt::metrics_json(m),
      R"({"step":4,"loss":2.5,"mtp_loss":2.75,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5})");
  f = open_memstream(&buf, &len);
  pprt::Progress q(pprt::ProgressMode::Lines, 4, 2, f);
  q.update(m);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, len),
            "step 4/4 loss 2.5000 mtp-loss 2.7500 lr 0.001 grad-norm 0.750 tok/s 2.0k eta 0:00\n");
  std::free(buf);
  // After an evaluation (--eval-data): eval_loss and eval_mtp_loss after the training losses,
  // and a line even at a step that would not have had one.
  m.eval_loss = 3.25;
  m.eval_reported = {{"mtp_loss", 3.5}};
  EXPECT_EQ(
      pprt::metrics_json(m),
      R"({"step":4,"loss":2.5,"mtp_loss":2.75,"eval_loss":3.25,"eval_mtp_loss":3.5,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5})");
  m.step = 3;
  f = open_memstream(&buf, &len);
  pprt::Progress e(pprt::ProgressMode::Lines, 8, 2, f);
  e.update(m);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, len),
            "step 3/8 loss 2.5000 mtp-loss 2.7500 eval-loss 3.2500 eval-mtp-loss 3.5000 lr 0.001 "
            "grad-norm 0.750 tok/s 2.0k eta 0:03\n");
  std::free(buf);
  // Any number of a model's own: auxiliary losses ("<name>_loss") and metrics ("<name>"), each by
  // name, in the order the model declares them.
  m.reported = {{"load_balance_loss", 0.125}, {"mtp_loss", 2.75}, {"dropped_tokens", 0.5}};
  m.eval_reported = {{"load_balance_loss", 0.25}, {"dropped_tokens", 0.75}};
  EXPECT_EQ(
      pprt::metrics_json(m),
      R"({"step":3,"loss":2.5,"load_balance_loss":0.125,"mtp_loss":2.75,"dropped_tokens":0.5,"eval_loss":3.25,"eval_load_balance_loss":0.25,"eval_dropped_tokens":0.75,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5})");
  f = open_memstream(&buf, &len);
  pprt::Progress n(pprt::ProgressMode::Lines, 8, 2, f);
  n.update(m);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, len),
            "step 3/8 loss 2.5000 load-balance-loss 0.1250 mtp-loss 2.7500 dropped-tokens 0.5000 "
            "eval-loss 3.2500 eval-load-balance-loss 0.2500 eval-dropped-tokens 0.7500 lr 0.001 "
            "grad-norm 0.750 tok/s 2.0k eta 0:03\n");
  std::free(buf);
  // An evaluation-only run's line (--eval-only): the step it evaluated after, no training fields.
  EXPECT_EQ(pprt::eval_only_json(0, 5.5, pprt::NamedValues{}, 0.25),
            R"({"step":0,"eval_loss":5.5,"elapsed_s":0.25})");
  EXPECT_EQ(pprt::eval_only_json(40, 5.5, {{"mtp_loss", 5.75}}, 0.25),
            R"({"step":40,"eval_loss":5.5,"eval_mtp_loss":5.75,"elapsed_s":0.25})");
}

}  // namespace
