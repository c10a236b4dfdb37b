// pprun's own model in Hugging Face's formats (docs/huggingface.md): its configuration read from a
// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM or
// Qwen2MoeForCausalLM config.json (the sliding window
// included; any field that would change the model and that pprun does not implement is refused,
// naming it; the fields that do not change it are kept, ModelConfig::hf_fields), and the model as
// such a directory holds it (config.json: the model's fields, then the source's kept ones, then the
// family's defaults). The runtime reads and writes the files (runtime/checkpoint/hf.h). No
// LibTorch.
//
// Names: pprun's global parameter names (architecture.h) map one to one onto Hugging Face's
// (embed.weight = model.embed_tokens.weight, layers.N.attn.wq.weight =
// model.layers.N.self_attn.q_proj.weight, mlp.w1/w3/w2 = gate_proj/up_proj/down_proj,
// head.norm.weight = model.norm.weight, head.out.weight = lm_head.weight, ...). Both use the
// rotate-half rotary embedding, so no weight is permuted or transposed.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "compiler/layout.h"
#include "pprt/family.h"
#include "runtime/models/llama/config.h"

namespace pprt {

// The Hugging Face name of a pprun parameter in `family` (a MoE layer's names are the family's:
// "mixtral" block_sparse_moe.gate / experts.E.w1, "qwen2_moe" mlp.gate / experts.E.gate_proj /
// shared_expert / shared_expert_gate); throws ppc::InternalError for a name that has none (MTP
// parameters, the balancing bias).
std::string hf_tensor_name(const std::string& pprun_name, const std::string& family = "");

// A Hugging Face model's config.json as pprun's model.
struct HfConfig {
  ModelConfig model;  // seq_len: the run's
  int layers = 0;     // num_hidden_layers
  std::string architecture;
};
// Reads config.json (`j`, from `file`) for sequences of `seq_len` tokens. Throws ppc::UserError
// naming the file and the field.
HfConfig config_from_hf(const nlohmann::json& j, const std::string& file, int seq_len);
// The layout must hold exactly `hf.layers` decoder layers and no MTP layer.
void check_hf_layout(const HfConfig& hf, const std::string& file, const LayoutInfo& layout);

// The model of `c` laid out as `layout` as a Hugging Face directory holds it, tensors in `dtype`
// ("float32", "bfloat16"): config.json of its family (the family it was read from, else Llama's,
// Qwen2's with q/k/v biases, or Mistral's with a sliding window on every layer) and every
// parameter. Throws ppc::UserError for a model with MTP layers, which no Hugging Face family holds,
// or a sliding window its family cannot hold.
HfFormat hf_format(const ModelConfig& c, const ppc::Layout& layout, const std::string& dtype);

}  // namespace pprt
