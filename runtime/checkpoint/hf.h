// Hugging Face model directories in and out (docs/huggingface.md), for any model that gives its
// Hugging Face form (pprt::Model::hugging_face: config.json and its tensors' names; pprun's own:
// runtime/models/llama/hf_mapping.h). No LibTorch.
//
// In (--init-from DIR): DIR/config.json, which the family reads (pprt::Family::from_hugging_face),
// and DIR/model.safetensors or the shards of DIR/model.safetensors.index.json, in F32, BF16 or F16
// (read as float32). Every tensor the model needs is checked (present, shape, dtype) and every
// tensor the files hold must be one of the model's or a leftover its form names, before anything
// runs; each problem is a ppc::UserError naming the file and the tensor or field.
//
// Out (--export CKPT OUT_DIR --format hf): config.json and model.safetensors (or shards with
// model.safetensors.index.json above a size), which transformers'
// AutoModelForCausalLM.from_pretrained loads with no missing or unexpected keys.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pprt/family.h"
#include "runtime/checkpoint/safetensors.h"

namespace pprt {

// A Hugging Face model directory: its config.json, then its safetensors files, their headers
// validated.
class HfDirectory {
 public:
  // Reads DIR/config.json (a JSON object). Throws ppc::UserError.
  explicit HfDirectory(const std::string& dir);
  ~HfDirectory();
  HfDirectory(HfDirectory&&) noexcept;
  HfDirectory& operator=(HfDirectory&&) noexcept;

  const std::string& dir() const { return dir_; }
  const std::string& config_file() const { return config_file_; }  // DIR/config.json
  const nlohmann::json& config() const { return config_; }

  // Opens the weight files (model.safetensors, or the index's shards) and validates their headers
  // and the index against them.
  void open_weights();
  // Every tensor of `format` is in the files with its shape and a float dtype, and every tensor
  // of the files is one of them or a leftover.
  void check_weights(const HfFormat& format) const;
  // Reads `t` as float32 into `dst` (its shape's elements; transposed back if it is stored so).
  void read(const HfTensor& t, float* dst) const;
  // "LlamaForCausalLM from DIR (4 layers, 2 files, bf16)"
  std::string describe(const HfFormat& format) const;

 private:
  struct Where {
    size_t file;
    const TensorInfo* info;
  };
  std::string dir_, config_file_;
  nlohmann::json config_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Where> tensors_;  // Hugging Face name -> where
};

// --export CKPT OUT_DIR --format hf: the model of checkpoint `ckpt` (DIR or a step directory), as
// `format` (its configuration's form, from the checkpoint's layout) gives it, written to the
// Hugging Face directory `out_dir` (which must not exist, or be empty), tensors saved as `dtype`
// (F32 or BF16), in shards of at most `max_shard_bytes` (one tensor larger than that is a shard of
// its own). Written in a temporary directory beside it, then renamed. Returns the number of tensors
// and the number of files.
struct HfExport {
  size_t tensors = 0, shards = 0;
  std::string architecture;
};
HfExport export_hf(const std::string& ckpt, const HfFormat& format, const std::string& out_dir,
                   TensorDtype dtype, uint64_t max_shard_bytes);

// "5GB" (10^9), "500MB", "2GiB" (2^30), "1000" (bytes) -> bytes; throws ppc::UserError naming
// `flag`.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace pprt
