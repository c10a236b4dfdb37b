// The model's modules, written with ATen ops and custom autograd functions whose weight
// gradient can be deferred (see model.h). LibTorch 1.13 has no scaled_dot_product_attention:
// attention is written out (matmul, causal mask, softmax).
#include "runtime/model.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "compiler/diagnostic.h"
#include "runtime/data.h"

namespace pprt {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Weight gradients, added to the parameters' .grad. The first one of a step (after zero_grads,
// .grad is undefined) becomes .grad; later ones are added in place, by the product itself where
// there is one (addmm_ into .grad: no gradient tensor per microbatch, and no second pass over it).
// B and W both come here, in the same order, so I then W gives B's gradients bit for bit.
void accumulate(at::Tensor& param, const at::Tensor& g) {
  at::Tensor& grad = param.mutable_grad();
  if (!grad.defined())
    grad = g;
  else
    grad.add_(g);
}
at::Tensor rows_of(const at::Tensor& t) {
  return t.reshape({-1, t.size(-1)});
}

// y = x W^T: dW = gy^T x.
void accumulate_linear(at::Tensor& param, const at::Tensor& x, const at::Tensor& gy) {
  at::Tensor& grad = param.mutable_grad();
  const at::Tensor x2 = rows_of(x), gy2 = rows_of(gy);
  if (!grad.defined())
    grad = gy2.t().mm(x2);
  else
    grad.addmm_(gy2.t(), x2);
}
// y = x [W_0; W_1; ...]^T: each weight's gradient from its own columns of gy.
void accumulate_fused_linear(const std::vector<at::Tensor*>& params, const at::Tensor& x,
                             const at::Tensor& gy) {
  const at::Tensor gy2 = rows_of(gy);
  int64_t first = 0;
  for (at::Tensor* p : params) {
    accumulate_linear(*p, x, gy2.narrow(1, first, p->size(0)));
    first += p->size(0);
  }
}
void accumulate_scale(at::Tensor& param, const at::Tensor& x, const at::Tensor& gy) {
  accumulate(param, rows_of(gy * x).sum(0));
}
void accumulate_embedding(at::Tensor& param, const at::Tensor& ids, const at::Tensor& gy) {
  at::Tensor& grad = param.mutable_grad();
  if (!grad.defined()) grad = at::zeros_like(param);
  grad.index_add_(0, ids.reshape({-1}), rows_of(gy));
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
    if (stash && stash->defer)
      stash->push({GradStash::Op::Linear, param_of(ctx), x, gy});
    else
      accumulate_linear(*param_of(ctx), x, gy);
    return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y = x @ [W_0; W_1; ...]^T: linear maps of one input as one matrix product (q, k and v; gate
// and up), which the BLAS runs faster than two or three narrower ones. `wf` is the weights'
// concatenation (FusedWeight, made once per optimizer step); the weights themselves are inputs
// only so that the output requires their gradients. The backward is one product for the input's
// gradient, and one per weight that accumulates into its .grad (from that weight's columns of the
// output gradient).
at::Tensor fused_linear_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& wf,
                                GradStash* stash, const std::vector<at::Tensor*>& params) {
  ctx->save_for_backward({x, wf});
  ctx->saved_data["stash"] = reinterpret_cast<int64_t>(stash);
  std::vector<int64_t> ps;
  for (at::Tensor* p : params) ps.push_back(reinterpret_cast<int64_t>(p));
  ctx->saved_data["params"] = ps;
  return x.matmul(wf.t());
}

// The gradients of x, then none for the weights (added to their .grad here, or kept for W) and
// wf, and `extra` undefined ones (the non-tensor arguments).
variable_list fused_linear_backward(AutogradContext* ctx, const variable_list& grads,
                                    size_t extra) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& w = saved[1];
  const at::Tensor& gy = grads[0];
  std::vector<at::Tensor*> params;
  for (int64_t p : ctx->saved_data["params"].toIntVector())
    params.push_back(reinterpret_cast<at::Tensor*>(p));
  variable_list out(2 + params.size() + extra);
  out[0] = gy.matmul(w);
  GradStash* stash = stash_of(ctx);
  if (stash && stash->defer)
    stash->push({GradStash::Op::FusedLinear, params.front(), x, gy, std::move(params)});
  else
    accumulate_fused_linear(params, x, gy);
  return out;
}

struct FusedLinear2Fn : torch::autograd::Function<FusedLinear2Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor&,
                            const at::Tensor&, const at::Tensor& wf, GradStash* stash,
                            at::Tensor* p0, at::Tensor* p1) {
    return fused_linear_forward(ctx, x, wf, stash, {p0, p1});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return fused_linear_backward(ctx, grads, 3);
  }
};

struct FusedLinear3Fn : torch::autograd::Function<FusedLinear3Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const at::Tensor& wf,
                            GradStash* stash, at::Tensor* p0, at::Tensor* p1, at::Tensor* p2) {
    return fused_linear_forward(ctx, x, wf, stash, {p0, p1, p2});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return fused_linear_backward(ctx, grads, 4);
  }
};

// y = silu(g) * u, where [g, u] is the fused gate/up product's output: the gradient comes back
// as one tensor [dg, du], the layout that product's backward takes, with no concatenation.
struct SwiGluFn : torch::autograd::Function<SwiGluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gu) {
    const int64_t f = gu.size(-1) / 2;
    const at::Tensor a = at::silu(gu.narrow(-1, 0, f));
    ctx->save_for_backward({gu, a});
    return a * gu.narrow(-1, f, f);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& gu = saved[0];
    const at::Tensor& a = saved[1];
    const at::Tensor& gy = grads[0];
    const int64_t f = gu.size(-1) / 2;
    at::Tensor d = at::empty(gu.sizes(), gu.options());
    at::Tensor dg = d.narrow(-1, 0, f), du = d.narrow(-1, f, f);
    at::silu_backward_out(dg, gy * gu.narrow(-1, f, f), gu.narrow(-1, 0, f));
    at::mul_out(du, gy, a);
    return {d};
  }
};

// What attention needs besides its input: the rotary tables [T, head_dim], the causal mask stacked
// once per query head of a key/value head's group ([heads / kv_heads * T, T]), and the head counts.
// Both halves of a rotary table hold the same angles, so the rotation's transpose (for gradients)
// is the rotation by the opposite angle: `rotate` with the sine negated. The backward's tables
// also carry the softmax scale of the scores' product.
struct AttentionConsts {
  at::Tensor cos, sin, cos_back, sin_back, mask;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double scale = 1;
};

// Heads [first, first + n) of a fused q/k/v tensor [b, T, (heads + 2 kv_heads) * hd], as a view
// [b, n, T, hd].
at::Tensor heads_of(const at::Tensor& qkv, int64_t first, int64_t n, int64_t hd) {
  return qkv.narrow(-1, first * hd, n * hd).view({qkv.size(0), qkv.size(1), n, hd}).transpose(1, 2);
}

// Rotary embedding of x [b, n, T, hd] (any strides) into `out` (same shape):
// out = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
void rotate(const at::Tensor& x, at::Tensor out, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);
  at::mul_out(o1, x1, cos.narrow(-1, 0, half));
  o1.addcmul_(x2, sin.narrow(-1, 0, half), -1);
  at::mul_out(o2, x2, cos.narrow(-1, half, half));
  o2.addcmul_(x1, sin.narrow(-1, half, half));
}
// Grouped-query causal attention from the fused q/k/v product's output to the heads'
// concatenated outputs [b, T, heads * hd], rotary embedding included, with its backward written
// out. Query head j*group + r reads key/value head j (as repeat_interleave would give): the
// group's queries are stacked along the sequence, [b*kv, group*T, hd], so that each key/value head
// is multiplied once, by one larger product, and never copied. The scale and the causal mask
// (stacked likewise) go into that product (baddbmm). The gradient comes back as one tensor in
// the fused product's layout.
struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv, const AttentionConsts* c) {
    const int64_t b = qkv.size(0), T = qkv.size(1), hd = c->head_dim, h = c->heads,
                  kv = c->kv_heads, group = h / kv;
    at::Tensor q = at::empty({b, h, T, hd}, qkv.options());
    at::Tensor k = at::empty({b, kv, T, hd}, qkv.options());
    rotate(heads_of(qkv, 0, h, hd), q, c->cos, c->sin);
    rotate(heads_of(qkv, h, kv, hd), k, c->cos, c->sin);
    const at::Tensor qs = q.view({b * kv, group * T, hd}), ks = k.view({b * kv, T, hd});
    const at::Tensor vs = heads_of(qkv, h + kv, kv, hd).contiguous().view({b * kv, T, hd});
    const at::Tensor p =
        at::softmax(at::baddbmm(c->mask, qs, ks.transpose(1, 2), 1.0, c->scale), -1);
    ctx->save_for_backward({qs, ks, vs, p});
    ctx->saved_data["consts"] = reinterpret_cast<int64_t>(c);
    return p.bmm(vs).view({b, h, T, hd}).transpose(1, 2).reshape({b, T, h * hd});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &qs = saved[0], &ks = saved[1], &vs = saved[2], &p = saved[3];
    const auto* c = reinterpret_cast<const AttentionConsts*>(ctx->saved_data["consts"].toInt());
    const int64_t b = grads[0].size(0), T = grads[0].size(1), hd = c->head_dim, h = c->heads,
                  kv = c->kv_heads, group = h / kv;
    const at::Tensor go =
        grads[0].reshape({b, T, h, hd}).transpose(1, 2).contiguous().view({b * kv, group * T, hd});
    const at::Tensor ds =
        at::_softmax_backward_data(go.bmm(vs.transpose(1, 2)), p, -1, p.scalar_type());
    at::Tensor d = at::empty({b, T, (h + 2 * kv) * hd}, grads[0].options());
    // The rotation's transpose, with the scores' softmax scale, through the backward's tables.
    rotate(ds.bmm(ks).view({b, h, T, hd}), heads_of(d, 0, h, hd), c->cos_back, c->sin_back);
    rotate(ds.transpose(1, 2).bmm(qs).view({b, kv, T, hd}), heads_of(d, h, kv, hd), c->cos_back,
           c->sin_back);
    heads_of(d, h + kv, kv, hd).copy_(p.transpose(1, 2).bmm(go).view({b, kv, T, hd}));
    return {d, at::Tensor()};
  }
};

// The concatenation [W_0; W_1; ...] of a fused linear map's weights, kept from one microbatch to
// the next and made again only when a weight changed (each in-place update, the optimizer's
// included, bumps a tensor's version; checkpoint loading bumps it too).
struct FusedWeight {
  at::Tensor w;
  std::vector<const void*> data;
  std::vector<int64_t> versions;

  const at::Tensor& of(const std::vector<at::Tensor*>& ps) {
    bool fresh = w.defined() && data.size() == ps.size();
    for (size_t i = 0; fresh && i < ps.size(); ++i)
      fresh = ps[i]->data_ptr() == data[i] && ps[i]->_version() == versions[i];
    if (fresh) return w;
    std::vector<at::Tensor> ws;
    data.clear();
    versions.clear();
    for (const at::Tensor* p : ps) {
      ws.push_back(p->detach());
      data.push_back(p->data_ptr());
      versions.push_back(static_cast<int64_t>(p->_version()));
    }
    w = at::cat(ws);
    return w;
  }
};

// y = g * x / sqrt(mean(x^2) + eps): RMSNorm as one function, whose backward is written out
// (d/dx = rstd * (gy*g - xn * mean(gy*g * xn))) rather than recorded op by op.
struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& g,
                            double eps, GradStash* stash, at::Tensor* param) {
    const at::Tensor rstd = (x.square().mean({-1}, true) + eps).rsqrt();
    const at::Tensor xn = x * rstd;
    ctx->save_for_backward({xn, rstd, g});
    remember(ctx, stash, param);
    return xn * g;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& xn = saved[0];
    const at::Tensor& rstd = saved[1];
    const at::Tensor& g = saved[2];
    const at::Tensor& gy = grads[0];
    const at::Tensor gxn = gy * g;
    at::Tensor gx = (gxn - xn * (gxn * xn).mean({-1}, true)) * rstd;
    GradStash* stash = stash_of(ctx);
    if (stash && stash->defer)
      stash->push({GradStash::Op::Scale, param_of(ctx), xn, gy});
    else
      accumulate_scale(*param_of(ctx), xn, gy);
    return {gx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
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
    if (stash && stash->defer)
      stash->push({GradStash::Op::Embedding, param, ids, gy});
    else
      accumulate_embedding(*param, ids, gy);
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
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
        accumulate_linear(*it.param, it.input, it.grad);
        break;
      case Op::FusedLinear:
        accumulate_fused_linear(it.fused, it.input, it.grad);
        break;
      case Op::Scale:
        accumulate_scale(*it.param, it.input, it.grad);
        break;
      case Op::Embedding:
        accumulate_embedding(*it.param, it.input, it.grad);
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

  at::Tensor linear(const at::Tensor& x, at::Tensor* w, GradStash* s) {
    return LinearFn::apply(x, *w, s, w);
  }
  at::Tensor rms_norm(const at::Tensor& x, at::Tensor* g, GradStash* s) {
    return RmsNormFn::apply(x, *g, cfg.norm_eps, s, g);
  }
  at::Tensor embedding(at::Tensor* w, const at::Tensor& ids, GradStash* s) {
    return EmbeddingFn::apply(*w, ids, s, w);
  }
  at::Tensor decoder(const at::Tensor& x, const Decoder& d, GradStash* s) {
    const at::Tensor h = rms_norm(x, d.attn_norm, s);
    const at::Tensor qkv = FusedLinear3Fn::apply(
        h, *d.wq, *d.wk, *d.wv, d.qkv->of({d.wq, d.wk, d.wv}), s, d.wq, d.wk, d.wv);
    const at::Tensor x1 = x + linear(AttentionFn::apply(qkv, &attn), d.wo, s);
    const at::Tensor h2 = rms_norm(x1, d.mlp_norm, s);
    const at::Tensor gate_up =
        FusedLinear2Fn::apply(h2, *d.w1, *d.w3, d.gate_up->of({d.w1, d.w3}), s, d.w1, d.w3);
    return x1 + linear(SwiGluFn::apply(gate_up), d.w2, s);
  }

  // MTP depth k: the embedding of the tokens k places ahead (token i+k at position i; positions
  // past the sequence read id 0: only positions whose target is masked see them) and h^{k-1}.
  at::Tensor mtp(const at::Tensor& h_prev, const at::Tensor& rows, const Mtp& m, GradStash* s) {
    const int64_t b = rows.size(0), T = cfg.seq_len, k = m.depth;
    at::Tensor ids = rows.narrow(1, k, T + 1 - k);
    if (k > 1) ids = at::cat({ids, at::zeros({b, k - 1}, ids.options())}, 1);
    at::Tensor e = rms_norm(embedding(m.embed, ids.contiguous(), s), m.enorm, s);
    at::Tensor x = linear(at::cat({e, rms_norm(h_prev, m.hnorm, s)}, -1), m.eh_proj, s);
    return rms_norm(decoder(x, m.layer, s), m.final_norm, s);
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
    at::Tensor main = ce(rms_norm(hs[0], l.a, s), 0);
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

Stage::Stage(const ModelConfig& cfg, StageSpec spec, ParamStore& store, const at::Device& device)
    : impl_(std::make_unique<Impl>(cfg, std::move(spec), device)) {
  Impl& m = *impl_;
  for (const LayerSpec& spec_l : m.spec.layers) {
    // The layer's parameters in the order model_spec lists them (shared ones included).
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
  // Rotary tables and the causal mask, computed in double for exactness.
  const int64_t T = cfg.seq_len, hd = cfg.head_dim();
  at::Tensor inv =
      at::pow(cfg.rope_theta, -at::arange(0, hd, 2, at::kDouble) / static_cast<double>(hd));
  at::Tensor ang = at::outer(at::arange(T, at::kDouble), inv);
  ang = at::cat({ang, ang}, -1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  m.attn.cos = ang.cos().to(at::kFloat).to(device);
  m.attn.sin = ang.sin().to(at::kFloat).to(device);
  m.attn.cos_back = (ang.cos() * scale).to(at::kFloat).to(device);
  m.attn.sin_back = (ang.sin() * -scale).to(at::kFloat).to(device);
  m.attn.mask = at::full({T, T}, -std::numeric_limits<float>::infinity(), at::kFloat)
                    .triu(1)
                    .repeat({cfg.heads / cfg.kv_heads, 1})
                    .to(device);
  m.attn.heads = cfg.heads;
  m.attn.kv_heads = cfg.kv_heads;
  m.attn.head_dim = hd;
  m.attn.scale = scale;
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
        hs = {m.embedding(l.a, rows.narrow(1, 0, m.cfg.seq_len).contiguous(), stash)};
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
