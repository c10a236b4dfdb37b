// pprt: the pipeline runtime's model interface (docs/library.md).
//
// A model is a set of layers, one factory per layout symbol. The runtime builds, on each rank,
// the layers of the stages that rank runs (giving each factory the layer's global index), chains
// them, and splits each stage's backward into I and W for the zero-bubble schedules. pprun's own
// model (runtime/models/llama/) is registered through this same interface.
//
// clang-format off
//     pprt::Model model("gpt2");
//     model.layer('E', "embed", [&](const pprt::LayerInfo& l) { return pprt::make_layer(Embed(cfg, l)); })
//          .layer('t', "h", [&](const pprt::LayerInfo&) { return pprt::make_layer(Block(cfg)); })
//          .layer('L', "head", [&](const pprt::LayerInfo& l) { return pprt::make_layer(Head(cfg, l)); })
//          .loss([](const at::Tensor& logits, const pprt::Microbatch& mb) {
//            return at::cross_entropy_loss(logits.flatten(0, 1), mb.targets().flatten());
//          });
// clang-format on
//
// What flows: the model's first layer gets the microbatch's input token ids [b, seq_len] (int64),
// every other layer its predecessor's output, and the loss (Model::loss) the last layer's output;
// without a loss function the last layer's output is the loss (a scalar). A layer takes and gives
// one tensor (Layer::forward) or several by name (Layer::forward_tensors: pprun's MTP depths);
// what crosses a stage boundary is what the stage's last layer gives, one message (floating point,
// one dtype, its shape a function of the microbatch's shape: MicrobatchShape).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <chrono>
#include <compare>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pprt/family.h"
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

// What a microbatch's layers and loss report (Microbatch::report, add_loss, add_metric): the
// runtime's record, one per stage and microbatch.
struct LossReport {
  at::Tensor main;  // a scalar, logged as "loss" (detached)
  // The auxiliary losses and metrics, in the order added, each as added (detached; its mean is
  // logged).
  struct Value {
    std::string name;
    bool loss = false;  // an auxiliary loss (add_loss), or a metric (add_metric)
    at::Tensor value;
  };
  std::vector<Value> values;
  // What the auxiliary losses add to the loss the model trains on: weight * sum of each (attached
  // to the graph of the stage that added it).
  std::vector<at::Tensor> terms;
};

// The shape of a microbatch: what every rank knows of it from the data alone, before any layer
// runs (each reads the token rows itself), and so the size of every tensor that crosses a stage
// boundary for it: its sequences, their tokens, and the sizes the model derives from its rows
// (Model::dimension). The runtime sizes each microbatch's receive buffers from it, so that
// microbatches of several shapes (issue 41's variable lengths) need no global size.
struct MicrobatchShape {
  int64_t batch = 0;   // sequences (b)
  int64_t length = 0;  // tokens per sequence (the inputs'; its rows hold length + 1)
  std::vector<std::pair<std::string, int64_t>> sizes;  // Model::dimension's, in their order
  // Model::dimension `name`'s (0 if the model declares no such dimension).
  int64_t size(const std::string& name) const {
    for (const auto& [n, v] : sizes)
      if (n == name) return v;
    return 0;
  }
  auto operator<=>(const MicrobatchShape&) const = default;
};

// One microbatch, as layers and the loss see it.
class Microbatch {
 public:
  Microbatch(at::Tensor tokens, MicrobatchShape shape, int index, WeightWork* weights,
             LossReport* report)
      : tokens_(std::move(tokens)),
        shape_(std::move(shape)),
        index_(index),
        weights_(weights),
        report_(report) {}

  // `report` receives what the layers report (never null: the runtime's record).
  //
  // The microbatch's rows [b, seq_len + 1] (int64, on the device): inputs() are its first
  // seq_len tokens, targets() the same shifted by one.
  // Rows of documents (pprun's --pack, --pad, --varlen: runtime/data/documents.h) carry each
  // token's position in its document in the bits above 31 of tokens(); inputs() and targets()
  // are the ids alone.
  const at::Tensor& tokens() const { return tokens_; }
  at::Tensor inputs() const { return tokens_.narrow(1, 0, shape_.length).bitwise_and(kIdBits); }
  at::Tensor targets() const { return tokens_.narrow(1, 1, shape_.length).bitwise_and(kIdBits); }
  static constexpr int64_t kIdBits = (int64_t{1} << 32) - 1;
  int64_t size() const { return shape_.batch; }  // b, the sequences of the microbatch
  int seq_len() const { return static_cast<int>(shape_.length); }
  const MicrobatchShape& shape() const { return shape_; }
  int index() const { return index_; }  // in the step, from 0

  // For layers that split their own backward (Layer::splits_backward): where to defer weight
  // work. Null when the stage holds a layer that does not split its own backward (the runtime
  // then splits the stage's backward through the autograd graph: docs/library-split.md), or
  // when a caller wants the weight gradients from autograd: the layer's backward then returns
  // them as any LibTorch operation does.
  WeightWork* weight_work() const { return weights_; }

  // The loss to log for this microbatch (`main`, a scalar, detached), where the loss the last
  // layer or Model::loss returns is not it. Without a report, that loss is logged.
  void report(const at::Tensor& main) const { report_->main = main.detach(); }

  // An auxiliary loss of the model's (a mixture of experts' load balancing, a multi-token
  // prediction), from any layer on any stage: `weight` times the sum of `loss`'s elements joins
  // the loss the model trains on (the gradient flows back through the layer that added it, scaled
  // as the loss is), and the mean of its elements is logged as "<name>_loss" (--metrics, the
  // progress, --eval-data's "eval_<name>_loss": the mean over the microbatches, and over the
  // layers that add it in a microbatch). The model declares the name (Model::aux_loss).
  void add_loss(const std::string& name, const at::Tensor& loss, double weight) const {
    report_->values.push_back(LossReport::Value{name, true, loss.detach()});
    report_->terms.push_back(loss.sum() * weight);
  }
  // A metric of the model's: the mean of `value`'s elements (detached; no gradient), logged as
  // "<name>" as an auxiliary loss is. The model declares the name (Model::metric).
  void add_metric(const std::string& name, const at::Tensor& value) const {
    report_->values.push_back(LossReport::Value{name, false, value.detach()});
  }

 private:
  at::Tensor tokens_;
  MicrobatchShape shape_;
  int index_ = 0;
  WeightWork* weights_ = nullptr;
  LossReport* report_ = nullptr;
};

// --- Layers ---------------------------------------------------------------------------------

namespace detail {
class SharedParams;  // a rank's parameters shared between layers (the runtime's)
}
class Transport;  // runtime/transport/transport.h

// Expert parallelism (pprun --ep N, docs/pprun.md "Expert parallelism"): the ranks among which a
// layer's routed experts are sharded, the same pipeline rank in `size` neighbouring data-parallel
// replicas. A layer exchanges its tokens with them by Transport::all_to_all, on one communicator
// per direction over the same ranks: `forward` in its forwards (dispatch, combine), `backward`
// inside its autograd backward. Each direction's all-to-alls then run on every member in the
// order of its plan's forwards (or backwards) alone, whichever order the runtime interleaves
// the two directions in (or runs them concurrently: an OVERLAP_F_B's two threads, one per
// communicator). Every member runs the same actions in the same order, so the orders agree.
struct ExpertGroup {
  Transport* forward = nullptr;   // null when size is 1
  Transport* backward = nullptr;  // the same ranks, a second communicator
  int rank = 0;                   // this rank's position in the group (its experts' shard)
  int size = 1;                   // ranks sharing the experts (1: every expert here)
  std::chrono::milliseconds timeout{300'000};  // of each all-to-all (--timeout)
  bool sharded() const { return size > 1; }
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
  // The dtype of the model's activations: float32, or bfloat16 under --dtype bf16 for a model
  // that takes part in mixed precision (Model::mixed_precision).
  at::ScalarType dtype = at::kFloat;
  LayoutInfo layout;  // the whole layout
  // The runtime asks the layer to drop the parts of its activations that are cheap to recompute
  // (an attention core, an MLP's activation) and recompute them in its backward
  // (--recompute selective; pprt::recomputed, runtime/model/recompute.h). A layer that has no such
  // parts keeps everything.
  bool selective_recompute = false;
  // The ranks a mixture of experts shards its routed experts over (size 1: no expert parallelism).
  ExpertGroup experts;

  // A parameter used by several layers (a tied embedding, a shared submodule's weights): the one
  // tensor of global name `name` on this rank, created (float32, CPU, requiring grad) by the
  // first call on the rank and filled by `init`, then returned again to every later caller. Its
  // copies on other ranks start equal (`init` runs with torch's generator seeded from --seed and
  // the name) and get the sum of every copy's gradient after each step.
  at::Tensor shared(const std::string& name, const std::vector<int64_t>& shape,
                    const std::function<void(at::Tensor&)>& init) const;

  detail::SharedParams* params = nullptr;  // the runtime's
};

// A tensor handed from layer to layer (and across a stage boundary) by name.
struct NamedTensor {
  std::string name;  // "" for a layer of one tensor (Layer::forward)'s
  at::Tensor tensor;
};
using Tensors = std::vector<NamedTensor>;

// A layer: a module holding its parameters and a forward over (the previous layer's output, the
// microbatch). Parameters get global names: `prefix` then the module's own names
// (named_parameters()), except those from LayerInfo::shared, named by their shared name.
struct Layer {
  std::shared_ptr<torch::nn::Module> module;  // may be null: a layer without parameters
  // One tensor in and out: it gets the only tensor its predecessor gave, and gives one named "".
  std::function<at::Tensor(const at::Tensor& x, const Microbatch& mb)> forward;
  // Or several, by name, in order (set instead of `forward`): it gets what its predecessor gave
  // (the first layer: the token ids, named "") and gives what goes on (pprun's m layers add a
  // tensor per MTP depth). A stage's boundary is its last layer's tensors, sent as one message.
  std::function<Tensors(const Tensors& x, const Microbatch& mb)> forward_tensors;
  std::string prefix;            // empty: "<name>.<index>." (e.g. "h.3.")
  bool splits_backward = false;  // its backward defers weight work to mb.weight_work() itself
  // The global names of its parameters sharded over LayerInfo::experts (a mixture of experts'
  // routed experts, of which each rank holds its own shard): their gradients are reduced over
  // the replicas that hold the same shard, and every shard counts in the gradient norm.
  std::vector<std::string> expert_params;
  // Counts the layer keeps over each step's training forwards for its own use in the next step
  // (a mixture of experts' tokens per expert, which move its balancing bias): after the step's
  // backwards, before the optimizer, the runtime sums each tensor in place over every copy of
  // the layer in the job (the data-parallel replicas, and the pipeline ranks that hold the same
  // layout stage: DualPipe's two copies), so every copy reads the counts of the whole step's
  // batch, as one process that holds it (--reference) counts them. Float64, on the CPU; the
  // layer resets them when it has used them.
  std::vector<at::Tensor> step_sums;
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

// The same for a module whose forward takes and gives Tensors (Layer::forward_tensors).
template <class M>
Layer make_tensors_layer(M module, std::string prefix = "") {
  auto impl = [&] {
    if constexpr (requires { module.ptr(); })
      return module.ptr();
    else
      return module;
  }();
  Layer l;
  l.module = impl;
  l.prefix = std::move(prefix);
  l.forward_tensors = [impl](const Tensors& x, const Microbatch& mb) -> Tensors {
    return impl->forward(x, mb);
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
// A layer of several tensors (Layer::forward_tensors) declares their shapes by name for the
// shapes it gets, the microbatch's and the run's configuration.
struct TensorShape {
  std::string name;
  std::vector<int64_t> shape;
  bool operator==(const TensorShape&) const = default;
};
using TensorsShapeFn = std::function<std::vector<TensorShape>(
    const std::vector<TensorShape>& input, const MicrobatchShape& mb, const ModelSetup& setup)>;
// The microbatch's loss (a scalar) from the last layer's output (its only tensor).
using LossFn = std::function<at::Tensor(const at::Tensor& output, const Microbatch& mb)>;
// A size the model derives from a microbatch's token rows [b, length + 1] (Model::dimension),
// the same on every rank.
using DimensionFn = std::function<int64_t(const at::Tensor& rows)>;

// --- The model --------------------------------------------------------------------------------

// A model family: the layer factory of each layout symbol it uses, its loss, and the hooks that
// give it more of the runtime (all optional). Copies share their registrations.
class Model {
 public:
  explicit Model(std::string family);

  // The layers of layout symbol `symbol` ('E', 't', 'L', or a symbol of the model's own):
  // `make` builds one (on the CPU; the runtime moves it to the device), `name` names it in
  // messages and parameter names, `shape` (optional) declares its output's shape.
  Model& layer(char symbol, std::string name, LayerFactory make, ShapeFn shape = {});
  Model& layer(char symbol, std::string name, LayerFactory make, SetupShapeFn shape);
  Model& layer(char symbol, std::string name, LayerFactory make, TensorsShapeFn shape);
  // The loss of a microbatch from the last layer's output (optional: without one, the last
  // layer's output is the loss).
  Model& loss(LossFn fn);

  // --- hooks (docs/library.md, "What a model may add") ---
  // How it runs under --dtype bf16 (default None: fp32 only, --dtype bf16 is refused).
  Model& mixed_precision(MixedPrecision how);
  // Every parameter by name and shape for a layout: --resume then checks a checkpoint against it
  // before anything runs (without it each rank checks its own parameters as they load), and
  // --export checks a checkpoint's tensors against it.
  Model& parameters(ParamsFn fn);
  // Whether the model can be built as a layout, before anything runs (throws pprt::Error).
  Model& check(CheckFn fn);
  // The model in a run's first lines (default: "'NAME' of layout L (vocab V, seq T)").
  Model& describe(DescribeFn fn);
  // Its Hugging Face form: pprun --export CKPT DIR --format hf writes it (and a Family's
  // from_hugging_face reads one, --init-from).
  Model& hugging_face(HfFormatFn fn);
  // The auxiliary losses and the metrics its layers add (Microbatch::add_loss, add_metric), by
  // name, for the layouts `present` accepts (default: every layout; pprun's "mtp" where the
  // layout has m layers). Adding one it does not declare for the layout stops the run, naming
  // the layer.
  Model& aux_loss(std::string name, std::function<bool(const LayoutInfo&)> present = {});
  Model& metric(std::string name, std::function<bool(const LayoutInfo&)> present = {});
  // A size of a microbatch the model's shapes depend on beyond its sequences and tokens (how many
  // documents a packed sequence holds, say): MicrobatchShape::size(name), from its token rows.
  Model& dimension(std::string name, DimensionFn fn);
  // The routed experts of each of its mixture-of-experts layers laid out as `layout` (0: it has
  // none): pprun's --ep shards them (LayerInfo::experts) and must divide them.
  Model& routed_experts(std::function<int(const LayoutInfo&)> fn);

  // --- read by the runtime ---
  struct Symbol {
    char symbol = 0;
    std::string name;
    LayerFactory make;
    SetupShapeFn shape;            // a layer of one tensor's (a ShapeFn given ignores the setup)
    TensorsShapeFn tensors_shape;  // or of several; both empty: no shape declared
  };
  const std::string& family() const;
  const Symbol* symbol(char c) const;  // null if the model has no layer for it
  std::vector<char> symbols() const;   // in registration order
  const LossFn& loss() const;
  MixedPrecision mixed_precision() const;
  const ParamsFn& parameters() const;
  const CheckFn& check() const;
  const DescribeFn& describe() const;
  const HfFormatFn& hugging_face() const;
  const std::function<int(const LayoutInfo&)>& routed_experts() const;
  // The auxiliary losses and metrics of the model laid out as `layout`, in declaration order.
  std::vector<Reported> reported(const LayoutInfo& layout) const;
  // The shape of a microbatch of these token rows [b, length + 1].
  MicrobatchShape shape_of(const at::Tensor& rows) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace pprt
