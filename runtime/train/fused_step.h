// The work between replays through fused multi-tensor operations, as a GPU wants it (the trainer
// takes it where kernel_choice.h's fused_optimizer says): the gradients' norm by
// at::_foreach_norm (one pass over every gradient, nothing read back), then gradient clipping and
// AdamW by at::_fused_adamw_, one call per parameter group, the clipping factor its grad_scale: a
// tensor computed on the device from the norm, so that the host queues the whole update without
// waiting for the norm. AdamW's state (the moments, the step count) stays in the
// torch::optim::AdamW it is given, which checkpoints write and read as before. The parameters it
// writes have their version counters bumped, as an in-place update through autograd would (the
// model's working copies are made again by them).
//
// The same arithmetic as torch::optim::AdamW and clipping by the global norm
// (clip_grad_norm_'s), computed in another order: on the CPU, where the trainer keeps the unfused
// path by default, the two agree to rounding (tests/runtime/train/fused_step_test.cpp).
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace torch::optim {
class AdamW;
}

namespace pprt {

// sum over `grads` of the squares of their elements, as a one-element fp64 tensor on their device
// (zero on `device` when there are none): each gradient's norm by one at::_foreach_norm
// (accumulated in fp32), their squares summed in fp64.
at::Tensor squared_norm(const std::vector<at::Tensor>& grads, const at::Device& device);

class FusedAdamW {
 public:
  explicit FusedAdamW(torch::optim::AdamW& opt) : opt_(opt) {}

  // One AdamW step at learning rate `lr` over the optimizer's parameters that have a gradient.
  // With clip > 0 their gradients are first multiplied by min(1, clip / (sqrt(sq_norm) + 1e-6))
  // (divided by its inverse, _fused_adamw_'s grad_scale, which also leaves the clipped gradient
  // in .grad), sq_norm a one-element tensor on their device.
  void step(double lr, const at::Tensor& sq_norm, double clip);

 private:
  struct Count {
    at::Tensor tensor;  // fp32, on the parameter's device: what _fused_adamw_ reads
    int64_t steps = 0;  // the same on the host: AdamWParamState::step before this step
  };
  torch::optim::AdamW& opt_;
  std::unordered_map<const void*, Count> counts_;  // per parameter (TensorImpl)
};

}  // namespace pprt
