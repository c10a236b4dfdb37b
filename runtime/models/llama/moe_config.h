// The mixture-of-experts part of pprun's model configuration (config.h's ModelConfig::moe): how
// many routed experts each MoE decoder layer has, how a token picks them, the shared experts, and
// which decoder layers stay dense. Plain data, no LibTorch.
//
// A decoder layer is a MoE layer when experts > 0, its index is at least first_dense (DeepSeek-V3's
// first_k_dense_replace) and dense_layers does not list it (Qwen2-MoE's mlp_only_layers and
// decoder_sparse_step, spelled out). Its MLP is then: a router (a linear map hidden -> experts,
// softmax or sigmoid scores, the top_k experts of each token, their scores as weights, normalised
// to sum 1 with norm_topk and scaled by routed_scale), routed SwiGLU experts of width expert_ffn,
// and shared experts that every token passes (one SwiGLU of width shared_ffn, under Qwen2-MoE's
// sigmoid gate with shared_gate). MTP depths keep a dense MLP.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace pprt {

struct MoeConfig {
  int experts = 0;                // routed experts per MoE layer; 0: every layer dense
  int top_k = 2;                  // experts per token
  int expert_ffn = 0;             // a routed expert's SwiGLU width; 0: the dense ffn
  int shared_experts = 0;         // shared experts (DeepSeek's n_shared_experts)
  int shared_ffn = 0;             // their one SwiGLU's width; 0: shared_experts * the expert width
  bool shared_gate = false;       // Qwen2-MoE: the shared output times sigmoid(x . w_gate)
  int first_dense = 0;            // the first decoder layers that stay dense
  std::vector<int> dense_layers;  // other decoder layers that stay dense
  std::string score = "softmax";  // "softmax" or "sigmoid" (DeepSeek-V3)
  bool norm_topk = true;          // the top_k weights divided by their sum
  double routed_scale = 1.0;      // the routed output's factor (DeepSeek's routed_scaling_factor)
  // The classic load-balancing loss (Switch, Mixtral): experts * sum_e f_e * P_e, f_e the
  // fraction of the layer's tokens routed to e, P_e the mean of e's (normalised) score; the
  // auxiliary loss "load_balancing", joining the loss with this weight (0: only logged).
  double aux_loss_coef = 0;
  // DeepSeek-V3's balancing without an auxiliary loss: a per-expert bias added to the scores
  // for choosing the experts only, after each step moved by this rate towards the mean load
  // (b_e += rate * sign(mean load - load_e)); 0: no bias.
  double bias_update_rate = 0;

  bool enabled() const { return experts > 0; }
  // Whether decoder layer `layer` (-1: an MTP depth's) has a mixture of experts.
  bool is_moe(int layer) const;
  int expert_width(int ffn) const { return expert_ffn > 0 ? expert_ffn : ffn; }
  int shared_width(int ffn) const {
    return shared_ffn > 0 ? shared_ffn : shared_experts * expert_width(ffn);
  }
  bool has_shared() const { return shared_experts > 0 || shared_ffn > 0; }
  bool operator==(const MoeConfig&) const = default;
};

// Reads `key` of a model config file into `c` if it is one of the MoE fields (experts, top_k,
// expert_ffn, shared_experts, shared_ffn, shared_gate, first_dense, dense_layers, router_score,
// norm_topk_prob, routed_scaling, aux_loss_coef, bias_update_rate, or DeepSeek's and Hugging
// Face's names for them: n_routed_experts, num_experts, num_local_experts, num_experts_per_tok,
// moe_intermediate_size, n_shared_experts, first_k_dense_replace, routed_scaling_factor,
// router_aux_loss_coef); false if it is not. Throws ppc::UserError naming `input` and the field.
bool parse_moe_field(const std::string& key, const nlohmann::json& v, MoeConfig& c,
                     const std::string& input);
// Adds the fields that differ from the defaults to `j` (a checkpoint's "model").
void add_moe_json(const MoeConfig& c, nlohmann::ordered_json& j);
// Throws ppc::UserError naming `where` if the sizes do not fit: top_k from 1 to experts, widths
// positive, a known score.
void check_moe_config(const MoeConfig& c, const std::string& where);
// ", 8 experts (top 2, shared 1), first 1 dense" or "".
std::string describe_moe(const MoeConfig& c);

}  // namespace pprt
