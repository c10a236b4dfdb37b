// What the model is, without LibTorch: the layers of each layout stage, the parameters each layer
// uses (global names, shapes, initialisation), the state that crosses each stage boundary, and
// which ranks of a plan hold a copy of each parameter.
//
// Layers: E token embedding; t Llama-style decoder layer; m multi-token prediction (MTP) depth k
// (the k-th m of the layout); L final norm, output head and loss. Parameters have global names
// that do not depend on the layout split ("embed.weight", "layers.17.attn.wq.weight",
// "mtp.0.eh_proj.weight", "head.out.weight"), so any plan of a model holds the same parameters.
// A parameter used by layers on several ranks (the embedding of E, of every m and, with tied
// embeddings, of L; every parameter of DualPipe's two model copies) has a copy on each of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/layout.h"
#include "compiler/plan.h"
#include "runtime/models/llama/config.h"

namespace pprt {

struct LayerSpec {
  ppc::LayerKind kind;
  int index = 0;  // t: the global decoder layer number; m: the MTP depth minus 1; else 0
};

// The layers of every layout stage, decoder layers and MTP depths numbered in model order.
std::vector<std::vector<LayerSpec>> number_layers(const ppc::Layout& layout);

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  double init_std = 0;  // normal(0, init_std) from (seed, name); 0: ones (norm scales)
  bool decay = true;    // AdamW weight decay (matrices), not norm scales or biases
  bool zeros = false;   // starts at zero (biases), whatever init_std says
  int64_t numel() const;
};

// The state entering a stage (or leaving the last one). Before E there is nothing but the token
// ids, which every rank has (the boundary carries a placeholder of one float); between E and L,
// the main hidden state and each MTP depth's hidden state computed so far (named tensors of
// [batch, seq_len, hidden] each: builtin.h), whose message holds the bytes of their stack; after
// L, the loss.
struct Boundary {
  enum class Kind : uint8_t { Tokens, Hidden, Loss };
  Kind kind = Kind::Tokens;
  int streams = 0;  // Hidden: 1 + the MTP depths computed so far

  // The shape of what crosses it for a microbatch of `batch` sequences, as one tensor:
  // Tokens {1}, Hidden {streams, batch, seq_len, hidden} (the streams' stack), Loss {} (a scalar).
  std::vector<int64_t> shape(int64_t batch, const ModelConfig& c) const;
  bool operator==(const Boundary&) const = default;
};

// Everything a Stage needs to know beyond its parameters.
struct StageSpec {
  std::vector<LayerSpec> layers;
  Boundary in, out;
  int total_decoders = 0;  // decoder layers of the whole model (scales residual projections)
  int mtp_depths = 0;      // m layers of the whole model
  double mtp_loss_weight = 0.1;
};

// One StageSpec per layout stage.
std::vector<StageSpec> stage_specs(const ppc::Layout& layout, double mtp_loss_weight);
// The whole model as one stage (the unpipelined reference).
StageSpec whole_model_spec(const ppc::Layout& layout, double mtp_loss_weight);

int mtp_depths(const ppc::Layout& layout);

// The parameters `layers` use, each once, in the order of first use.
std::vector<ParamSpec> params_of(const ModelConfig& c, const std::vector<LayerSpec>& layers,
                                 int total_decoders);
// Every parameter of the model (each once).
std::vector<ParamSpec> model_params(const ModelConfig& c, const ppc::Layout& layout);
int64_t count_parameters(const ModelConfig& c, const ppc::Layout& layout);

// The parameters rank `rank` of `plan` holds (those of every stage it runs, each once).
std::vector<ParamSpec> rank_params(const ppc::Plan& plan, const ModelConfig& c, int rank);

// Parameters held by several ranks, grouped by the set of ranks holding them. Their gradients are
// summed over the group after every step (before clipping), so the copies stay identical; the
// lowest rank of a group counts them in the global gradient norm. Groups are in one global order
// (every rank sees the same list) and names sorted within a group.
struct SharedGroup {
  std::vector<int> ranks;  // sorted, at least two
  std::vector<std::string> names;
};
std::vector<SharedGroup> shared_groups(const ppc::Plan& plan, const ModelConfig& c);

}  // namespace pprt
