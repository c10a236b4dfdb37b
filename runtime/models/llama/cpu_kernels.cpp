// Fused CPU loops (cpu_kernels.h). Sums over a row use eight partial sums, so that the compiler
// vectorizes them without reassociating floating-point additions on its own.
#include "runtime/models/llama/cpu_kernels.h"

#include <cmath>

// Each function twice on x86-64 with GCC: for the baseline and for x86-64-v3 (AVX2, FMA), the
// loader picking one for the CPU at hand (GCC's function multi-versioning, an ifunc).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PP_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define PP_CPU_CLONES
#endif

namespace pprt::kernels {

namespace {

constexpr int kLanes = 8;

// sum_i a[i] * b[i] over n values, in kLanes partial sums.
inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) part[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < kLanes; ++j) s += part[j];
  return s;
}

}  // namespace

PP_CPU_CLONES
void rotate_block(const float* x, int64_t x_row, float* out, int64_t out_row, const float* cos,
                  const float* sin, int64_t T, int64_t half) {
  const int64_t hd = 2 * half;
  for (int64_t t = 0; t < T; ++t) {
    const float* __restrict x1 = x + t * x_row;
    const float* __restrict x2 = x1 + half;
    float* __restrict o1 = out + t * out_row;
    float* __restrict o2 = o1 + half;
    const float* __restrict c = cos + t * hd;
    const float* __restrict s = sin + t * hd;
    for (int64_t i = 0; i < half; ++i) o1[i] = x1[i] * c[i] - x2[i] * s[i];
    for (int64_t i = 0; i < half; ++i) o2[i] = x2[i] * c[half + i] + x1[i] * s[half + i];
  }
}

PP_CPU_CLONES
void rms_norm_forward(const float* x, const float* g, float eps, int64_t rows, int64_t n, float* xn,
                      float* y, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict xr = x + r * n;
    float* __restrict xnr = xn + r * n;
    float* __restrict yr = y + r * n;
    const float rs = 1.0f / std::sqrt(dot(xr, xr, n) / static_cast<float>(n) + eps);
    rstd[r] = rs;
    for (int64_t i = 0; i < n; ++i) {
      xnr[i] = xr[i] * rs;
      yr[i] = xnr[i] * g[i];
    }
  }
}

PP_CPU_CLONES
void rms_norm_backward(const float* gy, const float* g, const float* xn, const float* rstd,
                       int64_t rows, int64_t n, float* gx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict gyr = gy + r * n;
    const float* __restrict xnr = xn + r * n;
    float* __restrict gxr = gx + r * n;
    // mean(gy * g * xn), with gy * g formed in gx first.
    for (int64_t i = 0; i < n; ++i) gxr[i] = gyr[i] * g[i];
    const float m = dot(gxr, xnr, n) / static_cast<float>(n);
    const float rs = rstd[r];
    for (int64_t i = 0; i < n; ++i) gxr[i] = (gxr[i] - xnr[i] * m) * rs;
  }
}

PP_CPU_CLONES
void scale_grad_accumulate(const float* gy, const float* xn, int64_t rows, int64_t n, float* gw) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict gyr = gy + r * n;
    const float* __restrict xnr = xn + r * n;
    float* __restrict w = gw;
    for (int64_t i = 0; i < n; ++i) w[i] += gyr[i] * xnr[i];
  }
}

PP_CPU_CLONES
void swiglu_forward(const float* gu, const float* s, int64_t rows, int64_t f, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict g = gu + r * 2 * f;
    const float* __restrict u = g + f;
    const float* __restrict sr = s + r * f;
    float* __restrict yr = y + r * f;
    for (int64_t i = 0; i < f; ++i) yr[i] = g[i] * sr[i] * u[i];
  }
}

PP_CPU_CLONES
void swiglu_backward(const float* gy, const float* gu, const float* s, int64_t rows, int64_t f,
                     float* d) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* __restrict gyr = gy + r * f;
    const float* __restrict g = gu + r * 2 * f;
    const float* __restrict u = g + f;
    const float* __restrict sr = s + r * f;
    float* __restrict dg = d + r * 2 * f;
    float* __restrict du = dg + f;
    for (int64_t i = 0; i < f; ++i) {
      const float a = g[i] * sr[i];
      du[i] = gyr[i] * a;
      dg[i] = gyr[i] * u[i] * (sr[i] + a * (1.0f - sr[i]));
    }
  }
}

}  // namespace pprt::kernels
