// The model's parameters and stages (stage.h), built from the operations of ops.h.
#include "runtime/model/stage.h"

#include <ATen/ATen.h>

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "compiler/diagnostic.h"
#include "runtime/data/token_source.h"
#include "runtime/model/ops.h"

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

}  // namespace

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
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<float>(std * normal_at(key, static_cast<uint64_t>(i)));
  return t;
}

ParamStore::ParamStore(uint64_t seed, const at::Device& device) : seed_(seed), device_(device) {}

at::Tensor* ParamStore::use(const ParamSpec& spec) {
  if (NamedParam* p = find(spec.name)) {
    PPC_INTERNAL_ASSERT(p->tensor.sizes().vec() == spec.shape,
                        fmt::format("parameter '{}' used with two shapes", spec.name));
    return &p->tensor;
  }
  at::Tensor t = init_param(spec.name, spec.shape, spec.init_std, seed_).to(device_);
  t.set_requires_grad(true);
  index_.emplace(spec.name, params_.size());
  params_.push_back(NamedParam{spec.name, t, spec.decay});
  return &params_.back().tensor;
}

NamedParam* ParamStore::find(const std::string& name) {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &params_[it->second];
}

struct Stage::Impl {
  struct Decoder {
    at::Tensor *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w1, *w2, *w3;
    std::shared_ptr<FusedWeight> qkv, gate_up;  // [wq; wk; wv] and [w1; w3]
  };
  struct Mtp {
    int depth;  // k, from 1
    at::Tensor *embed, *enorm, *hnorm, *eh_proj, *final_norm;
    Decoder layer;
  };
  struct Layer {
    ppc::LayerKind kind;
    Decoder d{};
    Mtp m{};
    at::Tensor *a = nullptr, *b = nullptr;  // E: weight; L: norm, head
  };

  ModelConfig cfg;
  StageSpec spec;
  std::vector<Layer> layers;
  AttentionConsts attn;
  at::Device device;

  Impl(const ModelConfig& c, StageSpec s, const at::Device& d)
      : cfg(c), spec(std::move(s)), device(d) {}

  at::Tensor norm(const at::Tensor& x, at::Tensor* g, GradStash* s) {
    return rms_norm(x, g, cfg.norm_eps, s, attn.kernels);
  }
  at::Tensor decoder(const at::Tensor& x, const Decoder& d, GradStash* s) {
    const at::Tensor h = norm(x, d.attn_norm, s);
    const at::Tensor qkv = fused_linear(h, {d.wq, d.wk, d.wv}, *d.qkv, s);
    const at::Tensor x1 = residual_linear(x, attention(qkv, attn), d.wo, s);
    const at::Tensor h2 = norm(x1, d.mlp_norm, s);
    const at::Tensor gate_up = fused_linear(h2, {d.w1, d.w3}, *d.gate_up, s);
    return residual_linear(x1, swiglu(gate_up, attn.kernels), d.w2, s);
  }

  // MTP depth k: the embedding of the tokens k places ahead (token i+k at position i; positions
  // past the sequence read id 0: only positions whose target is masked see them) and h^{k-1}.
  at::Tensor mtp(const at::Tensor& h_prev, const at::Tensor& rows, const Mtp& m, GradStash* s) {
    const int64_t b = rows.size(0), T = cfg.seq_len, k = m.depth;
    at::Tensor ids = rows.narrow(1, k, T + 1 - k);
    if (k > 1) ids = at::cat({ids, at::zeros({b, k - 1}, ids.options())}, 1);
    at::Tensor e = norm(embedding(m.embed, ids.contiguous(), s), m.enorm, s);
    at::Tensor x = linear(at::cat({e, norm(h_prev, m.hnorm, s)}, -1), m.eh_proj, s);
    return norm(decoder(x, m.layer, s), m.final_norm, s);
  }

  // The loss of L: CE_main + (lambda / D) sum_k CE_k over the valid positions of each depth.
  at::Tensor loss(const std::vector<at::Tensor>& hs, const at::Tensor& rows, const Layer& l,
                  GradStash* s, StageLosses* out) {
    const int64_t T = cfg.seq_len;
    auto ce = [&](const at::Tensor& h, int64_t k) {  // h already normalised; depth k from 0
      const int64_t valid = T - k;
      at::Tensor logits = linear(h.narrow(1, 0, valid), l.b, s);
      return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                    rows.narrow(1, 1 + k, valid).reshape({-1}));
    };
    at::Tensor main = ce(norm(hs[0], l.a, s), 0);
    at::Tensor total = main;
    std::vector<at::Tensor> depths;
    for (size_t k = 1; k < hs.size(); ++k) depths.push_back(ce(hs[k], static_cast<int64_t>(k)));
    if (!depths.empty()) {
      at::Tensor mtp = at::stack(depths);
      total = main + mtp.sum() * (spec.mtp_loss_weight / static_cast<double>(depths.size()));
      if (out) out->mtp = mtp.detach();
    }
    if (out) out->main = main.detach();
    return total;
  }

  Decoder decoder_params(const std::vector<ParamSpec>& ps, size_t& i, ParamStore& store) {
    Decoder d{};
    at::Tensor** slots[] = {&d.attn_norm, &d.wq, &d.wk, &d.wv, &d.wo,
                            &d.mlp_norm,  &d.w1, &d.w3, &d.w2};
    for (at::Tensor** slot : slots) *slot = store.use(ps[i++]);
    d.qkv = std::make_shared<FusedWeight>();
    d.gate_up = std::make_shared<FusedWeight>();
    return d;
  }
};

Stage::Stage(const ModelConfig& cfg, StageSpec spec, ParamStore& store, const at::Device& device,
             Kernels kernels)
    : impl_(std::make_unique<Impl>(cfg, std::move(spec), device)) {
  Impl& m = *impl_;
  for (const LayerSpec& spec_l : m.spec.layers) {
    // The layer's parameters in the order architecture.h lists them (shared ones included).
    const std::vector<ParamSpec> ps = params_of(cfg, {spec_l}, m.spec.total_decoders);
    size_t i = 0;
    Impl::Layer l{spec_l.kind};
    switch (spec_l.kind) {
      case ppc::LayerKind::Embedding:
        l.a = store.use(ps[i++]);
        break;
      case ppc::LayerKind::Decoder:
        l.d = m.decoder_params(ps, i, store);
        break;
      case ppc::LayerKind::Mtp:
        l.m.depth = spec_l.index + 1;
        l.m.embed = store.use(ps[i++]);
        l.m.enorm = store.use(ps[i++]);
        l.m.hnorm = store.use(ps[i++]);
        l.m.eh_proj = store.use(ps[i++]);
        l.m.layer = m.decoder_params(ps, i, store);
        l.m.final_norm = store.use(ps[i++]);
        break;
      case ppc::LayerKind::Loss:
        l.a = store.use(ps[i++]);
        l.b = store.use(ps[i++]);
        break;
    }
    PPC_INTERNAL_ASSERT(i == ps.size(), "every parameter of a layer is used");
    m.layers.push_back(l);
  }
  m.attn = attention_consts(cfg, device, kernels);
}

Stage::~Stage() = default;
Stage::Stage(Stage&&) noexcept = default;
Stage& Stage::operator=(Stage&&) noexcept = default;

const StageSpec& Stage::spec() const {
  return impl_->spec;
}

bool Stage::has_loss() const {
  for (const Impl::Layer& l : impl_->layers)
    if (l.kind == ppc::LayerKind::Loss) return true;
  return false;
}

at::Tensor Stage::forward(const at::Tensor& state, const at::Tensor& rows, GradStash* stash,
                          StageLosses* losses) {
  Impl& m = *impl_;
  if (m.layers.empty()) {  // an empty stage passes its input on
    if (state.defined()) return state.view_as(state);
    // The model's first stage, empty, before E: a placeholder for the next stage.
    return at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(m.device))
        .requires_grad_(true);
  }
  std::vector<at::Tensor> hs;  // h^0, h^1, ...
  if (m.spec.in.kind == Boundary::Kind::Hidden) hs = state.unbind(0);
  at::Tensor loss;
  for (const Impl::Layer& l : m.layers) {
    switch (l.kind) {
      case ppc::LayerKind::Embedding:
        hs = {embedding(l.a, rows.narrow(1, 0, m.cfg.seq_len).contiguous(), stash)};
        break;
      case ppc::LayerKind::Decoder:
        hs[0] = m.decoder(hs[0], l.d, stash);
        break;
      case ppc::LayerKind::Mtp:
        hs.push_back(m.mtp(hs.back(), rows, l.m, stash));
        break;
      case ppc::LayerKind::Loss:
        loss = m.loss(hs, rows, l, stash, losses);
        break;
    }
  }
  if (loss.defined()) return loss;
  return hs.size() == 1 ? hs[0].unsqueeze(0) : at::stack(hs);
}

}  // namespace pprt
