#include "runtime/job.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pprt {

const char* precision_name(Precision p) {
  return p == Precision::Bf16 ? "bf16" : "fp32";
}

double learning_rate(const TrainOptions& o, int step) {
  const int warmup = std::min(o.warmup_steps(), o.steps);
  if (step < warmup) return o.lr * (step + 1) / warmup;
  const int decay = std::max(1, o.steps - warmup - 1);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / decay);
  const double min_lr = o.lr * o.min_lr_ratio;
  return min_lr + 0.5 * (o.lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

std::vector<int> Topology::pipeline(int replica) const {
  std::vector<int> out;
  for (int r = 0; r < pp; ++r) out.push_back(global(r, replica));
  return out;
}

std::vector<int> Topology::replicas(int pipeline_rank) const {
  std::vector<int> out;
  for (int d = 0; d < dp; ++d) out.push_back(global(pipeline_rank, d));
  return out;
}

int loss_rank(const ppc::Plan& plan) {
  return plan.rank_of(plan.stages_per_copy() - 1);
}

}  // namespace pprt
