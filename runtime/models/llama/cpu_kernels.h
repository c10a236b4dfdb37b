// Fused CPU loops for the model's element-wise operations (ops.cpp), on float32 buffers:
// one pass where ATen's kernels would make three to six, each with a temporary of its own. Plain
// C++ with no LibTorch: the compiler vectorizes the loops, and on x86-64 with GCC each function is
// also built for x86-64-v3 (AVX2, FMA), chosen at load time by the CPU it runs on.
//
// ops.cpp calls these for float32 CPU tensors of the layouts they take, and ATen's
// operations otherwise (other devices, other types), which compute the same values up to rounding.
#pragma once

#include <cstdint>

namespace pprt::kernels {

// Rotary embedding of the rows of one [T, 2 * half] block: out = x * cos + rotate_half(x) * sin,
// rotate_half(x) = [-x2, x1]. Row t of x starts at x + t * x_row, of out at out + t * out_row
// (both with unit stride inside a row); cos and sin are [T, 2 * half], contiguous. x and out do
// not overlap.
void rotate_block(const float* x, int64_t x_row, float* out, int64_t out_row, const float* cos,
                  const float* sin, int64_t T, int64_t half);

// RMSNorm over the rows of x [rows, n] (contiguous): rstd[r] = 1 / sqrt(mean(x[r]^2) + eps),
// xn = x * rstd, y = xn * g.
void rms_norm_forward(const float* x, const float* g, float eps, int64_t rows, int64_t n, float* xn,
                      float* y, float* rstd);
// Its input gradient: gx = rstd * (gy * g - xn * mean(gy * g * xn)) per row.
void rms_norm_backward(const float* gy, const float* g, const float* xn, const float* rstd,
                       int64_t rows, int64_t n, float* gx);
// The scale's gradient: gw[j] += sum over rows of gy[r, j] * xn[r, j].
void scale_grad_accumulate(const float* gy, const float* xn, int64_t rows, int64_t n, float* gw);

// SwiGLU on the fused gate/up product's rows gu [rows, 2f] (g = gu[:, :f], u = gu[:, f:]), with
// s = sigmoid(g) [rows, f] already computed: y = g * s * u [rows, f].
void swiglu_forward(const float* gu, const float* s, int64_t rows, int64_t f, float* y);
// Its gradient into d [rows, 2f], the product's layout: dg = gy * u * s * (1 + g * (1 - s)),
// du = gy * g * s.
void swiglu_backward(const float* gy, const float* gu, const float* s, int64_t rows, int64_t f,
                     float* d);

}  // namespace pprt::kernels
