// The fused CPU loops (runtime/models/llama/cpu_kernels.h) against their definitions, computed here
// in double precision element by element: odd widths (so that the vectorized loops' tails run),
// rows with gaps between them, and accumulation into gradients that already hold values.
#include "runtime/models/llama/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

namespace k = pprt::kernels;

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// |got - want| within a float's rounding of the values involved.
void expect_close(double got, double want, double magnitude, const char* what, size_t i) {
  EXPECT_NEAR(got, want, 1e-5 * (1.0 + magnitude)) << what << " [" << i << "]";
}

TEST(CpuKernels, RotateBlockFollowsTheRotaryDefinition) {
  const int64_t T = 3, half = 5, hd = 2 * half, x_row = hd + 3, out_row = hd + 7;
  const std::vector<float> x = random_values(size_t(T * x_row), 1);
  const std::vector<float> cos = random_values(size_t(T * hd), 2);
  const std::vector<float> sin = random_values(size_t(T * hd), 3);
  std::vector<float> out(size_t(T * out_row), 42.0f);
  k::rotate_block(x.data(), x_row, out.data(), out_row, cos.data(), sin.data(), T, half);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < hd; ++i) {
      // rotate_half(x) = [-x2, x1]
      const double xi = x[size_t(t * x_row + i)];
      const double rot = i < half ? -double(x[size_t(t * x_row + i + half)])
                                  : double(x[size_t(t * x_row + i - half)]);
      const double want = xi * cos[size_t(t * hd + i)] + rot * sin[size_t(t * hd + i)];
      expect_close(out[size_t(t * out_row + i)], want, std::abs(want), "out", size_t(t * hd + i));
    }
    for (int64_t i = hd; i < out_row; ++i)  // the gap between rows is not written
      EXPECT_EQ(out[size_t(t * out_row + i)], 42.0f);
  }
}

TEST(CpuKernels, RmsNormForwardAndBackwardFollowTheirDefinitions) {
  const int64_t rows = 3, n = 37;
  const float eps = 1e-5f;
  const std::vector<float> x = random_values(size_t(rows * n), 4, 2.0f);
  const std::vector<float> g = random_values(size_t(n), 5);
  const std::vector<float> gy = random_values(size_t(rows * n), 6);
  std::vector<float> xn(x.size()), y(x.size()), rstd(static_cast<size_t>(rows)), gx(x.size());
  k::rms_norm_forward(x.data(), g.data(), eps, rows, n, xn.data(), y.data(), rstd.data());
  k::rms_norm_backward(gy.data(), g.data(), xn.data(), rstd.data(), rows, n, gx.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
    const double rs = 1.0 / std::sqrt(ms / double(n) + eps);
    expect_close(rstd[size_t(r)], rs, rs, "rstd", size_t(r));
    // d/dx of y = g x rs: gx = rs (gy g - xn mean(gy g xn)), xn = x rs.
    double m = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t j = size_t(r * n + i);
      m += double(gy[j]) * g[size_t(i)] * (x[j] * rs);
    }
    m /= double(n);
    for (int64_t i = 0; i < n; ++i) {
      const size_t j = size_t(r * n + i);
      const double xnj = x[j] * rs;
      expect_close(xn[j], xnj, std::abs(xnj), "xn", j);
      expect_close(y[j], xnj * g[size_t(i)], std::abs(xnj * g[size_t(i)]), "y", j);
      const double want = rs * (double(gy[j]) * g[size_t(i)] - xnj * m);
      expect_close(gx[j], want, std::abs(want) + rs, "gx", j);
    }
  }
}

TEST(CpuKernels, RmsNormBackwardIsTheForwardsDerivative) {
  // Central differences of sum(gy * y) in x, from the forward kernel itself (in float: a loose
  // tolerance, but a wrong formula misses by the size of the gradient).
  const int64_t rows = 2, n = 19;
  std::vector<float> x = random_values(size_t(rows * n), 7);
  const std::vector<float> g = random_values(size_t(n), 8);
  const std::vector<float> gy = random_values(size_t(rows * n), 9);
  std::vector<float> xn(x.size()), y(x.size()), rstd(static_cast<size_t>(rows)), gx(x.size());
  k::rms_norm_forward(x.data(), g.data(), 1e-5f, rows, n, xn.data(), y.data(), rstd.data());
  k::rms_norm_backward(gy.data(), g.data(), xn.data(), rstd.data(), rows, n, gx.data());
  auto objective = [&] {
    std::vector<float> xn2(x.size()), y2(x.size()), r2(static_cast<size_t>(rows));
    k::rms_norm_forward(x.data(), g.data(), 1e-5f, rows, n, xn2.data(), y2.data(), r2.data());
    double s = 0;
    for (size_t j = 0; j < y2.size(); ++j) s += double(gy[j]) * y2[j];
    return s;
  };
  const float h = 1e-2f;
  for (size_t j = 0; j < x.size(); ++j) {
    const float keep = x[j];
    x[j] = keep + h;
    const double up = objective();
    x[j] = keep - h;
    const double down = objective();
    x[j] = keep;
    EXPECT_NEAR(gx[j], (up - down) / (2.0 * h), 2e-3) << j;
  }
}

TEST(CpuKernels, ScaleGradientAccumulatesOverRows) {
  const int64_t rows = 5, n = 11;
  const std::vector<float> gy = random_values(size_t(rows * n), 10);
  const std::vector<float> xn = random_values(size_t(rows * n), 11);
  std::vector<float> gw = random_values(size_t(n), 12);
  const std::vector<float> before = gw;
  k::scale_grad_accumulate(gy.data(), xn.data(), rows, n, gw.data());
  for (int64_t i = 0; i < n; ++i) {
    double want = before[size_t(i)];
    for (int64_t r = 0; r < rows; ++r)
      want += double(gy[size_t(r * n + i)]) * xn[size_t(r * n + i)];
    expect_close(gw[size_t(i)], want, std::abs(want), "gw", size_t(i));
  }
}

TEST(CpuKernels, SwiGluForwardAndBackwardFollowTheirDefinitions) {
  const int64_t rows = 3, f = 13;
  const std::vector<float> gu = random_values(size_t(rows * 2 * f), 13, 2.0f);
  const std::vector<float> gy = random_values(size_t(rows * f), 14);
  std::vector<float> s(size_t(rows * f));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < f; ++i)
      s[size_t(r * f + i)] = float(1.0 / (1.0 + std::exp(-double(gu[size_t(r * 2 * f + i)]))));
  std::vector<float> y(size_t(rows * f)), d(size_t(rows * 2 * f));
  k::swiglu_forward(gu.data(), s.data(), rows, f, y.data());
  k::swiglu_backward(gy.data(), gu.data(), s.data(), rows, f, d.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < f; ++i) {
      const double g = gu[size_t(r * 2 * f + i)], u = gu[size_t(r * 2 * f + f + i)];
      const double sg = 1.0 / (1.0 + std::exp(-g)), gyi = gy[size_t(r * f + i)];
      const size_t j = size_t(r * f + i);
      // y = silu(g) u; dy/dg = u sigmoid(g) (1 + g (1 - sigmoid(g))); dy/du = silu(g).
      expect_close(y[j], g * sg * u, std::abs(g * sg * u), "y", j);
      const double dg = gyi * u * sg * (1.0 + g * (1.0 - sg)), du = gyi * g * sg;
      expect_close(d[size_t(r * 2 * f + i)], dg, std::abs(dg), "dg", j);
      expect_close(d[size_t(r * 2 * f + f + i)], du, std::abs(du), "du", j);
    }
  }
}

}  // namespace
