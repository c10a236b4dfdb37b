// The model's modules on LibTorch, built from the layout (architecture.h says which layers and
// parameters there are). A rank owns its parameters in a ParamStore, one tensor per global name,
// however many of its stages use it; a Stage runs the layers of one layout stage.
//
// Layers: E token embedding; t Llama-style decoder layer (RMSNorm, rotary embedding, grouped-query
// causal attention, SwiGLU); m multi-token prediction depth k (DeepSeek-V3 section 2.2):
// h^k = FinalNorm(Decoder(W_k [RMSNorm(Emb(t_{i+k})) ; RMSNorm(h^{k-1}_i)])), h^0 the main
// model's last decoder output; L: the output head on FinalNorm(h^0) and on every h^k, and the loss
// CE_main + (lambda / D) sum_k CE_k, where depth k predicts token i+1+k and positions whose target
// lies past the sequence are masked.
//
// Parameters are initialised from (seed, name) alone, so every layout, pp and vpp gives exactly
// the weights of the unpipelined model, and the copies of a shared parameter start identical.
//
// Every parameter is used through one of three operations (a matmul with a weight, a per-channel
// scale, an embedding lookup) whose backward either adds the weight gradient to the parameter's
// .grad at once (B) or, when the microbatch's GradStash (ops.h) defers it (I), keeps the
// operation's input and output gradient so that W does that later without repeating the backward.
// Autograd itself never carries a weight gradient: a matmul's product accumulates into .grad in
// place.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/model/architecture.h"
#include "runtime/model/config.h"
#include "runtime/model/ops.h"

namespace pprt {

struct NamedParam {
  std::string name;
  at::Tensor tensor;  // a leaf that requires grad
  bool decay = true;  // AdamW weight decay applies (matrices); not to norm scales
};

// A rank's parameters, by global name, created on first use. Addresses are stable.
class ParamStore {
 public:
  ParamStore(uint64_t seed, const at::Device& device);
  // The parameter `spec` names, created (deterministically initialised) if it does not exist yet.
  at::Tensor* use(const ParamSpec& spec);
  NamedParam* find(const std::string& name);
  std::deque<NamedParam>& params() { return params_; }
  const std::deque<NamedParam>& params() const { return params_; }

 private:
  uint64_t seed_;
  at::Device device_;
  std::deque<NamedParam> params_;
  std::unordered_map<std::string, size_t> index_;
};

// The losses a stage holding L computed for a microbatch (detached).
struct StageLosses {
  at::Tensor main;  // scalar: the main next-token cross-entropy
  at::Tensor mtp;   // [depths]: CE_k of each MTP depth (undefined without m)
};

class Stage {
 public:
  // The stage's parameters come from (and are created in) `store`, which must outlive it.
  Stage(const ModelConfig& config, StageSpec spec, ParamStore& store, const at::Device& device,
        Kernels kernels = Kernels::Auto);
  ~Stage();
  Stage(Stage&&) noexcept;
  Stage& operator=(Stage&&) noexcept;

  const StageSpec& spec() const;
  bool has_loss() const;  // holds L: fills `losses` in forward()

  // One microbatch. `state`: the tensor of spec().in (undefined for the model's first stage);
  // `rows`: the microbatch's token rows [b, seq_len + 1] (int64): ids are rows[:, :T], the main
  // targets rows[:, 1:], MTP depth k reads them shifted by k. Returns the tensor of spec().out
  // (the loss, a scalar, after L). The backward of what it returns records into `stash` (which
  // must outlive the graph).
  at::Tensor forward(const at::Tensor& state, const at::Tensor& rows, GradStash* stash,
                     StageLosses* losses);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The deterministic initial value of a parameter (CPU, float32): normal(0, std) from (seed, name),
// or ones for norm scales (std 0). Exposed for tests.
at::Tensor init_param(const std::string& name, const std::vector<int64_t>& shape, double std,
                      uint64_t seed);

}  // namespace pprt
