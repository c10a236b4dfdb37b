// Clipping and AdamW through fused multi-tensor operations (fused_step.h).
#include "runtime/train/fused_step.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adamw.h>

#include <memory>
#include <optional>

namespace pprt {

at::Tensor squared_norm(const std::vector<at::Tensor>& grads, const at::Device& device) {
  if (grads.empty()) return at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  return at::stack(norms).to(at::kDouble).square().sum().reshape({1});
}

void FusedAdamW::step(double lr, const at::Tensor& sq_norm, double clip) {
  at::NoGradGuard no_grad;
  std::optional<at::Tensor> scale;  // the gradients are divided by it
  if (clip > 0) scale = ((sq_norm.sqrt() + 1e-6) / clip).clamp_min(1.0).to(at::kFloat);
  for (auto& group : opt_.param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    o.lr(lr);
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (at::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = opt_.state()[p.unsafeGetTensorImpl()];
      if (!slot) {  // as torch::optim::AdamW starts a parameter's state
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        st->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(st);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      Count& c = counts_[p.unsafeGetTensorImpl()];
      if (!c.tensor.defined() || c.steps != st.step()) {  // first use, or a checkpoint loaded
        c.tensor = at::full({}, static_cast<double>(st.step()),
                            at::TensorOptions().dtype(at::kFloat).device(p.device()));
        c.steps = st.step();
      }
      st.step(st.step() + 1);
      c.steps = st.step();
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(st.exp_avg());
      exp_avg_sqs.push_back(st.exp_avg_sq());
      steps.push_back(c.tensor);
    }
    if (params.empty()) continue;
    at::_foreach_add_(steps, 1);  // as torch.optim's fused AdamW counts before the update
    const auto [beta1, beta2] = o.betas();
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2,
                      o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false, scale,
                      std::nullopt);
    // _fused_adamw_ writes the parameters without bumping their version counters (LibTorch 2.13),
    // by which the model's working copies (ops.h's FusedWeight: concatenated weights, a weight's
    // copy in the compute dtype) know that a weight changed: bumped here, as an in-place
    // operation through autograd would.
    for (at::Tensor& p : params) p.unsafeGetTensorImpl()->bump_version();
  }
}

}  // namespace pprt
