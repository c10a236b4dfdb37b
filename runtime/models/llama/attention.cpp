// Grouped-query causal attention with rotary embedding (ops.h). On the CPU (Kernels::Auto) it is
// written out (matmul, causal mask, softmax, in causal blocks, with its backward); with
// Kernels::Fused (GPUs by default) SDPA's flash (or cuDNN) kernels are called directly, with the
// backward from what their forward returns; with Kernels::Generic, and where no fused kernel takes
// the tensors (fp32 on a GPU), it is at::scaled_dot_product_attention through autograd. A layer
// with a sliding window shorter than the sequence takes the window in the written-out path's mask,
// and elsewhere SDPA with the window's mask (the fused kernels take no mask but the causal flag).
// Attention has no weights, so every backward belongs to I whole when the backward is split.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <tuple>
#include <vector>

#include "compiler/diagnostic.h"
#include "runtime/data/documents.h"
#include "runtime/model/precision.h"
#include "runtime/models/llama/aten_support.h"
#include "runtime/models/llama/cpu_kernels.h"
#include "runtime/models/llama/ops.h"

namespace pprt {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

// Heads [first, first + n) of a fused q/k/v tensor [b, T, (heads + 2 kv_heads) * hd], as a view
// [b, n, T, hd].
at::Tensor heads_of(const at::Tensor& qkv, int64_t first, int64_t n, int64_t hd) {
  return qkv.narrow(-1, first * hd, n * hd).view({qkv.size(0), qkv.size(1), n, hd}).transpose(1, 2);
}

// Rotary embedding of x [..., T, hd] (any strides) into `out` (same shape):
// out = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
void rotate(const at::Tensor& x, at::Tensor out, const at::Tensor& cos, const at::Tensor& sin,
            bool fused) {
  const int64_t half = x.size(-1) / 2;
  if (fused && cpu_float({&x, &out, &cos, &sin}) && x.stride(-1) == 1 && out.stride(-1) == 1 &&
      cos.is_contiguous() && sin.is_contiguous()) {
    // One [T, hd] block per index of the leading dimensions.
    const int64_t lead = x.dim() - 2, T = x.size(-2);
    std::vector<int64_t> idx(static_cast<size_t>(lead), 0);
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t blocks = x.numel() / (T * 2 * half); blocks > 0; --blocks) {
      int64_t xo = 0, oo = 0;
      for (int64_t d = 0; d < lead; ++d) {
        xo += idx[static_cast<size_t>(d)] * x.stride(d);
        oo += idx[static_cast<size_t>(d)] * out.stride(d);
      }
      kernels::rotate_block(xp + xo, x.stride(-2), op + oo, out.stride(-2), cos.data_ptr<float>(),
                            sin.data_ptr<float>(), T, half);
      for (int64_t d = lead; d-- > 0;) {
        if (++idx[static_cast<size_t>(d)] < x.size(d)) break;
        idx[static_cast<size_t>(d)] = 0;
      }
    }
    return;
  }
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

// A rotary table [T, hd] read at each sequence's positions [b, T]: [b, 1, T, hd].
at::Tensor per_sequence(const at::Tensor& table, const at::Tensor& positions) {
  const int64_t b = positions.size(0), T = positions.size(1);
  return table.index_select(0, positions.reshape({-1})).view({b, 1, T, table.size(-1)});
}

// Where query i may attend key j in each sequence [b, T, T]: j in i's document (positions [b, T])
// and not after i, and with a sliding window `window` (0: none) not before i - window + 1.
at::Tensor document_mask(const at::Tensor& positions, int64_t T, int window) {
  const at::Tensor i = at::arange(T, positions.options()).view({1, T, 1});
  const at::Tensor j = at::arange(T, positions.options()).view({1, 1, T});
  at::Tensor allowed = (j <= i).logical_and(j >= i - positions.unsqueeze(2));
  if (window > 0 && window < T) allowed = allowed.logical_and(j > i - window);
  return allowed;
}

// Grouped-query causal attention from the fused q/k/v product's output to the heads'
// concatenated outputs [b, T, heads * hd], rotary embedding included, with its backward written
// out. Query head j*group + r reads key/value head j (as repeat_interleave would give): the
// group's queries are stacked, position-major, [b*kv, T*group, hd] (row t*group + r), so that
// each key/value head is multiplied once, by one larger product per block of positions
// (causal_blocks, whose rows are then contiguous), and never copied. The scale and the causal
// mask (stacked likewise) go into that product (baddbmm). The gradient comes back as one tensor
// in the fused product's layout.
// Mixed precision (a bf16 qkv): the scores are fp32 (q k^T of the bf16 operands, widened: ATen's
// CPU bf16 products round their result to bf16), and so are the softmax, its saved probabilities
// and its backward; the products with v and the gradients' products run in bf16, as a flash
// attention kernel does on a GPU.
// With documents (`positions` defined): each sequence's rotary tables (gathered at its tokens'
// positions, [b, 1, 1, T, hd] for q's view and [b, 1, T, hd] for k's) and mask ([b * kv,
// T * group, T], rows stacked as the queries are), made per call.
struct AttentionFn : torch::autograd::Function<AttentionFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv, const AttentionConsts* c,
                            const std::optional<at::Tensor>& documents) {
    const at::Tensor positions = documents.value_or(at::Tensor());
    const int64_t b = qkv.size(0), T = qkv.size(1), hd = c->head_dim, h = c->heads,
                  kv = c->kv_heads, group = h / kv;
    at::Tensor q = at::empty({b, kv, T, group, hd}, qkv.options());
    at::Tensor k = at::empty({b, kv, T, hd}, qkv.options());
    const bool docs = positions.defined();
    const bool fused = c->kernels == Kernels::Auto && !docs;
    const at::Tensor cos = docs ? per_sequence(c->cos, positions) : c->cos,
                     sin = docs ? per_sequence(c->sin, positions) : c->sin;
    rotate(heads_of(qkv, 0, h, hd).view({b, kv, group, T, hd}), q.permute({0, 1, 3, 2, 4}),
           docs ? cos.unsqueeze(1) : cos, docs ? sin.unsqueeze(1) : sin, fused);
    rotate(heads_of(qkv, h, kv, hd), k, cos, sin, fused);
    at::Tensor doc_mask;  // [b * kv, T * group, T]
    if (docs)
      doc_mask = at::zeros({b, T, T}, at::kFloat)
                     .to(qkv.device())
                     .masked_fill(document_mask(positions, T, c->window).logical_not(),
                                  -std::numeric_limits<float>::infinity())
                     .unsqueeze(2)
                     .expand({b, T, group, T})
                     .reshape({b, 1, T * group, T})
                     .expand({b, kv, T * group, T})
                     .reshape({b * kv, T * group, T});
    const at::Tensor qs = q.view({b * kv, T * group, hd}), ks = k.view({b * kv, T, hd});
    const at::Tensor vs = heads_of(qkv, h + kv, kv, hd).contiguous().view({b * kv, T, hd});
    at::Tensor out = at::empty({b, T, kv, group, hd}, qkv.options());
    std::vector<at::Tensor> saved = {qs, ks, vs};  // then each block's probabilities
    for (const CausalBlock& blk : causal_blocks(T)) {
      const int64_t n = blk.t1 - blk.t0;
      const at::Tensor mask =
          docs ? doc_mask.narrow(1, blk.t0 * group, n * group).narrow(2, 0, blk.t1)
               : c->mask.narrow(0, blk.t0 * group, n * group).narrow(1, 0, blk.t1);
      const at::Tensor p =
          at::softmax(at::baddbmm(mask, widened(qs.narrow(1, blk.t0 * group, n * group)),
                                  widened(ks.narrow(1, 0, blk.t1)).transpose(1, 2), 1.0, c->scale),
                      -1);
      out.narrow(1, blk.t0, n)
          .copy_(p.to(qkv.scalar_type())
                     .bmm(vs.narrow(1, 0, blk.t1))
                     .view({b, kv, n, group, hd})
                     .permute({0, 2, 1, 3, 4}));
      saved.push_back(p);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["consts"] = reinterpret_cast<int64_t>(c);
    if (docs) ctx->saved_data["positions"] = positions;
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
      const at::Tensor& p = saved[3 + i];            // fp32
      const at::Tensor pc = p.to(qs.scalar_type());  // p in the products' dtype
      const at::Tensor gi = go.narrow(1, blk.t0, n)
                                .permute({0, 2, 1, 3, 4})
                                .contiguous()
                                .view({b * kv, n * group, hd});
      const at::Tensor qi = qs.narrow(1, blk.t0 * group, n * group);
      const at::Tensor ki = ks.narrow(1, 0, blk.t1), vi = vs.narrow(1, 0, blk.t1);
      const at::Tensor ds =
          at::_softmax_backward_data(widened(gi.bmm(vi.transpose(1, 2))), p, -1, p.scalar_type())
              .to(qs.scalar_type());
      dq.narrow(2, blk.t0, n).copy_(ds.bmm(ki).view({b, kv, n, group, hd}));
      if (blk.t1 == T) {
        dk = ds.transpose(1, 2).bmm(qi);
        dv = pc.transpose(1, 2).bmm(gi);
      } else {
        dk.narrow(1, 0, blk.t1).baddbmm_(ds.transpose(1, 2), qi);
        dv.narrow(1, 0, blk.t1).baddbmm_(pc.transpose(1, 2), gi);
      }
    }
    at::Tensor d = at::empty({b, T, (h + 2 * kv) * hd}, grads[0].options());
    // The rotation's transpose, with the scores' softmax scale, through the backward's tables.
    const bool docs = ctx->saved_data.count("positions") > 0;
    const bool fused = c->kernels == Kernels::Auto && !docs;
    at::Tensor cos = c->cos_back, sin = c->sin_back;
    if (docs) {
      const at::Tensor positions = ctx->saved_data["positions"].toTensor();
      cos = per_sequence(cos, positions);
      sin = per_sequence(sin, positions);
    }
    rotate(dq.permute({0, 1, 3, 2, 4}), heads_of(d, 0, h, hd).view({b, kv, group, T, hd}),
           docs ? cos.unsqueeze(1) : cos, docs ? sin.unsqueeze(1) : sin, fused);
    rotate(dk.view({b, kv, T, hd}), heads_of(d, h, kv, hd), cos, sin, fused);
    heads_of(d, h + kv, kv, hd).copy_(dv.view({b, kv, T, hd}));
    return {d, at::Tensor(), at::Tensor()};
  }
};

// The same attention from ATen operations: the rotary embedding, then LibTorch's fused attention
// with the causal flag and grouped-query heads (query head j*group + r reads key/value head j, as
// in AttentionFn). Autograd gives its backward. The rotated q and k keep qkv's dtype (the tables
// are fp32); SDPA's kernels keep the softmax's statistics in fp32 for bf16 inputs.
// With documents (`positions` defined), the tables at each sequence's positions and the
// block-diagonal causal mask [b, 1, T, T] (the window's too).
at::Tensor attention_sdpa(const at::Tensor& qkv, const AttentionConsts& c,
                          const at::Tensor& positions) {
  const int64_t b = qkv.size(0), T = qkv.size(1), hd = c.head_dim, h = c.heads, kv = c.kv_heads;
  const int64_t half = hd / 2;
  const bool docs = positions.defined();
  const at::Tensor cos = docs ? per_sequence(c.cos, positions) : c.cos,
                   sin = docs ? per_sequence(c.sin, positions) : c.sin;
  auto rope = [&](const at::Tensor& x) {  // [b, n, T, hd]: x * cos + [-x2, x1] * sin
    const at::Tensor turned = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
    return (x * cos + turned * sin).to(x.scalar_type());
  };
  const at::Tensor q = rope(heads_of(qkv, 0, h, hd)), k = rope(heads_of(qkv, h, kv, hd));
  const at::Tensor v = heads_of(qkv, h + kv, kv, hd);
  std::optional<at::Tensor> mask;
  if (docs)
    mask = document_mask(positions, T, c.window).unsqueeze(1);
  else if (c.window_mask.defined())
    mask = c.window_mask;
  const at::Tensor o = at::scaled_dot_product_attention(q, k, v, mask, 0.0,
                                                        /*is_causal=*/!mask, c.scale,
                                                        /*enable_gqa=*/h != kv);
  return o.transpose(1, 2).reshape({b, T, h * hd});
}

// --- Kernels::Fused ---------------------------------------------------------------------------

// The rotary embedding of rows x [b, T, n, hd] (any strides, unit stride inside a row) into out
// (the same shape), the tables [T, hd] broadcast over the heads: out = x * cos + [-x2, x1] * sin,
// or with `transpose` the rotation's transpose (the gradient's: by -sin). Four ATen kernels over
// half rows, whatever the number of heads (q's and k's together).
void rope_rows(const at::Tensor& x, at::Tensor out, const at::Tensor& cos, const at::Tensor& sin,
               bool transpose) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // [T, 1, hd]
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  at::Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);
  const double sign = transpose ? -1 : 1;
  at::mul_out(o1, x1, c.narrow(-1, 0, half));
  o1.addcmul_(x2, s.narrow(-1, 0, half), -sign);
  at::mul_out(o2, x2, c.narrow(-1, half, half));
  o2.addcmul_(x1, s.narrow(-1, half, half), sign);
}

// Which fused attention kernel takes these tensors, if any.
enum class FusedKernel : uint8_t { None, Cpu, Flash, Cudnn };
FusedKernel fused_kernel(const at::Tensor& qkv, const AttentionConsts& c, Kernels k) {
  if (c.head_dim % 8 != 0) return FusedKernel::None;
  const at::ScalarType t = qkv.scalar_type();
  if (qkv.is_cpu())  // LibTorch's CPU flash kernel (fp32, bf16; grouped-query heads)
    return t == at::kFloat || t == at::kBFloat16 ? FusedKernel::Cpu : FusedKernel::None;
  if (!qkv.is_cuda() || !low_precision(qkv)) return FusedKernel::None;  // flash: bf16/fp16 only
  if (k == Kernels::FusedCudnn && aten_support::cudnn_attention_takes_gqa(qkv.device(), c.head_dim))
    return FusedKernel::Cudnn;
  return FusedKernel::Flash;
}

// Attention through a fused kernel: q and k rotated and v copied into one buffer [b, T, heads +
// 2 kv_heads, hd] (five kernels; the buffer is what the backward keeps, not qkv), then the
// kernel's forward with the causal flag and grouped-query heads (each kernel takes fewer key/value
// heads than query heads and sums their gradients itself); its output and log-sum-exp are kept
// for its backward, whose q and k gradients are rotated back into the fused product's layout.
// The kernels keep the softmax's statistics in fp32 (flash on bf16 inputs, as the CPU path does).
struct FusedAttentionFn : torch::autograd::Function<FusedAttentionFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv, const AttentionConsts* c,
                            int64_t kernel) {
    const int64_t b = qkv.size(0), T = qkv.size(1), hd = c->head_dim, h = c->heads,
                  kv = c->kv_heads;
    const at::Tensor src = qkv.reshape({b, T, h + 2 * kv, hd});
    at::Tensor r = at::empty({b, T, h + 2 * kv, hd}, qkv.options());
    rope_rows(src.narrow(2, 0, h + kv), r.narrow(2, 0, h + kv), c->cos, c->sin, false);
    r.narrow(2, h + kv, kv).copy_(src.narrow(2, h + kv, kv));
    const at::Tensor q = r.narrow(2, 0, h).transpose(1, 2), k = r.narrow(2, h, kv).transpose(1, 2),
                     v = r.narrow(2, h + kv, kv).transpose(1, 2);
    at::Tensor out, lse, cum_q, cum_k, seed, offset;
    int64_t max_q = 0, max_k = 0;
    switch (static_cast<FusedKernel>(kernel)) {
      case FusedKernel::Cpu:
        std::tie(out, lse) =
            at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, true, {}, c->scale);
        break;
      case FusedKernel::Flash: {
        auto [o, l, cq, ck, mq, mk, sd, off, dbg] =
            at::_scaled_dot_product_flash_attention(q, k, v, 0.0, true, false, c->scale);
        std::tie(out, lse, cum_q, cum_k, seed, offset) = std::tie(o, l, cq, ck, sd, off);
        max_q = mq.expect_int();
        max_k = mk.expect_int();
        break;
      }
      case FusedKernel::Cudnn: {
        auto [o, l, cq, ck, mq, mk, sd, off, dbg] = at::_scaled_dot_product_cudnn_attention(
            q, k, v, std::nullopt, true, 0.0, true, false, c->scale);
        std::tie(out, lse, cum_q, cum_k, seed, offset) = std::tie(o, l, cq, ck, sd, off);
        max_q = mq.expect_int();
        max_k = mk.expect_int();
        break;
      }
      case FusedKernel::None:
        PPC_INTERNAL_ASSERT(false, "a fused attention kernel");
    }
    ctx->save_for_backward({r, out, lse, cum_q, cum_k, seed, offset});
    ctx->saved_data["consts"] = reinterpret_cast<int64_t>(c);
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["max_q"] = max_q;
    ctx->saved_data["max_k"] = max_k;
    return out.transpose(1, 2).reshape({b, T, h * hd});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &r = saved[0], &out = saved[1], &lse = saved[2];
    const auto* c = reinterpret_cast<const AttentionConsts*>(ctx->saved_data["consts"].toInt());
    const auto kernel = static_cast<FusedKernel>(ctx->saved_data["kernel"].toInt());
    const int64_t max_q = ctx->saved_data["max_q"].toInt(),
                  max_k = ctx->saved_data["max_k"].toInt();
    const int64_t b = r.size(0), T = r.size(1), hd = c->head_dim, h = c->heads, kv = c->kv_heads;
    const at::Tensor q = r.narrow(2, 0, h).transpose(1, 2), k = r.narrow(2, h, kv).transpose(1, 2),
                     v = r.narrow(2, h + kv, kv).transpose(1, 2);
    at::Tensor go = grads[0].contiguous().view({b, T, h, hd}).transpose(1, 2);
    if (go.strides() != out.strides())  // the kernels take the output's gradient in its layout
      go = at::empty_like(out).copy_(go);
    at::Tensor dq, dk, dv;
    switch (kernel) {
      case FusedKernel::Cpu:
        std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
            go, q, k, v, out, lse, 0.0, true, {}, c->scale);
        break;
      case FusedKernel::Flash:
        std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
            go, q, k, v, out, lse, saved[3], saved[4], max_q, max_k, 0.0, true, saved[5], saved[6],
            c->scale);
        break;
      case FusedKernel::Cudnn:
        std::tie(dq, dk, dv) = at::_scaled_dot_product_cudnn_attention_backward(
            go, q, k, v, out, lse, saved[5], saved[6], at::Tensor(), saved[3], saved[4], max_q,
            max_k, 0.0, true, c->scale);
        break;
      case FusedKernel::None:
        PPC_INTERNAL_ASSERT(false, "a fused attention kernel");
    }
    at::Tensor d = at::empty({b, T, h + 2 * kv, hd}, grads[0].options());
    rope_rows(dq.transpose(1, 2), d.narrow(2, 0, h), c->cos, c->sin, true);
    rope_rows(dk.transpose(1, 2), d.narrow(2, h, kv), c->cos, c->sin, true);
    d.narrow(2, h + kv, kv).copy_(dv.transpose(1, 2));
    return {d.view({b, T, (h + 2 * kv) * hd}), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

AttentionConsts attention_consts(const ModelConfig& cfg, const at::Device& device, Kernels kernels,
                                 int window) {
  AttentionConsts c;
  c.kernels = kernels;
  const int64_t T = cfg.seq_len, hd = cfg.head_dim();
  at::Tensor inv =
      at::pow(cfg.rope_theta, -at::arange(0, hd, 2, at::kDouble) / static_cast<double>(hd));
  if (const RopeScaling& r = cfg.rope_scaling; r.factor > 0) {  // Llama 3's scaling (config.h)
    const at::Tensor wavelen = 2 * std::numbers::pi / inv;
    const double low = r.original_max_positions / r.low_freq_factor,
                 high = r.original_max_positions / r.high_freq_factor;
    const at::Tensor smooth = (r.original_max_positions / wavelen - r.low_freq_factor) /
                              (r.high_freq_factor - r.low_freq_factor);
    const at::Tensor mid = (1 - smooth) * inv / r.factor + smooth * inv;
    inv = at::where(wavelen > low, inv / r.factor, at::where(wavelen < high, inv, mid));
  }
  at::Tensor ang = at::outer(at::arange(T, at::kDouble), inv);
  ang = at::cat({ang, ang}, -1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  c.cos = ang.cos().to(at::kFloat).to(device);
  c.sin = ang.sin().to(at::kFloat).to(device);
  c.cos_back = (ang.cos() * scale).to(at::kFloat).to(device);
  c.sin_back = (ang.sin() * -scale).to(at::kFloat).to(device);
  // Where a position may attend: up to itself, and with a window not before t - window + 1.
  at::Tensor allowed = at::ones({T, T}, at::kBool).tril(0);
  const bool windowed = window > 0 && window < T;
  if (windowed) allowed = allowed.triu(1 - window);
  // Only the CPU's written-out path reads the mask (Auto on the CPU): not built elsewhere
  // ([heads / kv_heads x T, T] fp32: 256 MiB at seq 4096 with 4 query heads per kv head). The
  // other paths take the window, if any, as a boolean mask.
  if (device.is_cpu() && kernels == Kernels::Auto)
    c.mask = at::zeros({T, T}, at::kFloat)
                 .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity())
                 .repeat_interleave(cfg.heads / cfg.kv_heads, 0);
  else if (windowed)
    c.window_mask = allowed.to(device);
  c.window = windowed ? window : 0;
  c.heads = cfg.heads;
  c.kv_heads = cfg.kv_heads;
  c.head_dim = hd;
  c.scale = scale;
  return c;
}

at::Tensor attention(const at::Tensor& qkv, const AttentionConsts& c, const at::Tensor& positions) {
  const Kernels k = kernels_on(c.kernels, qkv.device());
  if (k == Kernels::Auto)  // the CPU's written-out path
    return AttentionFn::apply(
        qkv, &c, positions.defined() ? std::optional<at::Tensor>(positions) : std::nullopt);
  // The fused kernels take the causal flag and no other mask: a layer whose window is shorter
  // than the sequence, or a microbatch of documents, takes SDPA with its mask instead.
  if (fused(k) && !c.window_mask.defined() && !positions.defined())
    if (const FusedKernel f = fused_kernel(qkv, c, k); f != FusedKernel::None)
      return FusedAttentionFn::apply(qkv, &c, static_cast<int64_t>(f));
  return attention_sdpa(qkv, c, positions);
}

at::Tensor document_positions(const at::Tensor& rows, int64_t T) {
  // Rows with documents have position bits in every slot (windows have none): the first tells.
  if (rows.numel() == 0 || (rows[0][0].item<int64_t>() >> kDocumentShift) == 0) return {};
  return rows.narrow(1, 0, T).bitwise_right_shift(kDocumentShift).bitwise_and(kPositionMask) - 1;
}

}  // namespace pprt
