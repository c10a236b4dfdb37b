// pprun's own model in Hugging Face's formats (docs/huggingface.md): LlamaForCausalLM,
// MistralForCausalLM and Qwen2ForCausalLM, read (--init-from) and written (--export --format hf)
// through the runtime's Hugging Face hooks (pprt::Family::from_hugging_face,
// pprt::Model::hugging_face; runtime/checkpoint/hf.h does the files); the experts of
// MixtralForCausalLM and Qwen2MoeForCausalLM in hf_moe.cpp. No LibTorch.
#include "runtime/models/llama/hf_mapping.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/hf_config_reader.h"
#include "runtime/models/llama/hf_moe.h"

namespace pprt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct HfFamily {
  const char* architecture;
  const char* model_type;
};
constexpr HfFamily kFamilies[] = {{"LlamaForCausalLM", "llama"},
                                  {"MistralForCausalLM", "mistral"},
                                  {"Qwen2ForCausalLM", "qwen2"},
                                  {"MixtralForCausalLM", "mixtral"},
                                  {"Qwen2MoeForCausalLM", "qwen2_moe"}};

}  // namespace

// --- names ------------------------------------------------------------------------------------

std::string hf_tensor_name(const std::string& n, const std::string& family) {
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn.wq.weight", "self_attn.q_proj.weight"},
      {"attn.wk.weight", "self_attn.k_proj.weight"},
      {"attn.wv.weight", "self_attn.v_proj.weight"},
      {"attn.wo.weight", "self_attn.o_proj.weight"},
      {"attn.wq.bias", "self_attn.q_proj.bias"},
      {"attn.wk.bias", "self_attn.k_proj.bias"},
      {"attn.wv.bias", "self_attn.v_proj.bias"},
      {"mlp_norm.weight", "post_attention_layernorm.weight"},
      {"mlp.w1.weight", "mlp.gate_proj.weight"},
      {"mlp.w3.weight", "mlp.up_proj.weight"},
      {"mlp.w2.weight", "mlp.down_proj.weight"},
  };
  if (n == "embed.weight") return "model.embed_tokens.weight";
  if (n == "head.norm.weight") return "model.norm.weight";
  if (n == "head.out.weight") return "lm_head.weight";
  if (n.starts_with("layers.")) {
    const size_t dot = n.find('.', 7);
    if (dot != std::string::npos) {
      const std::string rest = n.substr(dot + 1);
      for (const auto& [ours, theirs] : kLayer)
        if (rest == ours) return "model." + n.substr(0, dot + 1) + theirs;
      if (moe_family(family))
        if (const std::string theirs = moe_rest_name(rest, family); !theirs.empty())
          return "model." + n.substr(0, dot + 1) + theirs;
    }
  }
  throw ppc::InternalError(fmt::format("parameter '{}' has no Hugging Face name", n));
}

namespace {

// --- config.json ------------------------------------------------------------------------------

// Fields that do not change the model's function (ids, caches, bookkeeping).
const std::set<std::string> kHarmless = {"architectures",
                                         "model_type",
                                         "transformers_version",
                                         "dtype",
                                         "torch_dtype",
                                         "bos_token_id",
                                         "eos_token_id",
                                         "pad_token_id",
                                         "use_cache",
                                         "initializer_range",
                                         "pretraining_tp",
                                         "max_position_embeddings",
                                         "_name_or_path",
                                         "name_or_path",
                                         "output_attentions",
                                         "output_hidden_states",
                                         "return_dict",
                                         "tokenizer_class",
                                         "id2label",
                                         "label2id",
                                         "max_window_layers",
                                         "sep_token_id",
                                         "decoder_start_token_id",
                                         "chunk_size_feed_forward",
                                         "is_decoder",
                                         "is_encoder_decoder",
                                         "problem_type",
                                         "attn_implementation",
                                         "_attn_implementation_autoset"};

// Fields pprun reads into its model and --export --format hf writes from it, and bookkeeping of
// the file that is not kept. Every other field of a config.json is kept as it is
// (ModelConfig::hf_fields) and written back by the export.
const std::set<std::string> kDerived = {"architectures",
                                        "model_type",
                                        "hidden_size",
                                        "intermediate_size",
                                        "num_hidden_layers",
                                        "num_attention_heads",
                                        "num_key_value_heads",
                                        "head_dim",
                                        "hidden_act",
                                        "max_position_embeddings",
                                        "rms_norm_eps",
                                        "rope_theta",
                                        "rope_parameters",
                                        "rope_scaling",
                                        "tie_word_embeddings",
                                        "vocab_size",
                                        "attention_bias",
                                        "mlp_bias",
                                        "dtype",
                                        "torch_dtype"};
const std::set<std::string> kBookkeeping = {"transformers_version", "_name_or_path", "name_or_path",
                                            "_attn_implementation_autoset"};

// rope_parameters (transformers 5) or rope_scaling with rope_theta (4.x).
void read_rope(HfConfigReader& r, ModelConfig& c) {
  const std::string key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  r.used.insert("rope_parameters");
  r.used.insert("rope_scaling");
  if (r.has("rope_theta")) c.rope_theta = r.number(r.at("rope_theta"), "rope_theta");
  if (!r.has(key)) return;
  const json& p = r.at(key);
  if (!p.is_object()) fail(r.file, fmt::format("{}: expected an object", key));
  std::string type = "default";
  for (const char* t : {"rope_type", "type"})
    if (p.contains(t)) {
      if (!p.at(t).is_string())
        fail(r.file, fmt::format("{}.{}: expected a string, got {}", key, t, p.at(t).dump()));
      type = p.at(t).get<std::string>();
    }
  if (type != "default" && type != "llama3")
    fail(r.file, fmt::format("{}.rope_type: '{}' is not supported (pprun implements the default "
                             "rotary embedding and 'llama3' scaling)",
                             key, ppc::printable(type)));
  for (const auto& item : p.items()) {
    const std::string& f = item.key();
    const std::string name = key + "." + ppc::printable(f);
    if (f == "rope_type" || f == "type") continue;
    if (f == "rope_theta") {
      c.rope_theta = r.number(item.value(), name);
    } else if (type == "llama3" && f == "factor") {
      c.rope_scaling.factor = r.number(item.value(), name);
    } else if (type == "llama3" && f == "low_freq_factor") {
      c.rope_scaling.low_freq_factor = r.number(item.value(), name);
    } else if (type == "llama3" && f == "high_freq_factor") {
      c.rope_scaling.high_freq_factor = r.number(item.value(), name);
    } else if (type == "llama3" && f == "original_max_position_embeddings") {
      if (!item.value().is_number_integer() || item.value().get<long long>() < 1 ||
          item.value().get<long long>() > (1 << 24))
        fail(r.file,
             fmt::format("{}: expected a positive integer, got {}", name, item.value().dump()));
      c.rope_scaling.original_max_positions = item.value().get<int>();
    } else if (!(f == "factor" && item.value().is_number() && item.value().get<double>() == 1.0)) {
      fail(r.file, fmt::format("{}: not supported with rope_type '{}' (it would change the "
                               "rotary embedding)",
                               name, type));
    }
  }
  if (type == "llama3") {
    if (!p.contains("factor")) fail(r.file, fmt::format("{}.factor: missing (llama3)", key));
    for (const char* f :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!p.contains(f)) fail(r.file, fmt::format("{}.{}: missing (llama3)", key, f));
  }
}

// The sliding window (ModelConfig::sliding_window, layer_types), as transformers reads it:
// MistralForCausalLM's sliding_window (4096 when absent, MistralConfig's default; null: none) on
// every layer (transformers ignores its layer_types); Qwen2ForCausalLM's only with
// use_sliding_window, on the layers layer_types names sliding_attention (without layer_types: the
// layers from max_window_layers on, 28 by default); LlamaForCausalLM has none (the fields, if
// there, change nothing and are kept as they are).
void read_window(HfConfigReader& r, const std::string& type, int layers, ModelConfig& c) {
  for (const char* k : {"sliding_window", "use_sliding_window", "max_window_layers", "layer_types"})
    r.used.insert(k);
  auto window = [&](int dflt) {
    if (!r.j.contains("sliding_window")) return dflt;
    const json& w = r.j.at("sliding_window");
    if (w.is_null()) return 0;
    if (!w.is_number_integer() || w.get<long long>() < 1 || w.get<long long>() > (1 << 24))
      fail(r.file,
           fmt::format("sliding_window: expected a positive integer or null, got {}", w.dump()));
    return w.get<int>();
  };
  if (type == "mistral") c.sliding_window = window(4096);
  if (type == "mixtral") c.sliding_window = window(0);  // MixtralConfig's default: none
  if ((type != "qwen2" && type != "qwen2_moe") || !r.boolean("use_sliding_window", false)) return;
  c.sliding_window = window(4096);
  if (c.sliding_window == 0) return;
  if (r.has("layer_types")) {
    const json& lt = r.j.at("layer_types");
    if (!lt.is_array() || lt.size() != static_cast<size_t>(layers))
      fail(r.file, fmt::format("layer_types: expected {} entries (num_hidden_layers), got {}",
                               layers, lt.dump()));
    for (const json& t : lt) {
      if (t != "full_attention" && t != "sliding_attention")
        fail(r.file, fmt::format("layer_types: {} is not supported (pprun's layers are "
                                 "full_attention or sliding_attention)",
                                 t.dump()));
      c.layer_types.push_back(t.get<std::string>());
    }
    return;
  }
  int from = 28;  // Qwen2Config's max_window_layers
  if (r.has("max_window_layers")) {
    const json& m = r.j.at("max_window_layers");
    if (!m.is_number_integer() || m.get<long long>() < 0 || m.get<long long>() > (1 << 24))
      fail(r.file, fmt::format("max_window_layers: expected an integer from 0, got {}", m.dump()));
    from = m.get<int>();
  }
  for (int k = 0; k < layers; ++k)
    c.layer_types.push_back(k >= from ? "sliding_attention" : "full_attention");
}

// The family a checkpoint's model is written as: the one it came from (--init-from), else Llama's,
// Qwen2's where the q/k/v projections have biases (check_model_config keeps a Hugging Face family
// and the biases in agreement), or Mistral's where every layer has a sliding window.
std::string export_family(const ModelConfig& c, int layers) {
  if (c.moe.enabled()) return export_moe_family(c, layers);
  if (moe_family(c.hf_family))
    fail("--export",
         fmt::format("the model has no experts, which Hugging Face's {} needs", c.hf_family));
  bool some_full = false;
  for (const std::string& t : c.layer_types) some_full |= t == "full_attention";
  const std::string family = !c.hf_family.empty() ? c.hf_family
                             : c.qkv_bias         ? "qwen2"
                             : c.sliding_window   ? "mistral"
                                                  : "llama";
  if (c.sliding_window > 0 && family == "llama")
    fail("--export",
         "the model has a sliding window (sliding_window), which Hugging Face's "
         "LlamaForCausalLM does not have");
  if (c.sliding_window > 0 && family == "mistral" && some_full)
    fail("--export",
         "the model has a sliding window on some layers only (layer_types), which "
         "Hugging Face's MistralForCausalLM does not have (Qwen2ForCausalLM has, with "
         "q/k/v biases: qkv_bias)");
  return family;
}

// The fields a family's config class defines (transformers 5: LlamaConfig, MistralConfig,
// Qwen2Config) that pprun's model does not decide, with the class's defaults: what the export
// writes where the model came from no config.json that had them.
nlohmann::ordered_json family_defaults(const std::string& family) {
  nlohmann::ordered_json d{{"attention_dropout", 0.0},
                           {"initializer_range", 0.02},
                           {"use_cache", true},
                           {"pad_token_id", nullptr}};
  if (family == "qwen2" || family == "qwen2_moe") {
    d["bos_token_id"] = nullptr;
    d["eos_token_id"] = nullptr;
    d["sliding_window"] = 4096;  // Qwen2Config's, which counts only with use_sliding_window
    d["max_window_layers"] = 28;
  } else {
    d["bos_token_id"] = 1;
    d["eos_token_id"] = 2;
  }
  if (family == "llama") d["pretraining_tp"] = 1;
  return d;
}

}  // namespace

HfConfig config_from_hf(const nlohmann::json& j, const std::string& file, int seq_len) {
  HfConfigReader r{file, j, {}};
  const HfFamily* family = nullptr;
  if (r.has("architectures")) {
    const json& a = r.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      fail(file, fmt::format("architectures: expected one name such as [\"LlamaForCausalLM\"], "
                             "got {}",
                             a.dump()));
    for (const HfFamily& f : kFamilies)
      if (a[0] == f.architecture) family = &f;
    if (!family)
      fail(file, fmt::format("architectures: '{}' is not supported (pprun reads "
                             "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                             "MixtralForCausalLM and Qwen2MoeForCausalLM)",
                             ppc::printable(a[0].get<std::string>())));
    // transformers builds the model_type's class: the two must name one family.
    if (r.has("model_type") && r.j.at("model_type") != family->model_type)
      fail(file, fmt::format("architectures: [\"{}\"] and model_type: {} disagree (the model_type "
                             "of {} is \"{}\")",
                             family->architecture, r.j.at("model_type").dump(),
                             family->architecture, family->model_type));
  } else if (r.has("model_type") && r.j.at("model_type").is_string()) {
    for (const HfFamily& f : kFamilies)
      if (r.j.at("model_type") == f.model_type) family = &f;
  }
  if (!family)
    fail(file, fmt::format("model_type: {} is not supported (pprun reads llama, mistral, qwen2, "
                           "mixtral and qwen2_moe)",
                           r.has("model_type") ? r.j.at("model_type").dump() : "missing"));
  const std::string type = family->model_type;

  ModelConfig c;
  c.hf_family = type;
  c.seq_len = seq_len;
  c.hidden = r.integer("hidden_size");
  c.heads = r.integer("num_attention_heads");
  c.kv_heads = r.integer("num_key_value_heads", c.heads);
  c.ffn = r.integer("intermediate_size");
  c.vocab = r.integer("vocab_size");
  const int layers = r.integer("num_hidden_layers");
  if (r.has("head_dim")) {
    const int hd = r.integer("head_dim");
    if (hd * c.heads != c.hidden) c.head_size = hd;
  }
  r.used.insert("head_dim");
  c.norm_eps = r.has("rms_norm_eps") ? r.number(r.at("rms_norm_eps"), "rms_norm_eps") : 1e-6;
  r.used.insert("rms_norm_eps");
  c.tie_embeddings = r.boolean("tie_word_embeddings", false);
  if (r.has("max_position_embeddings")) c.hf_max_positions = r.integer("max_position_embeddings");
  read_rope(r, c);
  if (r.has("hidden_act") && (!r.at("hidden_act").is_string() || r.at("hidden_act") != "silu"))
    fail(file, fmt::format("hidden_act: {} is not supported (pprun's MLP is SwiGLU: silu)",
                           r.at("hidden_act").dump()));
  r.used.insert("hidden_act");
  // Qwen2's q/k/v projections always have biases (its config has no field for them). Llama's
  // attention_bias would also give o_proj one, which pprun does not have.
  c.qkv_bias = type == "qwen2" || type == "qwen2_moe";
  if (type == "qwen2_moe") c.qkv_bias = r.boolean("qkv_bias", true);  // transformers 5 names it
  if (r.boolean("attention_bias", false))
    fail(file,
         "attention_bias: true is not supported (it gives o_proj a bias too; pprun's "
         "attention has q/k/v biases only, as Qwen2ForCausalLM has them)");
  if (r.boolean("mlp_bias", false))
    fail(file, "mlp_bias: true is not supported (pprun's MLP projections have no biases)");
  if (r.has("attention_dropout")) {
    const json& d = r.at("attention_dropout");
    if (!d.is_number() || d.get<double>() != 0)
      fail(file,
           fmt::format("attention_dropout: {} is not supported (pprun has no dropout)", d.dump()));
  }
  r.used.insert("attention_dropout");
  read_window(r, type, layers, c);
  if (moe_family(type)) read_moe(r, type, layers, c);
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (!kDerived.count(k) && !kBookkeeping.count(k)) c.hf_fields[k] = item.value().dump();
    if (r.used.count(k) || kHarmless.count(k)) continue;
    if (moe_config_fields().count(k))
      fail(file, fmt::format("{}: a mixture of experts' field, which {} does not have (pprun "
                             "reads experts from MixtralForCausalLM and Qwen2MoeForCausalLM)",
                             ppc::printable(k), family->architecture));
    fail(file, fmt::format("{}: not supported by pprun (a field it does not know could change "
                           "the model; docs/huggingface.md lists the fields it reads)",
                           ppc::printable(k)));
  }
  check_model_config(c, file);
  return HfConfig{c, layers, family->architecture};
}

void check_hf_layout(const HfConfig& hf, const std::string& file, const LayoutInfo& layout) {
  const int decoders = layout.count('t'), mtp = layout.count('m');
  if (mtp > 0)
    fail(file, fmt::format("the layout has {} MTP layers (m), which the {} in {} does not have",
                           mtp, hf.architecture, fs::path(file).parent_path().string()));
  if (decoders != hf.layers)
    fail(file, fmt::format("the layout has {} decoder layers (t), but {} has num_hidden_layers {}",
                           decoders, file, hf.layers));
}

HfFormat hf_format(const ModelConfig& c, const ppc::Layout& layout, const std::string& dtype) {
  if (layout.count(ppc::LayerKind::Mtp) > 0)
    fail("--export", fmt::format("the checkpoint's model {} has MTP layers (m), which no Hugging "
                                 "Face family pprun writes holds",
                                 layout.source));
  const std::string family = export_family(c, layout.count(ppc::LayerKind::Decoder));
  HfFormat f;
  for (const HfFamily& k : kFamilies)
    if (family == k.model_type) f.architecture = k.architecture;
  f.layers = layout.count(ppc::LayerKind::Decoder);
  f.description = describe(c);
  nlohmann::ordered_json cfg{
      {"architectures", {f.architecture}},
      {"model_type", family},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.ffn},
      {"num_hidden_layers", f.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.hf_max_positions > 0 ? c.hf_max_positions : c.seq_len},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_embeddings},
      {"vocab_size", c.vocab},
      {"dtype", dtype},
  };
  nlohmann::ordered_json rope{{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
  if (c.rope_scaling.factor > 0)
    rope = {{"rope_theta", c.rope_theta},
            {"rope_type", "llama3"},
            {"factor", c.rope_scaling.factor},
            {"low_freq_factor", c.rope_scaling.low_freq_factor},
            {"high_freq_factor", c.rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", c.rope_scaling.original_max_positions}};
  cfg["rope_parameters"] = rope;
  if (family == "llama") {
    cfg["attention_bias"] = false;
    cfg["mlp_bias"] = false;
  }
  write_moe_config(c, family, f.layers, cfg);
  if (family == "mistral" || family == "mixtral")
    cfg["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window)
                                                 : nlohmann::ordered_json(nullptr);
  if (family == "qwen2" || family == "qwen2_moe") {
    cfg["use_sliding_window"] = c.sliding_window > 0;
    std::vector<std::string> types;
    int leading_full = 0;  // max_window_layers, which transformers before layer_types reads
    for (int k = 0; k < f.layers; ++k) {
      types.push_back(c.window_of(k) > 0 ? "sliding_attention" : "full_attention");
      if (k == leading_full && c.window_of(k) == 0) ++leading_full;
    }
    if (c.sliding_window > 0) {
      cfg["sliding_window"] = c.sliding_window;
      if (!c.hf_fields.count("max_window_layers")) cfg["max_window_layers"] = leading_full;
    }
    cfg["layer_types"] = types;
  }
  // Then the source's other fields (--init-from's config.json), else the family's defaults.
  for (const auto& [name, value] : c.hf_fields)
    if (!cfg.contains(name)) cfg[name] = nlohmann::ordered_json::parse(value);
  const nlohmann::ordered_json defaults = family_defaults(family);
  for (const auto& [name, value] : defaults.items())
    if (!cfg.contains(name)) cfg[name] = value;
  f.config = std::move(cfg);
  for (const ParamSpec& p : model_params(c, layout))
    f.tensors.push_back(HfTensor{p.name, hf_tensor_name(p.name, family), p.shape, false});
  f.leftovers.push_back(R"(model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq)");
  if (c.tie_embeddings) f.leftovers.push_back(R"(lm_head\.weight)");  // tied: a copy
  return f;
}

}  // namespace pprt
