// Mixed precision's rules (precision.h).
#include "runtime/model/precision.h"

#include <ATen/ATen.h>

namespace pprt {

at::ScalarType compute_dtype(Precision p) {
  return p == Precision::Bf16 ? at::kBFloat16 : at::kFloat;
}

bool low_precision(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  return s == at::kBFloat16 || s == at::kHalf;
}

at::Tensor widened(const at::Tensor& t) {
  return low_precision(t) ? t.to(at::kFloat) : t;
}

at::Tensor master_grad(const at::Tensor& master, const at::Tensor& g) {
  return g.defined() && g.scalar_type() != master.scalar_type() ? g.to(master.scalar_type()) : g;
}

}  // namespace pprt
