// The input/weight split through the autograd graph (runtime/model/autograd_split.h), for modules
// whose backward the runtime knows nothing about:
//  - on one stage, I + W give the gradients of a full backward B, I accumulates nothing into the
//    parameters and W nothing into the input, for a tied weight used twice in a row, a parameter
//    on no path from the output, a parameter used on two branches, a stage without an input
//    gradient (the model's first) and the loss stage;
//  - a user model of ordinary torch::nn modules trains under ZB-H1, ZB-H2, ZBV, DualPipeV and
//    DualPipe (real ranks: one thread each, real Gloo) as its unpipelined reference does, and so
//    does a model with a branch and a submodule shared by two layers of a stage under ZB-H1 and
//    ZBV;
//  - the built-in model trains the same under the generic split as under its hand-written one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/torch.h>

#include <barrier>
#include <cstdlib>
#include <map>
#include <mutex>

#include "compiler/compile.h"
#include "rank_threads.h"
#include "runtime/data/token_source.h"
#include "runtime/model/autograd_split.h"
#include "runtime/model/stage.h"
#include "runtime/models/llama/builtin.h"
#include "runtime/train/executor.h"
#include "test_model.h"
#include "test_plans.h"

namespace {

constexpr int64_t kHidden = 16, kVocab = 32, kSeq = 8;
constexpr int kRows = 8;

// --- One stage ----------------------------------------------------------------------------------

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// A stage function of `x` over `params`, run once with a full backward (B) and once split (I, W)
// from the same parameter values; every gradient must agree.
void expect_split_equals_full(const std::vector<at::Tensor>& params,
                              const std::function<at::Tensor(const at::Tensor&)>& f,
                              const at::Tensor& x0, bool loss) {
  auto input = [&] { return x0.defined() ? x0.detach().clone().requires_grad_(true) : x0; };
  auto grad_out = [&](const at::Tensor& y) {
    return loss ? at::Tensor() : at::sin(at::arange(y.numel(), at::kFloat).view(y.sizes()) + 1);
  };
  for (const at::Tensor& p : params) p.mutable_grad() = at::Tensor();

  // B.
  at::Tensor xb = input();
  at::Tensor yb = f(xb);
  if (loss)
    torch::autograd::backward({yb});
  else
    torch::autograd::backward({yb}, {grad_out(yb)});
  std::vector<at::Tensor> gb;
  for (const at::Tensor& p : params) {
    gb.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    p.mutable_grad() = at::Tensor();
  }

  // I, then W.
  at::Tensor xs = input();
  at::Tensor ys = f(xs);
  pprt::AutogradSplit split;
  const at::Tensor gx = split.backward_input(ys, grad_out(ys), xs);
  EXPECT_TRUE(split.pending());
  for (const at::Tensor& p : params) EXPECT_FALSE(p.grad().defined()) << "I accumulated a weight";
  if (xs.defined()) {
    ASSERT_TRUE(gx.defined());
    EXPECT_LE(max_diff(gx, xb.grad()), 1e-6);
    EXPECT_FALSE(xs.grad().defined()) << "I accumulated into the input";
  } else {
    EXPECT_FALSE(gx.defined());
  }
  EXPECT_GT(split.held().gradient_bytes, 0);
  ys = at::Tensor();  // what the executor does after an I: W needs neither
  xs = at::Tensor();
  split.backward_weight();
  EXPECT_FALSE(split.pending());
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& g = params[i].grad();
    ASSERT_EQ(g.defined(), gb[i].defined()) << "parameter " << i;
    if (g.defined()) {
      EXPECT_LE(max_diff(g, gb[i]), 1e-6) << "parameter " << i;
    }
  }
}

TEST(AutogradSplit, TiedWeightUsedTwiceInARow) {
  torch::manual_seed(1);
  torch::nn::Linear lin(kHidden, kHidden);
  torch::nn::Linear unused(kHidden, kHidden);  // no path from the output: no gradient
  std::vector<at::Tensor> ps = lin->parameters();
  for (const auto& p : unused->parameters()) ps.push_back(p);
  expect_split_equals_full(
      ps, [&](const at::Tensor& x) { return lin(torch::gelu(lin(x))); }, at::randn({2, 3, kHidden}),
      false);
}

TEST(AutogradSplit, ParameterOnTwoBranchesAndAnElementwiseWeight) {
  torch::manual_seed(2);
  torch::nn::Linear a(kHidden, kHidden), b(kHidden, kHidden);
  const at::Tensor scale = at::randn({kHidden}).requires_grad_(true);
  std::vector<at::Tensor> ps = a->parameters();
  for (const auto& p : b->parameters()) ps.push_back(p);
  ps.push_back(scale);
  expect_split_equals_full(
      ps,
      [&](const at::Tensor& x) {
        const at::Tensor h = x * scale;  // the weight meets the input path in one node
        return h + torch::tanh(a(h)) * torch::sigmoid(b(x)) + scale;
      },
      at::randn({2, 3, kHidden}), false);
}

TEST(AutogradSplit, FirstStageWithoutAnInputGradient) {
  torch::manual_seed(3);
  torch::nn::Embedding emb(kVocab, kHidden);
  torch::nn::Linear lin(kHidden, kHidden);
  std::vector<at::Tensor> ps = emb->parameters();
  for (const auto& p : lin->parameters()) ps.push_back(p);
  const at::Tensor ids = at::arange(12, at::kLong).remainder(kVocab).view({2, 6});
  expect_split_equals_full(
      ps, [&](const at::Tensor&) { return lin(emb(ids)); }, at::Tensor(), false);
}

TEST(AutogradSplit, LossStageEndingInALinearMap) {
  torch::manual_seed(4);
  torch::nn::Linear lin(kHidden, kHidden), head(kHidden, kVocab);
  std::vector<at::Tensor> ps = lin->parameters();
  for (const auto& p : head->parameters()) ps.push_back(p);
  const at::Tensor targets = at::arange(6, at::kLong).remainder(kVocab);
  expect_split_equals_full(
      ps,
      [&](const at::Tensor& x) {
        return at::cross_entropy_loss(head(x + lin(x)).flatten(0, 1), targets) * 0.5;
      },
      at::randn({1, 6, kHidden}), true);
  // A stage whose last operation is a weight's own product (its node is where the split starts).
  expect_split_equals_full(
      ps, [&](const at::Tensor& x) { return head(torch::relu(lin(x))); },
      at::randn({1, 6, kHidden}), false);
}

// --- User models through the executor
// --------------------------------------------------------------

struct EmbedImpl : torch::nn::Module {
  torch::nn::Embedding wte{nullptr};
  EmbedImpl() { wte = register_module("wte", torch::nn::Embedding(kVocab, kHidden)); }
  at::Tensor forward(const at::Tensor& ids) { return wte(ids); }
};
TORCH_MODULE(Embed);

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
  BlockImpl() {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHidden})));
    up = register_module("up", torch::nn::Linear(kHidden, 2 * kHidden));
    down = register_module("down", torch::nn::Linear(2 * kHidden, kHidden));
  }
  at::Tensor forward(const at::Tensor& x) { return x + down(torch::gelu(up(norm(x)))); }
};
TORCH_MODULE(Block);

// Two paths joined, and a matrix shared by every such layer of the model (LayerInfo::shared):
// two layers of a stage use it, and ranks holding copies get their gradients summed.
struct BranchImpl : torch::nn::Module {
  at::Tensor mix;
  torch::nn::Linear a{nullptr}, b{nullptr};
  explicit BranchImpl(const pprt::LayerInfo& info) {
    mix = register_parameter("mix", info.shared("shared.mix", {kHidden, kHidden},
                                                [](at::Tensor& t) { t.normal_(0, 0.25); }));
    a = register_module("a", torch::nn::Linear(kHidden, kHidden));
    b = register_module("b", torch::nn::Linear(kHidden, kHidden));
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = at::linear(x, mix);
    return x + torch::tanh(a(h)) * torch::sigmoid(b(x));
  }
};
TORCH_MODULE(Branch);

struct HeadImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear out{nullptr};
  HeadImpl() {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHidden})));
    out = register_module("out", torch::nn::Linear(kHidden, kVocab));
  }
  at::Tensor forward(const at::Tensor& x) { return out(norm(x)); }
};
TORCH_MODULE(Head);

std::vector<int64_t> hidden_shape(const std::vector<int64_t>& in) {
  return {in[0], in[1], kHidden};
}

pprt::Model user_model(bool branch) {
  pprt::Model m(branch ? "branchy" : "plain");
  m.layer(
      'E', "embed", [](const pprt::LayerInfo&) { return pprt::make_layer(Embed()); }, hidden_shape);
  if (branch)
    m.layer(
        't', "h", [](const pprt::LayerInfo& l) { return pprt::make_layer(Branch(l)); },
        hidden_shape);
  else
    m.layer(
        't', "h", [](const pprt::LayerInfo&) { return pprt::make_layer(Block()); }, hidden_shape);
  m.layer(
       'L', "head", [](const pprt::LayerInfo&) { return pprt::make_layer(Head()); },
       [](const std::vector<int64_t>& in) {
         return std::vector<int64_t>{in[0], in[1], kVocab};
       })
      .loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
        return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
      });
  return m;
}

at::Tensor tokens(int vocab, int seq_len, int64_t step) {
  std::vector<int64_t> v;
  pprt::TokenSource::synthetic(vocab, 3).batch(step, kRows, seq_len + 1, v);
  return at::from_blob(v.data(), {kRows, seq_len + 1}, at::kLong).clone();
}

struct Trained {
  std::vector<double> losses;  // per step, the mean over microbatches
  std::map<std::string, at::Tensor> params;
};

constexpr double kLr = 0.05;

void sgd(pprt::ParamStore& store, const std::map<std::string, at::Tensor>* summed) {
  at::NoGradGuard no_grad;
  for (pprt::NamedParam& p : store.params()) {
    const at::Tensor g = summed ? summed->at(p.name) : p.tensor.grad();
    if (g.defined()) p.tensor.sub_(g * kLr);
    p.tensor.mutable_grad() = at::Tensor();
  }
}

struct RunSetup {
  const pprt::Model* model;
  pprt::ModelSetup setup;
  bool generic = false;
  pprt::ModelContext context() const {
    pprt::ModelContext c{model, setup, 0, 11, at::Device(at::kCPU)};
    c.generic_split = generic;
    return c;
  }
};

// `steps` steps of plain SGD on the plan's ranks; the gradients of a parameter held by several
// ranks (shared weights, DualPipe's two copies) summed over them, as pprun's reducer does.
Trained train_pipelined(const RunSetup& s, const ppc::Plan& plan, int steps) {
  Trained res;
  res.losses.assign(static_cast<size_t>(steps), 0.0);
  std::mutex m;
  std::vector<std::map<std::string, at::Tensor>> sums(static_cast<size_t>(steps));
  std::barrier sync(plan.pp());
  pprt_test::run_ranks(plan.pp(), [&](int rank, pprt::Transport& t, pprt::Store&) {
    // One intra-op thread per rank: ranks that are threads of one process would otherwise each
    // start OpenMP teams of every core and wait on each other's.
    at::set_num_threads(1);
    pprt::RankModel model(s.context());
    for (int st : plan.placement.rank_stages[static_cast<size_t>(rank)])
      model.add(plan.layout, plan.layout_stage(st));
    pprt::ExecutorOptions eo;
    eo.timeout = std::chrono::seconds(30);
    pprt::Executor exec(plan, rank, model.stages, model.ctx, &t, at::Device(at::kCPU), eo);
    // A rank that fails leaves the barrier, so that the others fail (their messages time out)
    // rather than wait for it.
    try {
      for (int step = 0; step < steps; ++step) {
        const pprt::StepReport rep =
            exec.run_step(tokens(s.setup.vocab, s.setup.seq_len, step), step);
        auto& sum = sums[static_cast<size_t>(step)];
        {
          std::lock_guard<std::mutex> lock(m);
          for (double l : rep.losses)
            res.losses[static_cast<size_t>(step)] += l / plan.microbatches;
          for (auto& p : model.store.params()) {
            const at::Tensor g =
                p.tensor.grad().defined() ? p.tensor.grad() : at::zeros_like(p.tensor);
            auto [it, fresh] = sum.emplace(p.name, g.clone());
            if (!fresh) it->second += g;
          }
        }
        sync.arrive_and_wait();
        sgd(model.store, &sum);
      }
    } catch (...) {
      sync.arrive_and_drop();
      throw;
    }
    std::lock_guard<std::mutex> lock(m);
    for (auto& p : model.store.params()) res.params.emplace(p.name, p.tensor.detach().clone());
  });
  return res;
}

// One intra-op thread on this thread while it lives (the ranks' threads run beside it).
struct OneThread {
  int before = at::get_num_threads();
  OneThread() { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(before); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;
};

Trained train_reference(const RunSetup& s, const ppc::Layout& layout, int mbs, int steps) {
  const OneThread one;
  pprt::RankModel model(s.context());
  pprt::Stage& whole = model.add(layout, -1);
  Trained res;
  const int b = kRows / mbs;
  for (int step = 0; step < steps; ++step) {
    const at::Tensor tk = tokens(s.setup.vocab, s.setup.seq_len, step);
    double sum = 0;
    for (int mb = 0; mb < mbs; ++mb) {
      pprt::LossReport parts;
      const at::Tensor loss =
          whole.forward(at::Tensor(), tk.narrow(0, mb * b, b), mb, nullptr, &parts);
      sum += parts.main.item<double>();
      torch::autograd::backward({loss * (1.0 / mbs)});
    }
    res.losses.push_back(sum / mbs);
    sgd(model.store, nullptr);
  }
  for (auto& p : model.store.params()) res.params.emplace(p.name, p.tensor.detach().clone());
  return res;
}

void expect_same_training(const Trained& got, const Trained& want, double tol) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], tol) << "step " << i;
  ASSERT_EQ(got.params.size(), want.params.size());
  for (const auto& [name, p] : want.params) {
    ASSERT_TRUE(got.params.count(name)) << name;
    EXPECT_LE(max_diff(got.params.at(name), p), tol) << name;
  }
}

constexpr int kSteps = 4;

void expect_user_model_trains(bool branch, const std::string& layout, int pp,
                              const std::string& schedule, int mbs) {
  const pprt::Model model = user_model(branch);
  const RunSetup s{&model, {kVocab, kSeq}};
  const ppc::Plan plan = rttest::compile(layout, pp, schedule, mbs);
  const Trained want = train_reference(s, plan.layout, mbs, kSteps);
  EXPECT_LT(want.losses.back(), want.losses.front()) << "the model should learn";
  expect_same_training(train_pipelined(s, plan, kSteps), want, 1e-5);
}

TEST(AutogradSplit, UserModelUnderZBH1) {
  expect_user_model_trains(false, "Ett|ttL", 2, "ZB-H1", 4);
}
TEST(AutogradSplit, UserModelUnderZBH2) {
  expect_user_model_trains(false, "Ett|ttL", 2, "ZB-H2", 4);
}
TEST(AutogradSplit, UserModelUnderZBV) {
  expect_user_model_trains(false, "Et|tt|tt|tL", 2, "ZBVZeroBubble", 4);
}
TEST(AutogradSplit, UserModelUnderDualPipeV) {
  expect_user_model_trains(false, "Et|tt|tt|tL", 2, "DualPipeV", 4);
}
TEST(AutogradSplit, UserModelUnderDualPipe) {
  expect_user_model_trains(false, "Et|tt|tt|tL", 4, "DualPipe", 8);
}
TEST(AutogradSplit, BranchAndSharedSubmoduleUnderZBH1) {
  expect_user_model_trains(true, "Ett|ttL", 2, "ZB-H1", 4);
}
TEST(AutogradSplit, BranchAndSharedSubmoduleUnderZBV) {
  expect_user_model_trains(true, "Et|tt|tt|tL", 2, "ZBVZeroBubble", 4);
}

// The built-in model: its hand-written split against the generic one forced on it.
void expect_builtin_generic_equals_hand_written(const std::string& layout, int pp,
                                                const std::string& schedule, int mbs) {
  const pprt::ModelConfig c = rttest::small_config();
  const pprt::Model model = pprt::builtin_model(c);
  const ppc::Plan plan = rttest::compile(layout, pp, schedule, mbs);
  RunSetup hand{&model, {c.vocab, c.seq_len}, false}, generic = hand;
  generic.generic = true;
  expect_same_training(train_pipelined(generic, plan, 3), train_pipelined(hand, plan, 3), 1e-6);
}

TEST(AutogradSplit, TheEnvironmentForcesItOnTheBuiltinModel) {
  pprt::ModelConfig c;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.ffn = 64;
  const pprt::Model model = pprt::builtin_model(c);
  const RunSetup s{&model, {c.vocab, c.seq_len}};
  const ppc::Layout layout = ppc::parse_layout("Et|tL");
  pprt::RankModel hand(s.context());
  EXPECT_TRUE(hand.add(layout, 0).splits_backward());
  ::setenv("PPRUN_GENERIC_SPLIT", "1", 1);
  pprt::RankModel generic(s.context());
  const bool split = generic.add(layout, 0).splits_backward();
  ::unsetenv("PPRUN_GENERIC_SPLIT");
  EXPECT_FALSE(split);
  // A user model's stage never splits its own backward.
  const pprt::Model user = user_model(false);
  pprt::RankModel u(RunSetup{&user, {kVocab, kSeq}}.context());
  EXPECT_FALSE(u.add(layout, 1).splits_backward());
}

TEST(AutogradSplit, BuiltinModelGenericEqualsHandWrittenUnderZBH1) {
  expect_builtin_generic_equals_hand_written("Ett|ttL", 2, "ZB-H1", 4);
}
TEST(AutogradSplit, BuiltinModelGenericEqualsHandWrittenUnderZBH2) {
  expect_builtin_generic_equals_hand_written("Ett|ttL", 2, "ZB-H2", 4);
}
TEST(AutogradSplit, BuiltinModelGenericEqualsHandWrittenUnderZBV) {
  expect_builtin_generic_equals_hand_written("Et|tt|tt|tL", 2, "ZBVZeroBubble", 4);
}

}  // namespace
