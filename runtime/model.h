// The model, built from the layout: each symbol is a module (E token embedding, t Llama-style
// decoder layer, L final norm + output head + cross-entropy). A Stage is the layers of one
// layout stage; a rank builds only the stages it holds.
//
// Parameters have global names ("embed.weight", "layers.3.attn.wq.weight", "head.out.weight")
// and are initialised from (seed, name) alone, so every layout, pp and vpp gives exactly the
// weights of the unpipelined model.
//
// Every parameter is used through one of three operations (a matmul with a weight, a per-channel
// scale, an embedding lookup) whose backward either computes the weight gradient at once (B) or,
// when the microbatch's GradStash defers it (I), keeps the operation's input and output gradient
// so that W computes the weight gradient later without repeating the backward.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/layout.h"
#include "runtime/model_config.h"

namespace pprt {

struct LayerSpec {
  ppc::LayerKind kind;
  int index = 0;  // decoder layers: the global layer number (0-based); else 0
};

// The layers of every layout stage, decoder layers numbered globally in model order.
std::vector<std::vector<LayerSpec>> number_layers(const ppc::Layout& layout);

struct NamedParam {
  std::string name;
  at::Tensor tensor;  // a leaf that requires grad
  bool decay = true;  // AdamW weight decay applies (matrices); not to norm scales
};

// What one microbatch's backward leaves for its weight-gradient step.
class GradStash {
 public:
  enum class Op : uint8_t { Linear, Scale, Embedding };
  struct Item {
    Op op;
    at::Tensor* param;  // the parameter (owned by its Stage)
    at::Tensor input;   // the operation's input (token ids for Embedding)
    at::Tensor grad;    // the gradient of its output
  };

  // When `defer` is set while the backward runs, weight gradients are kept here (I), else they
  // are computed during the backward (B).
  bool defer = false;

  void push(Item item) { items_.push_back(std::move(item)); }
  // W: computes the kept weight gradients, adds them to the parameters' .grad, and forgets them.
  void run_weight_grads();
  bool empty() const { return items_.empty(); }

 private:
  std::vector<Item> items_;
};

class Stage {
 public:
  // `total_decoders`: decoder layers in the whole model (scales the residual projections' init).
  Stage(const ModelConfig& config, std::vector<LayerSpec> layers, uint64_t seed, int total_decoders,
        const at::Device& device);
  ~Stage();
  Stage(Stage&&) noexcept;
  Stage& operator=(Stage&&) noexcept;

  bool takes_tokens() const;  // the first layer is E: input is token ids [b, T]
  bool has_loss() const;      // the last layer is L: output is the mean cross-entropy
  bool empty() const;

  // One microbatch. input: token ids [b, T] (int64) or hidden states [b, T, hidden]; targets:
  // [b, T] token ids when has_loss(). Returns hidden states [b, T, hidden], or the loss (scalar).
  // The backward of what it returns records into `stash` (which must outlive the graph).
  at::Tensor forward(const at::Tensor& input, const at::Tensor& targets, GradStash* stash);

  std::vector<NamedParam>& params();
  const std::vector<NamedParam>& params() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The deterministic initial value of a parameter (CPU, float32): normal(0, std) from (seed, name),
// or ones for norm scales. Exposed for tests.
at::Tensor init_param(const std::string& name, const std::vector<int64_t>& shape, double std,
                      uint64_t seed);

}  // namespace pprt
