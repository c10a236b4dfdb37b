// The layers' step sums (pprt::Layer::step_sums: a mixture of experts' tokens per expert) summed
// after each step over every copy of their layer in the job: first over the data-parallel
// replicas of this pipeline rank (one flat all-reduce), then over the pipeline ranks that hold
// the same layout stage (DualPipe's two copies: one process group per set of ranks, in one global
// order). Every copy then holds the whole step's counts. Included only by LibTorch translation
// units.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "compiler/plan.h"
#include "runtime/model/stage.h"
#include "runtime/transport/transport.h"

namespace pprt {

class StepSums {
 public:
  StepSums() = default;  // nothing to sum
  // The step sums of `stages` (a pipeline rank's, of `plan`), over `replicas` (null: dp 1) and
  // groups of `pipeline` (null: pp 1), which every holder of a layout stage with step sums makes
  // here, in the order of their ranks. The all-reduces run on `device`.
  StepSums(const ppc::Plan& plan, const std::vector<Stage*>& stages, Transport* replicas,
           Transport* pipeline, const at::Device& device);

  bool empty() const { return sums_.empty(); }
  // After the step's backwards (every replica and copy calls it). Throws TransportError.
  void sum(std::chrono::milliseconds timeout);

 private:
  struct Group {
    std::unique_ptr<Transport> transport;
    std::vector<at::Tensor> sums;  // by name
  };
  Transport* replicas_ = nullptr;
  at::Device device_ = at::Device(at::kCPU);
  std::vector<at::Tensor> sums_;  // every one of the rank's, by name
  std::vector<Group> groups_;     // in the order of their ranks
};

}  // namespace pprt
