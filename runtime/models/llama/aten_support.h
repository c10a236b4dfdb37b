// What the loaded LibTorch's CUDA kernels accept, where its versions differ and its headers do not
// say (the entry points exist, their dtype checks changed between releases). Each question is
// asked once per process, on the device of the first call, by running the entry point on a tiny
// input; a refusal (an exception) means "no", and the caller takes its other way. The answers are
// constants of the process (of the library it loaded), not state that changes. On the CPU every
// answer is "no": the CPU's paths never ask.
//
// Included only by LibTorch translation units.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace pprt::aten_support {

// at::addmm_out(grad, grad, a, b, kFloat) with bf16 a and b adds their product into an fp32 `grad`
// in place (cuBLAS with bf16 operands and an fp32 C, beta 1): the dtype overload's `self` may be
// fp32 in the newer releases, must be bf16 in the older ones.
bool addmm_accumulates_fp32(const c10::Device& device);

// at::_fused_rms_norm and at::_fused_rms_norm_backward take a bf16 input with an fp32 scale.
bool rms_norm_takes_fp32_scale(const c10::Device& device);

// SDPA's cuDNN kernels (at::_scaled_dot_product_cudnn_attention and its backward) take causal
// grouped-query attention in bf16 (fewer key/value heads than query heads, head_dim `head_dim`).
bool cudnn_attention_takes_gqa(const c10::Device& device, int64_t head_dim);

}  // namespace pprt::aten_support
