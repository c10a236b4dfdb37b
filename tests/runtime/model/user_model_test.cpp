// A user's own LibTorch modules through pprt::Model (pprt/pprt.h): the runtime builds a stage's
// layers with the model's factories, names their parameters, chains them into the whole model,
// checks outputs against declared shapes, and reports a missing symbol or a wrong shape as one
// line naming the stage and the layer.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "pprt/pprt.h"
#include "runtime/model/stage.h"
#include "tests/compiler/error_cases.h"

namespace {

using pptest::message_of;

constexpr int64_t kHidden = 8, kVocab = 32, kSeq = 6;

struct EmbedImpl : torch::nn::Module {
  torch::nn::Embedding wte{nullptr};
  EmbedImpl() { wte = register_module("wte", torch::nn::Embedding(kVocab, kHidden)); }
  at::Tensor forward(const at::Tensor& ids) { return wte(ids); }
};
TORCH_MODULE(Embed);

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  BlockImpl() { fc = register_module("fc", torch::nn::Linear(kHidden, kHidden)); }
  at::Tensor forward(const at::Tensor& x) { return x + torch::gelu(fc(x)); }
};
TORCH_MODULE(Block);

struct HeadImpl : torch::nn::Module {
  torch::nn::Linear out{nullptr};
  HeadImpl() { out = register_module("out", torch::nn::Linear(kHidden, kVocab)); }
  at::Tensor forward(const at::Tensor& x) { return out(x); }
};
TORCH_MODULE(Head);

pprt::Model user_model(int64_t block_out = kHidden) {
  pprt::Model m("tiny");
  m.layer(
       'E', "embed", [](const pprt::LayerInfo&) { return pprt::make_layer(Embed()); },
       [](const std::vector<int64_t>& in) {
         return std::vector<int64_t>{in[0], in[1], kHidden};
       })
      .layer(
          't', "h", [](const pprt::LayerInfo&) { return pprt::make_layer(Block()); },
          [block_out](const std::vector<int64_t>& in) {
            return std::vector<int64_t>{in[0], in[1], block_out};
          })
      .layer(
          'L', "head", [](const pprt::LayerInfo&) { return pprt::make_layer(Head()); },
          [](const std::vector<int64_t>& in) {
            return std::vector<int64_t>{in[0], in[1], kVocab};
          })
      .loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
        return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
      });
  return m;
}

pprt::ModelContext context(const pprt::Model& m) {
  return pprt::ModelContext{&m, {kVocab, kSeq}, 0, 5, at::Device(at::kCPU)};
}

at::Tensor rows(int64_t b) {
  return at::arange(b * (kSeq + 1), at::kLong).remainder(kVocab).view({b, kSeq + 1});
}

bool one_line(const std::string& s) {
  const size_t nl = s.find('\n');
  return nl == std::string::npos || nl == s.size() - 1;
}

TEST(UserModel, StagesChainIntoTheWholeModelWithTheSameParameters) {
  const pprt::Model m = user_model();
  const ppc::Layout split = ppc::parse_layout("Et|tt|tL"), whole = ppc::parse_layout("EttttL");
  pprt::RankModel a(context(m)), b(context(m));
  for (int s = 0; s < 3; ++s) a.add(split, s);
  b.add(whole, -1);
  ASSERT_EQ(a.store.params().size(), b.store.params().size());
  for (const auto& p : a.store.params()) {
    const pprt::NamedParam* q = b.store.find(p.name);
    ASSERT_NE(q, nullptr) << p.name;
    EXPECT_TRUE(at::equal(p.tensor, q->tensor)) << p.name;  // made from (seed, symbol, index)
  }
  EXPECT_NE(a.store.find("h.3.fc.weight"), nullptr);
  EXPECT_NE(a.store.find("embed.0.wte.weight"), nullptr);
  EXPECT_FALSE(a.store.find("h.3.fc.bias")->decay);

  at::Tensor x;
  for (pprt::Stage* s : a.stages) x = s->forward(x, rows(2), 0, nullptr, nullptr);
  const at::Tensor want = b.stages[0]->forward(at::Tensor(), rows(2), 0, nullptr, nullptr);
  EXPECT_TRUE(at::allclose(x, want, 1e-6, 1e-6));
  EXPECT_EQ(x.dim(), 0);
  // Backward through autograd reaches every parameter.
  x.backward();
  for (const auto& p : a.store.params()) EXPECT_TRUE(p.tensor.grad().defined()) << p.name;
  // The boundaries, from the declared shapes: placeholder, [b, T, H] twice, the loss.
  const auto bounds = pprt::declared_boundaries(m, {kVocab, kSeq}, split, 2);
  ASSERT_TRUE(bounds.has_value());
  EXPECT_EQ((*bounds)[1].tensors.at(0).shape, (std::vector<int64_t>{2, kSeq, kHidden}));
  EXPECT_EQ((*bounds)[3].tensors.at(0).shape, (std::vector<int64_t>{}));
}

// A model's own size of a microbatch (Model::dimension), from its token rows, is part of the
// microbatch's shape, and the shapes its layers declare may follow it: each microbatch's
// boundaries are its own (what variable lengths will need). The shapes alone: nothing runs.
TEST(UserModel, AModelsOwnDimensionShapesEachMicrobatchsBoundaries) {
  pprt::Model m = user_model();
  m.dimension("odd", [](const at::Tensor& r) {  // the rows that start with an odd token id
    return r.select(1, 0).remainder(2).sum().item<int64_t>();
  });
  // 't' declares a second tensor sized by it; 'L' takes both.
  auto block = [](const pprt::LayerInfo&) { return pprt::make_layer(Block()); };
  auto head = [](const pprt::LayerInfo&) { return pprt::make_layer(Head()); };
  m.layer('t', "h", block,
          pprt::TensorsShapeFn([](const std::vector<pprt::TensorShape>& in,
                                  const pprt::MicrobatchShape& mb, const pprt::ModelSetup&) {
            return std::vector<pprt::TensorShape>{in.front(), {"odd", {mb.size("odd")}}};
          }))
      .layer('L', "head", head,
             pprt::TensorsShapeFn([](const std::vector<pprt::TensorShape>&,
                                     const pprt::MicrobatchShape&, const pprt::ModelSetup&) {
               return std::vector<pprt::TensorShape>{{"", {}}};
             }));
  const pprt::MicrobatchShape three = m.shape_of(rows(3));  // rows start with 0, 7, 14
  EXPECT_EQ(three.batch, 3);
  EXPECT_EQ(three.length, kSeq);
  EXPECT_EQ(three.size("odd"), 1);
  EXPECT_EQ(three.size("none"), 0);
  const pprt::MicrobatchShape four = m.shape_of(rows(4));  // 0, 7, 14, 21
  EXPECT_EQ(four.size("odd"), 2);
  EXPECT_NE(three, four);
  const ppc::Layout layout = ppc::parse_layout("Et|L");
  const auto a = pprt::declared_boundaries(m, {kVocab, kSeq}, layout, three);
  const auto b = pprt::declared_boundaries(m, {kVocab, kSeq}, layout, four);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ((*a)[1].tensors.size(), 2u);
  EXPECT_EQ((*a)[1].tensors[0].shape, (std::vector<int64_t>{3, kSeq, kHidden}));
  EXPECT_EQ((*a)[1].tensors[1].name, "odd");
  EXPECT_EQ((*a)[1].tensors[1].shape, (std::vector<int64_t>{1}));
  EXPECT_EQ((*b)[1].tensors[0].shape, (std::vector<int64_t>{4, kSeq, kHidden}));
  EXPECT_EQ((*b)[1].tensors[1].shape, (std::vector<int64_t>{2}));
  EXPECT_EQ((*a)[1].numel(), 3 * kSeq * kHidden + 1);
}

TEST(UserModel, AMissingSymbolIsOneLineNamingSymbolAndStage) {
  const pprt::Model m = user_model();
  pprt::RankModel r(context(m));
  const std::string e = message_of([&] { r.add(ppc::parse_layout("Et|tm|L"), 1); });
  EXPECT_NE(e.find("symbol 'm' (stage 1) has no layer in the model 'tiny'"), std::string::npos)
      << e;
  EXPECT_TRUE(one_line(e)) << e;
}

TEST(UserModel, AWrongShapeIsOneLineNamingStageAndLayer) {
  const pprt::Model m = user_model(/*block_out=*/kHidden + 1);
  pprt::RankModel r(context(m));
  pprt::Stage& s = r.add(ppc::parse_layout("Et|tL"), 0);
  const std::string e = message_of([&] { s.forward(at::Tensor(), rows(2), 0, nullptr, nullptr); });
  EXPECT_NE(e.find("stage 0, layer 't' #0"), std::string::npos) << e;
  EXPECT_NE(e.find("its output is [2, 6, 8], but its declared shape for an input [2, 6, 8] is "
                   "[2, 6, 9]"),
            std::string::npos)
      << e;
  // A layer whose forward fails inside LibTorch: the same, with LibTorch's first line.
  pprt::Model bad("bad");
  bad.layer('E', "embed", [](const pprt::LayerInfo&) { return pprt::make_layer(Embed()); })
      .layer('t', "h", [](const pprt::LayerInfo&) { return pprt::make_layer(Head()); })
      .layer('L', "head", [](const pprt::LayerInfo&) { return pprt::make_layer(Head()); });
  pprt::RankModel rb(context(bad));
  pprt::Stage& sb = rb.add(ppc::parse_layout("EttL"), -1);
  const std::string e2 =
      message_of([&] { sb.forward(at::Tensor(), rows(2), 0, nullptr, nullptr); });
  EXPECT_NE(e2.find("the model, layer 't' #1 (h.1): its forward failed: "), std::string::npos)
      << e2;
  EXPECT_TRUE(one_line(e2)) << e2;
}

}  // namespace
