// A program of the library (pprt::main) whose model has a layout symbol of its own, for
// e2e_own_symbols_test.cpp (docs/library.md, "A symbol of your own"):
//   E  token embedding
//   x  an encoder block of the model's own: LayerNorm, then a GELU MLP, around a residual
//   t  a plain residual linear block
//   L  LayerNorm, the head and the cross-entropy loss
// Its plans are compiled with ppcompile --symbols x, e.g. 'Exx|xtL'.
#include <ATen/ATen.h>
#include <pprt/main.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

namespace {

constexpr int64_t kWidth = 16;

struct EncoderBlockImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear up{nullptr}, down{nullptr};
  EncoderBlockImpl() {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    up = register_module("up", torch::nn::Linear(kWidth, 2 * kWidth));
    down = register_module("down", torch::nn::Linear(2 * kWidth, kWidth));
  }
  at::Tensor forward(const at::Tensor& h) { return h + down(at::gelu(up(norm(h)))); }
};
TORCH_MODULE(EncoderBlock);

struct ResidualImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  ResidualImpl() { fc = register_module("fc", torch::nn::Linear(kWidth, kWidth)); }
  at::Tensor forward(const at::Tensor& h) { return h + at::tanh(fc(h)); }
};
TORCH_MODULE(Residual);

struct HeadImpl : torch::nn::Module {
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear out{nullptr};
  explicit HeadImpl(int64_t vocab) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    out = register_module("out", torch::nn::Linear(kWidth, vocab));
  }
  at::Tensor forward(const at::Tensor& h) { return out(norm(h)); }
};
TORCH_MODULE(Head);

}  // namespace

int main(int argc, char** argv) {
  pprt::Model m("encoder");
  m.layer('E', "embed",
          [](const pprt::LayerInfo& l) {
            return pprt::make_layer(torch::nn::Embedding(l.vocab, kWidth));
          })
      .layer('x', "enc", [](const pprt::LayerInfo&) { return pprt::make_layer(EncoderBlock()); })
      .layer('t', "h", [](const pprt::LayerInfo&) { return pprt::make_layer(Residual()); })
      .layer('L', "head", [](const pprt::LayerInfo& l) { return pprt::make_layer(Head(l.vocab)); })
      .loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
        return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
      });
  return pprt::main(argc, argv, m);
}
