// The loaded LibTorch's answers (aten_support.h), each found once by a tiny call.
#include "runtime/models/llama/aten_support.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace pprt::aten_support {

namespace {

struct Answer {
  std::once_flag once;
  bool yes = false;
};

// Runs `ask` once per process (on CUDA devices only): "yes" when it returns, "no" when it throws.
template <class F>
bool asked(Answer& a, const c10::Device& device, F&& ask) {
  if (!device.is_cuda()) return false;
  std::call_once(a.once, [&] {
    try {
      at::NoGradGuard no_grad;
      ask(at::TensorOptions().device(device));
      a.yes = true;
    } catch (const std::exception&) {
      a.yes = false;
    }
  });
  return a.yes;
}

}  // namespace

bool addmm_accumulates_fp32(const c10::Device& device) {
  static Answer answer;
  return asked(answer, device, [](const at::TensorOptions& o) {
    const at::Tensor a = at::ones({8, 16}, o.dtype(at::kBFloat16));
    const at::Tensor b = at::ones({16, 8}, o.dtype(at::kBFloat16));
    at::Tensor c = at::ones({8, 8}, o.dtype(at::kFloat));
    at::addmm_out(c, c, a, b, at::kFloat);
    // 1 + 16 everywhere: the product added to what was there, in fp32.
    if (!c.eq(17).all().item<bool>()) throw std::runtime_error("addmm into fp32: wrong result");
  });
}

bool rms_norm_takes_fp32_scale(const c10::Device& device) {
  static Answer answer;
  return asked(answer, device, [](const at::TensorOptions& o) {
    const at::Tensor x = at::ones({2, 16}, o.dtype(at::kBFloat16));
    const at::Tensor g = at::ones({16}, o.dtype(at::kFloat));
    auto [y, rstd] = at::_fused_rms_norm(x, {16}, g, 1e-5);
    auto [dx, dg] = at::_fused_rms_norm_backward(at::ones_like(y), x, {16}, rstd, g, {true, false});
    if (y.scalar_type() != at::kBFloat16 || dx.scalar_type() != at::kBFloat16)
      throw std::runtime_error("fused RMSNorm: unexpected dtypes");
  });
}

bool cudnn_attention_takes_gqa(const c10::Device& device, int64_t head_dim) {
  static Answer answer;
  return asked(answer, device, [head_dim](const at::TensorOptions& o) {
    const at::TensorOptions bf = o.dtype(at::kBFloat16);
    const at::Tensor q = at::randn({1, 4, 64, head_dim}, bf),
                     k = at::randn({1, 2, 64, head_dim}, bf),
                     v = at::randn({1, 2, 64, head_dim}, bf);
    auto [out, lse, cq, ck, mq, mk, seed, offset, debug] =
        at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, true, 0.0, true, false);
    auto [dq, dk, dv] = at::_scaled_dot_product_cudnn_attention_backward(
        at::ones_like(out), q, k, v, out, lse, seed, offset, at::Tensor(), cq, ck, mq.expect_int(),
        mk.expect_int(), 0.0, true);
    if (dk.size(1) != 2 || dq.size(1) != 4) throw std::runtime_error("cuDNN attention: not GQA");
  });
}

}  // namespace pprt::aten_support
