// The mixtures of experts among pprun's Hugging Face families (hf_moe.h).
#include "runtime/models/llama/hf_moe.h"

#include <fmt/format.h>

#include <vector>

#include "runtime/fail.h"

namespace pprt {

using nlohmann::json;

bool moe_family(const std::string& f) {
  return f == "mixtral" || f == "qwen2_moe";
}

std::string moe_rest_name(const std::string& rest, const std::string& family) {
  static const std::pair<const char*, const char*> kProj[] = {{"w1.weight", "gate_proj.weight"},
                                                              {"w3.weight", "up_proj.weight"},
                                                              {"w2.weight", "down_proj.weight"}};
  const bool mixtral = family == "mixtral";
  if (rest == "mlp.router.weight")
    return mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight";
  if (rest.starts_with("mlp.experts.")) {
    const size_t dot = rest.find('.', 12);
    if (dot == std::string::npos) return "";
    const std::string expert = rest.substr(0, dot + 1), w = rest.substr(dot + 1);
    if (mixtral)
      return w == "w1.weight" || w == "w2.weight" || w == "w3.weight"
                 ? "block_sparse_moe." + rest.substr(4)
                 : "";
    for (const auto& [ours, theirs] : kProj)
      if (w == ours) return expert + theirs;
    return "";
  }
  if (mixtral) return "";
  if (rest == "mlp.shared_gate.weight") return "mlp.shared_expert_gate.weight";
  for (const auto& [ours, theirs] : kProj)
    if (rest == std::string("mlp.shared.") + ours)
      return std::string("mlp.shared_expert.") + theirs;
  return "";
}

const std::set<std::string>& moe_config_fields() {
  static const std::set<std::string> kMoe = {
      "num_local_experts",     "num_experts",         "num_experts_per_tok",
      "moe_intermediate_size", "n_routed_experts",    "n_shared_experts",
      "router_aux_loss_coef",  "decoder_sparse_step", "shared_expert_intermediate_size",
      "mlp_only_layers"};
  return kMoe;
}

void read_moe(HfConfigReader& r, const std::string& type, int layers, ModelConfig& c) {
  MoeConfig& m = c.moe;
  if (r.has("router_aux_loss_coef")) {
    const json& v = r.at("router_aux_loss_coef");
    if (!v.is_number() || v.get<double>() < 0)
      fail(r.file, fmt::format("router_aux_loss_coef: expected a number from 0, got {}", v.dump()));
    m.aux_loss_coef = v.get<double>();
  }
  r.used.insert("router_aux_loss_coef");
  r.used.insert("output_router_logits");  // what transformers returns, not the model
  m.top_k = r.integer("num_experts_per_tok", 2);
  if (type == "mixtral") {
    m.experts = r.integer("num_local_experts", 8);
    m.norm_topk = true;
    if (r.has("router_jitter_noise")) {
      const json& v = r.at("router_jitter_noise");
      if (!v.is_number() || v.get<double>() != 0)
        fail(r.file, fmt::format("router_jitter_noise: {} is not supported (pprun's router has no "
                                 "noise)",
                                 v.dump()));
    }
    r.used.insert("router_jitter_noise");
    return;
  }
  m.experts = r.integer("num_experts", 60);
  m.expert_ffn = r.integer("moe_intermediate_size", 1408);
  m.shared_ffn = r.integer("shared_expert_intermediate_size", 5632);
  m.shared_gate = true;
  m.norm_topk = r.boolean("norm_topk_prob", false);
  const int step = r.integer("decoder_sparse_step", 1);
  std::set<int> dense;
  r.used.insert("mlp_only_layers");
  if (r.has("mlp_only_layers")) {
    const json& v = r.j.at("mlp_only_layers");
    if (!v.is_array())
      fail(r.file,
           fmt::format("mlp_only_layers: expected a list of layer numbers, got {}", v.dump()));
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<long long>() < 0 || x.get<long long>() >= layers)
        fail(r.file, fmt::format("mlp_only_layers: expected layer numbers 0..{}, got {}",
                                 layers - 1, x.dump()));
      dense.insert(x.get<int>());
    }
  }
  for (int k = 0; k < layers; ++k)
    if (dense.count(k) || (k + 1) % step != 0) m.dense_layers.push_back(k);
}

std::string export_moe_family(const ModelConfig& c, int layers) {
  const MoeConfig& m = c.moe;
  const std::string family = moe_family(c.hf_family)        ? c.hf_family
                             : c.qkv_bias || m.has_shared() ? "qwen2_moe"
                                                            : "mixtral";
  auto refuse = [&](const std::string& what) {
    fail("--export",
         fmt::format("the model has {}, which Hugging Face's {} does not have", what,
                     family == "mixtral" ? "MixtralForCausalLM" : "Qwen2MoeForCausalLM"));
  };
  if (!c.hf_family.empty() && !moe_family(c.hf_family))
    fail("--export",
         fmt::format("the model has experts, which Hugging Face's {} does not have", c.hf_family));
  if (m.score != "softmax") refuse("a sigmoid router (router_score)");
  if (m.bias_update_rate > 0) refuse("a balancing bias (bias_update_rate)");
  if (m.routed_scale != 1.0) refuse("a routed_scaling other than 1");
  bool some_dense = false;
  for (int k = 0; k < layers; ++k) some_dense |= !m.is_moe(k);
  if (family == "mixtral") {
    if (m.has_shared()) refuse("shared experts");
    if (!m.norm_topk) refuse("top-k weights that are not normalised (norm_topk_prob false)");
    if (some_dense) refuse("dense layers among its MoE layers (first_dense, dense_layers)");
    if (c.qkv_bias) refuse("q/k/v biases");
  } else {
    if (!m.has_shared() || !m.shared_gate)
      refuse("no gated shared expert (shared_experts, shared_gate)");
  }
  return family;
}

void write_moe_config(const ModelConfig& c, const std::string& family, int layers,
                      nlohmann::ordered_json& cfg) {
  if (family == "mixtral") {
    cfg["intermediate_size"] = c.moe.expert_width(c.ffn);
    cfg["num_local_experts"] = c.moe.experts;
    cfg["num_experts_per_tok"] = c.moe.top_k;
    cfg["router_aux_loss_coef"] = c.moe.aux_loss_coef;
    cfg["router_jitter_noise"] = 0.0;
    // MixtralConfig writes null for hidden / heads (and reads it so).
    if (c.head_size == 0) cfg["head_dim"] = nullptr;
  }
  if (family == "qwen2_moe") {
    std::vector<int> dense;
    for (int k = 0; k < layers; ++k)
      if (!c.moe.is_moe(k)) dense.push_back(k);
    cfg["num_experts"] = c.moe.experts;
    cfg["num_experts_per_tok"] = c.moe.top_k;
    cfg["moe_intermediate_size"] = c.moe.expert_width(c.ffn);
    cfg["shared_expert_intermediate_size"] = c.moe.shared_width(c.ffn);
    cfg["norm_topk_prob"] = c.moe.norm_topk;
    cfg["decoder_sparse_step"] = 1;
    cfg["mlp_only_layers"] = dense;
    cfg["router_aux_loss_coef"] = c.moe.aux_loss_coef;
    cfg["qkv_bias"] = c.qkv_bias;
  }
}

}  // namespace pprt
