// pprun's own model family through pprt::Model (builtin.h), built from the operations of ops.h.
#include "runtime/models/llama/builtin.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/nn/module.h>

#include <cmath>
#include <deque>
#include <map>
#include <mutex>
#include <numbers>

#include "compiler/diagnostic.h"
#include "runtime/data/documents.h"
#include "runtime/data/token_source.h"
#include "runtime/launch/cli.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/model/precision.h"
#include "runtime/model/recompute.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/moe.h"

namespace pprt {

namespace {

// Normal(0, 1) numbers from (key, index): Box-Muller over splitmix64.
float normal_at(uint64_t key, uint64_t i) {
  const uint64_t a = mix64(key, 2 * i), b = mix64(key, 2 * i + 1);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// What the layers of one builtin_model share: the configuration and, per device and attention
// window, attention's rotary tables and mask (ranks may run as threads of one process).
struct Common {
  ModelConfig cfg;
  Kernels kernels;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const AttentionConsts>> attn;

  std::shared_ptr<const AttentionConsts> attention_on(const at::Device& device, int window) {
    std::lock_guard<std::mutex> lock(mutex);
    auto& c = attn[fmt::format("{}/{}", device.str(), window)];
    if (!c)
      c = std::make_shared<const AttentionConsts>(attention_consts(cfg, device, kernels, window));
    return c;
  }
};

// One layer's parameters, in the order architecture.h lists them. Every one is a shared parameter
// under its global name (LayerInfo::shared), so that a rank holds one tensor per name however many
// layers use it (the embedding of E, of every m and of a tied L). Addresses are stable: ops.h's
// operations keep pointers to them.
struct BuiltinModule : torch::nn::Module {
  std::deque<at::Tensor> p;
  std::shared_ptr<const AttentionConsts> attn;  // of the device of the last forward
  int window = 0;  // the layer's attention window (ModelConfig::window_of; 0: full attention)

  BuiltinModule(const LayerInfo& info, const std::vector<ParamSpec>& specs) {
    for (const ParamSpec& s : specs) {
      at::Tensor t = info.shared(s.name, s.shape, [&](at::Tensor& x) {
        if (s.zeros)
          x.zero_();
        else
          x.copy_(init_param(s.name, s.shape, s.init_std, info.seed));
      });
      p.push_back(register_parameter(fmt::format("p{}", p.size()), t));
    }
  }
};

struct Decoder {
  at::Tensor *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w1, *w3, *w2;
  at::Tensor *bq = nullptr, *bk = nullptr, *bv = nullptr;              // with ModelConfig::qkv_bias
  std::shared_ptr<FusedWeight> qkv = std::make_shared<FusedWeight>();  // [wq; wk; wv]
  std::shared_ptr<FusedWeight> qkv_bias = std::make_shared<FusedWeight>();  // [bq; bk; bv]
  std::shared_ptr<FusedWeight> gate_up = std::make_shared<FusedWeight>();   // [w1; w3]
  // Working copies of wo and w2 in the activations' dtype (mixed precision only).
  std::shared_ptr<FusedWeight> wo_copy = std::make_shared<FusedWeight>();
  std::shared_ptr<FusedWeight> w2_copy = std::make_shared<FusedWeight>();
  std::shared_ptr<MoeLayer> moe;  // a MoE layer's MLP (moe.h) instead of w1, w3, w2
};

// In architecture.h's order: the biases (if any) follow wv.
Decoder decoder_params(BuiltinModule& m, size_t& i, bool qkv_bias, const MoeConfig* moe = nullptr,
                       const ExpertGroup& experts = {}) {
  Decoder d{};
  for (at::Tensor** slot : {&d.attn_norm, &d.wq, &d.wk, &d.wv}) *slot = &m.p[i++];
  if (qkv_bias)
    for (at::Tensor** slot : {&d.bq, &d.bk, &d.bv}) *slot = &m.p[i++];
  if (moe) {  // a MoE layer: its MLP's parameters are moe.h's
    for (at::Tensor** slot : {&d.wo, &d.mlp_norm}) *slot = &m.p[i++];
    d.moe = std::make_shared<MoeLayer>(moe_layer(m.p, i, *moe, experts));
    return d;
  }
  for (at::Tensor** slot : {&d.wo, &d.mlp_norm, &d.w1, &d.w3, &d.w2}) *slot = &m.p[i++];
  return d;
}

at::Tensor norm(const Common& c, const at::Tensor& x, at::Tensor* g, WeightWork* w) {
  return rms_norm(x, g, c.cfg.norm_eps, w, c.kernels);
}

// `selective` (--recompute selective: LayerInfo::selective_recompute): attention's core (from
// the q/k/v product to the heads' outputs) and SwiGLU keep only their inputs and run again in the
// backward (recompute.h); they hold no parameter, so the I/W split is untouched. `positions`: the
// tokens' positions in their documents (attention(); undefined: none).
at::Tensor decoder(const Common& c, const AttentionConsts& attn, const at::Tensor& x,
                   const Decoder& d, const Microbatch& mb, const at::Tensor& positions,
                   bool selective = false) {
  WeightWork* w = mb.weight_work();
  const at::Tensor h = norm(c, x, d.attn_norm, w);
  at::Tensor qkv = fused_linear(h, {d.wq, d.wk, d.wv}, *d.qkv, w);
  if (d.bq) qkv = fused_bias(qkv, {d.bq, d.bk, d.bv}, *d.qkv_bias, w);
  const AttentionConsts* a = &attn;
  const at::Tensor core =
      selective ? recomputed(
                      [a, positions](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
                        return {attention(in[0], *a, positions)};
                      },
                      {qkv})[0]
                : attention(qkv, attn, positions);
  const at::Tensor x1 = residual_linear(x, core, d.wo, w, d.wo_copy.get());
  const at::Tensor h2 = norm(c, x1, d.mlp_norm, w);
  if (d.moe) return x1 + moe_mlp(c.cfg.moe, h2, *d.moe, mb, c.kernels);
  const at::Tensor gate_up = fused_linear(h2, {d.w1, d.w3}, *d.gate_up, w);
  const Kernels k = c.kernels;
  const at::Tensor act =
      selective ? recomputed(
                      [k](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
                        return {swiglu(in[0], k)};
                      },
                      {gate_up})[0]
                : swiglu(gate_up, c.kernels);
  return residual_linear(x1, act, d.w2, w, d.w2_copy.get());
}

// The parameters of one layer as architecture.h lists them.
std::vector<ParamSpec> layer_params(const ModelConfig& cfg, ppc::LayerKind kind, int index,
                                    const LayerInfo& info) {
  return params_of(cfg, {LayerSpec{kind, index}}, info.layout.count('t'));
}

Layer make(std::shared_ptr<BuiltinModule> module,
           std::function<at::Tensor(const at::Tensor&, const Microbatch&)> forward) {
  Layer l;
  l.module = std::move(module);
  l.forward = std::move(forward);
  l.prefix = "";  // every parameter is named by its shared name
  l.splits_backward = true;
  return l;
}

// A layer of several tensors: the main stream h^0 and each MTP depth's h^k computed so far.
Layer make_tensors(std::shared_ptr<BuiltinModule> module,
                   std::function<Tensors(const Tensors&, const Microbatch&)> forward) {
  Layer l;
  l.module = std::move(module);
  l.forward_tensors = std::move(forward);
  l.splits_backward = true;
  return l;
}

// The embedding's rows in the activations' dtype (LayerInfo::dtype: precision.h; autograd casts
// their gradient back to fp32).
at::Tensor embed(at::ScalarType dtype, at::Tensor* w, const at::Tensor& ids, WeightWork* work) {
  return embedding(w, ids, work).to(dtype);
}

// The targets k + 1 places ahead of the first `n` positions of token rows `rows`, the ignored
// index (-100, cross_entropy's) where a target does not continue its position's document (rows
// of documents, runtime/data/documents.h: a document's last tokens, padding); the ids alone.
at::Tensor predicted(const at::Tensor& rows, int64_t k, int64_t n) {
  const at::Tensor from = rows.narrow(1, 0, n), to = rows.narrow(1, 1 + k, n);
  const at::Tensor ids = to.bitwise_and(kTokenMask);
  if (rows.numel() == 0 || (rows[0][0].item<int64_t>() >> kDocumentShift) == 0) return ids;
  auto position = [](const at::Tensor& t) {
    return t.bitwise_right_shift(kDocumentShift).bitwise_and(kPositionMask) - 1;
  };
  return at::where(position(to) == position(from) + (k + 1), ids,
                   at::full({}, -100, ids.options()));
}

// The attention tables of x's device and the layer's window, kept by the layer.
const AttentionConsts& attn_of(Common& c, BuiltinModule& m, const at::Tensor& x) {
  if (!m.attn || m.attn->cos.device() != x.device()) m.attn = c.attention_on(x.device(), m.window);
  return *m.attn;
}

}  // namespace

Kernels kernels_of(KernelChoice k) {
  switch (k) {
    case KernelChoice::Generic:
      return Kernels::Generic;
    case KernelChoice::Fused:
      return Kernels::Fused;
    case KernelChoice::FusedCudnn:
      return Kernels::FusedCudnn;
    case KernelChoice::Auto:
      break;
  }
  return Kernels::Auto;
}

at::Tensor init_param(const std::string& name, const std::vector<int64_t>& shape, double std,
                      uint64_t seed) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  float* p = t.data_ptr<float>();
  const int64_t n = t.numel();
  if (std == 0) {
    for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
    return t;
  }
  const uint64_t key = mix64(seed, name_hash(name));
  // Each value depends on (key, i) alone: the same on any number of threads (a Llama-3-8B-wide
  // model's billions of values take minutes on one).
  at::parallel_for(0, n, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      p[i] = static_cast<float>(std * normal_at(key, static_cast<uint64_t>(i)));
  });
  return t;
}

Model builtin_model(const ModelConfig& config, Kernels kernels) {
  auto common = std::make_shared<Common>();
  common->cfg = config;
  common->kernels = kernels;
  const int64_t hidden = config.hidden;
  Model model("pprun");

  // E: [b, T] token ids -> h^0 [b, T, hidden].
  model.layer(
      'E', "embed",
      [common](const LayerInfo& info) {
        auto m = std::make_shared<BuiltinModule>(
            info, layer_params(common->cfg, ppc::LayerKind::Embedding, 0, info));
        at::Tensor* w = &m->p[0];
        const at::ScalarType dtype = info.dtype;
        return make(m, [w, dtype](const at::Tensor& ids, const Microbatch& mb) {
          return embed(dtype, w, ids.contiguous(), mb.weight_work());
        });
      },
      [hidden](const std::vector<int64_t>& in) {
        return std::vector<int64_t>{in.at(0), in.at(1), hidden};
      });

  // t: the main stream h^0 through one decoder layer.
  model.layer(
      't', "layers",
      [common](const LayerInfo& info) {
        const MoeConfig& moe = common->cfg.moe;
        const bool is_moe = moe.is_moe(info.index);
        std::vector<ParamSpec> specs =
            layer_params(common->cfg, ppc::LayerKind::Decoder, info.index, info);
        std::vector<std::string> experts;  // --ep: the routed experts' of this rank's shard
        if (is_moe && info.experts.sharded()) {
          const std::string mlp = fmt::format("layers.{}.mlp.", info.index);
          std::erase_if(specs, [&](const ParamSpec& s) {
            return moe_foreign_expert(s.name, mlp, moe, info.experts);
          });
          for (const ParamSpec& s : specs) {
            bool routed = false;
            moe_foreign_expert(s.name, mlp, moe, info.experts, &routed);
            if (routed) experts.push_back(s.name);
          }
        }
        auto m = std::make_shared<BuiltinModule>(info, specs);
        m->window = common->cfg.window_of(info.index);
        size_t i = 0;
        auto d = std::make_shared<Decoder>(
            decoder_params(*m, i, common->cfg.qkv_bias, is_moe ? &moe : nullptr, info.experts));
        BuiltinModule* raw = m.get();
        const bool selective = info.selective_recompute;
        Layer l = make(m, [common, raw, d, selective](const at::Tensor& x, const Microbatch& mb) {
          return decoder(*common, attn_of(*common, *raw, x), x, *d, mb,
                         document_positions(mb.tokens(), mb.seq_len()), selective);
        });
        l.expert_params = std::move(experts);
        if (d->moe && d->moe->loads) l.step_sums = {d->moe->loads->tokens};  // bias balancing
        return l;
      },
      [](const std::vector<int64_t>& in) { return in; });

  // m: MTP depth k = index + 1, from h^{k-1}: one more tensor, "mtp.k".
  model.layer(
      'm', "mtp",
      [common](const LayerInfo& info) {
        auto m = std::make_shared<BuiltinModule>(
            info, layer_params(common->cfg, ppc::LayerKind::Mtp, info.index, info));
        m->window = common->cfg.window_of(-1);
        struct Mtp {
          int64_t depth;
          at::Tensor *embed, *enorm, *hnorm, *eh_proj, *final_norm;
          Decoder layer;
          FusedWeight eh_proj_copy;  // mixed precision
        };
        auto p = std::make_shared<Mtp>();
        p->depth = info.index + 1;
        size_t i = 0;
        p->embed = &m->p[i++];
        p->enorm = &m->p[i++];
        p->hnorm = &m->p[i++];
        p->eh_proj = &m->p[i++];
        p->layer = decoder_params(*m, i, common->cfg.qkv_bias);
        p->final_norm = &m->p[i++];
        PPC_INTERNAL_ASSERT(i == m->p.size(), "every parameter of a layer is used");
        BuiltinModule* raw = m.get();
        const at::ScalarType dtype = info.dtype;
        const bool selective = info.selective_recompute;
        return make_tensors(
            m, [common, raw, p, dtype, selective](const Tensors& x, const Microbatch& mb) {
              // The embedding of the tokens k places ahead (token i+k at position i; positions past
              // the sequence read id 0: only positions whose target is masked see them) and
              // h^{k-1}.
              const Common& c = *common;
              WeightWork* w = mb.weight_work();
              const at::Tensor& rows = mb.tokens();
              const int64_t b = rows.size(0), k = p->depth, T = mb.seq_len();
              const at::Tensor& prev = x.back().tensor;
              at::Tensor ids = rows.narrow(1, k, T + 1 - k).bitwise_and(kTokenMask);
              if (k > 1) ids = at::cat({ids, at::zeros({b, k - 1}, ids.options())}, 1);
              at::Tensor e = norm(c, embed(dtype, p->embed, ids.contiguous(), w), p->enorm, w);
              at::Tensor h = linear(at::cat({e, norm(c, prev, p->hnorm, w)}, -1), p->eh_proj, w,
                                    &p->eh_proj_copy);
              Tensors out = x;
              out.push_back(NamedTensor{"mtp." + std::to_string(k),
                                        norm(c,
                                             decoder(c, attn_of(*common, *raw, prev), h, p->layer,
                                                     mb, document_positions(rows, T), selective),
                                             p->final_norm, w)});
              return out;
            });
      },
      [](const std::vector<TensorShape>& in, const MicrobatchShape&, const ModelSetup&) {
        std::vector<TensorShape> out = in;  // depth k = in.size()
        out.push_back(TensorShape{"mtp." + std::to_string(in.size()), in.back().shape});
        return out;
      });

  // L: the loss CE_main, and the MTP depths' CE_k over the valid positions of each depth, which
  // join it as CE_main + (lambda / D) sum_k CE_k.
  model.layer(
      'L', "head",
      [common](const LayerInfo& info) {
        auto m = std::make_shared<BuiltinModule>(
            info, layer_params(common->cfg, ppc::LayerKind::Loss, 0, info));
        at::Tensor* norm_w = &m->p[0];
        at::Tensor* head = &m->p[1];
        auto head_copy = std::make_shared<FusedWeight>();  // mixed precision
        const double lambda = info.aux_loss_weight;
        return make_tensors(
            m, [common, norm_w, head, head_copy, lambda](const Tensors& hs, const Microbatch& mb) {
              WeightWork* w = mb.weight_work();
              const at::Tensor& rows = mb.tokens();
              const int64_t T = mb.seq_len();
              auto ce = [&](const at::Tensor& h, int64_t k) {  // h normalised; k from 0
                const int64_t valid = T - k;
                // The logits in the activations' dtype, the loss in fp32.
                at::Tensor logits =
                    linear(h.narrow(1, 0, valid), head, w, head_copy.get()).to(at::kFloat);
                return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                              predicted(rows, k, valid).reshape({-1}));
              };
              at::Tensor main = ce(norm(*common, hs[0].tensor, norm_w, w), 0);
              std::vector<at::Tensor> depths;
              for (size_t k = 1; k < hs.size(); ++k)
                depths.push_back(ce(hs[k].tensor, static_cast<int64_t>(k)));
              // The MTP depths' losses, an auxiliary loss of the model's: (lambda / D) sum_k CE_k
              // joins the loss, the mean of the CE_k is logged as mtp_loss.
              if (!depths.empty())
                mb.add_loss("mtp", at::stack(depths), lambda / static_cast<double>(depths.size()));
              return Tensors{NamedTensor{"", main}};
            });
      },
      [](const std::vector<TensorShape>&, const MicrobatchShape&, const ModelSetup&) {
        return std::vector<TensorShape>{TensorShape{"", {}}};
      });
  model.aux_loss("mtp", [](const LayoutInfo& layout) { return layout.count('m') > 0; });
  // Each MoE layer's load-balancing loss (moe.h), where the layout has one.
  model.aux_loss("load_balancing", [moe = config.moe](const LayoutInfo& layout) {
    for (int t = 0; t < layout.count('t'); ++t)
      if (moe.is_moe(t)) return true;
    return false;
  });
  model.routed_experts([moe = config.moe](const LayoutInfo& layout) {  // --ep shards them
    for (int t = 0; t < layout.count('t'); ++t)
      if (moe.is_moe(t)) return moe.experts;
    return 0;
  });
  return model;
}

}  // namespace pprt
