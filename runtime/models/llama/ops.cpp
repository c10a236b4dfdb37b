// The model's operations (ops.h), attention and RMSNorm apart (attention.cpp, rms_norm.cpp).
#include "runtime/models/llama/ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

#include "compiler/diagnostic.h"
#include "runtime/model/precision.h"
#include "runtime/models/llama/aten_support.h"
#include "runtime/models/llama/cpu_kernels.h"
#include "runtime/models/llama/op_grads.h"

namespace pprt {

bool cpu_float(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts)
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat) return false;
  return true;
}

Kernels kernels_on(Kernels k, const at::Device& device) {
  return k == Kernels::Auto && !device.is_cpu() ? Kernels::Fused : k;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace op_grads {

void accumulate(at::Tensor& param, const at::Tensor& g) {
  at::Tensor& grad = param.mutable_grad();
  if (!grad.defined())
    grad = master_grad(param, g);
  else
    grad.add_(g);
}
at::Tensor rows_of(const at::Tensor& t) {
  return t.reshape({-1, t.size(-1)});
}

WeightWork* work_of(AutogradContext* ctx) {
  return reinterpret_cast<WeightWork*>(ctx->saved_data["work"].toInt());
}
at::Tensor* param_of(AutogradContext* ctx) {
  return reinterpret_cast<at::Tensor*>(ctx->saved_data["param"].toInt());
}
void remember(AutogradContext* ctx, WeightWork* work, at::Tensor* param) {
  ctx->saved_data["work"] = reinterpret_cast<int64_t>(work);
  ctx->saved_data["param"] = reinterpret_cast<int64_t>(param);
}

}  // namespace op_grads

namespace {

using namespace op_grads;  // op_grads.h

// Whether a product of `a` (bf16 on a GPU) for an fp32 master is taken from cuBLAS in fp32:
// the GEMM accumulates in fp32 and writes its fp32 result, not rounded to bf16 (the CPU's products
// round theirs: ATen's CPU BLAS has no such output).
bool fp32_product_for(const at::Tensor& master, const at::Tensor& a) {
  return a.is_cuda() && low_precision(a) && master.scalar_type() == at::kFloat;
}
// a b as the gradient of `master` (in its dtype).
at::Tensor weight_product(const at::Tensor& master, const at::Tensor& a, const at::Tensor& b) {
  if (fp32_product_for(master, a)) return at::mm(a, b, at::kFloat);
  return master_grad(master, a.mm(b));
}

// y = x W^T: dW = gy^T x. Under mixed precision the product runs in x's dtype (with the GEMM's
// fp32 accumulation) and is added to the fp32 master's gradient (Megatron's main_grad); on a GPU
// the product's fp32 result itself, and where the loaded LibTorch can, by the product in place
// (cuBLAS adding into the fp32 .grad: Megatron's fused gradient accumulation).
void accumulate_linear(at::Tensor& param, const at::Tensor& x, const at::Tensor& gy) {
  at::Tensor& grad = param.mutable_grad();
  const at::Tensor x2 = rows_of(x), gy2 = rows_of(gy);
  if (x2.scalar_type() != param.scalar_type()) {
    if (grad.defined() && fp32_product_for(param, x2) &&
        aten_support::addmm_accumulates_fp32(x2.device()))
      at::addmm_out(grad, grad, gy2.t(), x2, param.scalar_type());
    else
      accumulate(param, weight_product(param, gy2.t(), x2));
  } else if (!grad.defined()) {
    grad = gy2.t().mm(x2);
  } else {
    grad.addmm_(gy2.t(), x2);
  }
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
void accumulate_embedding(at::Tensor& param, const at::Tensor& ids, const at::Tensor& gy) {
  at::Tensor& grad = param.mutable_grad();
  if (!grad.defined()) grad = at::zeros_like(param);
  grad.index_add_(0, ids.reshape({-1}), rows_of(gy));
}

// y = x W^T: dW = gy^T x, as a tensor of its own (returned to autograd), in the master's dtype.
at::Tensor linear_weight_grad(const at::Tensor& master, const at::Tensor& x, const at::Tensor& gy) {
  return weight_product(master, rows_of(gy).t(), rows_of(x));
}

// The backward of y = x W^T (+ r) for x and W, whose inputs are at edges `xi` and `xi + 1`:
// the input's gradient gy W, and W's gradient now (B) or deferred to the W (I) with a
// WeightWork, or returned (without one). The deferred work keeps `gy` itself, not a view of it:
// autograd adds another gradient into a returned one in place only when nothing else holds that
// tensor (ResidualLinearFn returns gy).
std::pair<at::Tensor, at::Tensor> linear_backward(AutogradContext* ctx, const at::Tensor& gy,
                                                  size_t xi) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& w = saved[1];  // the product's operand: the weight or its working copy
  WeightWork* work = work_of(ctx);
  if (!work) {  // autograd's: only what the running backward needs
    return {
        ctx->needs_input_grad(xi) ? gy.matmul(w) : at::Tensor(),
        ctx->needs_input_grad(xi + 1) ? linear_weight_grad(*param_of(ctx), x, gy) : at::Tensor()};
  }
  at::Tensor gx = gy.matmul(w);
  at::Tensor* param = param_of(ctx);
  if (work->deferring())
    work->defer([param, x, gy] { accumulate_linear(*param, x, gy); });
  else
    accumulate_linear(*param, x, gy);
  return {gx, at::Tensor()};
}

// y = x @ W^T, where `wc` is the product's operand: W itself, or its working copy in x's dtype
// (W is an input so that the output requires its gradient).
struct LinearFn : torch::autograd::Function<LinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor&,
                            const at::Tensor& wc, WeightWork* work, at::Tensor* param) {
    ctx->save_for_backward({x, wc});
    remember(ctx, work, param);
    return x.matmul(wc.t());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto [gx, gw] = linear_backward(ctx, grads[0], 0);
    return {gx, gw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y = r + x @ W^T, the residual added by the product itself (addmm: no pass of its own, and the
// BLAS does not clear the output first). r's gradient is gy.
struct ResidualLinearFn : torch::autograd::Function<ResidualLinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& r, const at::Tensor& x,
                            const at::Tensor&, const at::Tensor& wc, WeightWork* work,
                            at::Tensor* param) {
    ctx->save_for_backward({x, wc});
    remember(ctx, work, param);
    return at::addmm(rows_of(r), rows_of(x), wc.t()).view(r.sizes());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& gy = grads[0];
    auto [gx, gw] = linear_backward(ctx, gy, 1);
    const bool r_needed = work_of(ctx) || ctx->needs_input_grad(0);
    return {r_needed ? gy : at::Tensor(), gx, gw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y = x @ [W_0; W_1; ...]^T: linear maps of one input as one matrix product (q, k and v; gate
// and up), which the BLAS runs faster than two or three narrower ones. `wf` is the weights'
// concatenation (FusedWeight, made once per optimizer step); the weights themselves are inputs
// only so that the output requires their gradients. The backward is one product for the input's
// gradient, and one per weight that accumulates into its .grad (from that weight's columns of the
// output gradient), or is returned for that weight without a WeightWork.
at::Tensor fused_linear_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& wf,
                                WeightWork* work, const std::vector<at::Tensor*>& params) {
  ctx->save_for_backward({x, wf});
  ctx->saved_data["work"] = reinterpret_cast<int64_t>(work);
  std::vector<int64_t> ps;
  for (at::Tensor* p : params) ps.push_back(reinterpret_cast<int64_t>(p));
  ctx->saved_data["params"] = ps;
  return x.matmul(wf.t());
}

// The gradients of x, then of the weights (none with a WeightWork: added to their .grad here,
// or deferred), none for wf, and `extra` undefined ones (the non-tensor arguments).
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
  WeightWork* work = work_of(ctx);
  if (!work) {
    if (ctx->needs_input_grad(0)) out[0] = gy.matmul(w);
    const at::Tensor gy2 = rows_of(gy);
    int64_t first = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      if (ctx->needs_input_grad(1 + i))
        out[1 + i] =
            weight_product(*params[i], gy2.narrow(1, first, params[i]->size(0)).t(), rows_of(x));
      first += params[i]->size(0);
    }
    return out;
  }
  out[0] = gy.matmul(w);
  if (work->deferring())
    work->defer([params, x, gy] { accumulate_fused_linear(params, x, gy); });
  else
    accumulate_fused_linear(params, x, gy);
  return out;
}

struct FusedLinear2Fn : torch::autograd::Function<FusedLinear2Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor&,
                            const at::Tensor&, const at::Tensor& wf, WeightWork* work,
                            at::Tensor* p0, at::Tensor* p1) {
    return fused_linear_forward(ctx, x, wf, work, {p0, p1});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return fused_linear_backward(ctx, grads, 3);
  }
};

struct FusedLinear3Fn : torch::autograd::Function<FusedLinear3Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const at::Tensor& wf,
                            WeightWork* work, at::Tensor* p0, at::Tensor* p1, at::Tensor* p2) {
    return fused_linear_forward(ctx, x, wf, work, {p0, p1, p2});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return fused_linear_backward(ctx, grads, 4);
  }
};

// y = x + [b_0; b_1; ...]: the biases' gradients are sums of their columns of gy over the rows.
// The sums run in the masters' dtype (fp32 under --dtype bf16), as the products' GEMMs accumulate.
void accumulate_fused_bias(const std::vector<at::Tensor*>& params, const at::Tensor& gy) {
  const at::Tensor sums = rows_of(gy).sum(0, false, params.front()->scalar_type());
  int64_t first = 0;
  for (at::Tensor* p : params) {
    accumulate(*p, sums.narrow(0, first, p->size(0)));
    first += p->size(0);
  }
}

// The biases are inputs only so that the output requires their gradients; `bf` is their
// concatenation (FusedWeight). x's gradient is gy itself; the deferred work keeps gy, which
// autograd then never adds into in place (see linear_backward).
struct FusedBias3Fn : torch::autograd::Function<FusedBias3Fn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const at::Tensor& bf,
                            WeightWork* work, at::Tensor* p0, at::Tensor* p1, at::Tensor* p2) {
    ctx->saved_data["work"] = reinterpret_cast<int64_t>(work);
    ctx->saved_data["params"] =
        std::vector<int64_t>{reinterpret_cast<int64_t>(p0), reinterpret_cast<int64_t>(p1),
                             reinterpret_cast<int64_t>(p2)};
    return x + bf;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& gy = grads[0];
    std::vector<at::Tensor*> params;
    for (int64_t p : ctx->saved_data["params"].toIntVector())
      params.push_back(reinterpret_cast<at::Tensor*>(p));
    variable_list out(9);
    WeightWork* work = work_of(ctx);
    if (!work) {
      if (ctx->needs_input_grad(0)) out[0] = gy;
      const at::Tensor sums = rows_of(gy).sum(0, false, params.front()->scalar_type());
      int64_t first = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        if (ctx->needs_input_grad(1 + i))
          out[1 + i] = master_grad(*params[i], sums.narrow(0, first, params[i]->size(0)));
        first += params[i]->size(0);
      }
      return out;
    }
    out[0] = gy;
    if (work->deferring())
      work->defer([params, gy] { accumulate_fused_bias(params, gy); });
    else
      accumulate_fused_bias(params, gy);
    return out;
  }
};

// y = silu(g) * u, where [g, u] is the fused gate/up product's output: the gradient comes back
// as one tensor [dg, du], the layout that product's backward takes, with no concatenation.
// On the CPU (Kernels::Auto) the forward keeps sigmoid(g), so that the backward is one loop with
// no exponential; ATen's path keeps silu(g).
struct SwiGluFn : torch::autograd::Function<SwiGluFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gu, bool fused) {
    const int64_t f = gu.size(-1) / 2;
    fused = fused && cpu_float({&gu});
    ctx->saved_data["fused"] = fused;
    if (fused) {
      const at::Tensor guc = gu.contiguous();
      const at::Tensor s = at::sigmoid(guc.narrow(-1, 0, f));  // contiguous
      auto sizes = guc.sizes().vec();
      sizes.back() = f;
      at::Tensor y = at::empty(sizes, guc.options());
      kernels::swiglu_forward(guc.data_ptr<float>(), s.data_ptr<float>(), s.numel() / f, f,
                              y.data_ptr<float>());
      ctx->save_for_backward({guc, s});
      return y;
    }
    const at::Tensor a = at::silu(gu.narrow(-1, 0, f));
    ctx->save_for_backward({gu, a});
    return a * gu.narrow(-1, f, f);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& gu = saved[0];
    const at::Tensor& gy = grads[0];
    const int64_t f = gu.size(-1) / 2;
    at::Tensor d = at::empty(gu.sizes(), gu.options());
    if (ctx->saved_data["fused"].toBool()) {
      const at::Tensor& s = saved[1];
      const at::Tensor gyc = gy.contiguous();
      kernels::swiglu_backward(gyc.data_ptr<float>(), gu.data_ptr<float>(), s.data_ptr<float>(),
                               s.numel() / f, f, d.data_ptr<float>());
      return {d, at::Tensor()};
    }
    const at::Tensor& a = saved[1];
    at::Tensor dg = d.narrow(-1, 0, f), du = d.narrow(-1, f, f);
    at::silu_backward_out(dg, gy * gu.narrow(-1, f, f), gu.narrow(-1, 0, f));
    at::mul_out(du, gy, a);
    return {d, at::Tensor()};
  }
};

// y = W[ids]
struct EmbeddingFn : torch::autograd::Function<EmbeddingFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& ids,
                            WeightWork* work, at::Tensor* param) {
    ctx->save_for_backward({ids});
    remember(ctx, work, param);
    auto sizes = ids.sizes().vec();
    sizes.push_back(w.size(1));
    return w.index_select(0, ids.reshape({-1})).reshape(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ids = ctx->get_saved_variables()[0];
    const at::Tensor& gy = grads[0];
    WeightWork* work = work_of(ctx);
    at::Tensor* param = param_of(ctx);
    if (!work) {
      at::Tensor gw;
      if (ctx->needs_input_grad(0))
        gw = at::zeros_like(*param).detach().index_add_(0, ids.reshape({-1}), rows_of(gy));
      return {gw, at::Tensor(), at::Tensor(), at::Tensor()};
    }
    if (work->deferring())
      work->defer([param, ids, gy] { accumulate_embedding(*param, ids, gy); });
    else
      accumulate_embedding(*param, ids, gy);
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

const at::Tensor& FusedWeight::of(const std::vector<at::Tensor*>& ps,
                                  std::optional<at::ScalarType> dtype) {
  const at::ScalarType type = dtype.value_or(ps.front()->scalar_type());
  bool fresh = w.defined() && w.scalar_type() == type && data.size() == ps.size();
  for (size_t i = 0; fresh && i < ps.size(); ++i)
    fresh = ps[i]->data_ptr() == data[i] && ps[i]->_version() == versions[i];
  if (fresh) return w;
  // Made again in place where the copy already has the weights' shape, dtype and device (after an
  // optimizer step: each weight converted into its rows, no concatenated temporary, the buffer's
  // address kept); otherwise anew.
  int64_t rows = 0;
  for (const at::Tensor* p : ps) rows += p->size(0);
  const bool in_place = w.defined() && w.scalar_type() == type &&
                        w.device() == ps.front()->device() && w.dim() == ps.front()->dim() &&
                        w.size(0) == rows && w.sizes().slice(1) == ps.front()->sizes().slice(1);
  std::vector<at::Tensor> ws;
  data.clear();
  versions.clear();
  int64_t first = 0;
  for (const at::Tensor* p : ps) {
    if (in_place)
      w.narrow(0, first, p->size(0)).copy_(p->detach());
    else
      ws.push_back(p->detach());
    first += p->size(0);
    data.push_back(p->data_ptr());
    versions.push_back(static_cast<int64_t>(p->_version()));
  }
  if (!in_place) w = ws.size() == 1 ? ws.front().to(type) : at::cat(ws).to(type);
  return w;
}

namespace {
// The operand of a product of x with weight w: w itself, or its working copy in x's dtype.
at::Tensor operand(const at::Tensor& x, at::Tensor* w, FusedWeight* copy) {
  if (x.scalar_type() == w->scalar_type()) return *w;
  return copy ? copy->of({w}, x.scalar_type()) : w->detach().to(x.scalar_type());
}
}  // namespace

at::Tensor linear(const at::Tensor& x, at::Tensor* w, WeightWork* work, FusedWeight* copy) {
  return LinearFn::apply(x, *w, operand(x, w, copy), work, w);
}

at::Tensor residual_linear(const at::Tensor& r, const at::Tensor& x, at::Tensor* w,
                           WeightWork* work, FusedWeight* copy) {
  return ResidualLinearFn::apply(r, x, *w, operand(x, w, copy), work, w);
}

at::Tensor fused_linear(const at::Tensor& x, const std::vector<at::Tensor*>& ws, FusedWeight& wf,
                        WeightWork* work) {
  const at::Tensor& w = wf.of(ws, x.scalar_type());
  if (ws.size() == 2) return FusedLinear2Fn::apply(x, *ws[0], *ws[1], w, work, ws[0], ws[1]);
  PPC_INTERNAL_ASSERT(ws.size() == 3, "a fused linear map of two or three weights");
  return FusedLinear3Fn::apply(x, *ws[0], *ws[1], *ws[2], w, work, ws[0], ws[1], ws[2]);
}

at::Tensor fused_bias(const at::Tensor& x, const std::vector<at::Tensor*>& bs, FusedWeight& bf,
                      WeightWork* work) {
  PPC_INTERNAL_ASSERT(bs.size() == 3, "fused biases: q, k and v");
  const at::Tensor& b = bf.of(bs, x.scalar_type());  // a working copy in x's dtype (bf16)
  return FusedBias3Fn::apply(x, *bs[0], *bs[1], *bs[2], b, work, bs[0], bs[1], bs[2]);
}

at::Tensor embedding(at::Tensor* w, const at::Tensor& ids, WeightWork* work) {
  return EmbeddingFn::apply(*w, ids, work, w);
}

at::Tensor swiglu(const at::Tensor& gate_up, Kernels kernels) {
  return SwiGluFn::apply(gate_up, kernels == Kernels::Auto);
}

}  // namespace pprt
