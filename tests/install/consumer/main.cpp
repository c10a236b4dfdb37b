// The smallest program of the library's users, built out of tree against the installed package:
// a bigram model (one layer 'E': a table of next-token logits; 'L': nothing but the loss) trained
// by pprt::main. Its layers declare no shapes: a pipelined run learns them from one forward.
#include <ATen/ATen.h>
#include <pprt/main.h>

namespace {

struct Bigram : torch::nn::Module {
  at::Tensor table;
  explicit Bigram(int64_t vocab) {
    table = register_parameter("table", at::randn({vocab, vocab}) * 0.02);
  }
  at::Tensor forward(const at::Tensor& ids) {
    return table.index_select(0, ids.flatten()).view({ids.size(0), ids.size(1), -1});
  }
};

}  // namespace

int main(int argc, char** argv) {
  pprt::Model model("bigram");
  model
      .layer('E', "bigram",
             [](const pprt::LayerInfo& l) {
               return pprt::make_layer(std::make_shared<Bigram>(l.vocab));
             })
      .layer('L', "out",
             [](const pprt::LayerInfo&) {
               return pprt::function_layer(
                   [](const at::Tensor& x, const pprt::Microbatch&) { return x; });
             })
      .loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
        return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
      });
  return pprt::main(argc, argv, model);
}
