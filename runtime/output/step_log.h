// Output of a run: the metrics (JSON lines), the progress display.
// No LibTorch.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "runtime/job.h"

namespace pprt {

struct StepMetrics {
  int step = 0;                            // 1-based
  double loss = 0, lr = 0, grad_norm = 0;  // loss: the main next-token cross-entropy
  double step_time_s = 0;          // wall time of the step on the loss rank (replay + optimizer)
  double tokens_per_s = 0;         // global_batch * seq_len / step_time
  double elapsed_s = 0;            // since the first step began
  std::optional<double> mtp_loss;  // with m layers: the mean over MTP depths of CE_k
};

std::string metrics_json(const StepMetrics& m);

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
};

}  // namespace pprt
