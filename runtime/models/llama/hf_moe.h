// The mixtures of experts among pprun's Hugging Face families (hf_mapping.h): MixtralForCausalLM
// ("mixtral") and Qwen2MoeForCausalLM ("qwen2_moe"): their MoE layers' parameter names, their
// config.json's expert fields read into ModelConfig::moe and written from it, and which of the two
// a model with experts is exported as. No LibTorch.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "runtime/models/llama/config.h"
#include "runtime/models/llama/hf_config_reader.h"

namespace pprt {

// Whether the Hugging Face model_type `family` has experts ("mixtral", "qwen2_moe").
bool moe_family(const std::string& family);

// A MoE layer's MLP parameter (`rest`, after "layers.N.") by the family's name, or "".
// Mixtral: block_sparse_moe.gate, block_sparse_moe.experts.E.w1/w2/w3 (pprun's own names);
// Qwen2-MoE: mlp.gate, mlp.experts.E.gate_proj/up_proj/down_proj, mlp.shared_expert.*,
// mlp.shared_expert_gate.
std::string moe_rest_name(const std::string& rest, const std::string& family);

// The fields of mixtures of experts (a dense family's config.json that has one is refused, naming
// it).
const std::set<std::string>& moe_config_fields();

// The mixture of experts of a MixtralForCausalLM (num_local_experts experts of width
// intermediate_size on every layer, top num_experts_per_tok, weights normalised; no router jitter)
// or a Qwen2MoeForCausalLM (num_experts of width moe_intermediate_size, one shared expert of width
// shared_expert_intermediate_size under its sigmoid gate, norm_topk_prob; the layers
// mlp_only_layers names, and those whose number + 1 is not a multiple of decoder_sparse_step,
// dense of width intermediate_size) of `layers` decoder layers, into c.moe.
void read_moe(HfConfigReader& r, const std::string& type, int layers, ModelConfig& c);

// The family a model with experts is written as: the one it came from, else Qwen2-MoE's where it
// has q/k/v biases or shared experts, else Mixtral's; refused (ppc::UserError naming --export)
// where that family cannot hold it.
std::string export_moe_family(const ModelConfig& c, int layers);

// The expert fields of `family`'s config.json (none for a dense family) for `c`, added to `cfg`.
void write_moe_config(const ModelConfig& c, const std::string& family, int layers,
                      nlohmann::ordered_json& cfg);

}  // namespace pprt
