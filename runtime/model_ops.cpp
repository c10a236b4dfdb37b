// The model's operations (model_ops.h). LibTorch 1.13 has no scaled_dot_product_attention:
// attention is written out (matmul, causal mask, softmax).
#include "runtime/model_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/diagnostic.h"

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
// Causal attention in blocks of query positions: positions [t0, t1) read keys [0, t1) only, so
// that the products and the softmax skip most of the masked half of the scores (a quarter of
// attention's products with two blocks). Blocks of at least 64 positions, at most 8 of them.
struct CausalBlock {
  int64_t t0, t1;
};
std::vector<CausalBlock> causal_blocks(int64_t T) {
  const int64_t n = std::clamp<int64_t>(T / 64, 1, 8);
  std::vector<CausalBlock> blocks;
  for (int64_t i = 0; i < n; ++i) blocks.push_back({T * i / n, T * (i + 1) / n});
  return blocks;
}

// Grouped-query causal attention from the fused q/k/v product's output to the heads'
// concatenated outputs [b, T, heads * hd], rotary embedding included, with its backward written
// out. Query head j*group + r reads key/value head j (as repeat_interleave would give): the
// group's queries are stacked, position-major, [b*kv, T*group, hd] (row t*group + r), so that
// each key/value head is multiplied once, by one larger product per block of positions
// (causal_blocks, whose rows are then contiguous), and never copied. The scale and the causal
// mask (stacked likewise) go into that product (baddbmm). The gradient comes back as one tensor
// in the fused product's layout.
struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv, const AttentionConsts* c) {
    const int64_t b = qkv.size(0), T = qkv.size(1), hd = c->head_dim, h = c->heads,
                  kv = c->kv_heads, group = h / kv;
    at::Tensor q = at::empty({b, kv, T, group, hd}, qkv.options());
    at::Tensor k = at::empty({b, kv, T, hd}, qkv.options());
    rotate(heads_of(qkv, 0, h, hd).view({b, kv, group, T, hd}), q.permute({0, 1, 3, 2, 4}), c->cos,
           c->sin);
    rotate(heads_of(qkv, h, kv, hd), k, c->cos, c->sin);
    const at::Tensor qs = q.view({b * kv, T * group, hd}), ks = k.view({b * kv, T, hd});
    const at::Tensor vs = heads_of(qkv, h + kv, kv, hd).contiguous().view({b * kv, T, hd});
    at::Tensor out = at::empty({b, T, kv, group, hd}, qkv.options());
    std::vector<at::Tensor> saved = {qs, ks, vs};  // then each block's probabilities
    for (const CausalBlock& blk : causal_blocks(T)) {
      const int64_t n = blk.t1 - blk.t0;
      const at::Tensor mask = c->mask.narrow(0, blk.t0 * group, n * group).narrow(1, 0, blk.t1);
      const at::Tensor p =
          at::softmax(at::baddbmm(mask, qs.narrow(1, blk.t0 * group, n * group),
                                  ks.narrow(1, 0, blk.t1).transpose(1, 2), 1.0, c->scale),
                      -1);
      out.narrow(1, blk.t0, n)
          .copy_(
              p.bmm(vs.narrow(1, 0, blk.t1)).view({b, kv, n, group, hd}).permute({0, 2, 1, 3, 4}));
      saved.push_back(p);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["consts"] = reinterpret_cast<int64_t>(c);
    return out.view({b, T, h * hd});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &qs = saved[0], &ks = saved[1], &vs = saved[2];
    const auto* c = reinterpret_cast<const AttentionConsts*>(ctx->saved_data["consts"].toInt());
    const int64_t b = grads[0].size(0), T = grads[0].size(1), hd = c->head_dim, h = c->heads,
                  kv = c->kv_heads, group = h / kv;
    const at::Tensor go = grads[0].reshape({b, T, kv, group, hd});
    at::Tensor dq = at::empty({b, kv, T, group, hd}, grads[0].options());
    at::Tensor dk, dv;  // [b*kv, T, hd], made by the last block (which reads every key)
    const std::vector<CausalBlock> blocks = causal_blocks(T);
    for (size_t i = blocks.size(); i-- > 0;) {
      const CausalBlock& blk = blocks[i];
      const int64_t n = blk.t1 - blk.t0;
      const at::Tensor& p = saved[3 + i];
      const at::Tensor gi = go.narrow(1, blk.t0, n)
                                .permute({0, 2, 1, 3, 4})
                                .contiguous()
                                .view({b * kv, n * group, hd});
      const at::Tensor qi = qs.narrow(1, blk.t0 * group, n * group);
      const at::Tensor ki = ks.narrow(1, 0, blk.t1), vi = vs.narrow(1, 0, blk.t1);
      const at::Tensor ds =
          at::_softmax_backward_data(gi.bmm(vi.transpose(1, 2)), p, -1, p.scalar_type());
      dq.narrow(2, blk.t0, n).copy_(ds.bmm(ki).view({b, kv, n, group, hd}));
      if (blk.t1 == T) {
        dk = ds.transpose(1, 2).bmm(qi);
        dv = p.transpose(1, 2).bmm(gi);
      } else {
        dk.narrow(1, 0, blk.t1).baddbmm_(ds.transpose(1, 2), qi);
        dv.narrow(1, 0, blk.t1).baddbmm_(p.transpose(1, 2), gi);
      }
    }
    at::Tensor d = at::empty({b, T, (h + 2 * kv) * hd}, grads[0].options());
    // The rotation's transpose, with the scores' softmax scale, through the backward's tables.
    rotate(dq.permute({0, 1, 3, 2, 4}), heads_of(d, 0, h, hd).view({b, kv, group, T, hd}),
           c->cos_back, c->sin_back);
    rotate(dk.view({b, kv, T, hd}), heads_of(d, h, kv, hd), c->cos_back, c->sin_back);
    heads_of(d, h + kv, kv, hd).copy_(dv.view({b, kv, T, hd}));
    return {d, at::Tensor()};
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

}  // namespace

AttentionConsts attention_consts(const ModelConfig& cfg, const at::Device& device) {
  AttentionConsts c;
  const int64_t T = cfg.seq_len, hd = cfg.head_dim();
  at::Tensor inv =
      at::pow(cfg.rope_theta, -at::arange(0, hd, 2, at::kDouble) / static_cast<double>(hd));
  at::Tensor ang = at::outer(at::arange(T, at::kDouble), inv);
  ang = at::cat({ang, ang}, -1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  c.cos = ang.cos().to(at::kFloat).to(device);
  c.sin = ang.sin().to(at::kFloat).to(device);
  c.cos_back = (ang.cos() * scale).to(at::kFloat).to(device);
  c.sin_back = (ang.sin() * -scale).to(at::kFloat).to(device);
  c.mask = at::full({T, T}, -std::numeric_limits<float>::infinity(), at::kFloat)
               .triu(1)
               .repeat_interleave(cfg.heads / cfg.kv_heads, 0)
               .to(device);
  c.heads = cfg.heads;
  c.kv_heads = cfg.kv_heads;
  c.head_dim = hd;
  c.scale = scale;
  return c;
}

const at::Tensor& FusedWeight::of(const std::vector<at::Tensor*>& ps) {
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

at::Tensor linear(const at::Tensor& x, at::Tensor* w, GradStash* stash) {
  return LinearFn::apply(x, *w, stash, w);
}

at::Tensor fused_linear(const at::Tensor& x, const std::vector<at::Tensor*>& ws, FusedWeight& wf,
                        GradStash* stash) {
  const at::Tensor& w = wf.of(ws);
  if (ws.size() == 2) return FusedLinear2Fn::apply(x, *ws[0], *ws[1], w, stash, ws[0], ws[1]);
  PPC_INTERNAL_ASSERT(ws.size() == 3, "a fused linear map of two or three weights");
  return FusedLinear3Fn::apply(x, *ws[0], *ws[1], *ws[2], w, stash, ws[0], ws[1], ws[2]);
}

at::Tensor rms_norm(const at::Tensor& x, at::Tensor* g, double eps, GradStash* stash) {
  return RmsNormFn::apply(x, *g, eps, stash, g);
}

at::Tensor embedding(at::Tensor* w, const at::Tensor& ids, GradStash* stash) {
  return EmbeddingFn::apply(*w, ids, stash, w);
}

at::Tensor swiglu(const at::Tensor& gate_up) {
  return SwiGluFn::apply(gate_up);
}

at::Tensor attention(const at::Tensor& qkv, const AttentionConsts& c) {
  return AttentionFn::apply(qkv, &c);
}

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

}  // namespace pprt
