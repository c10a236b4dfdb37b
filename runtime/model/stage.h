// A rank's model, built from a pprt::Model (pprt/pprt.h): its parameters by global name
// (ParamStore) and its stages (Stage), each the layers of one layout stage made by the model's
// factories, and what crosses its boundaries (BoundarySpec: named tensors of shapes that follow
// the microbatch's). pprun's own model is one such pprt::Model (runtime/models/llama).
//
// Parameters: each layer's module's parameters are named `prefix` + their name in the module,
// except those a layer got from LayerInfo::shared, named by their shared name. A rank holds one
// tensor per global name however many of its stages use it. Layers are made with torch's
// default CPU generator seeded from (--seed, symbol, index) and shared parameters initialised
// with it seeded from (--seed, name), so every layout, pp and vpp starts from the weights of the
// unpipelined model, and every copy of a shared parameter starts identical; the generator's
// state is restored afterwards.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/layout.h"
#include "compiler/memory_mode.h"
#include "pprt/pprt.h"

namespace pprt {

struct NamedParam {
  std::string name;
  at::Tensor tensor;  // a leaf that requires grad
  bool decay = true;  // AdamW weight decay applies (matrices); not to vectors (norm scales, biases)
  bool expert = false;  // sharded over expert parallelism's ranks (Layer::expert_params)
};

// A rank's parameters, by global name, in the order the rank's layers first use them.
// Addresses are stable.
class ParamStore {
 public:
  // Registers `tensor` (a leaf requiring grad) as `name`; decay: tensors of two dimensions or more.
  NamedParam& add(const std::string& name, const at::Tensor& tensor);
  NamedParam* find(const std::string& name);
  std::deque<NamedParam>& params() { return params_; }
  const std::deque<NamedParam>& params() const { return params_; }
  int64_t numel() const;

 private:
  std::deque<NamedParam> params_;
  std::unordered_map<std::string, size_t> index_;
};

namespace detail {
// The parameters LayerInfo::shared hands out on a rank: made once per name, registered in the
// rank's store where a layer's module first holds them.
class SharedParams {
 public:
  SharedParams(ParamStore& store, uint64_t seed) : store_(store), seed_(seed) {}
  at::Tensor get(const std::string& name, const std::vector<int64_t>& shape,
                 const std::function<void(at::Tensor&)>& init);
  // The shared name of `t`, or null if it is not a shared parameter.
  const std::string* name_of(const at::Tensor& t) const;
  ParamStore& store() { return store_; }

 private:
  ParamStore& store_;
  uint64_t seed_;
  std::unordered_map<std::string, at::Tensor> made_;
  std::unordered_map<const void*, std::string> names_;  // TensorImpl -> name
};
}  // namespace detail

// The shape, type and name of a tensor crossing a stage boundary.
struct TensorSpec {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  std::string name;  // "" for a layer of one tensor's (pprt::NamedTensor)
  int64_t numel() const;
  bool operator==(const TensorSpec&) const = default;
};
std::string to_string(const TensorSpec& s);  // "[2, 64, 128] Float", "mtp.1 [2, 64, 128] Float"

// What crosses a stage boundary for one microbatch: its tensors, in order, one message
// (train/messages.h).
struct BoundarySpec {
  std::vector<TensorSpec> tensors;
  int64_t numel() const;  // of them all
  bool operator==(const BoundarySpec&) const = default;
};
std::string to_string(const BoundarySpec& s);  // its tensors', ", " between them
BoundarySpec spec_of(const Tensors& ts);       // their shapes, dtypes and names
std::vector<at::Tensor> tensors_of(const Tensors& ts);

// Where a layer sits in the model: its symbol, its index among that symbol's layers and among
// all the model's layers, and the layout stage that holds it.
struct LayerPlace {
  char symbol = 0;
  int index = 0, count = 0, position = 0, layers = 0, stage = 0;
};
// Every layer of `layout`, in model order.
std::vector<LayerPlace> layer_places(const ppc::Layout& layout);

// What a rank's stages share: the model, its configuration, the rank's parameters.
struct ModelContext {
  const Model* model = nullptr;
  ModelSetup setup;
  double aux_loss_weight = 0;  // --mtp-loss-weight
  uint64_t seed = 0;
  at::Device device = at::Device(at::kCPU);
  // Every stage splits its backward through the autograd graph (autograd_split.h), even where
  // its layers split their own (the built-in model's): for tests and benchmarks of the split.
  // PPRUN_GENERIC_SPLIT=1 in the environment does the same.
  bool generic_split = false;
  // The dtype of the activations crossing stage boundaries (--dtype: the model's activations;
  // precision.h). The placeholder before the first layer and the loss stay fp32.
  at::ScalarType dtype = at::kFloat;
  // What each layer keeps between its forward and its backward (issue 42, --recompute): its mode
  // is memory.mode_of(layout stage, its kind). Full: the layer keeps its inputs and reruns its
  // forward in its backward (recompute.h), except a layer whose inputs need no gradient (the
  // embedding that starts the model), which has nothing to rerun from; selective: the layer is
  // told (LayerInfo::selective_recompute) and recomputes its cheap parts itself, if it can.
  // Offload: what the layer saves for its backward goes to host memory between a pipelined F
  // and its B or I (offload.h, the executor's Offloader).
  ppc::MemoryPolicy memory = {};
  // Expert parallelism (--ep): every layer's LayerInfo::experts.
  ExpertGroup experts = {};
  // Offloading on the CPU: a host-to-host copy, for tests (pprun --offload-test-host-copy).
  bool offload_host_copy = false;
};

// The layers of one layout stage (or of the whole model: the unpipelined reference).
class Stage {
 public:
  // Layout stage `stage` of `layout` (-1: every layer, the whole model), its layers made by
  // `ctx.model`'s factories, their parameters registered in `params`' store and moved to
  // `ctx.device`. Throws ppc::UserError naming the layer when a factory fails or a parameter
  // name is taken.
  Stage(const ModelContext& ctx, const ppc::Layout& layout, int stage,
        detail::SharedParams& params);
  ~Stage();
  Stage(Stage&&) noexcept;
  Stage& operator=(Stage&&) noexcept;

  int index() const;          // the layout stage (-1: the whole model)
  bool has_loss() const;      // holds the model's last layer: forward() returns the loss
  bool takes_tokens() const;  // holds the model's first layer, which starts from the token ids
  // Every layer splits its own backward (Layer::splits_backward), and the context does not ask
  // for the generic split: forward() then takes a WeightWork. Otherwise an I splits the stage's
  // backward through the autograd graph (autograd_split.h).
  bool splits_backward() const;
  // The global names of the parameters its layers hold, each once, in order of first use.
  const std::vector<std::string>& param_names() const;
  // Its layers' step sums (Layer::step_sums), each named by its layer and position ("t3.0": the
  // first of the 't' layer of global index 3), in layer order: the same names on every rank that
  // holds the layer.
  std::vector<std::pair<std::string, at::Tensor>> step_sums() const;

  // One microbatch. `state`: the tensors crossing into the stage (empty or ignored when it takes
  // the token ids); `rows`: the microbatch's token rows [b, length + 1] (int64) and `shape` its
  // shape (Model::shape_of). Returns the tensors crossing out of it, the loss (one scalar) after
  // the model's last layer, with the auxiliary losses of its layers added; a stage before the
  // last leaves its layers' auxiliary losses in `losses->terms` (the executor joins them to its
  // backward: aux_loss.h). Layers that split their own backward defer into `work` (null: through
  // autograd); what layers report goes into `losses` (the loss itself as "main" when the model
  // reports nothing; null: kept nowhere). A layer that fails, or whose output breaks its declared
  // shape, throws ppc::UserError naming the stage and the layer.
  Tensors forward(const Tensors& state, const at::Tensor& rows, const MicrobatchShape& shape,
                  int microbatch, WeightWork* work, LossReport* losses);
  // The same for a stage whose boundaries are one tensor each (tests), its shape from `rows`.
  at::Tensor forward(const at::Tensor& state, const at::Tensor& rows, int microbatch,
                     WeightWork* work, LossReport* losses);
  // How many times its layers' forwards ran, recomputations included (each layer's each run
  // counts one): for tests that count recomputation.
  int64_t layer_runs() const;
  // "stage 2 (layers 't' #3 .. 't' #5)" or "the whole model": for messages.
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What crosses each boundary of `layout` for a microbatch of shape `mb`: entry i enters layout
// stage i, the last leaves the model (the loss, a scalar). From the layers' declared shapes
// (Model::layer's ShapeFn, SetupShapeFn or TensorsShapeFn); nothing if a layer declares none
// (`missing` then says which). Activations are of `dtype` (ModelContext::dtype); the placeholder
// and the loss are fp32.
std::optional<std::vector<BoundarySpec>> declared_boundaries(
    const Model& model, const ModelSetup& setup, const ppc::Layout& layout,
    const MicrobatchShape& mb, std::string* missing = nullptr, at::ScalarType dtype = at::kFloat);
// The same for microbatches of `rows` sequences of setup.seq_len tokens (and no other size).
std::optional<std::vector<BoundarySpec>> declared_boundaries(
    const Model& model, const ModelSetup& setup, const ppc::Layout& layout, int64_t rows,
    std::string* missing = nullptr, at::ScalarType dtype = at::kFloat);

// The same, learned from one forward of the whole model, for a model whose layers do not all
// declare their shapes: every layout stage built on this process from `ctx` (parameters of their
// own, on ctx.device, as the reference makes them) and run once, without autograd, on the token
// rows `rows` of a microbatch; each stage's output gives its boundary (shapes and dtypes) for
// microbatches of that shape. It costs one unpipelined forward of one microbatch and, while it
// runs, the memory of the whole model's parameters; the model is freed afterwards. Throws
// ppc::UserError naming the stage and layer when a layer fails.
std::vector<BoundarySpec> learned_boundaries(const ModelContext& ctx, const ppc::Layout& layout,
                                             const at::Tensor& rows);

// A process's parameters and the stages that use them (a rank's stages, or the whole model).
struct RankModel {
  ModelContext ctx;
  ParamStore store;
  detail::SharedParams shared;
  std::vector<std::unique_ptr<Stage>> owned;
  std::vector<Stage*> stages;

  explicit RankModel(const ModelContext& c);
  RankModel(const RankModel&) = delete;
  RankModel& operator=(const RankModel&) = delete;
  // Builds layout stage `stage` of `layout` (-1: the whole model) and appends it to `stages`.
  Stage& add(const ppc::Layout& layout, int stage);
};

// The spec before the model's first layer: a one-float placeholder (every rank reads the tokens
// itself; an empty first stage passes it on).
BoundarySpec placeholder_spec();

}  // namespace pprt
