#include "runtime/models/llama/config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "compiler/diagnostic.h"
#include "compiler/read_file.h"
#include "runtime/fail.h"

namespace pprt {

int ModelConfig::window_of(int layer) const {
  if (sliding_window <= 0) return 0;
  if (layer_types.empty()) return sliding_window;
  return layer >= 0 && static_cast<size_t>(layer) < layer_types.size() &&
                 layer_types[static_cast<size_t>(layer)] == "sliding_attention"
             ? sliding_window
             : 0;
}

ModelConfig parse_model_config(std::string_view text, const std::string& input, ModelConfig c) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number too large to hold
    fail(input, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) fail(input, "expected a JSON object such as {\"hidden\": 64, \"heads\": 4}");
  for (const auto& item : j.items()) {
    // Not a structured binding: the lambdas below capture these (clang 14, the fuzz build's
    // compiler, cannot capture structured bindings).
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto integer = [&](int& out) {
      if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > (1 << 24))
        fail(input, fmt::format("{}: expected a positive integer, got {}", key, v.dump()));
      out = v.get<int>();
    };
    auto number = [&](double& out) {
      if (!v.is_number() || !(v.get<double>() > 0))
        fail(input, fmt::format("{}: expected a positive number, got {}", key, v.dump()));
      out = v.get<double>();
    };
    if (key == "hidden")
      integer(c.hidden);
    else if (key == "heads")
      integer(c.heads);
    else if (key == "kv_heads")
      integer(c.kv_heads);
    else if (key == "ffn")
      integer(c.ffn);
    else if (key == "vocab")
      integer(c.vocab);
    else if (key == "seq_len")
      integer(c.seq_len);
    else if (key == "rope_theta")
      number(c.rope_theta);
    else if (key == "norm_eps")
      number(c.norm_eps);
    else if (key == "tie_embeddings") {
      if (!v.is_boolean())
        fail(input, fmt::format("{}: expected true or false, got {}", key, v.dump()));
      c.tie_embeddings = v.get<bool>();
    } else if (key == "qkv_bias") {
      if (!v.is_boolean())
        fail(input, fmt::format("{}: expected true or false, got {}", key, v.dump()));
      c.qkv_bias = v.get<bool>();
    } else if (key == "head_dim")
      integer(c.head_size);
    else if (key == "hf_family") {
      if (!v.is_string() ||
          (v != "llama" && v != "mistral" && v != "qwen2" && v != "mixtral" && v != "qwen2_moe"))
        fail(input, fmt::format("{}: expected \"llama\", \"mistral\", \"qwen2\", \"mixtral\" "
                                "or \"qwen2_moe\", got {}",
                                key, v.dump()));
      c.hf_family = v.get<std::string>();
    } else if (key == "hf_max_positions")
      integer(c.hf_max_positions);
    else if (key == "sliding_window") {
      c.sliding_window = 0;
      if (!v.is_null()) integer(c.sliding_window);
    } else if (key == "layer_types") {
      if (!v.is_array())
        fail(input, fmt::format("{}: expected a list such as [\"full_attention\", "
                                "\"sliding_attention\"], got {}",
                                key, v.dump()));
      c.layer_types.clear();
      for (const nlohmann::json& t : v) {
        if (!t.is_string()) fail(input, fmt::format("{}: expected strings, got {}", key, t.dump()));
        c.layer_types.push_back(t.get<std::string>());
      }
    } else if (key == "hf_fields") {
      if (!v.is_object()) fail(input, fmt::format("{}: expected an object", key));
      c.hf_fields.clear();
      for (const auto& f : v.items()) c.hf_fields[f.key()] = f.value().dump();
    } else if (key == "rope_scaling") {
      if (!v.is_object())
        fail(input, fmt::format("{}: expected an object such as {{\"factor\": 8}}", key));
      RopeScaling& r = c.rope_scaling;
      for (const auto& f : v.items()) {
        const nlohmann::json& x = f.value();
        const std::string field = "rope_scaling." + ppc::printable(f.key());
        if (!x.is_number() || !(x.get<double>() > 0))
          fail(input, fmt::format("{}: expected a positive number, got {}", field, x.dump()));
        if (f.key() == "factor")
          r.factor = x.get<double>();
        else if (f.key() == "low_freq_factor")
          r.low_freq_factor = x.get<double>();
        else if (f.key() == "high_freq_factor")
          r.high_freq_factor = x.get<double>();
        else if (f.key() == "original_max_positions" && x.is_number_integer() &&
                 x.get<long long>() <= (1 << 24))
          r.original_max_positions = x.get<int>();
        else
          fail(input, fmt::format("{}: unknown field or not a whole number (expected factor, "
                                  "low_freq_factor, high_freq_factor, original_max_positions)",
                                  field));
      }
    } else if (parse_moe_field(key, v, c.moe, input)) {
    } else
      fail(input, fmt::format("{}: unknown field (expected hidden, heads, kv_heads, ffn, vocab, "
                              "seq_len, rope_theta, norm_eps, tie_embeddings, head_dim, "
                              "rope_scaling, qkv_bias, sliding_window, layer_types, hf_family, "
                              "hf_max_positions, hf_fields, or a mixture of experts' field: "
                              "docs/pprun.md)",
                              ppc::printable(key)));
  }
  check_model_config(c, input);
  return c;
}

nlohmann::ordered_json model_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j{{"hidden", c.hidden},
                           {"heads", c.heads},
                           {"kv_heads", c.kv_heads},
                           {"ffn", c.ffn},
                           {"vocab", c.vocab},
                           {"seq_len", c.seq_len},
                           {"rope_theta", c.rope_theta},
                           {"norm_eps", c.norm_eps},
                           {"tie_embeddings", c.tie_embeddings}};
  if (c.head_size > 0) j["head_dim"] = c.head_size;
  if (c.rope_scaling.factor > 0)
    j["rope_scaling"] = {{"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_positions", c.rope_scaling.original_max_positions}};
  if (c.qkv_bias) j["qkv_bias"] = true;
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (!c.layer_types.empty()) j["layer_types"] = c.layer_types;
  if (!c.hf_family.empty()) j["hf_family"] = c.hf_family;
  if (c.hf_max_positions > 0) j["hf_max_positions"] = c.hf_max_positions;
  if (!c.hf_fields.empty()) {
    nlohmann::ordered_json& f = j["hf_fields"] = nlohmann::ordered_json::object();
    for (const auto& [name, value] : c.hf_fields) f[name] = nlohmann::ordered_json::parse(value);
  }
  add_moe_json(c.moe, j);
  return j;
}

ModelConfig resolve_model_config(const std::string& path, const ModelOverrides& o,
                                 ModelConfig base) {
  ModelConfig c = base;
  if (!path.empty()) c = parse_model_config(ppc::read_file(path), path, c);
  if (o.hidden) c.hidden = *o.hidden;
  if (o.heads) c.heads = *o.heads;
  if (o.kv_heads) c.kv_heads = *o.kv_heads;
  if (o.ffn) c.ffn = *o.ffn;
  if (o.vocab) c.vocab = *o.vocab;
  if (o.seq_len) c.seq_len = *o.seq_len;
  if (o.tie_embeddings) c.tie_embeddings = true;
  if (o.experts) c.moe.experts = *o.experts;
  if (o.top_k) c.moe.top_k = *o.top_k;
  if (o.shared_experts) c.moe.shared_experts = *o.shared_experts;
  if (o.first_dense) c.moe.first_dense = *o.first_dense;
  check_model_config(c, path.empty() ? "model" : path + " and flags");
  return c;
}

void check_model_config(const ModelConfig& c, const std::string& where) {
  auto positive = [&](int v, const char* name, int hi) {
    if (v < 1 || v > hi) fail(where, fmt::format("{} is {}; expected 1..{}", name, v, hi));
  };
  positive(c.hidden, "hidden", 1 << 16);
  positive(c.heads, "heads", 1024);
  positive(c.kv_heads, "kv_heads", 1024);
  positive(c.ffn, "ffn", 1 << 18);
  positive(c.vocab, "vocab", 1 << 22);
  positive(c.seq_len, "seq_len", 1 << 16);
  if (c.head_size < 0 || c.head_size > 4096)
    fail(where, fmt::format("head_dim is {}; expected 1..4096", c.head_size));
  if (c.head_size == 0 && c.hidden % c.heads != 0)
    fail(where, fmt::format("hidden {} is not a multiple of heads {}", c.hidden, c.heads));
  if (c.head_dim() % 2 != 0)
    fail(where, fmt::format("the head size {} = {} must be even (rotary embedding)",
                            c.head_size > 0 ? "head_dim" : "hidden/heads", c.head_dim()));
  if (c.rope_scaling.factor > 0 &&
      !(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
    fail(where, fmt::format("rope_scaling: high_freq_factor {} must be above low_freq_factor {}",
                            c.rope_scaling.high_freq_factor, c.rope_scaling.low_freq_factor));
  if (c.heads % c.kv_heads != 0)
    fail(where, fmt::format("heads {} is not a multiple of kv_heads {}", c.heads, c.kv_heads));
  if (!c.hf_family.empty() && c.hf_family != "qwen2_moe" && c.qkv_bias != (c.hf_family == "qwen2"))
    fail(where, fmt::format("qkv_bias is {}, but the Hugging Face family {} {} q/k/v biases",
                            c.qkv_bias, c.hf_family, c.qkv_bias ? "has no" : "has"));
  if (c.sliding_window < 0 || c.sliding_window > (1 << 24))
    fail(where,
         fmt::format("sliding_window is {}; expected 1..{} (or none)", c.sliding_window, 1 << 24));
  if (!c.layer_types.empty() && c.sliding_window == 0)
    fail(where, "layer_types: needs a sliding_window (the window of its sliding_attention layers)");
  for (size_t k = 0; k < c.layer_types.size(); ++k)
    if (c.layer_types[k] != "full_attention" && c.layer_types[k] != "sliding_attention")
      fail(where, fmt::format("layer_types[{}]: '{}' is not supported (expected full_attention or "
                              "sliding_attention)",
                              k, ppc::printable(c.layer_types[k])));
  check_moe_config(c.moe, where);
}

namespace {

// ", sliding window 32" (", on 3 of 4 layers" where only some layers slide).
std::string window_text(const ModelConfig& c) {
  if (c.sliding_window <= 0) return "";
  size_t sliding = 0;
  for (const std::string& t : c.layer_types) sliding += t == "sliding_attention";
  return fmt::format(", sliding window {}{}", c.sliding_window,
                     c.layer_types.empty() || sliding == c.layer_types.size()
                         ? ""
                         : fmt::format(" on {} of {} layers", sliding, c.layer_types.size()));
}

}  // namespace

std::string describe(const ModelConfig& c) {
  return fmt::format("hidden {}, heads {} (kv {}{}), ffn {}, vocab {}, seq {}{}{}{}{}{}", c.hidden,
                     c.heads, c.kv_heads,
                     c.head_size > 0 ? fmt::format(", head_dim {}", c.head_size) : "", c.ffn,
                     c.vocab, c.seq_len, c.tie_embeddings ? ", tied embeddings" : "",
                     c.rope_scaling.factor > 0 ? ", llama3 rope scaling" : "",
                     c.qkv_bias ? ", q/k/v biases" : "", window_text(c), describe_moe(c.moe));
}

void check_same_model(const ModelConfig& c, const LayoutInfo& their_layout,
                      const ModelConfig& model, const LayoutInfo& layout,
                      const std::string& where) {
  auto differs = [&](const char* field, auto mine, auto theirs) {
    if (mine != theirs)
      fail(where, fmt::format("the checkpoint's model has {} {}, this run's {} (a checkpoint "
                              "resumes only the same model)",
                              field, theirs, mine));
  };
  differs("hidden", model.hidden, c.hidden);
  differs("heads", model.heads, c.heads);
  differs("kv_heads", model.kv_heads, c.kv_heads);
  differs("ffn", model.ffn, c.ffn);
  differs("vocab", model.vocab, c.vocab);
  differs("tie_embeddings", model.tie_embeddings, c.tie_embeddings);
  differs("experts", model.moe.experts, c.moe.experts);
  differs("top_k", model.moe.top_k, c.moe.top_k);
  differs("shared_experts", model.moe.shared_experts, c.moe.shared_experts);
  differs("first_dense", model.moe.first_dense, c.moe.first_dense);
  for (auto [symbol, what] : {std::pair{'t', "decoder layers"}, std::pair{'m', "MTP depths"}})
    if (layout.count(symbol) != their_layout.count(symbol))
      fail(where, fmt::format("the checkpoint's model has {} {} ({}), this plan's {} ({})",
                              their_layout.count(symbol), what, their_layout.text,
                              layout.count(symbol), layout.text));
}

}  // namespace pprt
