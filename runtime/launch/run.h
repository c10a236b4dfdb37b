// pprun's top level: turns the command line's options into a Job, checks everything the user
// gave before any compute, and runs it: the unpipelined reference, one rank under torchrun or
// SLURM, or (by default) one process per rank spawned on this machine. No LibTorch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pprt/family.h"
#include "runtime/job.h"
#include "runtime/launch/env.h"

namespace pprt {

struct RunOptions {
  std::string plan_path;
  bool reference = false;
  std::string layout;               // --reference without a plan
  std::optional<int> microbatches;  // must agree with the plan
  Family family;                    // the model's: pprun's own, or a program's
  OptionValues model;               // its options as given (--vocab, --seq-len among them)
  TrainOptions train;
  std::string eval_data;                        // --eval-data FILE
  std::optional<int> eval_every, eval_batches;  // --eval-every N, --eval-batches K
  bool eval_only = false;                       // --eval-only
  OutputOptions out;
  std::string progress = "auto";  // auto, bar, lines, none
  std::string device = "cpu";
  double timeout_s = 300;
  double step_timeout_s = 0;  // 0: proportional to the step (train/step_timeout.h)
  int threads = 0;            // 0 = cores / ranks on this machine
  std::string
      fault_kill;  // "RANK:STEP[:save|commit|hang]" (tests): that rank kills itself mid-step
  std::string fault_slow;   // "RANK:FACTOR" (tests): that rank computes FACTOR times slower
  bool seed_given = false;  // --seed was on the command line
  int dp = 1;               // --dp: data-parallel replicas
  int ep = 1;               // --ep: expert parallelism, inside --dp (launch/expert_groups.h)
  int stop_after = 0;       // --stop-after
  std::string save_dir;     // --save
  int save_every = 0;       // --save-every
  int keep = 0;             // --keep
  bool save_async = false;  // --save-async
  std::string resume_dir;   // --resume: DIR, or "auto" (--save's latest checkpoint, if any)
  std::vector<std::string> export_args;       // --export DIR OUT
  std::string export_format = "safetensors";  // --format: safetensors (one file) or hf
  std::string dtype = "fp32";                 // --dtype: training's; --export --format hf's
  std::string recompute, offload;             // --recompute, --offload (launch/memory_flags.h)
  bool offload_test_host_copy = false;        // --offload-test-host-copy
  bool replan_lengths = false;                // --replan-lengths
  std::string replan_costs;                   // --replan-costs FILE
  std::string max_shard_size = "5GB";         // --max-shard-size (--format hf)
  std::string init_from;                      // --init-from DIR (Hugging Face)
  std::string exe;                            // this program (spawning)
  std::vector<std::string> args;              // its arguments, passed on to spawned ranks
};

// Checks and resolves the options (plan, model, data, device, ...). Throws ppc::UserError.
// `env` is the rank environment, if any (the ranks on this machine decide the default thread
// count).
Job make_job(const RunOptions& o, const std::optional<LaunchEnv>& env);

// Runs pprun; returns the process exit code. Throws ppc::UserError for bad input (exit 2).
int run(const RunOptions& o, const GetEnv& getenv);

}  // namespace pprt
