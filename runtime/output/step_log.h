// What a run prints and writes as it trains: its first lines, each step's metrics (JSON lines) and
// progress (a bar or log lines), the line at the end and the summary after it. The loss rank
// writes them (or the reference). No LibTorch.
#pragma once

#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "runtime/job.h"
#include "runtime/output/metrics_file.h"
#include "runtime/output/report.h"

namespace pprt {

class TokenSource;

// The run's first lines: what runs (the schedule on its ranks and replicas, or the reference),
// the microbatches; the model, the data, the transport and the threads; where it starts from
// (with --resume).
std::string run_header(const Job& job, const TokenSource& data, const std::string& transport,
                       bool reference);

// Prints each line of `text` as "PROGRAM: LINE" (program_name()) on stdout, and flushes it.
void print_lines(const std::string& text);

// A value the model reports besides its loss, by its metrics field ("mtp_loss": pprun's MTP
// depths' mean cross-entropy; "<name>_loss" for an auxiliary loss, "<name>" for a metric).
using NamedValues = std::vector<std::pair<std::string, double>>;

struct StepMetrics {
  int step = 0;                            // 1-based
  double loss = 0, lr = 0, grad_norm = 0;  // loss: the main next-token cross-entropy
  double step_time_s = 0;         // wall time of the step on the loss rank (replay + optimizer)
  double tokens_per_s = 0;        // global_batch * seq_len / step_time (or StepStats::targets)
  double elapsed_s = 0;           // since the first step began
  NamedValues reported;           // the model's auxiliary losses and metrics (Model::reported)
  std::vector<double> compute_s;  // per global rank: its time in compute actions (no waits)
  int straggler = -1;             // the slowest rank, if at least kStragglerRatio x the median
  double straggler_ratio = 0;     // its time / the median over the ranks
  // After an evaluation (--eval-data): the loss and the reported values on the held-out data.
  std::optional<double> eval_loss;
  NamedValues eval_reported;
  std::vector<int> microbatch_order;  // StepStats's, when not data order
};

std::string metrics_json(const StepMetrics& m);

// An evaluation-only run's metrics line (--eval-only): "step" (the steps the model had trained:
// 0, or the checkpoint's), "eval_loss", "eval_<field>" for each reported value ("eval_mtp_loss"
// with MTP), "elapsed_s".
std::string eval_only_json(int step, double eval_loss, const NamedValues& eval_reported,
                           double elapsed_s);

// The loss rank's display: a progress bar on a terminal (step, loss, tokens/s, ETA), plain log
// lines otherwise.
class Progress {
 public:
  // `steps`: the last step; `done_before`: steps a resumed run had completed already.
  Progress(ProgressMode mode, int steps, int log_every, std::FILE* out, int done_before = 0);
  void update(const StepMetrics& m);
  void finish();  // ends the bar's line

 private:
  ProgressMode mode_;
  int steps_, every_, done_before_;
  std::FILE* out_;
  bool drawn_ = false;
  std::string last_eval_;  // the bar: the last evaluation's text, kept until the next one
};

// What every rank learns at the end of a step (one all-reduce): the global gradient norm, each
// microbatch's loss (computed on one rank) and reported values, and every rank's compute time.
struct StepStats {
  double grad_norm = 0;
  std::vector<double> losses;
  // Per value the model reports (Model::reported), per microbatch: the mean of what its layers
  // added (over the layers, ranks and replicas that added it), nullopt where none did.
  std::vector<std::vector<std::optional<double>>> reported;
  std::vector<double> compute_s;  // per global rank (empty for the reference)
  // Rows of documents (--pack, --pad, --varlen): the step's predicted targets (the loss rank's
  // replica's, times the replicas), which tokens_per_s then counts; 0: every slot is a target.
  double targets = 0;
  std::vector<int> microbatch_order;  // the plan's (data microbatch per plan microbatch); or empty
};

// An evaluation's result (every rank's, after one all-reduce): the mean main cross-entropy over
// the held-out sequences, and the mean of each reported value (nullopt where nothing added it).
struct EvalStats {
  double loss = 0;
  std::vector<std::optional<double>> reported;
};

// The loss rank's output as it trains: the metrics file (each step's line appended as the step
// ends: output/metrics_file.h) and the progress display, then the line that ends the run. Does
// nothing where not `active` (the other ranks).
class StepLog {
 public:
  StepLog(const Job& job, bool active);
  // Starts the clock (elapsed time, the final line's duration): before the first step.
  void start() { start_ = Clock::now(); }
  // `eval`: the evaluation after this step, if one ran.
  void step(int step, const StepStats& stats, double step_time_s,
            const std::optional<EvalStats>& eval = std::nullopt);
  // --eval-only: the one evaluation, of the model after `done` steps (its metrics line, and
  // "PROGRAM: eval loss X after N steps" on stdout).
  void evaluated(int done, const EvalStats& eval);
  // The metrics written so far are made durable (after a checkpoint is saved).
  void sync();
  // Syncs the metrics and prints "PROGRAM: done: N steps in S s, loss A -> B" (nothing more after
  // an evaluation-only run).
  void finish();
  // The ranks' compute time per step over the last steps (the run's first step left out).
  ComputeBalance balance() const {
    return compute_balance(std::vector<std::vector<double>>(compute_.begin(), compute_.end()));
  }

 private:
  using Clock = std::chrono::steady_clock;
  const Job& job_;
  bool active_;
  std::vector<Reported> reported_;  // the model's auxiliary losses and metrics, for the layout
  Progress progress_;
  std::optional<MetricsFile> metrics_;
  Clock::time_point start_;
  double first_loss_ = 0, last_loss_ = 0;
  std::optional<double> last_eval_;  // the last evaluation's loss (the bar and the final line)
  std::deque<std::vector<double>> compute_;  // per step kept, every rank's compute seconds
};

}  // namespace pprt
