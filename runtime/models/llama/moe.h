// A decoder layer's mixture of experts (moe_config.h), over the operations of ops.h: the router,
// the routed SwiGLU experts and the shared experts, dropless (every token reaches each of its
// top_k experts). The routed experts' outputs are summed in expert order, each into its tokens'
// rows, so a microbatch's result does not depend on where or when it runs (pipelined equals
// --reference). Every weight is used through ops.h, whose backward splits itself into I and W.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "pprt/pprt.h"
#include "runtime/models/llama/moe_config.h"
#include "runtime/models/llama/ops.h"

namespace pprt {

// DeepSeek-V3's bias balancing: the tokens each expert got in the step's training forwards (a
// microbatch counted once, however often its forward runs: a recomputation does not count;
// evaluation's forwards, which run without autograd, not at all). After the step the runtime sums
// `tokens` over every copy of the layer (Layer::step_sums), and the layer's first training forward
// of the next step moves the bias by it. The forward and the backward thread (a concurrent
// OVERLAP_F_B, a recomputation inside a backward) both count: under `mutex`.
struct BiasLoads {
  std::mutex mutex;
  int64_t step_version = -1;  // the router weight's version when the step began (AdamW bumps it)
  std::set<int> counted;      // the microbatches counted in `tokens`
  at::Tensor tokens;          // [experts] float64, on the CPU
};

struct MoeLayer {
  at::Tensor* router = nullptr;         // [experts, hidden]
  at::Tensor* bias = nullptr;           // [experts] with bias_update_rate; else null
  std::vector<at::Tensor*> w1, w3, w2;  // per routed expert (under --ep, this rank's)
  // Expert parallelism (moe_dispatch.h): this rank holds experts [first, first + w1.size()).
  ExpertGroup group;
  int first = 0;
  at::Tensor *shared_w1 = nullptr, *shared_w3 = nullptr, *shared_w2 = nullptr;
  at::Tensor* shared_gate = nullptr;  // [1, hidden] with shared_gate
  // Working copies (fused gate/up products; other dtypes under --dtype bf16).
  std::vector<std::shared_ptr<FusedWeight>> gate_up, w2_copy;
  std::shared_ptr<FusedWeight> router_copy = std::make_shared<FusedWeight>(),
                               shared_gate_up = std::make_shared<FusedWeight>(),
                               shared_w2_copy = std::make_shared<FusedWeight>(),
                               shared_gate_copy = std::make_shared<FusedWeight>();
  // Bias balancing (with a bias): the step's loads, the runtime's step sum (Layer::step_sums).
  std::shared_ptr<BiasLoads> loads;
};

// The layer's parameters from `p` at `i` on, in architecture.cpp's order (add_moe_mlp); `i` moves
// past them. Sharded over `g` (g.size > 1), `p` holds only the routed experts of rank g.rank
// (moe_local_experts).
MoeLayer moe_layer(std::deque<at::Tensor>& p, size_t& i, const MoeConfig& c,
                   const ExpertGroup& g = {});

// Whether the parameter named `name` of the layer whose MLP's parameters are named from `mlp`
// ("layers.3.mlp.") is a routed expert's that rank g.rank does not hold; `expert` (if not null)
// says whether it is a routed expert's at all.
bool moe_foreign_expert(const std::string& name, const std::string& mlp, const MoeConfig& c,
                        const ExpertGroup& g, bool* expert = nullptr);

// The MLP's output for the normalised hidden state `h` [b, T, hidden] (to be added to the
// residual stream). Adds the auxiliary loss "load_balancing" (moe_config.h) to `mb`; with a
// routing bias, first moves it by the loads of the step before when a step has passed.
at::Tensor moe_mlp(const MoeConfig& c, const at::Tensor& h, MoeLayer& p, const Microbatch& mb,
                   Kernels kernels);

}  // namespace pprt
