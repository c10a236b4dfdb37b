// The model built from layout stages: deterministic initialisation, stages that chain into the
// whole model, the split backward (I then W) that gives exactly what the full backward (B) gives,
// multi-token prediction against an independent formulation of its definition, tied embeddings.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <deque>
#include <map>

#include "compiler/layout.h"
#include "runtime/data/token_source.h"
#include "runtime/model/stage.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/builtin.h"
#include "runtime/models/llama/moe.h"
#include "test_model.h"

namespace {

using pprt::ModelConfig;
using pprt::Stage;
using pprt::WeightWork;

using rttest::small_config;  // vocab 256, the default

// One rank's worth of the built-in model (builtin.h): every stage of `layout` over one parameter
// store.
struct Model {
  pprt::Model model;
  ppc::Layout layout;
  pprt::ModelSetup setup;
  std::unique_ptr<pprt::RankModel> rank;
  std::deque<pprt::NamedParam>& params() { return rank->store.params(); }
  Stage& operator[](size_t i) { return *rank->stages[i]; }
  Stage& front() { return *rank->stages.front(); }
  Stage& back() { return *rank->stages.back(); }
  // The tensors crossing boundary i for microbatches of `rows` sequences: names and shapes.
  std::vector<std::pair<std::string, std::vector<int64_t>>> boundary(size_t i, int64_t rows) const {
    std::vector<std::pair<std::string, std::vector<int64_t>>> out;
    const auto bounds = pprt::declared_boundaries(model, setup, layout, rows).value();
    for (const pprt::TensorSpec& t : bounds.at(i).tensors) out.emplace_back(t.name, t.shape);
    return out;
  }
};

Model build(const std::string& layout, const ModelConfig& c, uint64_t seed = 7,
            double mtp_weight = 0.1, pprt::Kernels kernels = pprt::Kernels::Auto,
            at::ScalarType dtype = at::kFloat) {
  Model m{pprt::builtin_model(c, kernels), ppc::parse_layout(layout), {c.vocab, c.seq_len}, {}};
  pprt::ModelContext ctx{&m.model, m.setup, mtp_weight, seed, at::Device(at::kCPU)};
  ctx.dtype = dtype;
  m.rank = std::make_unique<pprt::RankModel>(ctx);
  for (int s = 0; s < m.layout.num_stages(); ++s) m.rank->add(m.layout, s);
  return m;
}

std::map<std::string, at::Tensor> by_name(Model& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& p : m.params()) out[p.name] = p.tensor;
  return out;
}

void zero(Model& m) {
  for (auto& p : m.params()) p.tensor.mutable_grad() = at::Tensor();
}

// Runs the stages one after the other on one microbatch, their weight gradients through autograd
// (no WeightWork) unless `works` gives each stage one; returns the loss.
at::Tensor chain(Model& m, const at::Tensor& rows, pprt::LossReport* losses = nullptr,
                 std::vector<WeightWork>* works = nullptr) {
  pprt::Tensors x;
  const pprt::MicrobatchShape shape = m.model.shape_of(rows);
  for (size_t s = 0; s < m.rank->stages.size(); ++s)
    x = m.rank->stages[s]->forward(x, rows, shape, 0, works ? &(*works)[s] : nullptr, losses);
  return x.front().tensor;
}

// The streams of the built-in model's boundary (the main hidden state, then "mtp.1", ...) from
// and to one tensor stacking them (a test's way of writing them down).
pprt::Tensors streams(const at::Tensor& stacked) {
  pprt::Tensors out;
  for (int64_t k = 0; k < stacked.size(0); ++k)
    out.push_back(pprt::NamedTensor{k == 0 ? "" : "mtp." + std::to_string(k), stacked[k]});
  return out;
}

at::Tensor tokens(const ModelConfig& c, int rows, int64_t step = 0) {
  std::vector<int64_t> v;
  pprt::TokenSource::synthetic(c.vocab, 1).batch(step, rows, c.seq_len + 1, v);
  return at::from_blob(v.data(), {rows, c.seq_len + 1}, at::kLong).clone();
}

TEST(Model, NumbersDecoderLayersAndMtpDepthsGloballyInModelOrder) {
  const auto specs = pprt::number_layers(ppc::parse_layout("Et|tt|tm|mL"));
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0][1].index, 0);
  EXPECT_EQ(specs[1][0].index, 1);
  EXPECT_EQ(specs[1][1].index, 2);
  EXPECT_EQ(specs[2][0].index, 3);
  EXPECT_EQ(specs[2][1].kind, ppc::LayerKind::Mtp);
  EXPECT_EQ(specs[2][1].index, 0);
  EXPECT_EQ(specs[3][0].index, 1);
  EXPECT_EQ(specs[3][1].kind, ppc::LayerKind::Loss);
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
  const at::Tensor x = chain(split, tk);
  const at::Tensor ref = chain(whole, tk);
  EXPECT_TRUE(at::allclose(x, ref, 1e-6, 1e-6)) << x.item<double>() << " vs " << ref.item<double>();
  // An untrained model predicts about uniformly: the loss starts near ln(vocab).
  EXPECT_NEAR(ref.item<double>(), std::log(256.0), 0.1);
  EXPECT_FALSE(split.front().has_loss());
  EXPECT_TRUE(split.back().has_loss());
  // The hidden state crosses a boundary as one stream [1, b, seq, hidden].
  EXPECT_EQ(split[0].forward(at::Tensor(), tk, 0, nullptr, nullptr).sizes().vec(),
            (std::vector<int64_t>{2, c.seq_len, c.hidden}));
}

// Backward of one stage for one microbatch, as B (weights at once) or as I then W.
struct Grads {
  std::map<std::string, at::Tensor> params;
  at::Tensor input;
};

// `input` and `grad_out` stack the streams crossing the stage's boundaries (streams()).
Grads backward(Model& m, Stage& stage, const at::Tensor& input, const at::Tensor& rows,
               const at::Tensor& grad_out, bool split) {
  zero(m);
  at::Tensor in = input.defined() ? input.detach().clone().requires_grad_(true) : input;
  WeightWork work;
  const pprt::Tensors out = stage.forward(in.defined() ? streams(in) : pprt::Tensors{}, rows,
                                          m.model.shape_of(rows), 0, &work, nullptr);
  work.set_deferring(split);
  if (grad_out.defined())
    torch::autograd::backward(pprt::tensors_of(out), grad_out.unbind(0));
  else
    torch::autograd::backward({out.front().tensor});
  Grads g;
  if (split) {
    for (auto& p : m.params())
      EXPECT_FALSE(p.tensor.grad().defined()) << p.name << " got its gradient in I";
    EXPECT_FALSE(work.empty());
    work.run();
    EXPECT_TRUE(work.empty());
  }
  for (auto& p : m.params())
    if (p.tensor.grad().defined()) g.params[p.name] = p.tensor.grad().clone();
  if (in.defined()) g.input = in.grad().clone();
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
  auto m = build("Et|tt|tL", c);
  const at::Tensor tk = tokens(c, 2);
  const at::Tensor hidden = at::randn({1, 2, c.seq_len, c.hidden}) * 0.5;
  const at::Tensor grad = at::randn({1, 2, c.seq_len, c.hidden}) * 1e-3;
  // First stage (token ids in, no input gradient), middle stage, loss stage.
  expect_same(backward(m, m[0], at::Tensor(), tk, grad, false),
              backward(m, m[0], at::Tensor(), tk, grad, true));
  expect_same(backward(m, m[1], hidden, tk, grad, false),
              backward(m, m[1], hidden, tk, grad, true));
  expect_same(backward(m, m[2], hidden, tk, at::Tensor(), false),
              backward(m, m[2], hidden, tk, at::Tensor(), true));
}

TEST(Model, InputThenWeightBackwardEqualsFullBackwardWithMtpAndTiedEmbeddings) {
  ModelConfig c = small_config();
  c.tie_embeddings = true;
  auto m = build("Et|tm|mL", c);
  const at::Tensor tk = tokens(c, 2);
  const at::Tensor two = at::randn({2, 2, c.seq_len, c.hidden}) * 0.5;
  const at::Tensor grad = at::randn({2, 2, c.seq_len, c.hidden}) * 1e-3;
  expect_same(backward(m, m[1], two.narrow(0, 0, 1), tk, grad, false),
              backward(m, m[1], two.narrow(0, 0, 1), tk, grad, true));
  expect_same(backward(m, m[2], two, tk, at::Tensor(), false),
              backward(m, m[2], two, tk, at::Tensor(), true));
}

TEST(Model, StagesAccumulateGradientsOverMicrobatches) {
  const ModelConfig c = small_config();
  auto m = build("EtL", c);
  Stage& s = m[0];
  const at::Tensor tk = tokens(c, 4);
  // Three microbatches: split backward for the `split`th (I, then W with grad mode on) and full
  // for the others (B, inside autograd's backward), against one batch. The first weight gradient
  // of a step makes the .grads (those of a fused product as blocks of one matrix), in B or in W,
  // and the later ones add to them in the other.
  for (int split = 0; split < 3; ++split) {
    zero(m);
    for (int mb = 0; mb < 3; ++mb) {
      const at::Tensor rows = tk.narrow(0, mb, 1);
      WeightWork work;
      at::Tensor loss = s.forward(at::Tensor(), rows, mb, &work, nullptr);
      work.set_deferring(mb == split);
      torch::autograd::backward({loss / 3.0});
      work.run();
    }
    std::map<std::string, at::Tensor> acc;
    for (auto& p : m.params()) acc[p.name] = p.tensor.grad().clone();
    zero(m);
    WeightWork work;
    at::Tensor loss = s.forward(at::Tensor(), tk.narrow(0, 0, 3), 0, &work, nullptr);
    torch::autograd::backward({loss});
    for (auto& p : m.params())
      EXPECT_TRUE(at::allclose(acc[p.name], p.tensor.grad(), 1e-5, 1e-7))
          << p.name << " (split microbatch " << split << ")";
  }
}

// An independent formulation of the model's definition (runtime/model/stage.h), with plain ATen ops
// on the parameters by name: the decoder layer (with a sliding window W, position t attends to
// positions t - W + 1 .. t only: Mistral's and Qwen2's, ModelConfig::window_of), then
// multi-token prediction as DeepSeek-V3 defines it (depth k embeds token i+k, concatenates
// [RMSNorm(emb) ; RMSNorm(h^{k-1})], projects 2H -> H, runs a decoder layer and a final norm) and
// the loss CE_main + lambda/D sum_k CE_k, where depth k predicts token i+1+k and positions past the
// sequence are masked out of the mean.
struct Reference {
  std::map<std::string, at::Tensor> p;
  ModelConfig c;

  at::Tensor rms(const at::Tensor& x, const std::string& name) {
    return x * at::rsqrt(x.pow(2).mean({-1}, true) + c.norm_eps) * p.at(name);
  }
  at::Tensor lin(const at::Tensor& x, const std::string& name) { return x.matmul(p.at(name).t()); }
  // A q/k/v projection: with ModelConfig::qkv_bias, plus its bias.
  at::Tensor proj(const at::Tensor& x, const std::string& pre) {
    at::Tensor y = lin(x, pre + ".weight");
    return c.qkv_bias ? y + p.at(pre + ".bias") : y;
  }
  at::Tensor rope(const at::Tensor& x) {
    const int64_t T = c.seq_len, hd = c.head_dim();
    at::Tensor inv = at::pow(c.rope_theta, -at::arange(0, hd, 2, at::kDouble) / double(hd));
    at::Tensor ang = at::outer(at::arange(T, at::kDouble), inv);
    ang = at::cat({ang, ang}, -1);
    const int64_t h = hd / 2;
    at::Tensor rot = at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
    return x * ang.cos().to(at::kFloat) + rot * ang.sin().to(at::kFloat);
  }
  at::Tensor decoder(const at::Tensor& x, const std::string& pre, int window = 0) {
    const int64_t b = x.size(0), T = x.size(1), hd = c.head_dim(), rep = c.heads / c.kv_heads;
    at::Tensor h = rms(x, pre + "attn_norm.weight");
    at::Tensor q = rope(proj(h, pre + "attn.wq").view({b, T, c.heads, hd}).transpose(1, 2));
    at::Tensor k = rope(proj(h, pre + "attn.wk").view({b, T, c.kv_heads, hd}).transpose(1, 2));
    at::Tensor v = proj(h, pre + "attn.wv").view({b, T, c.kv_heads, hd}).transpose(1, 2);
    k = k.repeat_interleave(rep, 1);
    v = v.repeat_interleave(rep, 1);
    at::Tensor causal = at::ones({T, T}, at::kBool).tril();
    if (window > 0) {  // key j is seen from query i when i - j < window
      const at::Tensor i = at::arange(T).unsqueeze(1), j = at::arange(T).unsqueeze(0);
      causal = causal.logical_and(i - j < window);
    }
    at::Tensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(double(hd));
    scores = scores.masked_fill(causal.logical_not(), -INFINITY);
    at::Tensor o = at::softmax(scores, -1).matmul(v).transpose(1, 2).reshape({b, T, c.hidden});
    at::Tensor x1 = x + lin(o, pre + "attn.wo.weight");
    at::Tensor h2 = rms(x1, pre + "mlp_norm.weight");
    return x1 + lin(at::silu(lin(h2, pre + "mlp.w1.weight")) * lin(h2, pre + "mlp.w3.weight"),
                    pre + "mlp.w2.weight");
  }
  // Mean cross-entropy of `logits` [b, T, V] against token i+1+k at position i, over the
  // positions whose target exists.
  at::Tensor masked_ce(const at::Tensor& logits, const at::Tensor& rows, int64_t k) {
    const int64_t T = c.seq_len;
    at::Tensor pos = at::arange(T, at::kLong);
    at::Tensor valid = (pos + 1 + k) <= T;
    at::Tensor idx = (pos + 1 + k).clamp_max(T);
    at::Tensor targets = rows.index_select(1, idx);
    at::Tensor nll = -at::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
    return (nll * valid.to(at::kFloat)).sum() / (valid.sum() * rows.size(0)).to(at::kFloat);
  }
  at::Tensor loss(const at::Tensor& rows, int layers, int depths, double lambda,
                  std::vector<double>* mtp) {
    const int64_t T = c.seq_len;
    const std::string head = c.tie_embeddings ? "embed.weight" : "head.out.weight";
    at::Tensor h = p.at("embed.weight").index_select(0, rows.narrow(1, 0, T).reshape({-1}));
    h = h.view({rows.size(0), T, c.hidden});
    for (int l = 0; l < layers; ++l)
      h = decoder(h, "layers." + std::to_string(l) + ".", c.window_of(l));
    at::Tensor total = masked_ce(lin(rms(h, "head.norm.weight"), head), rows, 0);
    at::Tensor prev = h;
    for (int k = 1; k <= depths; ++k) {
      const std::string pre = "mtp." + std::to_string(k - 1) + ".";
      at::Tensor ids = at::zeros({rows.size(0), T}, at::kLong);  // token i+k, 0 past the end
      ids.narrow(1, 0, T + 1 - k).copy_(rows.narrow(1, k, T + 1 - k));
      at::Tensor e = p.at("embed.weight").index_select(0, ids.reshape({-1}));
      e = e.view({rows.size(0), T, c.hidden});
      at::Tensor x =
          lin(at::cat({rms(e, pre + "enorm.weight"), rms(prev, pre + "hnorm.weight")}, -1),
              pre + "eh_proj.weight");
      prev = rms(decoder(x, pre + "layer.", c.window_of(-1)), pre + "final_norm.weight");
      at::Tensor ce = masked_ce(lin(prev, head), rows, k);
      mtp->push_back(ce.item<double>());
      total = total + ce * (lambda / depths);
    }
    return total;
  }
};

TEST(Model, MultiTokenPredictionFollowsItsDefinition) {
  ModelConfig c = small_config();
  for (bool tie : {false, true}) {
    c.tie_embeddings = tie;
    auto m = build("Et|tm|m|L", c, 7, 0.3);  // two decoder layers, two MTP depths
    const at::Tensor tk = tokens(c, 3);
    pprt::LossReport parts;
    const at::Tensor got = chain(m, tk, &parts);
    Reference ref{by_name(m), c};
    std::vector<double> mtp;
    const at::Tensor want = ref.loss(tk, 2, 2, 0.3, &mtp);
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << "tied " << tie;
    // The depths' losses, reported as the auxiliary loss "mtp" (Microbatch::add_loss).
    ASSERT_EQ(parts.values.size(), 1u);
    EXPECT_EQ(parts.values[0].name, "mtp");
    EXPECT_TRUE(parts.values[0].loss);
    const at::Tensor& depth_losses = parts.values[0].value;
    ASSERT_EQ(depth_losses.numel(), 2);
    for (int k = 0; k < 2; ++k) EXPECT_NEAR(depth_losses[k].item<double>(), mtp[size_t(k)], 1e-5);
    EXPECT_NEAR(parts.main.item<double>(), std::log(256.0), 0.1);
    // The state after the first m holds two streams, after the second three, each by name.
    const std::vector<int64_t> h{3, c.seq_len, c.hidden};
    using Named = std::vector<std::pair<std::string, std::vector<int64_t>>>;
    EXPECT_EQ(m.boundary(1, 3), (Named{{"", h}}));
    EXPECT_EQ(m.boundary(2, 3), (Named{{"", h}, {"mtp.1", h}}));
    EXPECT_EQ(m.boundary(3, 3), (Named{{"", h}, {"mtp.1", h}, {"mtp.2", h}}));
    EXPECT_EQ(by_name(m).count("head.out.weight"), tie ? 0u : 1u);
  }
}

// Attention runs in blocks of query positions that skip the keys past the block (64 positions
// and more per block): at 200 positions, three blocks of 66, 67 and 67. Loss and every gradient
// must equal the plain definition's (scores over all keys, masked), through autograd.
TEST(Model, AttentionInCausalBlocksFollowsItsDefinition) {
  ModelConfig c = small_config();
  c.seq_len = 200;
  for (const auto& [heads, kv] : {std::pair{4, 2}, std::pair{4, 4}}) {
    c.heads = heads;
    c.kv_heads = kv;
    auto m = build("EttL", c);
    const at::Tensor tk = tokens(c, 2);
    const at::Tensor got = chain(m, tk);
    got.backward();
    std::map<std::string, at::Tensor> got_grads;
    for (auto& p : m.params()) got_grads[p.name] = p.tensor.grad().clone();
    zero(m);
    Reference ref{by_name(m), c};
    const at::Tensor want = ref.loss(tk, 2, 0, 0.0, nullptr);
    want.backward();
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << heads << "/" << kv;
    for (auto& p : m.params()) {
      const at::Tensor& w = p.tensor.grad();
      ASSERT_TRUE(w.defined()) << p.name;
      EXPECT_TRUE(at::allclose(got_grads[p.name], w, 1e-4, 1e-6))
          << p.name << " differs by " << (got_grads[p.name] - w).abs().max().item<double>();
    }
  }
}

// A sliding window (Mistral's, and Qwen2's on some layers: ModelConfig::sliding_window,
// layer_types) shorter than the sequence, in causal blocks (200 positions: three blocks), through
// scaled_dot_product_attention (Kernels::Generic, given the window's mask) and with Kernels::Fused
// and FusedCudnn (what GPUs run: the fused kernels take no mask, so a windowed layer takes SDPA
// with the window's mask, a full one the flash kernel, LibTorch's CPU one here): the loss and
// every gradient equal the Reference's, which masks the keys W or more positions back; the window
// on some layers only, and on every layer with MTP depths too. Without the window the loss
// differs (the window masks something).
TEST(Model, SlidingWindowFollowsItsDefinition) {
  ModelConfig c = small_config();
  c.seq_len = 200;
  c.sliding_window = 37;
  const at::Tensor tk = tokens(c, 2);
  for (const bool some : {true, false})
    for (const auto kernels : {pprt::Kernels::Auto, pprt::Kernels::Generic, pprt::Kernels::Fused,
                               pprt::Kernels::FusedCudnn}) {
      c.layer_types = some ? std::vector<std::string>{"sliding_attention", "full_attention",
                                                      "sliding_attention"}
                           : std::vector<std::string>{};
      const std::string layout = some ? "EtttL" : "EtttmL";
      const int depths = some ? 0 : 1;
      const std::string what = std::string(some ? "some layers" : "every layer") +
                               (kernels == pprt::Kernels::Auto      ? ", blocks"
                                : kernels == pprt::Kernels::Generic ? ", sdpa"
                                : kernels == pprt::Kernels::Fused   ? ", fused"
                                                                    : ", fused-cudnn");
      auto m = build(layout, c, 7, 0.3, kernels);
      const at::Tensor got = chain(m, tk);
      got.backward();
      std::map<std::string, at::Tensor> got_grads;
      for (auto& p : m.params()) got_grads[p.name] = p.tensor.grad().clone();
      zero(m);
      Reference ref{by_name(m), c};
      std::vector<double> mtp;
      const at::Tensor want = ref.loss(tk, 3, depths, 0.3, &mtp);
      want.backward();
      EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << what;
      for (auto& p : m.params())
        EXPECT_TRUE(at::allclose(got_grads[p.name], p.tensor.grad(), 1e-4, 1e-6))
            << what << ": " << p.name << " differs by "
            << (got_grads[p.name] - p.tensor.grad()).abs().max().item<double>();
      ModelConfig full = c;
      full.sliding_window = 0;
      full.layer_types.clear();
      auto f = build(layout, full, 7, 0.3, kernels);
      EXPECT_GT(std::fabs(chain(f, tk).item<double>() - got.item<double>()), 1e-4) << what;
    }
}

// The fused CPU loops (Kernels::Auto: RMSNorm, SwiGLU, the rotary embedding) against ATen's
// operations (Kernels::Generic, what other devices run), on a whole model with MTP: the same loss
// and gradients, with the full backward (B) and with I then W. Each is also checked against the
// independent Reference above by the tests that use it (Auto) and here (Generic, B).
TEST(Model, FusedCpuLoopsGiveWhatAtenOperationsGive) {
  const ModelConfig c = small_config();
  const at::Tensor tk = tokens(c, 3);
  for (bool split : {false, true}) {
    std::map<std::string, at::Tensor> grads[2];
    double loss[2];
    for (int i = 0; i < 2; ++i) {
      const auto kernels = i == 0 ? pprt::Kernels::Auto : pprt::Kernels::Generic;
      auto m = build("EttmL", c, 7, 0.3, kernels);
      WeightWork work;
      const at::Tensor l = m[0].forward(at::Tensor(), tk, 0, &work, nullptr);
      work.set_deferring(split);
      l.backward();
      work.run();
      loss[i] = l.item<double>();
      for (auto& p : m.params()) grads[i][p.name] = p.tensor.grad().clone();
      if (i == 1 && !split) {  // Generic against the Reference
        zero(m);
        Reference ref{by_name(m), c};
        std::vector<double> mtp;
        EXPECT_NEAR(loss[1], ref.loss(tk, 2, 1, 0.3, &mtp).item<double>(), 1e-5);
      }
    }
    EXPECT_NEAR(loss[0], loss[1], 1e-5) << "split " << split;
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (const auto& [name, g] : grads[0]) {
      const at::Tensor& w = grads[1].at(name);
      EXPECT_TRUE(at::allclose(g, w, 1e-4, 1e-6))
          << name << " (split " << split << ") differs by " << (g - w).abs().max().item<double>();
    }
  }
}

// LibTorch's fused entry points (Kernels::Fused: RMSNorm by at::_fused_rms_norm, attention by
// the CPU flash kernel with its backward; what GPUs run by default) against the CPU's own paths
// (Auto), on a whole model with MTP, in fp32 and bf16: the same loss and gradients (fp32 to
// rounding; bf16 within the tolerances of Bf16FollowsFp32AndEveryPathAgrees below), with the full
// backward (B) and with I then W, whose gradients are B's bit for bit.
TEST(Model, FusedEntryPointsGiveWhatTheCpuPathsGive) {
  const ModelConfig c = small_config();
  const at::Tensor tk = tokens(c, 3);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const bool bf16 = dtype == at::kBFloat16;
    std::map<std::string, at::Tensor> grads[2][2];  // [split][auto, fused]
    double loss[2][2];
    for (const bool split : {false, true}) {
      for (int i = 0; i < 2; ++i) {
        auto m =
            build("EttmL", c, 7, 0.3, i == 0 ? pprt::Kernels::Auto : pprt::Kernels::Fused, dtype);
        WeightWork work;
        const at::Tensor l = m[0].forward(at::Tensor(), tk, 0, &work, nullptr);
        work.set_deferring(split);
        l.backward();
        work.run();
        loss[split][i] = l.item<double>();
        for (auto& p : m.params()) grads[split][i][p.name] = p.tensor.grad().clone();
      }
      EXPECT_NEAR(loss[split][1], loss[split][0], (bf16 ? 1e-2 : 1e-5) * loss[split][0]);
      for (const auto& [name, g] : grads[split][0]) {
        const at::Tensor& f = grads[split][1].at(name);
        EXPECT_EQ(f.scalar_type(), at::kFloat) << name;
        const double scale = g.abs().max().item<double>() + 1e-6;
        EXPECT_LE((f - g).abs().max().item<double>(), (bf16 ? 0.1 : 1e-4) * scale)
            << name << " (" << dtype << ", split " << split << ")";
      }
    }
    EXPECT_EQ(loss[1][1], loss[0][1]);  // the same forward
    for (const auto& [name, g] : grads[0][1])
      EXPECT_TRUE(at::equal(g, grads[1][1].at(name))) << name << ": I then W is not B";
  }
}

// Qwen2's q/k/v biases (ModelConfig::qkv_bias): zeros at the start, and, once set, the loss and
// every gradient (biases included) equal the Reference's through autograd, with the full backward
// (B), with I then W (the biases' gradients deferred into W), and with the gradients returned to
// autograd (no WeightWork), with MTP and pipelined stages.
TEST(Model, QkvBiasesFollowTheirDefinition) {
  ModelConfig c = small_config();
  c.qkv_bias = true;
  const at::Tensor tk = tokens(c, 3);
  for (int how = 0; how < 3; ++how) {  // B, I then W, autograd
    auto m = build("Et|tm|L", c, 7, 0.3);
    std::map<std::string, at::Tensor> params = by_name(m);
    ASSERT_EQ(params.count("layers.1.attn.wk.bias"), 1u);
    ASSERT_EQ(params.count("mtp.0.layer.attn.wv.bias"), 1u);
    EXPECT_EQ(params.at("layers.0.attn.wq.bias").sizes().vec(), (std::vector<int64_t>{c.hidden}));
    EXPECT_EQ(params.at("layers.0.attn.wk.bias").sizes().vec(),
              (std::vector<int64_t>{c.hidden / 2}));
    {
      at::NoGradGuard no_grad;
      for (auto& [name, t] : params)
        if (name.ends_with(".bias")) {
          EXPECT_TRUE(t.eq(0).all().item<bool>()) << name;
          t.normal_(0, 0.5);
        }
    }
    at::Tensor got;
    if (how == 2) {
      got = chain(m, tk);
      got.backward();
    } else {
      std::vector<WeightWork> works(3);
      got = chain(m, tk, nullptr, &works);
      for (WeightWork& w : works) w.set_deferring(how == 1);
      got.backward();
      for (WeightWork& w : works) {
        EXPECT_EQ(w.empty(), how == 0);
        w.run();
      }
    }
    std::map<std::string, at::Tensor> got_grads;
    for (auto& p : m.params()) got_grads[p.name] = p.tensor.grad().clone();
    zero(m);
    Reference ref{params, c};
    std::vector<double> mtp;
    const at::Tensor want = ref.loss(tk, 2, 1, 0.3, &mtp);
    want.backward();
    EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5) << "how " << how;
    for (auto& p : m.params()) {
      const at::Tensor& w = p.tensor.grad();
      ASSERT_TRUE(w.defined()) << p.name;
      EXPECT_TRUE(at::allclose(got_grads[p.name], w, 1e-4, 1e-6))
          << p.name << " (how " << how << ") differs by "
          << (got_grads[p.name] - w).abs().max().item<double>();
    }
  }
}

TEST(Model, EmptyStagesAtEitherEndPassTheStateOn) {
  const ModelConfig c = small_config();
  auto padded = build("|Et|tL|", c);
  auto plain = build("EttL", c);
  const at::Tensor tk = tokens(c, 2);
  EXPECT_TRUE(at::allclose(chain(padded, tk), chain(plain, tk), 1e-6, 1e-6));
  using Named = std::vector<std::pair<std::string, std::vector<int64_t>>>;
  EXPECT_EQ(padded.boundary(1, 2), (Named{{"", {1}}}));  // the placeholder
  EXPECT_EQ(padded.boundary(3, 2), (Named{{"", {}}}));   // the loss
}

// --- mixed precision (--dtype bf16: runtime/model/precision.h) ---------------------------------

// The bf16 model: fp32 parameters and gradients, bf16 activations crossing the boundaries (the
// placeholder and the loss fp32), and I then W giving B's gradients bit for bit, with MTP and tied
// embeddings (the embedding's gradient comes from E, m and L).
TEST(Model, Bf16KeepsFp32MastersAndSplitsItsBackwardExactly) {
  ModelConfig c = small_config();
  c.tie_embeddings = true;
  auto m = build("Et|tm|mL", c, 7, 0.1, pprt::Kernels::Auto, at::kBFloat16);
  const at::Tensor tk = tokens(c, 2);
  const auto bounds =
      pprt::declared_boundaries(m.model, m.setup, m.layout, 2, nullptr, at::kBFloat16).value();
  ASSERT_EQ(bounds.size(), 4u);
  EXPECT_EQ(bounds[0].tensors[0].dtype, at::kFloat);  // the placeholder
  EXPECT_EQ(bounds[1].tensors[0].dtype, at::kBFloat16);
  for (const pprt::TensorSpec& t : bounds[2].tensors) EXPECT_EQ(t.dtype, at::kBFloat16);
  EXPECT_EQ(bounds[3].tensors[0].dtype, at::kFloat);  // the loss
  const at::Tensor out = m[0].forward(at::Tensor(), tk, 0, nullptr, nullptr);
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  const at::Tensor two = (at::randn({2, 2, c.seq_len, c.hidden}) * 0.5).to(at::kBFloat16);
  const at::Tensor grad = (at::randn({2, 2, c.seq_len, c.hidden}) * 1e-3).to(at::kBFloat16);
  for (const bool split : {false, true}) {
    const Grads g = backward(m, m[1], two.narrow(0, 0, 1), tk, grad, split);
    EXPECT_EQ(g.input.scalar_type(), at::kBFloat16);
    for (const auto& [name, t] : g.params) EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
  }
  for (auto& p : m.params()) EXPECT_EQ(p.tensor.scalar_type(), at::kFloat) << p.name;
  expect_same(backward(m, m[0], at::Tensor(), tk, grad.narrow(0, 0, 1), false),
              backward(m, m[0], at::Tensor(), tk, grad.narrow(0, 0, 1), true));
  expect_same(backward(m, m[1], two.narrow(0, 0, 1), tk, grad, false),
              backward(m, m[1], two.narrow(0, 0, 1), tk, grad, true));
  expect_same(backward(m, m[2], two, tk, at::Tensor(), false),
              backward(m, m[2], two, tk, at::Tensor(), true));
}

// The bf16 model against the fp32 one and against itself: its loss is the fp32 model's within
// bf16's precision; the CPU's written-out attention and fused loops (Auto) against ATen's
// operations and SDPA (Generic: what a GPU runs, in bf16); the weight gradients of the hand-written
// split (a WeightWork) against those autograd accumulates without one (cast to the fp32 masters);
// after an optimizer-like update of the masters the working copies follow.
TEST(Model, Bf16FollowsFp32AndEveryPathAgrees) {
  const ModelConfig c = small_config();
  const at::Tensor tk = tokens(c, 3);
  auto f32 = build("EttmL", c, 7, 0.3);
  const double want = f32[0].forward(at::Tensor(), tk, 0, nullptr, nullptr).item<double>();
  std::map<std::string, at::Tensor> grads[3];
  double loss[3];
  for (int i = 0; i < 3; ++i) {
    const auto kernels = i == 1 ? pprt::Kernels::Generic : pprt::Kernels::Auto;
    auto m = build("EttmL", c, 7, 0.3, kernels, at::kBFloat16);
    WeightWork work;
    const at::Tensor l = m[0].forward(at::Tensor(), tk, 0, i == 2 ? nullptr : &work, nullptr);
    EXPECT_EQ(l.scalar_type(), at::kFloat);  // the loss
    l.backward();
    work.run();
    loss[i] = l.item<double>();
    for (auto& p : m.params()) {
      ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
      EXPECT_EQ(p.tensor.grad().scalar_type(), at::kFloat) << p.name;
      grads[i][p.name] = p.tensor.grad().clone();
    }
    if (i == 0) {  // the working copies are made again after the masters change
      at::NoGradGuard no_grad;
      for (auto& p : m.params()) p.tensor.mul_(0.5);
      const double halved = m[0].forward(at::Tensor(), tk, 0, &work, nullptr).item<double>();
      EXPECT_GT(std::fabs(halved - loss[0]), 1e-3);
    }
  }
  EXPECT_NEAR(loss[0], want, 2e-2 * want);
  EXPECT_NEAR(loss[1], loss[0], 1e-2 * want);
  EXPECT_EQ(loss[2], loss[0]);  // the same forward
  for (const auto& [name, g] : grads[0]) {
    const double scale = g.abs().max().item<double>() + 1e-6;
    EXPECT_LE((g - grads[1].at(name)).abs().max().item<double>(), 0.1 * scale) << name;
    EXPECT_LE((g - grads[2].at(name)).abs().max().item<double>(), 1e-3 * scale) << name;
  }
}

}  // namespace

// --- Mixtures of experts (runtime/models/llama/moe.h) -------------------------------------------

namespace {

ModelConfig moe_config() {
  ModelConfig c = small_config();
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 24;
  c.moe.shared_experts = 1;
  c.moe.first_dense = 1;
  c.moe.aux_loss_coef = 0.01;
  return c;
}

// A MoE layer's MLP written out token by token: the scores, the top k, the weights, each chosen
// expert's SwiGLU, the shared expert (under its gate).
at::Tensor moe_by_definition(const pprt::MoeConfig& c, const at::Tensor& x,
                             std::map<std::string, at::Tensor> p, const std::string& pre) {
  auto swiglu = [](const at::Tensor& v, const at::Tensor& w1, const at::Tensor& w3,
                   const at::Tensor& w2) {
    return at::matmul(at::silu(at::matmul(v, w1.t())) * at::matmul(v, w3.t()), w2.t());
  };
  at::Tensor out = at::zeros_like(x);
  for (int64_t n = 0; n < x.size(0); ++n) {
    const at::Tensor v = x[n];
    const at::Tensor logits = at::matmul(p[pre + "router.weight"], v);
    const at::Tensor s = c.score == "sigmoid" ? logits.sigmoid() : logits.softmax(0);
    at::Tensor by = s;
    if (p.count(pre + "router.bias")) by = s + p[pre + "router.bias"];
    const at::Tensor idx = std::get<1>(by.topk(c.top_k));
    at::Tensor w = s.index_select(0, idx);
    if (c.norm_topk) w = w / w.sum();
    w = w * c.routed_scale;
    for (int64_t j = 0; j < c.top_k; ++j) {
      const std::string e = pre + "experts." + std::to_string(idx[j].item<int64_t>()) + ".";
      out[n] += w[j] * swiglu(v, p[e + "w1.weight"], p[e + "w3.weight"], p[e + "w2.weight"]);
    }
    if (c.has_shared()) {
      at::Tensor sh = swiglu(v, p[pre + "shared.w1.weight"], p[pre + "shared.w3.weight"],
                             p[pre + "shared.w2.weight"]);
      if (c.shared_gate) sh = sh * at::matmul(p[pre + "shared_gate.weight"], v).sigmoid();
      out[n] += sh;
    }
  }
  return out;
}

}  // namespace

TEST(Model, MixtureOfExpertsFollowsItsDefinition) {
  for (const std::string score : {"softmax", "sigmoid"}) {
    ModelConfig c = moe_config();
    c.moe.score = score;
    c.moe.shared_gate = score == "softmax";  // Qwen2-MoE's gate; DeepSeek-V3's scale
    c.moe.routed_scale = score == "sigmoid" ? 2.5 : 1.0;
    c.moe.norm_topk = score == "sigmoid";
    auto m = build("EttL", c);
    auto p = by_name(m);
    const at::Tensor x = at::randn({2, c.seq_len, c.hidden});
    pprt::LossReport report;
    const pprt::Microbatch mb(tokens(c, 2), m.model.shape_of(tokens(c, 2)), 0, nullptr, &report);
    std::deque<at::Tensor> ps;
    for (const pprt::ParamSpec& s :
         pprt::params_of(c, {pprt::LayerSpec{ppc::LayerKind::Decoder, 1}}, 2))
      ps.push_back(p.at(s.name));
    size_t i = 6;  // after attn_norm, wq, wk, wv, wo and mlp_norm
    pprt::MoeLayer layer = pprt::moe_layer(ps, i, c.moe);
    EXPECT_EQ(i, ps.size());
    const at::Tensor got = pprt::moe_mlp(c.moe, x, layer, mb, pprt::Kernels::Generic);
    const at::Tensor want =
        moe_by_definition(c.moe, x.reshape({-1, c.hidden}), p, "layers.1.mlp.").reshape(x.sizes());
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-5) << score;
    ASSERT_EQ(report.values.size(), 1u);
    EXPECT_EQ(report.values[0].name, "load_balancing");
  }
}

// The router's weight gets gradients through the weights of the chosen experts and through the
// load-balancing loss (whose coefficient changes them), and changing it changes the loss; the
// I/W split of a MoE stage gives the full backward's gradients.
TEST(Model, RouterGradientsReachTheRouter) {
  auto loss_and_router_grad = [](double coef, double nudge) {
    ModelConfig c = moe_config();
    c.moe.aux_loss_coef = coef;
    auto m = build("EttL", c);
    at::Tensor router = by_name(m).at("layers.1.mlp.router.weight");
    {
      at::NoGradGuard no_grad;
      router[0].add_(nudge);  // expert 0's score only (softmax ignores a shift of all)
    }
    pprt::LossReport parts;
    at::Tensor loss = chain(m, tokens(c, 2), &parts);
    for (const at::Tensor& t : parts.terms) loss = loss + t;
    loss.backward();
    EXPECT_TRUE(router.grad().defined());
    return std::pair{loss.item<double>(), router.grad().clone()};
  };
  const auto [l0, g0] = loss_and_router_grad(0.01, 0);
  EXPECT_GT(g0.abs().max().item<double>(), 0);
  const auto [l1, g1] = loss_and_router_grad(1.0, 0);
  EXPECT_GT((g1 - g0).abs().max().item<double>(), 1e-6);
  const auto [l2, g2] = loss_and_router_grad(0.01, 0.05);
  EXPECT_NE(l0, l2);

  const ModelConfig c = moe_config();
  auto m = build("Et|tt|tL", c);
  const at::Tensor tk = tokens(c, 2);
  const at::Tensor hidden = at::randn({1, 2, c.seq_len, c.hidden}) * 0.5;
  const at::Tensor grad = at::randn({1, 2, c.seq_len, c.hidden}) * 1e-3;
  const Grads full = backward(m, m[1], hidden, tk, grad, false);
  expect_same(full, backward(m, m[1], hidden, tk, grad, true));
  EXPECT_TRUE(full.params.count("layers.1.mlp.router.weight"));
  EXPECT_TRUE(full.params.count("layers.2.mlp.experts.0.w1.weight"));
}
