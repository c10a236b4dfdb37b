// The step's statistics gathered over the ranks (runtime/train/trainer.cpp's step loop): the
// gradient norm, each microbatch's loss and reported values, every rank's compute time in one
// all-reduce (on the fused path with clipping and AdamW queued after it), and validation's forward
// passes (--eval-data) averaged the same way.
//
// Included only by LibTorch translation units.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>

#include "runtime/output/step_log.h"

namespace pprt {

class FusedAdamW;
class ParamStore;
class StepGradients;
class TokenSource;
class Transport;
struct Job;
struct StepReport;

// Where the trainer sits in the job: the rows of each step's global batch it trains on (replica
// `replica` of `replicas`), and where the gradient norm and the losses are summed.
struct TrainerPlace {
  int replica = 0, replicas = 1;
  Transport* world = nullptr;  // every rank (null: alone)
  int rank = 0;                // in `world`
  bool counts_norm = true;     // its gradients count in the norm (replica 0's: after data
                               // parallelism's average every replica holds the same)
  const std::unordered_set<std::string>* counted_elsewhere = nullptr;  // shared parameters
  bool counts_expert_norm = true;  // its expert parameters' (--ep: the first ep replicas' shards)
};

// The work between replays on the fused path (fused_step.h), queued between the all-reduce of
// the step's statistics and the host's reading of them.
struct FusedUpdate {
  FusedAdamW* adamw;
  double lr, clip;
};

// The squared gradient norm (shared parameters counted once), each microbatch's loss (computed on
// one rank; averaged over the replicas) and reported values (each a sum and a count over the
// layers, ranks and replicas that added it), and every rank's compute time (each in its own slot),
// summed over every rank in one all-reduce. `own_ns`: the time spent before the all-reduce (the
// rank's own work, --profile's "optimizer"; on a GPU what the host saw).
// With `fused` the norm is fused_step.h's, and its update (clipping, AdamW) is queued after the
// all-reduce and before the statistics are read back: on a GPU the host then waits for the norm
// and the all-reduce only (the one synchronisation between replays), while AdamW runs; the
// queuing counts in `own_ns`.
StepStats gather_stats(ParamStore& store, const StepReport& rep, const Job& job,
                       const TrainerPlace& place, const c10::Device& device,
                       std::chrono::milliseconds timeout, int64_t& own_ns,
                       std::optional<FusedUpdate> fused = std::nullopt);

// Validation (--eval-data): job.eval.batches global batches of held-out sequences (batch k holds
// sequences [k G, (k + 1) G), this replica its share of them), each run forward only; the mean
// of their microbatches' losses over every rank, and of each reported value over what added it
// (one all-reduce).
EvalStats evaluate(const Job& job, const TrainerPlace& place, StepGradients& grads,
                   const TokenSource& data, const c10::Device& device);

}  // namespace pprt
