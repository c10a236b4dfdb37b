#include "runtime/models/llama/architecture.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_set>

#include "compiler/diagnostic.h"

namespace pprt {

using ppc::LayerKind;

std::vector<std::vector<LayerSpec>> number_layers(const ppc::Layout& layout) {
  std::vector<std::vector<LayerSpec>> out;
  int decoder = 0, depth = 0;
  for (const auto& stage : layout.stages) {
    auto& specs = out.emplace_back();
    for (LayerKind k : stage) {
      int index = 0;
      if (k == LayerKind::Decoder) index = decoder++;
      if (k == LayerKind::Mtp) index = depth++;
      specs.push_back(LayerSpec{k, index});
    }
  }
  return out;
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> Boundary::shape(int64_t batch, const ModelConfig& c) const {
  switch (kind) {
    case Kind::Tokens:
      return {1};
    case Kind::Hidden:
      return {streams, batch, c.seq_len, c.hidden};
    case Kind::Loss:
      return {};
  }
  return {};
}

namespace {

Boundary after(Boundary b, const std::vector<LayerSpec>& layers) {
  for (const LayerSpec& l : layers) {
    if (l.kind == LayerKind::Embedding) b = Boundary{Boundary::Kind::Hidden, 1};
    if (l.kind == LayerKind::Mtp) ++b.streams;
    if (l.kind == LayerKind::Loss) b = Boundary{Boundary::Kind::Loss, 0};
  }
  return b;
}

// A MoE layer's MLP (moe_config.h): the router, each routed expert's SwiGLU, the shared experts'
// SwiGLU and gate. The router's bias (bias_update_rate) starts at zero and is moved by the layer
// between steps, never by the optimizer (its gradient is zero).
void add_moe_mlp(std::vector<ParamSpec>& out, const ModelConfig& c, const std::string& pre,
                 double std, double out_std) {
  const MoeConfig& m = c.moe;
  const int64_t H = c.hidden, E = m.experts, F = m.expert_width(c.ffn), S = m.shared_width(c.ffn);
  out.push_back({pre + "router.weight", {E, H}, std, true});
  if (m.bias_update_rate > 0) out.push_back({pre + "router.bias", {E}, 0, false, true});
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = pre + "experts." + std::to_string(e) + ".";
    out.push_back({x + "w1.weight", {F, H}, std, true});
    out.push_back({x + "w3.weight", {F, H}, std, true});
    out.push_back({x + "w2.weight", {H, F}, out_std, true});
  }
  if (m.has_shared()) {
    out.push_back({pre + "shared.w1.weight", {S, H}, std, true});
    out.push_back({pre + "shared.w3.weight", {S, H}, std, true});
    out.push_back({pre + "shared.w2.weight", {H, S}, out_std, true});
    if (m.shared_gate) out.push_back({pre + "shared_gate.weight", {1, H}, std, true});
  }
}

void add_decoder(std::vector<ParamSpec>& out, const ModelConfig& c, const std::string& pre,
                 double std, double out_std, bool moe = false) {
  const int64_t H = c.hidden, hd = c.head_dim(), F = c.ffn;
  out.push_back({pre + "attn_norm.weight", {H}, 0, false});
  out.push_back({pre + "attn.wq.weight", {c.heads * hd, H}, std, true});
  out.push_back({pre + "attn.wk.weight", {c.kv_heads * hd, H}, std, true});
  out.push_back({pre + "attn.wv.weight", {c.kv_heads * hd, H}, std, true});
  if (c.qkv_bias) {  // Qwen2's: zeros at a random start
    out.push_back({pre + "attn.wq.bias", {c.heads * hd}, 0, false, true});
    out.push_back({pre + "attn.wk.bias", {c.kv_heads * hd}, 0, false, true});
    out.push_back({pre + "attn.wv.bias", {c.kv_heads * hd}, 0, false, true});
  }
  out.push_back({pre + "attn.wo.weight", {H, c.heads * hd}, out_std, true});
  out.push_back({pre + "mlp_norm.weight", {H}, 0, false});
  if (moe) {
    add_moe_mlp(out, c, pre + "mlp.", std, out_std);
    return;
  }
  out.push_back({pre + "mlp.w1.weight", {F, H}, std, true});
  out.push_back({pre + "mlp.w3.weight", {F, H}, std, true});
  out.push_back({pre + "mlp.w2.weight", {H, F}, out_std, true});
}

// The parameters one layer uses, in the order it uses them (shared ones included).
void layer_params(std::vector<ParamSpec>& out, const ModelConfig& c, const LayerSpec& l,
                  int total_decoders) {
  const int64_t H = c.hidden, V = c.vocab;
  const double std = 0.02, out_std = 0.02 / std::sqrt(2.0 * std::max(1, total_decoders));
  const ParamSpec embed{"embed.weight", {V, H}, std, true};
  switch (l.kind) {
    case LayerKind::Embedding:
      out.push_back(embed);
      break;
    case LayerKind::Decoder:
      add_decoder(out, c, "layers." + std::to_string(l.index) + ".", std, out_std,
                  c.moe.is_moe(l.index));
      break;
    case LayerKind::Mtp: {
      const std::string pre = "mtp." + std::to_string(l.index) + ".";
      out.push_back(embed);
      out.push_back({pre + "enorm.weight", {H}, 0, false});
      out.push_back({pre + "hnorm.weight", {H}, 0, false});
      out.push_back({pre + "eh_proj.weight", {H, 2 * H}, std, true});
      add_decoder(out, c, pre + "layer.", std, out_std);
      out.push_back({pre + "final_norm.weight", {H}, 0, false});
      break;
    }
    case LayerKind::Loss:
      out.push_back({"head.norm.weight", {H}, 0, false});
      out.push_back(c.tie_embeddings ? embed : ParamSpec{"head.out.weight", {V, H}, std, true});
      break;
  }
}

}  // namespace

int mtp_depths(const ppc::Layout& layout) {
  return layout.count(LayerKind::Mtp);
}

std::vector<StageSpec> stage_specs(const ppc::Layout& layout, double mtp_loss_weight) {
  std::vector<StageSpec> out;
  Boundary b;
  const int decoders = layout.count(LayerKind::Decoder), depths = mtp_depths(layout);
  for (auto& layers : number_layers(layout)) {
    StageSpec s;
    s.in = b;
    s.out = b = after(b, layers);
    s.layers = std::move(layers);
    s.total_decoders = decoders;
    s.mtp_depths = depths;
    s.mtp_loss_weight = mtp_loss_weight;
    out.push_back(std::move(s));
  }
  return out;
}

StageSpec whole_model_spec(const ppc::Layout& layout, double mtp_loss_weight) {
  StageSpec whole;
  whole.total_decoders = layout.count(LayerKind::Decoder);
  whole.mtp_depths = mtp_depths(layout);
  whole.mtp_loss_weight = mtp_loss_weight;
  for (const auto& stage : number_layers(layout))
    whole.layers.insert(whole.layers.end(), stage.begin(), stage.end());
  whole.out = after(whole.in, whole.layers);
  return whole;
}

std::vector<ParamSpec> params_of(const ModelConfig& c, const std::vector<LayerSpec>& layers,
                                 int total_decoders) {
  std::vector<ParamSpec> all, out;
  for (const LayerSpec& l : layers) layer_params(all, c, l, total_decoders);
  std::unordered_set<std::string> seen;
  for (ParamSpec& p : all)
    if (seen.insert(p.name).second) out.push_back(std::move(p));
  return out;
}

std::vector<ParamSpec> model_params(const ModelConfig& c, const ppc::Layout& layout) {
  const StageSpec whole = whole_model_spec(layout, 0);
  return params_of(c, whole.layers, whole.total_decoders);
}

int64_t count_parameters(const ModelConfig& c, const ppc::Layout& layout) {
  int64_t n = 0;
  for (const ParamSpec& p : model_params(c, layout)) n += p.numel();
  return n;
}

std::vector<ParamSpec> rank_params(const ppc::Plan& plan, const ModelConfig& c, int rank) {
  const auto numbered = number_layers(plan.layout);
  std::vector<LayerSpec> layers;
  for (int s : plan.placement.rank_stages[static_cast<size_t>(rank)]) {
    const auto& l = numbered[static_cast<size_t>(plan.layout_stage(s))];
    layers.insert(layers.end(), l.begin(), l.end());
  }
  return params_of(c, layers, plan.layout.count(LayerKind::Decoder));
}

std::vector<SharedGroup> shared_groups(const ppc::Plan& plan, const ModelConfig& c) {
  std::map<std::string, std::vector<int>> holders;  // ranks in increasing order
  for (int r = 0; r < plan.pp(); ++r)
    for (const ParamSpec& p : rank_params(plan, c, r)) holders[p.name].push_back(r);
  std::map<std::vector<int>, std::vector<std::string>> groups;  // names arrive sorted
  for (auto& [name, ranks] : holders)
    if (ranks.size() > 1) groups[ranks].push_back(name);
  std::vector<SharedGroup> out;
  for (auto& [ranks, names] : groups) out.push_back(SharedGroup{ranks, std::move(names)});
  return out;
}

}  // namespace pprt
