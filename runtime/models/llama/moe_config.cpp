#include "runtime/models/llama/moe_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "runtime/fail.h"

namespace pprt {

bool MoeConfig::is_moe(int layer) const {
  return experts > 0 && layer >= first_dense &&
         std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

bool parse_moe_field(const std::string& key, const nlohmann::json& v, MoeConfig& c,
                     const std::string& input) {
  auto count = [&](int& out, int lo) {
    if (!v.is_number_integer() || v.get<long long>() < lo || v.get<long long>() > (1 << 24))
      fail(input, fmt::format("{}: expected an integer from {}, got {}", key, lo, v.dump()));
    out = v.get<int>();
  };
  auto number = [&](double& out) {
    if (!v.is_number() || v.get<double>() < 0)
      fail(input, fmt::format("{}: expected a number from 0, got {}", key, v.dump()));
    out = v.get<double>();
  };
  auto boolean = [&](bool& out) {
    if (!v.is_boolean())
      fail(input, fmt::format("{}: expected true or false, got {}", key, v.dump()));
    out = v.get<bool>();
  };
  if (key == "experts" || key == "n_routed_experts" || key == "num_experts" ||
      key == "num_local_experts")
    count(c.experts, 0);
  else if (key == "top_k" || key == "num_experts_per_tok")
    count(c.top_k, 1);
  else if (key == "expert_ffn" || key == "moe_intermediate_size")
    count(c.expert_ffn, 1);
  else if (key == "shared_experts" || key == "n_shared_experts")
    count(c.shared_experts, 0);
  else if (key == "shared_ffn")
    count(c.shared_ffn, 0);
  else if (key == "shared_gate")
    boolean(c.shared_gate);
  else if (key == "first_dense" || key == "first_k_dense_replace")
    count(c.first_dense, 0);
  else if (key == "dense_layers") {
    if (!v.is_array()) fail(input, fmt::format("{}: expected a list of layer numbers", key));
    c.dense_layers.clear();
    for (const nlohmann::json& x : v) {
      if (!x.is_number_integer() || x.get<long long>() < 0 || x.get<long long>() > (1 << 24))
        fail(input, fmt::format("{}: expected layer numbers from 0, got {}", key, x.dump()));
      c.dense_layers.push_back(x.get<int>());
    }
  } else if (key == "router_score" || key == "scoring_func") {
    if (v != "softmax" && v != "sigmoid")
      fail(input, fmt::format("{}: expected \"softmax\" or \"sigmoid\", got {}", key, v.dump()));
    c.score = v.get<std::string>();
  } else if (key == "norm_topk_prob")
    boolean(c.norm_topk);
  else if (key == "routed_scaling" || key == "routed_scaling_factor")
    number(c.routed_scale);
  else if (key == "aux_loss_coef" || key == "router_aux_loss_coef")
    number(c.aux_loss_coef);
  else if (key == "bias_update_rate")
    number(c.bias_update_rate);
  else
    return false;
  return true;
}

void add_moe_json(const MoeConfig& c, nlohmann::ordered_json& j) {
  const MoeConfig d;
  if (c == d) return;
  j["experts"] = c.experts;
  j["top_k"] = c.top_k;
  if (c.expert_ffn != d.expert_ffn) j["expert_ffn"] = c.expert_ffn;
  if (c.shared_experts != d.shared_experts) j["shared_experts"] = c.shared_experts;
  if (c.shared_ffn != d.shared_ffn) j["shared_ffn"] = c.shared_ffn;
  if (c.shared_gate != d.shared_gate) j["shared_gate"] = c.shared_gate;
  if (c.first_dense != d.first_dense) j["first_dense"] = c.first_dense;
  if (!c.dense_layers.empty()) j["dense_layers"] = c.dense_layers;
  if (c.score != d.score) j["router_score"] = c.score;
  if (c.norm_topk != d.norm_topk) j["norm_topk_prob"] = c.norm_topk;
  if (c.routed_scale != d.routed_scale) j["routed_scaling"] = c.routed_scale;
  if (c.aux_loss_coef != d.aux_loss_coef) j["aux_loss_coef"] = c.aux_loss_coef;
  if (c.bias_update_rate != d.bias_update_rate) j["bias_update_rate"] = c.bias_update_rate;
}

void check_moe_config(const MoeConfig& c, const std::string& where) {
  if (c.experts < 0 || c.experts > 4096)
    fail(where, fmt::format("experts is {}; expected 0..4096", c.experts));
  if (c.experts == 0) return;
  if (c.top_k < 1 || c.top_k > c.experts)
    fail(where, fmt::format("top_k is {}, but a token can choose 1..{} of the {} experts", c.top_k,
                            c.experts, c.experts));
  if (c.shared_gate && !c.has_shared())
    fail(where, "shared_gate: needs shared experts (shared_experts or shared_ffn)");
  if (!(c.routed_scale > 0))
    fail(where, fmt::format("routed_scaling is {}; expected a positive number", c.routed_scale));
}

std::string describe_moe(const MoeConfig& c) {
  if (c.experts == 0) return "";
  std::string s = fmt::format(", {} experts (top {}", c.experts, c.top_k);
  if (c.expert_ffn > 0) s += fmt::format(", width {}", c.expert_ffn);
  if (c.has_shared()) s += fmt::format(", shared {}", std::max(1, c.shared_experts));
  if (c.score != "softmax") s += ", " + c.score;
  s += ")";
  if (c.first_dense > 0) s += fmt::format(", first {} dense", c.first_dense);
  return s;
}

}  // namespace pprt
