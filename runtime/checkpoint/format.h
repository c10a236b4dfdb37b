// Checkpoints (docs/checkpoints.md): a directory DIR of step directories, each written crash-safely
// and readable by any safetensors reader. No LibTorch.
//
//   DIR/latest                              the step directory to resume from ("step-00000006")
//   DIR/step-00000006/
//     model-00001-of-00004.safetensors      the parameters pipeline rank 0 owns, by global name
//     ...                                   (a parameter held by several ranks: by the lowest)
//     optimizer-00001-of-00004.safetensors  their AdamW moments: "<name>.exp_avg", ".exp_avg_sq"
//     model.safetensors.index.json          {"metadata": {...}, "weight_map": {name: file}}
//     optimizer.safetensors.index.json      the same for the optimizer's tensors
//     trainer_state.json                    format, version, step, model, layout, plan, training
//                                           options, data, RNG state
//
// Writing: rank 0 makes DIR/.tmp-step-N (prepare_checkpoint), every writing rank writes and fsyncs
// its two shards there (write_checkpoint_shard), then rank 0 writes the indexes and the state,
// fsyncs, renames the directory to DIR/step-N, fsyncs DIR and only then points DIR/latest at it
// (commit_checkpoint). A step directory therefore exists only complete, and `latest` only ever
// names a complete one; a crash at any point leaves the previous checkpoint as it was.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "pprt/family.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/data/token_file.h"
#include "runtime/job.h"

namespace pprt {

inline constexpr int kCheckpointVersion = 1;

// What trainer_state.json holds.
struct CheckpointState {
  int64_t step = 0;       // optimizer steps completed
  Config model;           // the model's configuration (pprt::Family's: a JSON object)
  std::string layout;     // the layout the model was trained with (its text)
  std::string plan_json;  // the plan it was trained with (ppcompile's JSON)
  int pp = 1, dp = 1;     // pipeline ranks (one shard each) and data-parallel replicas
  TrainOptions train;     // learning-rate schedule, AdamW, seed, data options
  DataIdentity data;      // what the data was; its position is the step (data/token_source.h)
  std::string rng_state;  // LibTorch's default CPU generator state, hex
};

std::string checkpoint_state_json(const CheckpointState& s);
// Throws ppc::UserError naming `file` and the field.
CheckpointState parse_checkpoint_state(const std::string& text, const std::string& file);

std::string step_dir_name(int64_t step);  // "step-00000006"
// "model-00001-of-00004.safetensors" for shard `index` (from 0) of `count`.
std::string shard_file_name(const std::string& kind, int index, int count);

// The step directory to resume from, given DIR or a step directory: DIR/latest's, else the newest
// complete step-* directory. Throws ppc::UserError naming DIR when it holds no checkpoint.
std::string find_checkpoint(const std::string& path);

// Whether DIR holds a checkpoint to resume from: a `latest` file or a complete step directory
// (--resume auto starts fresh otherwise). A DIR that does not exist holds none.
bool holds_checkpoint(const std::string& dir);

// A checkpoint opened for reading: its state, its indexes and the validated headers of its
// shards, checked against each other (every tensor an index names is in its shard, as F32, and
// every shard tensor is in the index). Throws ppc::UserError naming the file and the tensor or
// field.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& path);  // DIR or a step directory
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  const std::string& dir() const { return dir_; }  // the step directory
  const CheckpointState& state() const { return state_; }
  std::vector<std::string> model_tensors() const;  // sorted

  // Checks that the checkpoint holds exactly the parameters `params` (names, shapes, F32) and
  // both AdamW moments of each. Throws ppc::UserError naming the first mismatch.
  void check_params(const std::vector<ParamShape>& params) const;

  // The header of a model tensor (or, with `optimizer`, an optimizer tensor); throws
  // ppc::UserError naming the checkpoint if it has none of that name.
  const TensorInfo& info(const std::string& name, bool optimizer) const;

  // Reads a model tensor (or, with `optimizer`, an optimizer tensor such as "w.exp_avg") of
  // `shape` into `dst` (F32, `bytes` of room).
  void read(const std::string& name, bool optimizer, std::span<const int64_t> shape, void* dst,
            size_t bytes) const;
  // Where that tensor lies: reads made in the order of this key go through each file from start
  // to end, as the kernel's read-ahead expects (names in model order jump back and forth).
  // Throws ppc::UserError naming the tensor if it is not in the checkpoint.
  std::pair<size_t, uint64_t> position(const std::string& name, bool optimizer) const;

 private:
  struct Where {
    size_t file;
    const TensorInfo* info;
  };
  std::string dir_;
  CheckpointState state_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, Where> model_, optimizer_;
};

// Rank 0: creates DIR (if needed) and an empty DIR/.tmp-step-N (removing one a crashed save left);
// returns its path.
std::string prepare_checkpoint(const std::string& dir, int64_t step);

// A writing rank: its model and optimizer shards, `index` of `count`, into the temporary
// directory `tmp` (fsynced). Tensors are written from the caller's memory. `between` (fault
// injection in tests) runs after the model shard.
void write_checkpoint_shard(const std::string& tmp, int index, int count,
                            std::span<const TensorWrite> model,
                            std::span<const TensorWrite> optimizer, void (*between)() = nullptr);

// Rank 0, once every shard is written: the indexes and trainer_state.json, then the directory is
// fsynced, renamed to DIR/step-N, DIR fsynced, DIR/latest replaced atomically, and checkpoints
// older than the newest `keep` (0: keep all) removed. Returns the bytes of tensors written.
// `before_rename` (fault injection in tests) runs just before the rename.
uint64_t commit_checkpoint(const std::string& dir, const std::string& tmp,
                           const CheckpointState& state, int keep,
                           void (*before_rename)() = nullptr);

// pprun --export: every model tensor of a checkpoint (DIR or a step directory) into one
// safetensors file `out`, written atomically. With `params` (the checkpoint's model's parameters
// for its layout: Model::parameters), every tensor must be one of them and of its shape. Returns
// the number of tensors.
size_t export_checkpoint(const std::string& path, const std::string& out,
                         const std::vector<ParamShape>* params = nullptr);

}  // namespace pprt
