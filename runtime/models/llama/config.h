// The size of the model pprun builds from a layout: flags, or a JSON config file
// (examples/tiny-model.json). Plain data, no LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pprt/setup.h"
#include "runtime/models/llama/moe_config.h"

namespace pprt {

// Llama 3's rope_scaling ("rope_type": "llama3"): the rotary frequencies of wavelengths above
// original_max_positions / low_freq_factor are divided by `factor`, those below
// original_max_positions / high_freq_factor kept, those between interpolated smoothly.
struct RopeScaling {
  double factor = 0;  // 0: no scaling
  double low_freq_factor = 1, high_freq_factor = 4;
  int original_max_positions = 8192;
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  int hidden = 64;   // model width
  int heads = 4;     // attention heads
  int kv_heads = 2;  // key/value heads (grouped-query attention); divides heads
  int ffn = 176;     // SwiGLU hidden width
  int vocab = 256;   // tokens (byte-level data needs at least 256)
  int seq_len = 64;  // tokens per sequence
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;  // the output head uses the token embedding's weight
  int head_size = 0;            // size of an attention head; 0: hidden / heads
  RopeScaling rope_scaling;     // Llama 3's rotary frequency scaling (factor 0: none)
  bool qkv_bias = false;        // the q/k/v projections have biases (Qwen2); o_proj never does
  // Sliding-window attention (Mistral, Qwen2): a position attends to itself and the
  // sliding_window - 1 positions before it; 0: to every earlier position. `layer_types` says per
  // decoder layer (in the model's order) which attention it has, in Hugging Face's words,
  // "full_attention" or "sliding_attention"; empty: every layer slides, MTP depths included
  // (which otherwise attend fully).
  int sliding_window = 0;
  std::vector<std::string> layer_types;
  // A model read from a Hugging Face directory (--init-from, docs/huggingface.md): its family
  // ("llama", "mistral", "qwen2"), max_position_embeddings and the other fields of its config.json
  // that pprun keeps without using them (bos_token_id, eos_token_id, initializer_range, ...: name
  // -> the value's JSON text), which --export --format hf writes back. Empty / 0 for pprun's own
  // models.
  std::string hf_family;
  int hf_max_positions = 0;
  std::map<std::string, std::string> hf_fields;
  MoeConfig moe;  // mixtures of experts (moe_config.h); experts 0: every layer dense

  int head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  // The attention window of decoder layer `layer` (-1: an MTP depth's), 0 for full attention.
  int window_of(int layer) const;
  bool operator==(const ModelConfig&) const = default;
};

// Values given on the command line; each overrides the config file.
struct ModelOverrides {
  std::optional<int> hidden, heads, kv_heads, ffn, vocab, seq_len;
  bool tie_embeddings = false;  // --tie-embeddings (a flag can only turn it on)
  std::optional<int> experts, top_k, shared_experts, first_dense;  // moe_config.h
};

// Parses a JSON object holding any of "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len",
// "rope_theta", "norm_eps", "tie_embeddings", "head_dim", "rope_scaling" (an object:
// "factor", "low_freq_factor", "high_freq_factor", "original_max_positions"), "qkv_bias",
// "sliding_window", "layer_types", "hf_family", "hf_max_positions", "hf_fields" (an object)
// over `base`. Throws ppc::UserError naming the input
// and the field (unknown fields are errors: a typo must not silently train another model).
ModelConfig parse_model_config(std::string_view json_text, const std::string& input_name,
                               ModelConfig base = {});

// The JSON object parse_model_config reads (a checkpoint's "model"): every field of pprun's own
// models, and the others (head_dim ... hf_fields) where they are not their defaults.
nlohmann::ordered_json model_config_json(const ModelConfig& c);

// `base` (the defaults, or a checkpoint's model), then the file (if any), then the overrides;
// then checks the result.
ModelConfig resolve_model_config(const std::string& config_path, const ModelOverrides& overrides,
                                 ModelConfig base = {});

// Throws ppc::UserError (naming the field, as `where`) if the sizes do not fit together: all
// positive, heads divides hidden with an even head size, kv_heads divides heads, limits; a
// Hugging Face family agrees with qkv_bias (qwen2 has the biases, llama and mistral do not);
// layer_types only with a sliding window, each entry one of the two.
void check_model_config(const ModelConfig& c, const std::string& where);

// "hidden 64, heads 4 (kv 2), ffn 176, vocab 256, seq 64" (+ ", tied embeddings", ", sliding
// window 32", ...)
std::string describe(const ModelConfig& c);

// --resume: that a checkpoint's model (`theirs`, laid out as `their_layout`) is this run's, in
// words: the sizes, then the decoder layers and MTP depths. Throws ppc::UserError naming `where`
// (the checkpoint) and the first difference.
void check_same_model(const ModelConfig& theirs, const LayoutInfo& their_layout,
                      const ModelConfig& mine, const LayoutInfo& layout, const std::string& where);

}  // namespace pprt
