#include "runtime/checkpoint/hf_load.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <unordered_map>
#include <vector>

#include "compiler/diagnostic.h"
#include "runtime/checkpoint/hf.h"

namespace pprt {

uint64_t load_hf_weights(const std::string& dir, const HfFormat& format, ParamStore& store) {
  HfDirectory hf(dir);
  hf.open_weights();
  std::unordered_map<std::string, const HfTensor*> by_name;
  for (const HfTensor& t : format.tensors) by_name.emplace(t.name, &t);
  c10::NoGradGuard no_grad;
  uint64_t bytes = 0;
  for (NamedParam& p : store.params()) {
    const auto it = by_name.find(p.name);
    PPC_INTERNAL_ASSERT(it != by_name.end(), "every parameter has a Hugging Face tensor");
    at::Tensor cpu = at::empty(p.tensor.sizes(), at::TensorOptions().dtype(at::kFloat));
    PPC_INTERNAL_ASSERT(cpu.sizes().vec() == it->second->shape, "of its Hugging Face shape");
    hf.read(*it->second, cpu.data_ptr<float>());
    p.tensor.copy_(cpu);
    bytes += static_cast<uint64_t>(cpu.numel()) * sizeof(float);
  }
  return bytes;
}

}  // namespace pprt
