// The layers' step sums over every copy of their layer (step_sums.h).
#include "runtime/train/step_sums.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

namespace pprt {

namespace {

// The pipeline ranks that hold layout stage `stage` of `plan`, in increasing order.
std::vector<int> holders(const ppc::Plan& plan, int stage) {
  std::vector<int> out;
  for (int r = 0; r < plan.pp(); ++r)
    for (int s : plan.placement.rank_stages[static_cast<size_t>(r)])
      if (plan.layout_stage(s) == stage && (out.empty() || out.back() != r)) out.push_back(r);
  return out;
}

// `sums` summed in place over `group`: one flat all-reduce on `device`.
void all_reduce(const std::vector<at::Tensor>& sums, Transport& group, const at::Device& device,
                std::chrono::milliseconds timeout) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat_parts;
  for (const at::Tensor& t : sums) flat_parts.push_back(t.reshape({-1}).to(at::kDouble));
  at::Tensor flat = at::cat(flat_parts).to(device);
  group.allreduce_sum(flat, timeout);
  flat = flat.cpu();
  int64_t at = 0;
  for (const at::Tensor& t : sums) {
    t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

}  // namespace

StepSums::StepSums(const ppc::Plan& plan, const std::vector<Stage*>& stages, Transport* replicas,
                   Transport* pipeline, const at::Device& device)
    : replicas_(replicas), device_(device) {
  // By name: the order every replica and every holder of the stage agrees on.
  std::map<std::string, at::Tensor> mine;
  std::map<std::vector<int>, std::map<std::string, at::Tensor>> shared;
  for (Stage* st : stages)
    for (auto& [name, sum] : st->step_sums()) {
      mine.emplace(name, sum);
      if (std::vector<int> ranks = holders(plan, st->index()); pipeline && ranks.size() > 1)
        shared[ranks].emplace(name, sum);
    }
  for (auto& [name, sum] : mine) sums_.push_back(sum);
  for (auto& [ranks, by_name] : shared) {  // in the order of their ranks: the same everywhere
    Group g;
    g.transport = pipeline->new_group(ranks, fmt::format("step_sums:{}", fmt::join(ranks, ",")));
    for (auto& [name, sum] : by_name) g.sums.push_back(sum);
    groups_.push_back(std::move(g));
  }
}

void StepSums::sum(std::chrono::milliseconds timeout) {
  if (sums_.empty()) return;
  if (replicas_) all_reduce(sums_, *replicas_, device_, timeout);
  for (Group& g : groups_) all_reduce(g.sums, *g.transport, device_, timeout);
}

}  // namespace pprt
