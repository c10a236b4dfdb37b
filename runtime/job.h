// What one pprun run trains and writes: plain data shared by the launcher, the ranks and the
// reference. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "compiler/plan.h"
#include "runtime/model_config.h"
#include "runtime/token_file.h"

namespace pprt {

struct TrainOptions {
  int steps = 40;
  int global_batch = 16;      // sequences per step; a multiple of the plan's microbatches
  double lr = 3e-3;           // peak learning rate
  double min_lr_ratio = 0.1;  // the cosine decays to lr * min_lr_ratio
  int warmup = -1;            // linear warm-up steps; -1 = steps / 10
  double weight_decay = 0.1;  // AdamW, on matrices only
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;             // max global gradient norm; 0 = no clipping
  double mtp_loss_weight = 0.1;  // lambda: the loss is CE_main + lambda / D * sum_k CE_k
  uint64_t seed = 1234;          // initialisation and data
  std::string data_path;         // empty = synthetic language
  DataFormat data_format = DataFormat::Auto;

  int warmup_steps() const { return warmup >= 0 ? warmup : steps / 10; }
};

// Linear warm-up to lr over warmup_steps(), then cosine decay to lr * min_lr_ratio at the last
// step.
double learning_rate(const TrainOptions& o, int step);

enum class ProgressMode : uint8_t { Bar, Lines, None };

struct OutputOptions {
  std::string metrics_path;  // JSON lines, one per step (written by the loss rank)
  std::string trace_path;    // Chrome trace of the real execution
  std::string dump_dir;      // per-parameter dump: DIR/params.rank<R>.jsonl
  ProgressMode progress = ProgressMode::Lines;
  int log_every = 0;  // Lines: every N steps; 0 = about 20 lines per run
};

struct Job {
  ppc::Plan plan;  // verified and lowered; for --reference, the layout and microbatches it gives
  ModelConfig model;
  TrainOptions train;
  OutputOptions out;
  std::string device = "cpu";  // "cpu" or "cuda"
  std::chrono::milliseconds timeout{300'000};
  int threads = 1;         // intra-op threads per rank
  int kill_rank = -1;      // fault injection (tests): this rank raises SIGKILL ...
  int64_t kill_step = -1;  // ... in the middle of this step
};

// The rank that holds the loss (the last stage of the model): it prints progress and writes the
// metrics, the trace and the summary.
int loss_rank(const ppc::Plan& plan);

}  // namespace pprt
