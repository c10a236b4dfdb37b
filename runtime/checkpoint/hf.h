// Hugging Face model directories in and out (docs/huggingface.md). No LibTorch.
//
// In (pprun --init-from DIR): DIR/config.json of a LlamaForCausalLM, MistralForCausalLM or
// Qwen2ForCausalLM (the families and fields docs/huggingface.md lists, the sliding window
// included; any field that would change the model and that pprun does not implement is refused,
// naming it; the fields that do not change it are kept, ModelConfig::hf_fields), and
// DIR/model.safetensors or the shards of
// DIR/model.safetensors.index.json, in F32, BF16 or F16 (read as float32). Every tensor the model
// needs is checked (present, shape, dtype) and every tensor the files hold must be one of the
// model's, before anything runs; each problem is a ppc::UserError naming the file and the tensor
// or field.
//
// Out (pprun --export CKPT OUT_DIR --format hf): config.json (the model's fields, then the
// source's kept ones, then the family's defaults) and model.safetensors (or shards with
// model.safetensors.index.json above a size), which transformers'
// AutoModelForCausalLM.from_pretrained loads with no missing or unexpected keys, as the model
// pprun trained.
//
// Names: pprun's global parameter names (architecture.h) map one to one onto Hugging Face's
// (embed.weight = model.embed_tokens.weight, layers.N.attn.wq.weight =
// model.layers.N.self_attn.q_proj.weight, mlp.w1/w3/w2 = gate_proj/up_proj/down_proj,
// head.norm.weight = model.norm.weight, head.out.weight = lm_head.weight, ...). Both use the
// rotate-half rotary embedding, so no weight is permuted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/layout.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/config.h"

namespace pprt {

// The Hugging Face name of a pprun parameter; throws ppc::InternalError for a name that has none
// (MTP parameters).
std::string hf_tensor_name(const std::string& pprun_name);

// A Hugging Face model directory, its config read and its safetensors headers validated.
class HfModel {
 public:
  // Reads DIR/config.json (the model, at the training sequence length `seq_len`) and opens the
  // weight files. Throws ppc::UserError.
  HfModel(const std::string& dir, int seq_len);
  ~HfModel();
  HfModel(HfModel&&) noexcept;
  HfModel& operator=(HfModel&&) noexcept;

  const std::string& dir() const { return dir_; }
  const ModelConfig& model() const { return model_; }
  int layers() const { return layers_; }
  const std::string& architecture() const { return architecture_; }  // "LlamaForCausalLM"

  // The layout must hold exactly layers() decoder layers and no MTP layer. `where`: the plan.
  void check_layout(const ppc::Layout& layout, const std::string& where) const;
  // Every parameter of `params` is in the files with its shape and a float dtype, and every
  // tensor of the files is one of them (or a known leftover: rotary tables, a tied lm_head).
  void check_weights(const std::vector<ParamSpec>& params) const;
  // Reads parameter `name` (pprun's name) of `numel` elements as float32 into `dst`.
  void read(const std::string& name, float* dst, size_t numel) const;
  // "LlamaForCausalLM from DIR (2 files, bf16)"
  std::string describe() const;

 private:
  struct Where {
    size_t file;
    const TensorInfo* info;
  };
  std::string dir_, architecture_;
  ModelConfig model_;
  int layers_ = 0;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Where> tensors_;  // Hugging Face name -> where
};

// pprun --export CKPT OUT_DIR --format hf: the model of checkpoint `ckpt` (DIR or a step
// directory) as a Hugging Face directory `out_dir` (which must not exist, or be empty), tensors
// saved as `dtype` (F32, BF16 or F16), in shards of at most `max_shard_bytes` (one tensor larger
// than that is a shard of its own). Written in a temporary directory beside it, then renamed.
// Returns the number of tensors and the number of files.
struct HfExport {
  size_t tensors = 0, shards = 0;
  std::string architecture;
};
HfExport export_hf(const std::string& ckpt, const std::string& out_dir, TensorDtype dtype,
                   uint64_t max_shard_bytes);

// "5GB" (10^9), "500MB", "2GiB" (2^30), "1000" (bytes) -> bytes; throws ppc::UserError naming
// `flag`.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace pprt
