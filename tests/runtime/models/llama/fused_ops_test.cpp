// LibTorch's fused entry points (Kernels::Fused: what GPUs run by default) against the CPU's own
// paths (Kernels::Auto: the fused loops and the written-out attention) and ATen's plain operations
// (Kernels::Generic: what GPUs ran before), run on the CPU, where LibTorch has the entry points
// (at::_fused_rms_norm's forward, its CPU flash attention kernel; RMSNorm's fused backward is
// CUDA's only, so the CPU runs its ATen formula): the same values and gradients, in fp32 and bf16,
// with the weight gradients at once (B), deferred (I then W: bit for bit B's) and through autograd.
// The tolerances: fp32 to rounding (1e-5 of the largest value; 2.5e-7 seen); bf16 within 1 % (5e-3
// seen: each path rounds its bf16 intermediates at other places; docs/gpu.md).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include <string>
#include <vector>

#include "runtime/models/llama/ops.h"
#include "test_model.h"

namespace {

using pprt::Kernels;

// The largest difference between a and b, relative to b's largest magnitude.
double relative_gap(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor af = a.to(at::kDouble), bf = b.to(at::kDouble);
  return (af - bf).abs().max().item<double>() / (bf.abs().max().item<double>() + 1e-30);
}

struct Attention {
  at::Tensor out, grad;  // fp32
  std::string node;      // the output's autograd node
};

Attention attention(const pprt::ModelConfig& c, Kernels k, at::ScalarType dtype,
                    const at::Tensor& qkv0, const at::Tensor& gout, int window = 0,
                    const at::Tensor& positions = {}) {
  const pprt::AttentionConsts consts = pprt::attention_consts(c, at::Device(at::kCPU), k, window);
  at::Tensor qkv = qkv0.to(dtype).detach().requires_grad_(true);
  const at::Tensor out = pprt::attention(qkv, consts, positions);
  Attention r;
  r.node = out.grad_fn() ? out.grad_fn()->name() : "";
  out.backward(gout.to(dtype));
  r.out = out.detach().to(at::kFloat);
  r.grad = qkv.grad().to(at::kFloat);
  return r;
}

TEST(FusedOps, KernelsResolvePerDevice) {
  EXPECT_EQ(pprt::kernels_on(Kernels::Auto, at::Device(at::kCPU)), Kernels::Auto);
  EXPECT_EQ(pprt::kernels_on(Kernels::Auto, at::Device(at::kCUDA, 0)), Kernels::Fused);
  EXPECT_EQ(pprt::kernels_on(Kernels::Generic, at::Device(at::kCUDA, 0)), Kernels::Generic);
  EXPECT_EQ(pprt::kernels_on(Kernels::FusedCudnn, at::Device(at::kCPU)), Kernels::FusedCudnn);
  EXPECT_TRUE(pprt::fused(Kernels::Fused));
  EXPECT_TRUE(pprt::fused(Kernels::FusedCudnn));
  EXPECT_FALSE(pprt::fused(Kernels::Auto));
}

// Grouped-query causal attention with the rotary embedding: LibTorch's CPU flash kernel, called
// directly with its backward, against the written-out CPU attention and SDPA through autograd.
TEST(FusedOps, FlashAttentionGivesWhatTheOtherPathsGive) {
  pprt::ModelConfig c = rttest::small_config();
  c.hidden = 64;  // head_dim 16
  c.seq_len = 40;
  at::manual_seed(3);
  const int64_t hd = c.head_dim(), width = (c.heads + 2 * c.kv_heads) * hd;
  const at::Tensor qkv = at::randn({2, c.seq_len, width});
  const at::Tensor gout = at::randn({2, c.seq_len, c.heads * hd}) * 0.1;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const Attention fused = attention(c, Kernels::Fused, dtype, qkv, gout);
    EXPECT_NE(fused.node.find("FusedAttentionFn"), std::string::npos) << fused.node;
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
    for (const Kernels other : {Kernels::Auto, Kernels::Generic}) {
      const Attention o = attention(c, other, dtype, qkv, gout);
      EXPECT_EQ(o.node.find("FusedAttentionFn"), std::string::npos) << o.node;
      EXPECT_LE(relative_gap(fused.out, o.out), tol) << "dtype " << dtype;
      EXPECT_LE(relative_gap(fused.grad, o.grad), tol) << "dtype " << dtype;
    }
    if (dtype == at::kBFloat16) {  // and against fp32's, within bf16's precision
      const Attention f32 = attention(c, Kernels::Auto, at::kFloat, qkv, gout);
      EXPECT_LE(relative_gap(fused.out, f32.out), tol);
      EXPECT_LE(relative_gap(fused.grad, f32.grad), tol);
    }
  }
}

// Documents (--pack's rows: positions restarting at each document) take, on every device but the
// CPU's written-out path, SDPA with the block-diagonal causal mask through autograd (the flash
// kernels take the causal flag alone): GPUs run it by default (Fused), and on the CPU Fused and
// Generic (PPRUN_KERNELS) run it too. Its values and gradients are those of the written-out path
// (Kernels::Auto, pprun's own CPU attention with per-sequence masks and rotary tables) within
// 1e-5, with and without a sliding window; and the documents mask something (another result than
// the sequence without them).
TEST(FusedOps, DocumentsTakeSdpaWithTheirMaskAndGiveTheWrittenOutPath) {
  pprt::ModelConfig c = rttest::small_config();
  c.hidden = 64;  // head_dim 16: one the flash kernels take, were there no documents
  c.seq_len = 40;
  at::manual_seed(5);
  const int64_t hd = c.head_dim(), width = (c.heads + 2 * c.kv_heads) * hd;
  const at::Tensor qkv = at::randn({2, c.seq_len, width});
  const at::Tensor gout = at::randn({2, c.seq_len, c.heads * hd}) * 0.1;
  // Row 0: documents of 7, 20 and 13 tokens; row 1: 40 tokens, one document (as without them).
  std::vector<int64_t> pos;
  for (const int n : {7, 20, 13})
    for (int i = 0; i < n; ++i) pos.push_back(i);
  for (int i = 0; i < 40; ++i) pos.push_back(i);
  const at::Tensor positions = at::tensor(pos, at::kLong).view({2, 40});
  for (const int window : {0, 6}) {
    const Attention written = attention(c, Kernels::Auto, at::kFloat, qkv, gout, window, positions);
    EXPECT_NE(written.node.find("AttentionFn"), std::string::npos) << written.node;
    for (const Kernels k : {Kernels::Fused, Kernels::Generic}) {
      const Attention sdpa = attention(c, k, at::kFloat, qkv, gout, window, positions);
      EXPECT_EQ(sdpa.node.find("AttentionFn"), std::string::npos) << sdpa.node;  // autograd's
      EXPECT_LE(relative_gap(sdpa.out, written.out), 1e-5) << "window " << window;
      EXPECT_LE(relative_gap(sdpa.grad, written.grad), 1e-5) << "window " << window;
      // Row 1 is one document: what it gets without documents.
      const Attention plain = attention(c, k, at::kFloat, qkv, gout, window);
      EXPECT_LE(relative_gap(sdpa.out[1], plain.out[1]), 1e-5) << "window " << window;
      EXPECT_GT(relative_gap(sdpa.out[0], plain.out[0]), 1e-3) << "window " << window;
    }
  }
}

// A head size the flash kernels do not take (not a multiple of 8): Fused falls back to SDPA.
TEST(FusedOps, AttentionFallsBackWhereNoFusedKernelTakesIt) {
  const pprt::ModelConfig c = rttest::small_config();  // head_dim 8
  pprt::ModelConfig odd = c;
  odd.hidden = 24;  // head_dim 6
  at::manual_seed(4);
  const at::Tensor qkv = at::randn({1, odd.seq_len, (odd.heads + 2 * odd.kv_heads) * 6});
  const at::Tensor gout = at::randn({1, odd.seq_len, odd.heads * 6});
  const Attention fused = attention(odd, Kernels::Fused, at::kFloat, qkv, gout);
  EXPECT_EQ(fused.node.find("FusedAttentionFn"), std::string::npos) << fused.node;
  const Attention generic = attention(odd, Kernels::Generic, at::kFloat, qkv, gout);
  EXPECT_TRUE(at::equal(fused.out, generic.out));
  EXPECT_TRUE(at::equal(fused.grad, generic.grad));
}

// A sliding window shorter than the sequence (ModelConfig::window_of): the flash kernels take
// no mask but the causal flag, so Fused and FusedCudnn take SDPA with the window's mask, and give
// the windowed attention: what the written-out path gives with the window in its mask (fp32 to
// rounding, bf16 within 1 %), bit for bit what Generic gives, and not the full causal attention.
// A window as long as the sequence is no window: the flash kernel, as without one.
TEST(FusedOps, FusedAttentionHonoursASlidingWindow) {
  pprt::ModelConfig c = rttest::small_config();
  c.hidden = 64;  // head_dim 16: the flash kernel takes it
  c.seq_len = 40;
  at::manual_seed(5);
  const int64_t hd = c.head_dim(), width = (c.heads + 2 * c.kv_heads) * hd;
  const at::Tensor qkv = at::randn({2, c.seq_len, width});
  const at::Tensor gout = at::randn({2, c.seq_len, c.heads * hd}) * 0.1;
  const int window = 7;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16})
    for (const Kernels k : {Kernels::Fused, Kernels::FusedCudnn}) {
      const Attention fused = attention(c, k, dtype, qkv, gout, window);
      EXPECT_EQ(fused.node.find("FusedAttentionFn"), std::string::npos) << fused.node;
      const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
      const Attention written = attention(c, Kernels::Auto, dtype, qkv, gout, window);
      EXPECT_LE(relative_gap(fused.out, written.out), tol) << "dtype " << dtype;
      EXPECT_LE(relative_gap(fused.grad, written.grad), tol) << "dtype " << dtype;
      const Attention generic = attention(c, Kernels::Generic, dtype, qkv, gout, window);
      EXPECT_TRUE(at::equal(fused.out, generic.out)) << "dtype " << dtype;
      EXPECT_TRUE(at::equal(fused.grad, generic.grad)) << "dtype " << dtype;
      const Attention full = attention(c, Kernels::Auto, dtype, qkv, gout);
      EXPECT_GT(relative_gap(fused.out, full.out), 0.05) << "the window masks something";
      const Attention whole = attention(c, k, dtype, qkv, gout, static_cast<int>(c.seq_len));
      EXPECT_NE(whole.node.find("FusedAttentionFn"), std::string::npos) << whole.node;
      EXPECT_LE(relative_gap(whole.out, full.out), tol) << "dtype " << dtype;
    }
}

struct Norm {
  at::Tensor y, gx, gg;  // fp32
};

// RMSNorm of x (in `dtype`) with an fp32 scale: the output, x's gradient and the scale's, the
// latter through a WeightWork (at once, or deferred and run: `split`) or through autograd.
Norm rms_norm(Kernels k, at::ScalarType dtype, const at::Tensor& x0, const at::Tensor& g0,
              const at::Tensor& gy, int how) {
  at::Tensor g = g0.clone().requires_grad_(true);
  at::Tensor x = x0.to(dtype).detach().requires_grad_(true);
  pprt::WeightWork work;
  const at::Tensor y = pprt::rms_norm(x, &g, 1e-5, how == 2 ? nullptr : &work, k);
  work.set_deferring(how == 1);
  y.backward(gy.to(dtype));
  if (how == 1) {
    EXPECT_FALSE(g.grad().defined()) << "the scale's gradient waits for the W";
    work.run();
  }
  EXPECT_EQ(y.scalar_type(), dtype);
  EXPECT_EQ(g.grad().scalar_type(), at::kFloat);
  return Norm{y.detach().to(at::kFloat), x.grad().to(at::kFloat), g.grad().clone()};
}

TEST(FusedOps, FusedRmsNormGivesWhatTheOtherPathsGive) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({2, 7, 48}) * 2;
  const at::Tensor g = at::randn({48}) * 0.3 + 1;
  const at::Tensor gy = at::randn({2, 7, 48});
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
    const Norm b = rms_norm(Kernels::Fused, dtype, x, g, gy, 0);
    const Norm iw = rms_norm(Kernels::Fused, dtype, x, g, gy, 1);
    const Norm ag = rms_norm(Kernels::Fused, dtype, x, g, gy, 2);
    EXPECT_TRUE(at::equal(b.gx, iw.gx));  // I then W: B's gradients bit for bit
    EXPECT_TRUE(at::equal(b.gg, iw.gg));
    EXPECT_TRUE(at::equal(b.gg, ag.gg));  // autograd's: the same computation
    for (const Kernels other : {Kernels::Auto, Kernels::Generic}) {
      const Norm o = rms_norm(other, dtype, x, g, gy, 0);
      EXPECT_LE(relative_gap(b.y, o.y), tol) << "dtype " << dtype;
      EXPECT_LE(relative_gap(b.gx, o.gx), tol) << "dtype " << dtype;
      EXPECT_LE(relative_gap(b.gg, o.gg), tol) << "dtype " << dtype;
    }
  }
}

// In bf16 the fused norm computes in fp32 and rounds once: y is the fp32 formula rounded to bf16.
TEST(FusedOps, FusedRmsNormRoundsOnceInBf16) {
  at::manual_seed(6);
  const at::Tensor x = (at::randn({3, 64}) * 3).to(at::kBFloat16);
  const at::Tensor g = at::randn({64}) * 0.5 + 1;
  at::Tensor gp = g.clone().requires_grad_(true);
  const at::Tensor y = pprt::rms_norm(x, &gp, 1e-5, nullptr, Kernels::Fused);
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor want = (xf * (xf.square().mean({-1}, true) + 1e-5).rsqrt() * g);
  // Within half a bf16 unit of the fp32 value (at most 2^-8 relative: bf16 keeps 8 significant
  // bits), plus fp32's own rounding; a second rounding (of x * rstd before the scale) would show
  // as twice that.
  EXPECT_LE(((y.to(at::kFloat) - want).abs() / (want.abs() + 1e-6)).max().item<double>(),
            1.0 / 256 + 1e-5);
}

}  // namespace
