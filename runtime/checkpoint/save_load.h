// A rank's side of checkpoints (format.h, docs/checkpoints.md): saving, collectively, the
// parameters it owns with their AdamW moments, and loading its parameters and AdamW state from a
// checkpoint of the same model saved under any plan (parameters are found by global name).
// Included only by LibTorch translation units.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>

#include "runtime/checkpoint/format.h"
#include "runtime/data/token_source.h"
#include "runtime/job.h"
#include "runtime/model/stage.h"

namespace torch::optim {
class AdamW;
}

namespace pprt {

class Transport;

struct SaveContext {
  const Job* job = nullptr;
  ParamStore* store = nullptr;
  torch::optim::AdamW* opt = nullptr;
  const TokenSource* data = nullptr;
  Transport* world = nullptr;  // all ranks (null: a single process)
  int rank = 0;                // in `world`
  bool writes = true;          // this rank writes a shard (data-parallel replica 0 only)
  int shard = 0, shards = 1;   // its pipeline rank, and the pipeline's ranks
  // Parameters this rank holds but another writes (shared ones, written by their lowest rank).
  const std::unordered_set<std::string>* not_owned = nullptr;
  std::string plan_json;  // the plan, as the checkpoint records it
};

struct SaveResult {
  double seconds = 0;  // this rank's time in the save (training paused)
  uint64_t bytes = 0;  // tensor bytes this rank wrote
};

// Every rank calls it after the optimizer step that completes `step` steps. Rank 0 prepares the
// temporary directory and commits it; the writing ranks write their shards in between.
SaveResult save_checkpoint(const SaveContext& ctx, int64_t step);

// Sets every parameter of `store` and its AdamW state (moments, step count) from `ckpt`, and
// LibTorch's default generator state. Returns the bytes read.
uint64_t load_checkpoint(const Checkpoint& ckpt, ParamStore& store, torch::optim::AdamW& opt);

}  // namespace pprt
