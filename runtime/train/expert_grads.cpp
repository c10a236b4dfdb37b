// Expert parallelism's gradient reduction (expert_grads.h).
#include "runtime/train/expert_grads.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "runtime/train/grad_reducer.h"

namespace pprt {

ExpertGradReduce::ExpertGradReduce(ParamStore& store, Transport* same_experts, int replicas)
    : group_(same_experts), scale_(1.0 / replicas) {
  for (NamedParam& p : store.params())
    if (p.expert) params_.push_back(&p.tensor);
}

void ExpertGradReduce::finish(std::chrono::milliseconds timeout) {
  if (params_.empty()) return;
  at::NoGradGuard no_grad;
  at::Tensor flat = flat_grads(params_);
  if (group_) group_->allreduce_sum(flat, timeout);
  flat.mul_(scale_);
  set_grads(params_, flat);
}

}  // namespace pprt
