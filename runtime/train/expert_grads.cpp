// Expert parallelism's gradient reduction (expert_grads.h).
#include "runtime/train/expert_grads.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace pprt {

ExpertGradReduce::ExpertGradReduce(ParamStore& store, Transport* same_experts, int replicas)
    : group_(same_experts), scale_(1.0 / replicas) {
  for (NamedParam& p : store.params())
    if (p.expert) params_.push_back(&p.tensor);
}

void ExpertGradReduce::finish(std::chrono::milliseconds timeout) {
  if (params_.empty()) return;
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> parts;
  for (at::Tensor* p : params_)
    parts.push_back(p->grad().defined() ? p->grad().reshape({-1})
                                        : at::zeros({p->numel()}, p->options()));
  at::Tensor flat = at::cat(parts);
  if (group_) group_->allreduce_sum(flat, timeout);
  flat.mul_(scale_);
  int64_t at = 0;
  for (at::Tensor* p : params_) {
    at::Tensor part = flat.narrow(0, at, p->numel()).view_as(*p);
    at += p->numel();
    if (p->grad().defined())
      p->mutable_grad().copy_(part);
    else
      p->mutable_grad() = part.clone();
  }
}

}  // namespace pprt
