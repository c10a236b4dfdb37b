// An auxiliary loss added on a stage before the last (pprt::Microbatch::add_loss: a mixture of
// experts' load balancing on any stage) joins the backward of that stage's output: the output
// passes unchanged, and its backward gives the loss the gradient `scale` (the loss's own: 1 /
// microbatches), so its layers' weights (and the stage's input, if the loss depends on it) get the
// gradients of scale * term, as Megatron-LM's MoEAuxLossAutoScaler does. The last stage adds its
// auxiliary losses to the loss itself (model/stage.h).
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "pprt/pprt.h"

namespace pprt {

// `out`, whose backward also runs `terms` (scalars) with the gradient `scale` each.
at::Tensor attach_aux_losses(const at::Tensor& out, const std::vector<at::Tensor>& terms,
                             double scale);

// What a rank's stages reported of one value (Model::reported) in a step: per microbatch the sum
// of the means its layers added, and how many they added.
struct ReportedSums {
  std::vector<double> sum, count;
};

// Adds what `r` (microbatch `mb`'s record on a stage) holds of each of `reported` to `out` (one
// entry per value, each sized for the step's microbatches).
void add_reported(const LossReport& r, int mb, const std::vector<Reported>& reported,
                  std::vector<ReportedSums>& out);
// The same, each value (a scalar: its mean) added to its sum by `add(value, &sum)`, which may read
// it later (the executor on a device: every value in one copy).
using AddValue = std::function<void(const at::Tensor& value, double* sum)>;

// Scalars read to the host, each added to its sum: on the CPU at once (item<double>()), on a
// device all in one copy by read() (a step's losses: one synchronisation, not one per microbatch),
// each exactly as item<double>() reads it.
class HostSums {
 public:
  void add(const at::Tensor& value, double* sum);
  void read();

 private:
  std::vector<at::Tensor> values_;
  std::vector<double*> into_;
};
void add_reported(const LossReport& r, int mb, const std::vector<Reported>& reported,
                  std::vector<ReportedSums>& out, const AddValue& add);
// One entry per value, each of `microbatches` zeros.
std::vector<ReportedSums> no_reports(size_t values, int microbatches);

}  // namespace pprt
