// The model's modules, written with ATen ops and three custom autograd functions whose weight
// gradient can be deferred (see model.h). LibTorch 1.13 has no scaled_dot_product_attention:
// attention is written out (matmul, causal mask, softmax).
#include "runtime/model.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <numbers>

#include "runtime/data.h"

namespace pprt {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<std::vector<LayerSpec>> number_layers(const ppc::Layout& layout) {
  std::vector<std::vector<LayerSpec>> out;
  int decoder = 0;
  for (const auto& stage : layout.stages) {
    auto& specs = out.emplace_back();
    for (ppc::LayerKind k : stage)
      specs.push_back(LayerSpec{k, k == ppc::LayerKind::Decoder ? decoder++ : 0});
  }
  return out;
}

namespace {

void accumulate(at::Tensor& param, const at::Tensor& g) {
  at::Tensor& grad = param.mutable_grad();
  if (!grad.defined())
    grad = g;
  else
    grad.add_(g);
}

// Weight gradients of the three operations.
at::Tensor linear_weight_grad(const at::Tensor& x, const at::Tensor& gy) {
  return gy.reshape({-1, gy.size(-1)}).t().matmul(x.reshape({-1, x.size(-1)}));
}
at::Tensor scale_weight_grad(const at::Tensor& x, const at::Tensor& gy) {
  return (gy * x).reshape({-1, x.size(-1)}).sum(0);
}
at::Tensor embedding_weight_grad(const at::Tensor& ids, const at::Tensor& gy,
                                 const at::Tensor& like) {
  return at::zeros_like(like).index_add_(0, ids.reshape({-1}), gy.reshape({-1, gy.size(-1)}));
}

GradStash* stash_of(AutogradContext* ctx) {
  return reinterpret_cast<GradStash*>(ctx->saved_data["stash"].toInt());
}
at::Tensor* param_of(AutogradContext* ctx) {
  return reinterpret_cast<at::Tensor*>(ctx->saved_data["param"].toInt());
}
void remember(AutogradContext* ctx, GradStash* stash, at::Tensor* param) {
  ctx->saved_data["stash"] = reinterpret_cast<int64_t>(stash);
  ctx->saved_data["param"] = reinterpret_cast<int64_t>(param);
}

// y = x @ W^T
struct LinearFn : torch::autograd::Function<LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            GradStash* stash, at::Tensor* param) {
    ctx->save_for_backward({x, w});
    remember(ctx, stash, param);
    return x.matmul(w.t());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor& gy = grads[0];
    at::Tensor gx = gy.matmul(w);
    GradStash* stash = stash_of(ctx);
    if (stash && stash->defer) {
      stash->push({GradStash::Op::Linear, param_of(ctx), x, gy});
      return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    return {gx, linear_weight_grad(x, gy), at::Tensor(), at::Tensor()};
  }
};

// y = x * g (per channel)
struct ScaleFn : torch::autograd::Function<ScaleFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& g,
                            GradStash* stash, at::Tensor* param) {
    ctx->save_for_backward({x, g});
    remember(ctx, stash, param);
    return x * g;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& g = saved[1];
    const at::Tensor& gy = grads[0];
    at::Tensor gx = gy * g;
    GradStash* stash = stash_of(ctx);
    if (stash && stash->defer) {
      stash->push({GradStash::Op::Scale, param_of(ctx), x, gy});
      return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    return {gx, scale_weight_grad(x, gy), at::Tensor(), at::Tensor()};
  }
};

// y = W[ids]
struct EmbeddingFn : torch::autograd::Function<EmbeddingFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& ids,
                            GradStash* stash, at::Tensor* param) {
    ctx->save_for_backward({ids});
    remember(ctx, stash, param);
    auto sizes = ids.sizes().vec();
    sizes.push_back(w.size(1));
    return w.index_select(0, ids.reshape({-1})).reshape(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ids = ctx->get_saved_variables()[0];
    const at::Tensor& gy = grads[0];
    GradStash* stash = stash_of(ctx);
    at::Tensor* param = param_of(ctx);
    if (stash && stash->defer) {
      stash->push({GradStash::Op::Embedding, param, ids, gy});
      return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    return {embedding_weight_grad(ids, gy, *param), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

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

void GradStash::run_weight_grads() {
  for (Item& it : items_) {
    switch (it.op) {
      case Op::Linear:
        accumulate(*it.param, linear_weight_grad(it.input, it.grad));
        break;
      case Op::Scale:
        accumulate(*it.param, scale_weight_grad(it.input, it.grad));
        break;
      case Op::Embedding:
        accumulate(*it.param, embedding_weight_grad(it.input, it.grad, *it.param));
        break;
    }
  }
  items_.clear();
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
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<float>(std * normal_at(key, static_cast<uint64_t>(i)));
  return t;
}

struct Stage::Impl {
  struct Decoder {
    int attn_norm, wq, wk, wv, wo, mlp_norm, w1, w2, w3;  // indices into params
  };
  struct Layer {
    ppc::LayerKind kind;
    Decoder d{};
    int a = -1, b = -1;  // E: weight; L: norm, out
  };

  ModelConfig cfg;
  std::vector<Layer> layers;
  std::vector<NamedParam> params;
  at::Tensor cos, sin, mask;  // rotary tables [T, head_dim] and causal mask [T, T]

  int add(const std::string& name, std::vector<int64_t> shape, double std, uint64_t seed,
          const at::Device& device) {
    at::Tensor t = init_param(name, shape, std, seed).to(device);
    t.set_requires_grad(true);
    params.push_back(NamedParam{name, t, shape.size() >= 2});
    return static_cast<int>(params.size() - 1);
  }
  at::Tensor* p(int i) { return &params[static_cast<size_t>(i)].tensor; }

  at::Tensor linear(const at::Tensor& x, int w, GradStash* s) {
    return LinearFn::apply(x, *p(w), s, p(w));
  }
  at::Tensor rms_norm(const at::Tensor& x, int g, GradStash* s) {
    at::Tensor xn = x * at::rsqrt(x.pow(2).mean({-1}, true) + cfg.norm_eps);
    return ScaleFn::apply(xn, *p(g), s, p(g));
  }
  at::Tensor rope(const at::Tensor& x) const {  // x: [b, heads, T, head_dim]
    const int64_t half = x.size(-1) / 2;
    at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
    return x * cos + rotated * sin;
  }

  at::Tensor decoder(const at::Tensor& x, const Decoder& d, GradStash* s) {
    const int64_t b = x.size(0), T = x.size(1), hd = cfg.head_dim();
    at::Tensor h = rms_norm(x, d.attn_norm, s);
    at::Tensor q = linear(h, d.wq, s).view({b, T, cfg.heads, hd}).transpose(1, 2);
    at::Tensor k = linear(h, d.wk, s).view({b, T, cfg.kv_heads, hd}).transpose(1, 2);
    at::Tensor v = linear(h, d.wv, s).view({b, T, cfg.kv_heads, hd}).transpose(1, 2);
    q = rope(q);
    k = rope(k);
    if (cfg.kv_heads != cfg.heads) {
      const int64_t rep = cfg.heads / cfg.kv_heads;
      k = k.repeat_interleave(rep, 1);
      v = v.repeat_interleave(rep, 1);
    }
    at::Tensor scores =
        q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd))) + mask;
    at::Tensor o = at::softmax(scores, -1).matmul(v).transpose(1, 2).reshape({b, T, cfg.hidden});
    at::Tensor x1 = x + linear(o, d.wo, s);
    at::Tensor h2 = rms_norm(x1, d.mlp_norm, s);
    at::Tensor gate = linear(h2, d.w1, s);
    at::Tensor up = linear(h2, d.w3, s);
    return x1 + linear(at::silu(gate) * up, d.w2, s);
  }
};

Stage::Stage(const ModelConfig& cfg, std::vector<LayerSpec> specs, uint64_t seed,
             int total_decoders, const at::Device& device)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = cfg;
  const int64_t H = cfg.hidden, hd = cfg.head_dim(), F = cfg.ffn, V = cfg.vocab;
  const double std = 0.02, out_std = 0.02 / std::sqrt(2.0 * std::max(1, total_decoders));
  for (const LayerSpec& spec : specs) {
    Impl::Layer l{spec.kind};
    switch (spec.kind) {
      case ppc::LayerKind::Embedding:
        l.a = m.add("embed.weight", {V, H}, std, seed, device);
        break;
      case ppc::LayerKind::Decoder: {
        const std::string pre = "layers." + std::to_string(spec.index) + ".";
        l.d.attn_norm = m.add(pre + "attn_norm.weight", {H}, 0, seed, device);
        l.d.wq = m.add(pre + "attn.wq.weight", {cfg.heads * hd, H}, std, seed, device);
        l.d.wk = m.add(pre + "attn.wk.weight", {cfg.kv_heads * hd, H}, std, seed, device);
        l.d.wv = m.add(pre + "attn.wv.weight", {cfg.kv_heads * hd, H}, std, seed, device);
        l.d.wo = m.add(pre + "attn.wo.weight", {H, cfg.heads * hd}, out_std, seed, device);
        l.d.mlp_norm = m.add(pre + "mlp_norm.weight", {H}, 0, seed, device);
        l.d.w1 = m.add(pre + "mlp.w1.weight", {F, H}, std, seed, device);
        l.d.w3 = m.add(pre + "mlp.w3.weight", {F, H}, std, seed, device);
        l.d.w2 = m.add(pre + "mlp.w2.weight", {H, F}, out_std, seed, device);
        break;
      }
      case ppc::LayerKind::Loss:
        l.a = m.add("head.norm.weight", {H}, 0, seed, device);
        l.b = m.add("head.out.weight", {V, H}, std, seed, device);
        break;
      case ppc::LayerKind::Mtp:
        throw std::logic_error("multi-token prediction (m) layers are not supported yet");
    }
    m.layers.push_back(l);
  }
  // Rotary tables and the causal mask, computed in double for exactness.
  const int64_t T = cfg.seq_len;
  at::Tensor inv =
      at::pow(cfg.rope_theta, -at::arange(0, hd, 2, at::kDouble) / static_cast<double>(hd));
  at::Tensor ang = at::outer(at::arange(T, at::kDouble), inv);
  ang = at::cat({ang, ang}, -1);
  m.cos = ang.cos().to(at::kFloat).to(device);
  m.sin = ang.sin().to(at::kFloat).to(device);
  m.mask = at::full({T, T}, -std::numeric_limits<float>::infinity(), at::kFloat).triu(1).to(device);
}

Stage::~Stage() = default;
Stage::Stage(Stage&&) noexcept = default;
Stage& Stage::operator=(Stage&&) noexcept = default;

bool Stage::takes_tokens() const {
  return !impl_->layers.empty() && impl_->layers.front().kind == ppc::LayerKind::Embedding;
}
bool Stage::has_loss() const {
  return !impl_->layers.empty() && impl_->layers.back().kind == ppc::LayerKind::Loss;
}
bool Stage::empty() const {
  return impl_->layers.empty();
}
std::vector<NamedParam>& Stage::params() {
  return impl_->params;
}
const std::vector<NamedParam>& Stage::params() const {
  return impl_->params;
}

at::Tensor Stage::forward(const at::Tensor& input, const at::Tensor& targets, GradStash* stash) {
  Impl& m = *impl_;
  if (m.layers.empty()) return input.view_as(input);  // an empty stage passes its input on
  at::Tensor x = input;
  for (const Impl::Layer& l : m.layers) {
    switch (l.kind) {
      case ppc::LayerKind::Embedding:
        x = EmbeddingFn::apply(*m.p(l.a), x, stash, m.p(l.a));
        break;
      case ppc::LayerKind::Decoder:
        x = m.decoder(x, l.d, stash);
        break;
      case ppc::LayerKind::Loss: {
        at::Tensor logits = m.linear(m.rms_norm(x, l.a, stash), l.b, stash);
        x = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
        break;
      }
      case ppc::LayerKind::Mtp:
        break;
    }
  }
  return x;
}

}  // namespace pprt
