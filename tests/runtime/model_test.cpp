// The model built from layout stages: deterministic initialisation, stages that chain into the
// whole model, and the split backward (I then W) that gives exactly what the full backward (B)
// gives.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <map>

#include "compiler/layout.h"
#include "runtime/data.h"
#include "runtime/model.h"

namespace {

using pprt::GradStash;
using pprt::LayerSpec;
using pprt::ModelConfig;
using pprt::Stage;

ModelConfig small_config() {
  ModelConfig c;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 64;
  c.vocab = 256;
  c.seq_len = 16;
  return c;
}

std::vector<Stage> build(const std::string& layout, const ModelConfig& c, uint64_t seed = 7) {
  const ppc::Layout l = ppc::parse_layout(layout);
  std::vector<Stage> stages;
  for (const auto& specs : pprt::number_layers(l))
    stages.emplace_back(c, specs, seed, l.count(ppc::LayerKind::Decoder), at::Device(at::kCPU));
  return stages;
}

std::map<std::string, at::Tensor> by_name(std::vector<Stage>& stages) {
  std::map<std::string, at::Tensor> out;
  for (Stage& s : stages)
    for (auto& p : s.params()) out[p.name] = p.tensor;
  return out;
}

at::Tensor tokens(const ModelConfig& c, int rows, int64_t step = 0) {
  std::vector<int64_t> v;
  pprt::TokenSource::synthetic(c.vocab, 1).batch(step, rows, c.seq_len + 1, v);
  return at::from_blob(v.data(), {rows, c.seq_len + 1}, at::kLong).clone();
}

TEST(Model, NumbersDecoderLayersGloballyInModelOrder) {
  const auto specs = pprt::number_layers(ppc::parse_layout("Et|tt|tL"));
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0][1].index, 0);
  EXPECT_EQ(specs[1][0].index, 1);
  EXPECT_EQ(specs[1][1].index, 2);
  EXPECT_EQ(specs[2][0].index, 3);
  EXPECT_EQ(specs[2][1].kind, ppc::LayerKind::Loss);
}

TEST(Model, InitialWeightsDependOnlyOnNameAndSeed) {
  const ModelConfig c = small_config();
  auto split = build("Et|tt|tL", c);
  auto whole = build("EttttL", c);
  auto a = by_name(split), b = by_name(whole);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(at::equal(t, b[name])) << name;
  }
  EXPECT_TRUE(a.count("layers.3.mlp.w2.weight"));
  EXPECT_TRUE(at::equal(a["layers.0.attn_norm.weight"], at::ones({c.hidden})));
  auto other_seed = build("EttttL", c, 8);
  EXPECT_FALSE(at::equal(by_name(other_seed)["embed.weight"], b["embed.weight"]));
}

TEST(Model, StagesChainIntoTheWholeModel) {
  const ModelConfig c = small_config();
  auto split = build("Et|tt|tL", c);
  auto whole = build("EttttL", c);
  const at::Tensor tk = tokens(c, 2);
  const at::Tensor ids = tk.narrow(1, 0, c.seq_len).contiguous(),
                   tg = tk.narrow(1, 1, c.seq_len).contiguous();
  at::Tensor x = ids;
  for (Stage& s : split) x = s.forward(x, tg, nullptr);
  const at::Tensor ref = whole[0].forward(ids, tg, nullptr);
  EXPECT_TRUE(at::allclose(x, ref, 1e-6, 1e-6)) << x.item<double>() << " vs " << ref.item<double>();
  // An untrained model predicts about uniformly: the loss starts near ln(vocab).
  EXPECT_NEAR(ref.item<double>(), std::log(256.0), 0.1);
  EXPECT_TRUE(split.front().takes_tokens());
  EXPECT_FALSE(split.front().has_loss());
  EXPECT_TRUE(split.back().has_loss());
}

// Backward of one stage for one microbatch, as B (weights at once) or as I then W.
struct Grads {
  std::map<std::string, at::Tensor> params;
  at::Tensor input;
};

Grads backward(Stage& stage, const at::Tensor& input, const at::Tensor& targets,
               const at::Tensor& grad_out, bool split) {
  for (auto& p : stage.params()) p.tensor.mutable_grad() = at::Tensor();
  at::Tensor in = input.is_floating_point() ? input.detach().clone().requires_grad_(true) : input;
  GradStash stash;
  at::Tensor out = stage.forward(in, targets, &stash);
  stash.defer = split;
  if (grad_out.defined())
    torch::autograd::backward({out}, {grad_out});
  else
    torch::autograd::backward({out});
  Grads g;
  if (split) {
    for (auto& p : stage.params())
      EXPECT_FALSE(p.tensor.grad().defined()) << p.name << " got its gradient in I";
    EXPECT_FALSE(stash.empty());
    stash.run_weight_grads();
    EXPECT_TRUE(stash.empty());
  }
  for (auto& p : stage.params()) g.params[p.name] = p.tensor.grad().clone();
  if (in.requires_grad()) g.input = in.grad().clone();
  return g;
}

void expect_same(const Grads& a, const Grads& b) {
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, t] : a.params) {
    ASSERT_TRUE(t.defined()) << name;
    EXPECT_TRUE(at::equal(t, b.params.at(name)))
        << name << " differs by " << (t - b.params.at(name)).abs().max().item<double>();
  }
  ASSERT_EQ(a.input.defined(), b.input.defined());
  if (a.input.defined()) {
    EXPECT_TRUE(at::equal(a.input, b.input));
  }
}

TEST(Model, InputThenWeightBackwardEqualsFullBackward) {
  const ModelConfig c = small_config();
  auto stages = build("Et|tt|tL", c);
  const at::Tensor tk = tokens(c, 2);
  const at::Tensor ids = tk.narrow(1, 0, c.seq_len).contiguous(),
                   tg = tk.narrow(1, 1, c.seq_len).contiguous();
  const at::Tensor hidden = at::randn({2, c.seq_len, c.hidden}) * 0.5;
  const at::Tensor grad = at::randn({2, c.seq_len, c.hidden}) * 1e-3;
  // First stage (token ids in, no input gradient), middle stage, loss stage.
  expect_same(backward(stages[0], ids, at::Tensor(), grad, false),
              backward(stages[0], ids, at::Tensor(), grad, true));
  expect_same(backward(stages[1], hidden, at::Tensor(), grad, false),
              backward(stages[1], hidden, at::Tensor(), grad, true));
  expect_same(backward(stages[2], hidden, tg, at::Tensor(), false),
              backward(stages[2], hidden, tg, at::Tensor(), true));
}

TEST(Model, StagesAccumulateGradientsOverMicrobatches) {
  const ModelConfig c = small_config();
  auto stages = build("EtL", c);
  Stage& s = stages[0];
  const at::Tensor tk = tokens(c, 4);
  for (auto& p : s.params()) p.tensor.mutable_grad() = at::Tensor();
  // Two microbatches of 2, split backward for one and full for the other, against one batch of 4.
  for (int mb = 0; mb < 2; ++mb) {
    const at::Tensor rows = tk.narrow(0, mb * 2, 2);
    GradStash stash;
    at::Tensor loss = s.forward(rows.narrow(1, 0, c.seq_len).contiguous(),
                                rows.narrow(1, 1, c.seq_len).contiguous(), &stash);
    stash.defer = mb == 0;
    torch::autograd::backward({loss * 0.5});
    stash.run_weight_grads();
  }
  std::map<std::string, at::Tensor> acc;
  for (auto& p : s.params()) acc[p.name] = p.tensor.grad().clone();
  for (auto& p : s.params()) p.tensor.mutable_grad() = at::Tensor();
  at::Tensor loss = s.forward(tk.narrow(1, 0, c.seq_len).contiguous(),
                              tk.narrow(1, 1, c.seq_len).contiguous(), nullptr);
  torch::autograd::backward({loss});
  for (auto& p : s.params())
    EXPECT_TRUE(at::allclose(acc[p.name], p.tensor.grad(), 1e-5, 1e-7)) << p.name;
}

}  // namespace
