// Expert parallelism's gradient reduction (pprun --ep, docs/pprun.md "Expert parallelism"): a
// rank's expert parameters (NamedParam::expert: its shard of each MoE layer's routed experts) are
// left out of data parallelism's average (grad_reducer.h). Their gradients already sum what the
// ep replicas sharing them sent through the all-to-all; summed over the replicas that hold the
// same shard (dp / ep of them) they are the whole step's, and divided by dp they are the mean
// over the replicas, as every other gradient is. Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <vector>

#include "runtime/model/stage.h"
#include "runtime/transport/transport.h"

namespace pprt {

class ExpertGradReduce {
 public:
  ExpertGradReduce() = default;  // nothing to reduce
  // The expert parameters of `store`, summed over `same_experts` (null: this replica alone holds
  // its shard) and divided by `replicas` (dp).
  ExpertGradReduce(ParamStore& store, Transport* same_experts, int replicas);
  // After the step's actions (a gradient missing on a rank counts as zeros). Throws
  // TransportError on a failure.
  void finish(std::chrono::milliseconds timeout);

 private:
  std::vector<at::Tensor*> params_;
  Transport* group_ = nullptr;
  double scale_ = 1;
};

}  // namespace pprt
