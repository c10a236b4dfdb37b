// The built-in model's operations (builtin.cpp): a matmul with a weight (alone, or several weights
// fused into one product), RMSNorm's per-channel scale, the embedding lookup, SwiGLU, and
// grouped-query causal attention with rotary embedding. Each is a custom autograd function whose
// backward is written out. With a microbatch's WeightWork (pprt/pprt.h) the weight gradients go
// straight into the parameters' .grad, at once (B) or deferred to the W (I): the hand-written
// input/weight split. Without one (null) the backward returns them to autograd like any LibTorch
// operation, computing only the gradients the running backward needs (so that the runtime's
// generic split through the autograd graph applies to these operations too).
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "pprt/pprt.h"
#include "runtime/models/llama/config.h"

namespace pprt {

// How the model's element-wise operations and attention run.
//  - Auto: on the CPU what the CPU runs fastest (the fused loops of cpu_kernels.h on float32
//    tensors, the written-out attention of attention.cpp); on other devices (GPUs) Fused.
//  - Generic: ATen's plain operations everywhere, attention through
//  at::scaled_dot_product_attention
//    and autograd (what GPUs ran before Fused; the tests compare every path on the CPU).
//  - Fused: LibTorch's fused entry points wherever LibTorch has them (fused_ops.cpp): RMSNorm by
//    at::_fused_rms_norm (and its backward where LibTorch has one: CUDA), attention by SDPA's
//    flash kernels called directly (their backward from the forward's log-sum-exp: on CUDA for
//    bf16/fp16, on the CPU LibTorch's CPU flash kernel), the rotary embedding of q and k as one
//    pass; elsewhere Generic's operations, and so is a layer's attention whose sliding window is
//    shorter than the sequence (SDPA with the window's mask: the fused kernels take no mask).
//  - FusedCudnn: Fused, with attention through the cuDNN kernels (SDPA's cuDNN backend) on CUDA.
enum class Kernels : uint8_t { Auto, Generic, Fused, FusedCudnn };

// The kernels that run for tensors on `device`: Auto resolved (Fused off the CPU).
Kernels kernels_on(Kernels k, const at::Device& device);
inline bool fused(Kernels k) {
  return k == Kernels::Fused || k == Kernels::FusedCudnn;
}

// What attention needs besides its input: the rotary tables [T, head_dim], the causal mask with
// each row repeated once per query head of a key/value head's group ([T * heads / kv_heads, T],
// row t * group + r; only for the CPU's written-out path, undefined elsewhere), and the head
// counts. `kernels` is as given to the model (Auto unresolved). With a sliding window W shorter
// than the sequence, position t attends to positions t - W + 1 .. t only (Mistral's and Qwen2's
// sliding_window): the written-out path's mask also hides the earlier ones, and `window_mask`
// ([T, T] bool, true where a position may attend) is what the other paths give
// scaled_dot_product_attention instead of its causal flag.
// Both halves of a rotary table hold the same angles, so the rotation's transpose (for gradients)
// is the rotation by the opposite angle: `rotate` with the sine negated. The backward's tables
// also carry the softmax scale of the scores' product.
struct AttentionConsts {
  at::Tensor cos, sin, cos_back, sin_back, mask, window_mask;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double scale = 1;
  Kernels kernels = Kernels::Auto;
  int window = 0;  // the sliding window, if shorter than the sequence (else 0)
};

// The rotary tables and the causal mask of `cfg` (computed in double for exactness), on `device`;
// `window`: the sliding window of the layers they serve (ModelConfig::window_of), 0 for none.
AttentionConsts attention_consts(const ModelConfig& cfg, const at::Device& device,
                                 Kernels kernels = Kernels::Auto, int window = 0);

// The concatenation [W_0; W_1; ...] of a fused linear map's weights, or a weight's working copy
// in another dtype (mixed precision: precision.h), kept from one microbatch to the next and made
// again only when a weight changed (each in-place update, the optimizer's included, bumps a
// tensor's version; checkpoint loading bumps it too).
struct FusedWeight {
  at::Tensor w;
  std::vector<const void*> data;
  std::vector<int64_t> versions;

  // The weights `ps` concatenated, in `dtype` (none: theirs). Detached.
  const at::Tensor& of(const std::vector<at::Tensor*>& ps,
                       std::optional<at::ScalarType> dtype = std::nullopt);
};

// Whether the fused CPU loops of cpu_kernels.h take these tensors: float32 on the CPU.
bool cpu_float(std::initializer_list<const at::Tensor*> ts);

// Matrix products run in the dtype of their input x; a weight of another dtype (an fp32 master
// under --dtype bf16) takes part through its working copy in x's dtype, kept in `copy` (made per
// call without one), and its gradient goes into the master's .grad in the master's dtype.

// y = x W^T.
at::Tensor linear(const at::Tensor& x, at::Tensor* w, WeightWork* work,
                  FusedWeight* copy = nullptr);
// y = r + x W^T (the residual stream r and a branch's output x).
at::Tensor residual_linear(const at::Tensor& r, const at::Tensor& x, at::Tensor* w,
                           WeightWork* work, FusedWeight* copy = nullptr);
// y = x [W_0; W_1; ...]^T for two or three weights (q, k and v; gate and up) as one product; `wf`
// keeps their concatenation (in x's dtype).
at::Tensor fused_linear(const at::Tensor& x, const std::vector<at::Tensor*>& ws, FusedWeight& wf,
                        WeightWork* work);
// y = x + [b_q, b_k, b_v] over the last dimension (Qwen2's q, k and v biases, after their fused
// product); `bf` keeps their concatenation. x's gradient is y's; each bias's is
// the sum of its columns of y's gradient over the rows, at once (B) or deferred to the W (I).
at::Tensor fused_bias(const at::Tensor& x, const std::vector<at::Tensor*>& bs, FusedWeight& bf,
                      WeightWork* work);
// y = g * x / sqrt(mean(x^2) + eps), computed in g's dtype (fp32 under --dtype bf16: the
// statistics, the scale and the backward), the output in x's.
at::Tensor rms_norm(const at::Tensor& x, at::Tensor* g, double eps, WeightWork* work,
                    Kernels kernels = Kernels::Auto);
// y = W[ids].
at::Tensor embedding(at::Tensor* w, const at::Tensor& ids, WeightWork* work);
// y = silu(g) * u, where gate_up = [g, u] (the fused gate/up product's output).
at::Tensor swiglu(const at::Tensor& gate_up, Kernels kernels = Kernels::Auto);
// Attention from the fused q/k/v product's output to the heads' concatenated outputs. `c` must
// outlive the autograd graph. (attention.cpp)
// `positions` ([b, T] int64, on qkv's device; undefined: none) are the tokens' positions in their
// documents (runtime/data/documents.h: rows of --pack, --pad, --varlen): a token then attends to
// the tokens of its own document only (the earlier ones: those at most its position before it),
// and its rotary angle is its position in its document. On the CPU's written-out path, per
// sequence masks and tables; elsewhere SDPA with the block-diagonal causal mask (the fused
// kernels take the causal flag alone).
at::Tensor attention(const at::Tensor& qkv, const AttentionConsts& c,
                     const at::Tensor& positions = {});
// The positions in their documents of the inputs of token rows `rows` [b, >= T + 1] (the first T
// columns), or an undefined tensor when the rows carry no documents. (attention.cpp)
at::Tensor document_positions(const at::Tensor& rows, int64_t T);

}  // namespace pprt
