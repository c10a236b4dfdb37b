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

Topology::Topology(int pp, int dp, int ep) : dims_{{"ep", ep}, {"dp", dp}, {"pp", pp}} {}

int Topology::stride(const std::string& dim) const {
  int s = 1;
  for (const Dim& d : dims_) {
    if (d.name == dim) return s;
    s *= d.size;
  }
  return 0;
}

int Topology::size(const std::string& dim) const {
  for (const Dim& d : dims_)
    if (d.name == dim) return d.size;
  return 1;
}

int Topology::world() const {
  int n = 1;
  for (const Dim& d : dims_) n *= d.size;
  return n;
}

int Topology::coordinate(int g, const std::string& dim) const {
  const int s = stride(dim);
  return s == 0 ? 0 : (g / s) % size(dim);
}

int Topology::along(int g, const std::string& dim, int coordinate) const {
  const int s = stride(dim);
  return s == 0 ? g : g + (coordinate - this->coordinate(g, dim)) * s;
}

std::vector<int> Topology::group(int g, const std::string& dim) const {
  std::vector<int> out;
  for (int c = 0; c < size(dim); ++c) out.push_back(along(g, dim, c));
  return out;
}

std::vector<int> Topology::pipeline(int replica) const {
  return group(global(0, replica), "pp");
}

std::vector<int> Topology::replicas(int pipeline_rank) const {
  return group(global(pipeline_rank, 0), "dp");
}

int loss_rank(const ppc::Plan& plan) {
  return plan.rank_of(plan.stages_per_copy() - 1);
}

}  // namespace pprt
