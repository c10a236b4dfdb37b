// What one pprun run trains and writes: plain data shared by the launcher, the ranks and the
// reference. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compiler/memory_mode.h"
#include "compiler/plan.h"
#include "pprt/family.h"
#include "runtime/data/documents.h"
#include "runtime/data/token_file.h"
#include "runtime/model/model_facts.h"

namespace ppc {
struct CostModel;  // compiler/cost_model.h
}

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
  // Documents (runtime/data/documents.h, docs/pprun.md "Documents"): --eod (-1: none), --pack or
  // --pad (RowMode), --varlen's --granule (0: off; each microbatch as long as its longest
  // sequence, in multiples of it).
  int64_t eod = -1;
  RowMode rows = RowMode::Windows;
  int granule = 0;
  // --varlen's length buckets (--no-length-buckets: off): each replica's rows of a step in the
  // order of their lengths before they are cut into microbatches (TokenSource::bucket_by_length).
  bool length_buckets = true;
  // --dtype: of activations and matrix products (bf16: mixed precision, with fp32 master weights,
  // gradients and AdamW state; pprt::MixedPrecision, runtime/model/precision.h, docs/gpu.md).
  Precision dtype = Precision::Fp32;
  // --overlap: an OVERLAP_F_B's forward and backward concurrently (train/overlap.h), or in
  // sequence.
  bool overlap = true;

  int warmup_steps() const { return warmup >= 0 ? warmup : steps / 10; }
};

// Linear warm-up to lr over warmup_steps(), then cosine decay to lr * min_lr_ratio at the last
// step.
double learning_rate(const TrainOptions& o, int step);

// Validation (--eval-data, docs/pprun.md "Validation"): forward-only passes of the plan over
// held-out data after every `every` steps and after the last one; with --eval-only, once, of the
// model as it starts (fresh, --init-from or --resume), and no step.
struct EvalOptions {
  std::string data_path;  // empty: no evaluation (read with --data-format)
  int every = 0;          // also after every N steps; 0: only after the last
  int batches = 0;        // global batches per evaluation (resolved by make_job)
  bool only = false;      // --eval-only: evaluate the starting model, train nothing, save nothing
  bool enabled() const { return !data_path.empty(); }
  // Whether to evaluate once `done` steps are done (`last`: the run's last step).
  bool due(int done, int last) const {
    return enabled() && (done == last || (every > 0 && done % every == 0));
  }
};

enum class ProgressMode : uint8_t { Bar, Lines, None };

struct OutputOptions {
  std::string metrics_path;  // JSON lines, one per step (written by the loss rank)
  std::string trace_path;    // Chrome trace of the real execution
  std::string profile_path;  // --profile: the measured costs (output/profile.h)
  std::string dump_dir;      // per-parameter dump: DIR/params.rank<R>.jsonl
  ProgressMode progress = ProgressMode::Lines;
  int log_every = 0;  // Lines: every N steps; 0 = about 20 lines per run
};

// Where the ranks of a job sit: named dimensions, numbered as Megatron-LM numbers its ranks (its
// order "tp-cp-ep-dp-pp", innermost first: the innermost varies fastest between neighbouring
// ranks). Global rank g's coordinate along dimension d is (g / stride(d)) % size(d), stride(d) the
// product of the sizes inside d. Here, innermost first:
//  - ep: expert parallelism, inside the data-parallel ranks as Megatron-Core's expert groups are
//    (room for it: size 1, no rank runs experts apart yet);
//  - dp: data-parallel replicas of the plan's pipeline, so that the ranks of one pipeline stage
//    across replicas are neighbours (often one machine);
//  - pp: the plan's pipeline ranks, outermost: a pipeline spans the machines.
// A group of ranks is named by a dimension: the ranks that differ from a rank along it only.
class Topology {
 public:
  struct Dim {
    std::string name;
    int size = 1;
  };
  explicit Topology(int pp = 1, int dp = 1, int ep = 1);

  const std::vector<Dim>& dims() const { return dims_; }  // innermost first
  int size(const std::string& dim) const;                 // 1 for a dimension it lacks
  int world() const;
  int coordinate(int g, const std::string& dim) const;  // 0 for a dimension it lacks
  // The rank at `g`'s coordinates but `coordinate` along `dim`.
  int along(int g, const std::string& dim, int coordinate) const;
  // `g`'s group along `dim`: the ranks that differ from it only there, in that coordinate's order.
  std::vector<int> group(int g, const std::string& dim) const;

  // pprun's names for its two dimensions.
  int pp() const { return size("pp"); }
  int dp() const { return size("dp"); }
  int pipeline_rank(int g) const { return coordinate(g, "pp"); }
  int replica(int g) const { return coordinate(g, "dp"); }
  int global(int pipeline_rank, int replica) const {
    return along(along(0, "pp", pipeline_rank), "dp", replica);
  }
  std::vector<int> pipeline(int replica) const;        // a replica's ranks, pipeline order
  std::vector<int> replicas(int pipeline_rank) const;  // a pipeline rank in every replica

 private:
  int stride(const std::string& dim) const;  // 0 for a dimension it lacks
  std::vector<Dim> dims_;
};

struct Job {
  ppc::Plan plan;  // verified and lowered; for --reference, the layout and microbatches it gives
  int dp = 1;      // data-parallel replicas of the plan's pipeline
  // Expert parallelism (--ep): each MoE layer's routed experts sharded over this many
  // neighbouring replicas (a divisor of dp; RankGroups::experts_forward).
  int ep = 1;
  Topology topology() const { return Topology(plan.pp(), dp); }
  Family family;     // the model's family: pprun's own (runtime/models/llama) or a program's
  Config model;      // its configuration (Family::configured)
  ModelSetup setup;  // vocab and seq_len, of `model`
  ModelFacts facts;  // the model the family makes of `model`: its name, symbols and hooks
  TrainOptions train;
  EvalOptions eval;
  OutputOptions out;
  std::string device = "cpu";  // "cpu" or "cuda"
  // What each stage keeps between a forward and its backward (--recompute, --offload over the
  // plan's "memory": launch/memory_flags.h); empty: everything.
  ppc::MemoryPolicy memory;
  bool offload_host_copy = false;  // on the CPU, offload with a host copy (tests)
  // --replan-lengths (train/replan.h): each step's microbatch order planned for its lengths under
  // this cost model; null: the plan's microbatch_order every step.
  std::shared_ptr<const ppc::CostModel> replan_costs;
  // How long a rank waits for a peer: `timeout` (--timeout) in the first step and outside the
  // steps, `step_timeout` (--step-timeout; 0: ten times the slowest step, at least 10 s) in the
  // steps after it (train/step_timeout.h).
  std::chrono::milliseconds timeout{300'000};
  std::chrono::milliseconds step_timeout{0};
  int threads = 1;         // intra-op threads per rank
  int kill_rank = -1;      // fault injection (tests): this rank raises SIGKILL ...
  int64_t kill_step = -1;  // ... in the middle of this step (0-based) or of the save after it
  enum class KillAt : uint8_t {
    Step,    // in the middle of the step's actions
    Save,    // during the save after it: its model shard written, its optimizer shard not
    Commit,  // rank 0, committing that save: everything written, before the rename
    Hang,    // or, instead of dying, stops in the middle of the step in a host call that never
             // returns (its process and connections alive), as a CUDA call that hangs would
  } kill_at = KillAt::Step;
  int slow_rank = -1;      // fault injection (tests): this rank's compute actions take ...
  double slow_factor = 1;  // ... this many times as long (a straggler)

  // Checkpoints (docs/checkpoints.md).
  int stop_after = 0;  // --stop-after: stop once this many steps are done (0: --steps);
                       // --steps still sets the learning-rate schedule
  int last_step() const { return stop_after > 0 ? std::min(stop_after, train.steps) : train.steps; }
  std::string save_dir;      // --save DIR: at the end and every save_every steps
  int save_every = 0;        // 0: only at the end
  int keep = 0;              // the newest checkpoints kept; 0: all
  bool save_async = false;   // --save-async: written in the background while training goes on
  std::string resume_path;   // --resume: the step directory to start from (resolved)
  std::string init_from;     // --init-from: a Hugging Face model directory (checkpoint/hf.h)
  HfFormat hf_format;        // and the model as it holds it
  int64_t start_step = 0;    // steps the checkpoint had completed
  bool resume_auto = false;  // --resume auto: from save_dir's latest checkpoint, if it has one
  // --resume: the --dtype the checkpoint was trained with.
  Precision resumed_dtype = Precision::Fp32;
};

// The rank that holds the loss (the last stage of the model): it prints progress and writes the
// metrics, the trace and the summary.
int loss_rank(const ppc::Plan& plan);

}  // namespace pprt
