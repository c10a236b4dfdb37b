// A second user model (issue 26's proof), a program of the library (pprt::main) as a user writes
// one, for e2e_library_branch_test.cpp: ordinary LibTorch modules whose backward the runtime knows
// nothing about, so that the zero-bubble schedules split it through the autograd graph.
//   E  an embedding;
//   t  a block of two branches joined (x + gelu(proj(h)) * sigmoid(gate(proj(tanh(h mix)))), h
//      the block's LayerNorm of x): the submodule `proj` is called on both branches, and the
//      matrix `mix` is one tensor shared by every block of the model (LayerInfo::shared), so two
//      blocks of a stage use it and ranks holding blocks hold copies of it;
//   L  LayerNorm and a linear head; the loss is Model::loss (cross-entropy).
// BRANCHY_SHAPES=declared declares every layer's output shape (the head's from the run's --vocab:
// a SetupShapeFn); otherwise a pipelined run learns the boundaries from one forward.
// BRANCHY_AUX=1: every block also adds an auxiliary loss, "smooth" (0.05 x the mean square of its
// first branch: it joins the loss from whatever stage the block is on), and a metric, "gate" (the
// mean of its gate); BRANCHY_AUX=undeclared adds a loss the model does not declare.
#include <ATen/ATen.h>
#include <pprt/main.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace branchy {

constexpr int64_t kWidth = 16;

// The submodule both branches of a block call.
struct ProjImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  ProjImpl() { fc = register_module("fc", torch::nn::Linear(kWidth, kWidth)); }
  at::Tensor forward(const at::Tensor& x) { return fc(x); }
};
TORCH_MODULE(Proj);

// BRANCHY_AUX
enum class Aux { None, Declared, Undeclared };

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  Proj proj{nullptr};
  torch::nn::Linear gate{nullptr};
  at::Tensor mix;  // the model's one shared matrix
  Aux aux;
  BlockImpl(const pprt::LayerInfo& info, Aux a) : aux(a) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    proj = register_module("proj", Proj());
    gate = register_module("gate", torch::nn::Linear(kWidth, kWidth));
    mix = register_parameter("mix", info.shared("shared.mix", {kWidth, kWidth},
                                                [](at::Tensor& t) { t.normal_(0, 0.3); }));
  }
  at::Tensor forward(const at::Tensor& x, const pprt::Microbatch& mb) {
    const at::Tensor h = norm(x);
    const at::Tensor a = at::gelu(proj(h));                   // one branch
    const at::Tensor b = proj(at::tanh(at::linear(h, mix)));  // the other, same proj
    const at::Tensor g = at::sigmoid(gate(b));
    if (aux != Aux::None) {
      mb.add_loss(aux == Aux::Declared ? "smooth" : "undeclared", a.pow(2).mean(), 0.05);
      mb.add_metric("gate", g);
    }
    return x + a * g;  // joined
  }
};
TORCH_MODULE(Block);

struct HeadImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear out{nullptr};
  explicit HeadImpl(int vocab) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    out = register_module("out", torch::nn::Linear(kWidth, vocab));
  }
  at::Tensor forward(const at::Tensor& x) { return out(norm(x)); }
};
TORCH_MODULE(Head);

pprt::Model model(bool declared, Aux aux) {
  const pprt::ShapeFn hidden = [](const std::vector<int64_t>& in) {
    return std::vector<int64_t>{in[0], in[1], kWidth};
  };
  const pprt::SetupShapeFn logits = [](const std::vector<int64_t>& in,
                                       const pprt::ModelSetup& setup) {
    return std::vector<int64_t>{in[0], in[1], setup.vocab};
  };
  pprt::Model m("branchy");
  m.layer(
       'E', "embed",
       [](const pprt::LayerInfo& l) {
         return pprt::make_layer(torch::nn::Embedding(l.vocab, kWidth));
       },
       declared ? hidden : pprt::ShapeFn())
      .layer(
          't', "h", [aux](const pprt::LayerInfo& l) { return pprt::make_layer(Block(l, aux)); },
          declared ? hidden : pprt::ShapeFn())
      .layer(
          'L', "head", [](const pprt::LayerInfo& l) { return pprt::make_layer(Head(l.vocab)); },
          declared ? logits : pprt::SetupShapeFn())
      .loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
        return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
      });
  if (aux != Aux::None) m.aux_loss("smooth").metric("gate");
  return m;
}

}  // namespace branchy

int main(int argc, char** argv) {
  const char* shapes = std::getenv("BRANCHY_SHAPES");
  const char* aux = std::getenv("BRANCHY_AUX");
  const std::string a = aux ? aux : "";
  return pprt::main(argc, argv,
                    branchy::model(shapes && std::string(shapes) == "declared",
                                   a == "1"            ? branchy::Aux::Declared
                                   : a == "undeclared" ? branchy::Aux::Undeclared
                                                       : branchy::Aux::None));
}
