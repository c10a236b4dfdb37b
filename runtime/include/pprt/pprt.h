// pprt: the pipeline runtime's model interface (docs/library.md).
//
// A model is a set of layers, one factory per layout symbol. The runtime builds, on each rank,
// the layers of the stages that rank runs (giving each factory the layer's global index), chains
// them, and splits each stage's backward into I and W for the zero-bubble schedules. pprun's own
// model (runtime/models/llama/builtin.h) is registered through this same interface.
//
//     pprt::Model model("gpt2");
//     model.layer('E', "embed", [&](const pprt::LayerInfo& l) { return pprt::make_layer(Embed(cfg,
//     l)); })
//          .layer('t', "h", [&](const pprt::LayerInfo&) { return pprt::make_layer(Block(cfg)); })
//          .layer('L', "head", [&](const pprt::LayerInfo& l) { return pprt::make_layer(Head(cfg,
//          l)); }) .loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
//            return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
//          });
//
// What flows: the model's first layer gets the microbatch's input token ids [b, seq_len] (int64),
// every other layer its predecessor's output, and the loss (Model::loss) the last layer's output;
// without a loss function the last layer's output is the loss (a scalar). What crosses a stage
// boundary is the one tensor the stage's last layer returns (floating point, the same shape for
// every microbatch).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pprt/setup.h"

namespace pprt {

// --- What a layer sees of a microbatch ----------------------------------------------------------

// The deferred weight-gradient work of one stage for one microbatch, for layers that split their
// own backward (Layer::splits_backward): while the runtime runs an I, deferring() is true and
// such a layer's backward computes only its input's gradient and defer()s the rest; the W runs
// it. In a full backward (B) deferring() is false and the work is done at once.
class WeightWork {
 public:
  bool deferring() const { return deferring_; }
  void defer(std::function<void()> work) { work_.push_back(std::move(work)); }

  // The runtime's side: set before each backward; run() does the deferred work in order.
  void set_deferring(bool on) { deferring_ = on; }
  void run() {
    for (auto& w : work_) w();
    work_.clear();
  }
  bool empty() const { return work_.empty(); }

 private:
  bool deferring_ = false;
  std::vector<std::function<void()>> work_;
};

// The losses reported for a microbatch (Microbatch::report), detached.
struct LossReport {
  at::Tensor main;  // a scalar, logged as "loss"
  at::Tensor aux;   // optional auxiliary losses (any shape): their mean is logged as
                    // ModelSetup::aux_loss
};

// One microbatch, as layers and the loss see it.
class Microbatch {
 public:
  Microbatch(at::Tensor tokens, int index, int seq_len, WeightWork* weights, LossReport* report)
      : tokens_(std::move(tokens)),
        index_(index),
        seq_len_(seq_len),
        weights_(weights),
        report_(report) {}

  // The microbatch's rows [b, seq_len + 1] (int64, on the device): inputs() are its first
  // seq_len tokens, targets() the same shifted by one.
  const at::Tensor& tokens() const { return tokens_; }
  at::Tensor inputs() const { return tokens_.narrow(1, 0, seq_len_); }
  at::Tensor targets() const { return tokens_.narrow(1, 1, seq_len_); }
  int64_t size() const { return tokens_.size(0); }  // b, the sequences of the microbatch
  int seq_len() const { return seq_len_; }
  int index() const { return index_; }  // in the step, from 0

  // For layers that split their own backward (Layer::splits_backward): where to defer weight
  // work. Null when the stage holds a layer that does not split its own backward (the runtime
  // then splits the stage's backward through the autograd graph: docs/library-split.md), or
  // when a caller wants the weight gradients from autograd: the layer's backward then returns
  // them as any LibTorch operation does.
  WeightWork* weight_work() const { return weights_; }

  // What the loss layer or function reports for this microbatch: `main` (a scalar) is logged as
  // the loss, `aux` (optional) as the model's auxiliary loss. Without a report the loss itself
  // is logged. The values are detached.
  void report(const at::Tensor& main, const at::Tensor& aux = at::Tensor()) const {
    if (!report_) return;
    report_->main = main.detach();
    if (aux.defined()) report_->aux = aux.detach();
  }

 private:
  at::Tensor tokens_;
  int index_ = 0, seq_len_ = 0;
  WeightWork* weights_ = nullptr;
  LossReport* report_ = nullptr;
};

// --- Layers ---------------------------------------------------------------------------------

namespace detail {
class SharedParams;  // a rank's parameters shared between layers (the runtime's)
}

// A layout as the model's hooks see it: its text and each stage's symbols ("Ett", "", "tL").
struct LayoutInfo {
  std::string text;
  std::vector<std::string> stages;
  int count(char symbol) const {
    int n = 0;
    for (const auto& s : stages)
      for (char c : s) n += c == symbol;
    return n;
  }
};

// What a layer factory is given about the layer it makes.
struct LayerInfo {
  char symbol = 0;   // its layout symbol
  std::string name;  // the name Model::layer gave the symbol
  int index = 0;     // among the model's layers of this symbol, from 0 (the layer's global index)
  int count = 0;     // the model's layers of this symbol
  int position = 0;  // among all the model's layers, from 0
  int layers = 0;    // all the model's layers
  int stage = 0;     // the layout stage that holds it
  int vocab = 0, seq_len = 0;  // the configured model's (ModelSetup)
  uint64_t seed = 0;           // --seed: for a model that initialises its weights by name
  double aux_loss_weight = 0;  // --mtp-loss-weight: the weight of a model's auxiliary losses
  LayoutInfo layout;           // the whole layout

  // A parameter used by several layers (a tied embedding, a shared submodule's weights): the one
  // tensor of global name `name` on this rank, created (float32, CPU, requiring grad) by the
  // first call on the rank and filled by `init`, then returned again to every later caller. Its
  // copies on other ranks start equal (`init` runs with torch's generator seeded from --seed and
  // the name) and get the sum of every copy's gradient after each step.
  at::Tensor shared(const std::string& name, const std::vector<int64_t>& shape,
                    const std::function<void(at::Tensor&)>& init) const;

  detail::SharedParams* params = nullptr;  // the runtime's
};

// A layer: a module holding its parameters and a forward over (the previous layer's output, the
// microbatch). Parameters get global names: `prefix` then the module's own names
// (named_parameters()), except those from LayerInfo::shared, named by their shared name.
struct Layer {
  std::shared_ptr<torch::nn::Module> module;  // may be null: a layer without parameters
  std::function<at::Tensor(const at::Tensor& x, const Microbatch& mb)> forward;
  std::string prefix;            // empty: "<name>.<index>." (e.g. "h.3.")
  bool splits_backward = false;  // its backward defers weight work to mb.weight_work() itself
};

// A Layer from a module holder (TORCH_MODULE) or a std::shared_ptr to a module whose forward
// takes the tensor alone, or the tensor and the Microbatch.
template <class M>
Layer make_layer(M module, std::string prefix = "") {
  std::shared_ptr<torch::nn::Module> base;
  auto impl = [&] {
    if constexpr (requires { module.ptr(); })
      return module.ptr();
    else
      return module;
  }();
  base = impl;
  Layer l;
  l.module = std::move(base);
  l.prefix = std::move(prefix);
  l.forward = [impl](const at::Tensor& x, const Microbatch& mb) -> at::Tensor {
    if constexpr (requires { impl->forward(x, mb); })
      return impl->forward(x, mb);
    else
      return impl->forward(x);
  };
  return l;
}

// A layer that is a function (no parameters of its own; it may close over modules, whose
// parameters it then does not own: use make_layer for those).
inline Layer function_layer(std::function<at::Tensor(const at::Tensor&, const Microbatch&)> f) {
  Layer l;
  l.forward = std::move(f);
  return l;
}

using LayerFactory = std::function<Layer(const LayerInfo&)>;
// The shape of a layer's output for the shape of its input (the first layer's input is the
// token ids [b, seq_len]); for a model whose every symbol declares one, the runtime knows each
// boundary's shape without a forward, and checks every output against it.
using ShapeFn = std::function<std::vector<int64_t>(const std::vector<int64_t>& input)>;
// The same for a shape that depends on the run's configuration (--vocab, --seq-len): a head's
// logits [b, T, setup.vocab].
using SetupShapeFn =
    std::function<std::vector<int64_t>(const std::vector<int64_t>& input, const ModelSetup& setup)>;
// The microbatch's loss (a scalar) from the last layer's output.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const Microbatch& mb)>;

// --- The model --------------------------------------------------------------------------------

// A model family: the layer factory of each layout symbol it uses, and its loss.
// Copies share their registrations.
class Model {
 public:
  explicit Model(std::string family);

  // The layers of layout symbol `symbol` ('E', 't', 'L', or a symbol of the model's own):
  // `make` builds one (on the CPU; the runtime moves it to the device), `name` names it in
  // messages and parameter names, `shape` (optional) declares its output's shape.
  Model& layer(char symbol, std::string name, LayerFactory make, ShapeFn shape = {});
  Model& layer(char symbol, std::string name, LayerFactory make, SetupShapeFn shape);
  // The loss of a microbatch from the last layer's output (optional: without one, the last
  // layer's output is the loss).
  Model& loss(LossFn fn);

  // --- read by the runtime ---
  struct Symbol {
    char symbol = 0;
    std::string name;
    LayerFactory make;
    SetupShapeFn shape;  // empty: no shape declared (a ShapeFn given ignores the setup)
  };
  const std::string& family() const;
  const Symbol* symbol(char c) const;  // null if the model has no layer for it
  std::vector<char> symbols() const;   // in registration order
  const LossFn& loss() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace pprt
