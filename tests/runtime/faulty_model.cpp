// A program of the library (pprt::main) whose model goes wrong the way a user's can, for
// e2e_library_test.cpp; FAULTY_MODEL picks how:
//   declared  't' declares an output shape its module does not return
//   varies    no shapes declared; 't' returns another shape for microbatch 1 than for 0 (the
//             shapes a pipelined run learns from one forward stop holding)
//   libtorch  't' #1's forward fails inside LibTorch (a linear map of the wrong width)
//   scalar    no Model::loss: the last layer's output, the logits, is not a scalar
//   prefix    every 't' takes the same Layer::prefix: two layers make parameters of one name
//   own       't' #1's factory throws a pprt::Error of its own
// Otherwise its model is sound: E embeds, t adds a linear map, L is the head and the loss.
#include <ATen/ATen.h>
#include <pprt/main.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>
#include <string>

namespace {

constexpr int64_t kWidth = 8;

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  bool varies;
  explicit BlockImpl(bool v, int64_t in = kWidth) : varies(v) {
    fc = register_module("fc", torch::nn::Linear(in, kWidth));
  }
  at::Tensor forward(const at::Tensor& x, const pprt::Microbatch& mb) {
    at::Tensor y = x + fc(x);
    return varies && mb.index() == 1 ? y.narrow(1, 0, y.size(1) - 1) : y;
  }
};
TORCH_MODULE(Block);

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("FAULTY_MODEL");
  const std::string fault = env ? env : "";
  pprt::Model m("faulty");
  pprt::ShapeFn wider = [](const std::vector<int64_t>& in) {
    return std::vector<int64_t>{in[0], in[1], kWidth + 1};
  };
  m.layer('E', "embed",
          [](const pprt::LayerInfo& l) {
            return pprt::make_layer(torch::nn::Embedding(l.vocab, kWidth));
          })
      .layer(
          't', "h",
          [fault](const pprt::LayerInfo& l) {
            if (fault == "own" && l.index == 1)
              throw pprt::Error("h.1", "this block wants an even stage");
            const bool wrong = fault == "libtorch" && l.index == 1;
            return pprt::make_layer(Block(fault == "varies", wrong ? kWidth + 1 : kWidth),
                                    fault == "prefix" ? "block." : "");
          },
          fault == "declared" ? wider : pprt::ShapeFn())
      .layer('L', "head", [](const pprt::LayerInfo& l) {
        return pprt::make_layer(torch::nn::Linear(kWidth, l.vocab));
      });
  if (fault != "scalar")
    m.loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
      return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
    });
  return pprt::main(argc, argv, m);
}
