// RMSNorm (ops.h's rms_norm): written out as one autograd function with its own backward (on the
// CPU by the model's kernels, cpu_kernels.h), or through LibTorch's fused entry points.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "runtime/model/precision.h"
#include "runtime/models/llama/aten_support.h"
#include "runtime/models/llama/cpu_kernels.h"
#include "runtime/models/llama/op_grads.h"
#include "runtime/models/llama/ops.h"

namespace pprt {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

using namespace op_grads;  // op_grads.h

void accumulate_scale(at::Tensor& param, const at::Tensor& x, const at::Tensor& gy, bool fused) {
  if (fused && cpu_float({&param, &x, &gy})) {
    at::Tensor& grad = param.mutable_grad();
    if (!grad.defined()) grad = at::zeros_like(param);
    const at::Tensor xc = x.contiguous(), gyc = gy.contiguous();
    const int64_t n = xc.size(-1);
    kernels::scale_grad_accumulate(gyc.data_ptr<float>(), xc.data_ptr<float>(), xc.numel() / n, n,
                                   grad.data_ptr<float>());
    return;
  }
  accumulate(param, rows_of(gy * x).sum(0));
}
// The same as a tensor of its own (returned to autograd).
at::Tensor scale_weight_grad(const at::Tensor& param, const at::Tensor& x, const at::Tensor& gy,
                             bool fused) {
  if (fused && cpu_float({&param, &x, &gy})) {
    at::Tensor gw = at::zeros_like(param).detach();
    const at::Tensor xc = x.contiguous(), gyc = gy.contiguous();
    const int64_t n = xc.size(-1);
    kernels::scale_grad_accumulate(gyc.data_ptr<float>(), xc.data_ptr<float>(), xc.numel() / n, n,
                                   gw.data_ptr<float>());
    return gw;
  }
  return rows_of(gy * x).sum(0);
}

// y = g * x / sqrt(mean(x^2) + eps): RMSNorm as one function, whose backward is written out
// (d/dx = rstd * (gy*g - xn * mean(gy*g * xn))) rather than recorded op by op.
struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& g,
                            double eps, WeightWork* work, at::Tensor* param, bool fused) {
    remember(ctx, work, param);
    fused = fused && cpu_float({&x, &g});
    ctx->saved_data["fused"] = fused;
    if (fused) {
      const at::Tensor xc = x.contiguous(), gc = g.contiguous();
      const int64_t n = xc.size(-1), rows = xc.numel() / n;
      at::Tensor xn = at::empty_like(xc), y = at::empty_like(xc);
      auto sizes = xc.sizes().vec();
      sizes.back() = 1;
      at::Tensor rstd = at::empty(sizes, xc.options());
      kernels::rms_norm_forward(xc.data_ptr<float>(), gc.data_ptr<float>(), static_cast<float>(eps),
                                rows, n, xn.data_ptr<float>(), y.data_ptr<float>(),
                                rstd.data_ptr<float>());
      ctx->save_for_backward({xn, rstd, gc});
      return y;
    }
    const at::Tensor rstd = (x.square().mean({-1}, true) + eps).rsqrt();
    const at::Tensor xn = x * rstd;
    ctx->save_for_backward({xn, rstd, g});
    return xn * g;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& xn = saved[0];
    const at::Tensor& rstd = saved[1];
    const at::Tensor& g = saved[2];
    const bool fused = ctx->saved_data["fused"].toBool();
    WeightWork* work = work_of(ctx);
    at::Tensor gy = grads[0], gx;
    if (fused) {
      // Contiguous, also for the weight gradient kept for W (deferred work keeps what it is
      // given: see linear_backward).
      gy = gy.contiguous();
      if (work || ctx->needs_input_grad(0)) {
        gx = at::empty_like(xn);
        const int64_t n = xn.size(-1);
        kernels::rms_norm_backward(gy.data_ptr<float>(), g.data_ptr<float>(), xn.data_ptr<float>(),
                                   rstd.data_ptr<float>(), xn.numel() / n, n, gx.data_ptr<float>());
      }
    } else if (work || ctx->needs_input_grad(0)) {
      const at::Tensor gxn = gy * g;
      gx = (gxn - xn * (gxn * xn).mean({-1}, true)) * rstd;
    }
    at::Tensor gg;
    at::Tensor* param = param_of(ctx);
    if (!work) {
      if (ctx->needs_input_grad(1)) gg = scale_weight_grad(*param, xn, gy, fused);
    } else if (work->deferring()) {
      work->defer([param, xn, gy, fused] { accumulate_scale(*param, xn, gy, fused); });
    } else {
      accumulate_scale(*param, xn, gy, fused);
    }
    return {gx, gg, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The same RMSNorm through LibTorch's fused entry points (Kernels::Fused): at::_fused_rms_norm
// (one kernel on CUDA: the statistics in fp32, y = x * rstd * g computed in fp32 and rounded once
// to x's dtype, rstd kept for the backward) on x as it comes, bf16 included (no widened copy).
// The backward computes x's gradient with at::_fused_rms_norm_backward where LibTorch has it
// (CUDA), in fp32 ATen operations elsewhere (the CPU has no fused backward), and the scale's
// gradient, sum over rows of gy * x * rstd, always in fp32 ATen operations: at once (B) or in the
// W, from x, rstd and gy. Where the device's kernel takes no fp32 scale with a bf16 input
// (aten_support.h), the scale goes in as a bf16 copy (its gradient stays fp32).
struct FusedRmsNormFn : torch::autograd::Function<FusedRmsNormFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& g,
                            double eps, WeightWork* work, at::Tensor* param) {
    remember(ctx, work, param);
    at::Tensor scale = g;
    if (x.scalar_type() != g.scalar_type() && !x.is_cpu() &&
        !aten_support::rms_norm_takes_fp32_scale(x.device()))
      scale = g.detach().to(x.scalar_type());
    auto [y, rstd] = at::_fused_rms_norm(x, {x.size(-1)}, scale, eps);
    ctx->save_for_backward({x, rstd, scale});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& rstd = saved[1];
    const at::Tensor& scale = saved[2];
    const at::Tensor gy = grads[0].contiguous();
    WeightWork* work = work_of(ctx);
    at::Tensor gx;
    if (work || ctx->needs_input_grad(0)) {
      if (x.is_cuda()) {
        gx = std::get<0>(
            at::_fused_rms_norm_backward(gy, x, {x.size(-1)}, rstd, scale, {true, false}));
      } else {  // rstd * (gy*g - xn * mean(gy*g * xn)), xn = x * rstd, in fp32
        const at::Tensor xn = at::mul(widened(x), rstd), gxn = at::mul(widened(gy), widened(scale));
        gx = ((gxn - xn * (gxn * xn).mean({-1}, true)) * rstd).to(x.scalar_type());
      }
    }
    at::Tensor gg;
    at::Tensor* param = param_of(ctx);
    auto scale_grad = [](const at::Tensor& master, const at::Tensor& x, const at::Tensor& rstd,
                         const at::Tensor& gy) {  // in fp32 (rstd's), then the master's dtype
      return master_grad(master, rows_of(at::mul(gy, at::mul(x, rstd))).sum(0));
    };
    if (!work) {
      if (ctx->needs_input_grad(1)) gg = scale_grad(*param, x, rstd, gy);
    } else if (work->deferring()) {
      work->defer([param, x, rstd, gy, scale_grad] {
        accumulate(*param, scale_grad(*param, x, rstd, gy));
      });
    } else {
      accumulate(*param, scale_grad(*param, x, rstd, gy));
    }
    return {gx, gg, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, at::Tensor* g, double eps, WeightWork* work,
                    Kernels kernels) {
  kernels = kernels_on(kernels, x.device());
  if (fused(kernels)) return FusedRmsNormFn::apply(x, *g, eps, work, g);
  if (x.scalar_type() == g->scalar_type())
    return RmsNormFn::apply(x, *g, eps, work, g, kernels == Kernels::Auto);
  // Mixed precision: in fp32 (g's), through autograd's casts on either side.
  return RmsNormFn::apply(x.to(g->scalar_type()), *g, eps, work, g, kernels == Kernels::Auto)
      .to(x.scalar_type());
}

}  // namespace pprt
