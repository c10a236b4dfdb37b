// pprun's own model family as a pprt::Model (pprt/pprt.h), registered through the same interface
// a user's model uses: E token embedding, t Llama-style decoder layer (RMSNorm, rotary embedding,
// grouped-query causal attention, SwiGLU), m multi-token prediction depth k (DeepSeek-V3 section
// 2.2): h^k = FinalNorm(Decoder(W_k [RMSNorm(Emb(t_{i+k})) ; RMSNorm(h^{k-1}_i)])), h^0 the main
// model's last decoder output; L: the output head on FinalNorm(h^0) and on every h^k, and the
// loss CE_main + (lambda / D) sum_k CE_k (lambda: LayerInfo::aux_loss_weight, --mtp-loss-weight),
// where depth k predicts token i+1+k and positions whose target lies past the sequence are masked.
// The MTP term is the auxiliary loss "mtp" (Microbatch::add_loss: logged as mtp_loss, the mean of
// the CE_k), declared for layouts with m layers.
//
// What crosses a boundary between E and L is the main hidden state [b, seq_len, hidden] and each
// MTP depth's hidden state computed so far, named "mtp.1", "mtp.2", ... (the m and L layers take
// and give several tensors: pprt::Layer::forward_tensors), one message holding the bytes of their
// stack (architecture.h: Boundary).
// Parameters keep architecture.h's global names and are initialised from (seed, name) alone
// (init_param), so every layout, pp and vpp gives exactly the weights of the unpipelined model.
// Every parameter is used through an operation of ops.h whose backward splits itself (the
// hand-written I/W split: Layer::splits_backward).
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pprt/pprt.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/models/llama/config.h"
#include "runtime/models/llama/ops.h"

namespace pprt {

// The model of `config`: symbols E, t, m and L, each declaring its output's shape. Its activations
// and matrix products are of LayerInfo::dtype (--dtype; bf16: mixed precision,
// runtime/model/precision.h; its parameters stay fp32), from the embedding's output to the logits
// (the loss is fp32). Its layers only: the hooks that give it the rest of the runtime are the
// family's (family.h).
Model builtin_model(const ModelConfig& config, Kernels kernels = Kernels::Auto);

// PPRUN_KERNELS's choice (runtime/model/kernel_choice.h) for this model's operations.
Kernels kernels_of(KernelChoice choice);

// The deterministic initial value of a parameter (CPU, float32): normal(0, std) from (seed, name),
// or ones for norm scales (std 0). Exposed for tests.
at::Tensor init_param(const std::string& name, const std::vector<int64_t>& shape, double std,
                      uint64_t seed);

}  // namespace pprt
