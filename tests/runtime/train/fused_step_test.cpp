// The work between replays through fused multi-tensor operations (fused_step.h: what GPUs run)
// against the trainer's unfused path (the gradients' norm in fp64 per tensor, clipping by a host
// factor, torch::optim::AdamW), on the CPU, where LibTorch has at::_foreach_norm and
// at::_fused_adamw_ too: the same norms, parameters and AdamW state over several steps, clipping
// on and off, and the state where checkpoints look for it.
//
// Tolerance: both compute the same formulas in fp32 in another order (the moments' update as a
// lerp or as a multiply-add, the clipping factor applied as a division by its inverse, the norm
// accumulated per tensor in fp32), so each step's update differs by a few units in the last place
// (ulp, 1.2e-7 relative). Measured against the size of what is compared (the largest update of a
// tensor over the 6 steps, plus an ulp of the parameter per step for the rounding of the
// parameter itself; its largest moment), the two agree to 1e-5: some 80 ulp, room for the
// rounding to add up over the steps, while a wrong formula (a bias correction, the decay, the
// clipping factor) moves them by 1e-2 or more. Per element the relative difference means nothing
// here: a moment that sums gradients of both signs to near zero keeps their rounding. The norm:
// 1e-6 (fp32 accumulation of 10^4 squares against fp64).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <vector>

#include "runtime/models/llama/ops.h"
#include "runtime/train/fused_step.h"

namespace {

struct Params {
  std::vector<at::Tensor> decay, no_decay;
  std::vector<at::Tensor> all() const {
    std::vector<at::Tensor> v = decay;
    v.insert(v.end(), no_decay.begin(), no_decay.end());
    return v;
  }
};

Params make_params() {
  at::manual_seed(11);
  Params p;
  for (auto shape : {std::vector<int64_t>{64, 32}, {96, 32}, {7, 5}})
    p.decay.push_back((at::randn(shape) * 0.05).requires_grad_(true));
  for (int64_t n : {32, 3}) p.no_decay.push_back(at::ones({n}).requires_grad_(true));
  return p;
}

// The trainer's optimizer: AdamW with weight decay on the matrices (trainer.cpp's make_optimizer).
std::unique_ptr<torch::optim::AdamW> optimizer(const Params& p) {
  auto options = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(p.decay, options(0.1));
  groups.emplace_back(p.no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(1e-3));
}

void set_grads(const Params& p, int step, double size) {
  at::manual_seed(100 + step);
  for (const at::Tensor& t : p.all()) t.mutable_grad() = at::randn(t.sizes()) * size;
}

// The largest difference between a and b relative to b's largest magnitude.
double relative_gap(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / (b.abs().max().item<double>() + 1e-30);
}

// `clip`: clipping on (a norm above it every step) or off.
void compare(double clip, double grad_size) {
  Params a = make_params(), b = make_params();
  const Params start = make_params();
  auto opt_a = optimizer(a), opt_b = optimizer(b);
  pprt::FusedAdamW fused(*opt_b);
  for (int step = 0; step < 6; ++step) {
    const double lr = 1e-3 * (1.0 + 0.25 * step);
    set_grads(a, step, grad_size);
    set_grads(b, step, grad_size);
    // Unfused: the trainer's gather_stats, clip_gradients and optimizer_step.
    at::Tensor sq = at::zeros({1}, at::kDouble);
    for (const at::Tensor& t : a.all()) sq += t.grad().to(at::kDouble).pow(2).sum();
    const double norm = std::sqrt(sq.item<double>());
    const double coef = clip / (norm + 1e-6);
    if (clip > 0 && coef < 1)
      for (at::Tensor& t : a.all()) t.mutable_grad().mul_(coef);
    for (auto& group : opt_a->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    opt_a->step();
    // Fused.
    std::vector<at::Tensor> grads;
    for (const at::Tensor& t : b.all()) grads.push_back(t.grad());
    const at::Tensor fsq = pprt::squared_norm(grads, at::Device(at::kCPU));
    EXPECT_EQ(fsq.scalar_type(), at::kDouble);
    EXPECT_NEAR(std::sqrt(fsq.item<double>()), norm, 1e-6 * norm) << "step " << step;
    fused.step(lr, fsq, clip);
    if (clip > 0 && coef < 1) {  // the clipped gradients left in .grad, as clip_gradients does
      for (size_t i = 0; i < grads.size(); ++i)
        EXPECT_LE(relative_gap(b.all()[i].grad(), a.all()[i].grad()), 1e-6);
    }
  }
  const std::vector<at::Tensor> pa = a.all(), pb = b.all(), p0 = start.all();
  for (size_t i = 0; i < pa.size(); ++i) {
    // The updates, and each step's rounding of the parameter itself (an ulp of it per step).
    const double ulps = 6 * 1.2e-7 * pa[i].abs().max().item<double>();
    EXPECT_LE((pb[i] - pa[i]).abs().max().item<double>(),
              1e-5 * (pa[i] - p0[i]).abs().max().item<double>() + ulps)
        << "parameter " << i;
    auto* sa = static_cast<torch::optim::AdamWParamState*>(
        opt_a->state().at(pa[i].unsafeGetTensorImpl()).get());
    auto* sb = static_cast<torch::optim::AdamWParamState*>(
        opt_b->state().at(pb[i].unsafeGetTensorImpl()).get());
    EXPECT_EQ(sb->step(), 6);  // where checkpoints read it (save_load.cpp)
    EXPECT_EQ(sb->step(), sa->step());
    EXPECT_LE(relative_gap(sb->exp_avg(), sa->exp_avg()), 1e-5) << "parameter " << i;
    EXPECT_LE(relative_gap(sb->exp_avg_sq(), sa->exp_avg_sq()), 1e-5) << "parameter " << i;
  }
  // The parameters moved: the comparison is not of two idle optimizers.
  EXPECT_GT((pb[0] - p0[0]).abs().max().item<double>(), 1e-3);
}

TEST(FusedStep, FollowsAdamWWithClipping) {
  compare(1.0, 0.5);  // a norm of about 0.5 x sqrt(10^4) = 50: clipped every step
}

TEST(FusedStep, FollowsAdamWWithoutClipping) {
  compare(1.0, 1e-3);  // a norm of about 0.1: never clipped
  compare(0.0, 0.5);   // clipping off
}

// A parameter without a gradient this step is left alone (as torch::optim::AdamW leaves it), and
// a step count already in the state (a checkpoint's) is where the fused steps go on from.
TEST(FusedStep, SkipsParametersWithoutGradientsAndResumesTheCount) {
  Params p = make_params();
  auto opt = optimizer(p);
  const at::Tensor p0 = p.decay[1].detach().clone(), before = p.decay[0].detach().clone();
  auto st = std::make_unique<torch::optim::AdamWParamState>();
  st->step(40);
  st->exp_avg(at::zeros_like(p.decay[0]));
  st->exp_avg_sq(at::zeros_like(p.decay[0]));
  opt->state()[p.decay[0].unsafeGetTensorImpl()] = std::move(st);
  pprt::FusedAdamW fused(*opt);
  set_grads(p, 0, 0.1);
  p.decay[1].mutable_grad() = at::Tensor();
  fused.step(1e-3, pprt::squared_norm({p.decay[0].grad()}, at::Device(at::kCPU)), 0.0);
  EXPECT_TRUE(at::equal(p.decay[1], p0));
  EXPECT_EQ(opt->state().count(p.decay[1].unsafeGetTensorImpl()), 0u);
  auto* s0 = static_cast<torch::optim::AdamWParamState*>(
      opt->state().at(p.decay[0].unsafeGetTensorImpl()).get());
  EXPECT_EQ(s0->step(), 41);
  // AdamW's update with the bias corrections of step 41, not of step 1 (which would move every
  // weight by lr): m = (1 - beta1) g, v = (1 - beta2) g^2, weight decay 0.1.
  const at::Tensor g = p.decay[0].grad().to(at::kDouble);
  EXPECT_TRUE(at::allclose(s0->exp_avg(), (g * 0.1).to(at::kFloat), 1e-5, 1e-9));
  const double bc1 = 1 - std::pow(0.9, 41), bc2 = 1 - std::pow(0.95, 41);
  const at::Tensor want =
      before.to(at::kDouble) * (1 - 1e-3 * 0.1) -
      1e-3 / bc1 * (g * 0.1) / ((g.square() * 0.05).sqrt() / std::sqrt(bc2) + 1e-8);
  // fp32 arithmetic on values near 0.05 (ulp 3.7e-9): a few ulp.
  EXPECT_LE((p.decay[0].to(at::kDouble) - want).abs().max().item<double>(), 3e-8);
}

// The model's working copies (ops.h's FusedWeight: the concatenated weights of a fused product, a
// weight's copy in the compute dtype) are made again when a weight's version has changed: every
// parameter the fused update writes has its version bumped (at::_fused_adamw_ writes them without
// bumping it), so that the next microbatch computes with the updated weights. A parameter without a
// gradient is not written and keeps its version.
TEST(FusedStep, UpdatedWeightsHaveTheirWorkingCopiesMadeAgain) {
  Params p = make_params();
  auto opt = optimizer(p);
  pprt::FusedAdamW fused(*opt);
  pprt::FusedWeight concatenated, bf16;
  const std::vector<at::Tensor*> both = {&p.decay[0], &p.decay[1]}, one = {&p.decay[0]};
  concatenated.of(both);
  bf16.of(one, at::kBFloat16);
  const int64_t untouched = p.decay[2]._version();
  for (int step = 0; step < 2; ++step) {
    set_grads(p, step, 0.1);
    p.decay[2].mutable_grad() = at::Tensor();
    fused.step(1e-3, pprt::squared_norm({p.decay[0].grad()}, at::Device(at::kCPU)), 0.0);
    EXPECT_TRUE(at::equal(concatenated.of(both), at::cat({p.decay[0], p.decay[1]}).detach()))
        << "step " << step;
    EXPECT_TRUE(at::equal(bf16.of(one, at::kBFloat16), p.decay[0].detach().to(at::kBFloat16)))
        << "step " << step;
  }
  EXPECT_EQ(p.decay[2]._version(), untouched);
}

}  // namespace
