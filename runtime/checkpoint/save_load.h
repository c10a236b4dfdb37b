// A rank's side of checkpoints (format.h, docs/checkpoints.md): saving, collectively, the
// parameters it owns with their AdamW moments (synchronously, or in the background while training
// goes on), and loading its parameters and AdamW state from a checkpoint of the same model saved
// under any plan (parameters are found by global name). Included only by LibTorch translation
// units.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <c10/core/Device.h>

#include "runtime/checkpoint/format.h"
#include "runtime/data/token_source.h"
#include "runtime/job.h"
#include "runtime/model/stage.h"

namespace torch::optim {
class AdamW;
}

namespace pprt {

class Store;
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
  // (--ep E: shard pipeline rank x E + its expert shard, of pp x E; the replicas after the first
  // write their expert parameters alone, experts_only)
  bool experts_only = false;
  // Parameters this rank holds but another writes (shared ones, written by their lowest rank).
  const std::unordered_set<std::string>* not_owned = nullptr;
  std::string plan_json;          // the plan, as the checkpoint records it
  c10::Device device{c10::kCPU};  // where the parameters are (the saves' group reduces there)
};

struct SaveResult {
  double seconds = 0;  // this rank's time in the save (training paused)
  double waited = 0;   // of it, waiting for the previous background save to be written
  uint64_t bytes = 0;  // tensor bytes this rank wrote
};

// Every rank calls it after the optimizer step that completes `step` steps. Rank 0 prepares the
// temporary directory and commits it; the writing ranks write their shards in between.
SaveResult save_checkpoint(const SaveContext& ctx, int64_t step);

// The checkpoints of a run, saved after the optimizer steps that complete a save step:
//  - synchronously (save_checkpoint): training waits until the checkpoint is committed;
//  - asynchronously (--save-async): the rank's parameters and AdamW moments are copied to host
//    memory (buffers made when the saver is, kept from one save to the next), then a thread of
//    its own, at a lower priority than training's, writes them and commits while training goes
//    on: rank 0 prepares the temporary directory, the writing ranks
//    write their shards, rank 0 commits, the ranks agreeing on each stage's success with an
//    all-reduce over `group`, a process group of every rank that only the saves use. A save
//    first waits for the previous one. The files, and the crash safety, are those of a
//    synchronous save (format.h); a failed background save stops the rank at its next check().
class CheckpointSaver {
 public:
  // `group`: the saves' process group (async, several ranks; else null).
  CheckpointSaver(const SaveContext& ctx, bool async, std::shared_ptr<Transport> group);
  // Waits for a save in flight, ignoring its failure; while the rank is failing (an exception
  // unwinds the trainer) it leaves the save to finish or fail on its own.
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // The save after the optimizer step that completes `step` steps; seconds: training's pause.
  SaveResult save(int64_t step);
  // Throws the failure of a background save, if one failed (the trainer asks after each step).
  void check();
  // Waits for the save in flight; throws its failure.
  void finish();
  // A background save is being written.
  bool writing() const;
  // Per background save finished, the seconds from its start to its commit (async only).
  std::vector<double> write_seconds() const;

 private:
  struct Background;  // what the writing thread uses: it may outlive the saver
  static void write(const std::shared_ptr<Background>& bg, int64_t step);
  void join();

  SaveContext ctx_;
  bool async_;
  std::shared_ptr<Background> bg_;
  std::thread thread_;
};

// Every rank must start from the same checkpoint, or every rank fresh: each resolves --resume by
// itself, and with --resume auto a checkpoint committed in between (another job saving to the
// same directory) would split them. Rank 0 publishes its start in `store`; on another rank that
// starts elsewhere, throws ppc::UserError naming both.
void check_same_start(Store& store, int rank, const Job& job);

// Sets every parameter of `store` and its AdamW state (moments, step count) from `ckpt`, and
// LibTorch's default generator state. Returns the bytes read.
uint64_t load_checkpoint(const Checkpoint& ckpt, ParamStore& store, torch::optim::AdamW& opt);

}  // namespace pprt
