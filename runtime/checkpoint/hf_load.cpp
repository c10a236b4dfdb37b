#include "runtime/checkpoint/hf_load.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <vector>

#include "runtime/checkpoint/hf.h"

namespace pprt {

uint64_t load_hf_weights(const std::string& dir, int seq_len, ParamStore& store) {
  const HfModel hf(dir, seq_len);
  c10::NoGradGuard no_grad;
  uint64_t bytes = 0;
  for (NamedParam& p : store.params()) {
    at::Tensor cpu = at::empty(p.tensor.sizes(), at::TensorOptions().dtype(at::kFloat));
    hf.read(p.name, cpu.data_ptr<float>(), static_cast<size_t>(cpu.numel()));
    p.tensor.copy_(cpu);
    bytes += static_cast<uint64_t>(cpu.numel()) * sizeof(float);
  }
  return bytes;
}

}  // namespace pprt
