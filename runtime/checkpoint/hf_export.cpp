// Writing a Hugging Face model directory (pprun --export CKPT OUT_DIR --format hf; hf.h).
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "runtime/checkpoint/format.h"
#include "runtime/checkpoint/hf.h"
#include "runtime/checkpoint/hf_internal.h"
#include "runtime/fail.h"

namespace pprt {

namespace fs = std::filesystem;
using namespace hf_internal;

// --- out --------------------------------------------------------------------------------------

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  static const std::regex kSize(R"((\d+)\s*(B|KB|MB|GB|KiB|MiB|GiB)?)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, kSize) || m[1].length() > 15)
    fail(flag, fmt::format("'{}' is not a size such as 5GB, 500MB or 2GiB", ppc::printable(text)));
  uint64_t n = std::stoull(m[1].str());
  std::string unit = m[2].str();
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const uint64_t mult = unit == "KB"    ? 1000ull
                        : unit == "MB"  ? 1000ull * 1000
                        : unit == "GB"  ? 1000ull * 1000 * 1000
                        : unit == "KIB" ? 1ull << 10
                        : unit == "MIB" ? 1ull << 20
                        : unit == "GIB" ? 1ull << 30
                                        : 1;
  if (n == 0) fail(flag, "must be positive");
  return n * mult;
}

namespace {

// The family a checkpoint's model is written as: the one it came from (--init-from), else Llama's,
// Qwen2's where the q/k/v projections have biases (check_model_config keeps a Hugging Face family
// and the biases in agreement), or Mistral's where every layer has a sliding window.
std::string export_family(const ModelConfig& c) {
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
  if (family == "qwen2") {
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

HfExport export_hf(const std::string& path, const std::string& out_dir, TensorDtype dtype,
                   uint64_t max_shard_bytes) {
  PPC_INTERNAL_ASSERT(dtype == TensorDtype::F32 || dtype == TensorDtype::BF16,
                      "export dtype is F32 or BF16");
  const Checkpoint ckpt(path);
  const ModelConfig& c = ckpt.state().model;
  const ppc::Layout layout = ppc::parse_layout(ckpt.state().layout);
  if (layout.count(ppc::LayerKind::Mtp) > 0)
    fail("--export", fmt::format("the checkpoint's model {} has MTP layers (m), which no Hugging "
                                 "Face family pprun writes holds",
                                 ckpt.state().layout));
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    fail("--export", fmt::format("'{}' exists and is not an empty directory (nothing is "
                                 "overwritten)",
                                 out_dir));
  const std::string family = export_family(c);
  HfExport result;
  for (const Family& f : kFamilies)
    if (family == f.model_type) result.architecture = f.architecture;

  // The tensors, in the model's order, read as F32 and converted.
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> f32;
    std::vector<uint16_t> half;
    TensorWrite write() const {
      const void* p = half.empty() ? static_cast<const void*>(f32.data()) : half.data();
      const size_t bytes = half.empty() ? f32.size() * 4 : half.size() * 2;
      return TensorWrite{name, half.empty() ? TensorDtype::F32 : TensorDtype::BF16, shape, p,
                         bytes};
    }
  };
  std::vector<Tensor> tensors;
  for (const ParamSpec& p : model_params(c, layout)) {
    const TensorInfo& info = ckpt.info(p.name, false);
    if (info.shape != p.shape)
      fail(ckpt.dir(), fmt::format("tensor '{}': shape {} in the checkpoint's shards, but its "
                                   "model (trainer_state.json) has {}",
                                   p.name, shape_string(info.shape), shape_string(p.shape)));
    Tensor& t = tensors.emplace_back();
    t.name = hf_tensor_name(p.name);
    t.shape = p.shape;
    t.f32.resize(static_cast<size_t>(p.numel()));
    ckpt.read(p.name, false, p.shape, t.f32.data(), t.f32.size() * sizeof(float));
    if (dtype == TensorDtype::BF16) {
      t.half.resize(t.f32.size());
      for (size_t i = 0; i < t.f32.size(); ++i) t.half[i] = float_to_bf16(t.f32[i]);
      std::vector<float>().swap(t.f32);
    }
  }
  // Shards: tensors in order, a new shard when the next one would pass the limit.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t size = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = tensors[i].write().bytes;
    if (!shards.back().empty() && size + b > max_shard_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(i);
    size += b;
    total += b;
  }

  const std::string dtype_str = dtype == TensorDtype::BF16 ? "bfloat16" : "float32";
  nlohmann::ordered_json cfg{
      {"architectures", {result.architecture}},
      {"model_type", family},
      {"hidden_size", c.hidden},
      {"intermediate_size", c.ffn},
      {"num_hidden_layers", layout.count(ppc::LayerKind::Decoder)},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"head_dim", c.head_dim()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.hf_max_positions > 0 ? c.hf_max_positions : c.seq_len},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_embeddings},
      {"vocab_size", c.vocab},
      {"dtype", dtype_str},
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
  const int layers = layout.count(ppc::LayerKind::Decoder);
  if (family == "mistral")
    cfg["sliding_window"] = c.sliding_window > 0 ? nlohmann::ordered_json(c.sliding_window)
                                                 : nlohmann::ordered_json(nullptr);
  if (family == "qwen2") {
    cfg["use_sliding_window"] = c.sliding_window > 0;
    std::vector<std::string> types;
    int leading_full = 0;  // max_window_layers, which transformers before layer_types reads
    for (int k = 0; k < layers; ++k) {
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

  // Everything into a temporary directory beside OUT_DIR, then one rename.
  const fs::path out = fs::absolute(out_dir, ec);
  const fs::path tmp = out.parent_path() / ("." + out.filename().string() + ".tmp-export");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    fail("--export", fmt::format("cannot create the directory {}: {}", tmp.string(), ec.message()));
  try {
    ppc::write_file_atomically((tmp / "config.json").string(), cfg.dump(2) + "\n", "--export");
    const SafetensorsMetadata meta{{"format", "pt"}};
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name =
          shards.size() == 1
              ? "model.safetensors"
              : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      std::vector<TensorWrite> writes;
      for (size_t i : shards[s]) {
        writes.push_back(tensors[i].write());
        weight_map[tensors[i].name] = name;
      }
      write_safetensors((tmp / name).string(), writes, meta, "--export");
    }
    if (shards.size() > 1) {
      const nlohmann::ordered_json index{{"metadata", {{"total_size", total}}},
                                         {"weight_map", weight_map}};
      ppc::write_file_atomically((tmp / "model.safetensors.index.json").string(),
                                 index.dump(2) + "\n", "--export");
    }
    if (fs::exists(out, ec)) fs::remove(out, ec);  // empty (checked above)
    fs::rename(tmp, out, ec);
    if (ec)
      fail("--export",
           fmt::format("cannot rename {} to {}: {}", tmp.string(), out.string(), ec.message()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  result.tensors = tensors.size();
  result.shards = shards.size();
  return result;
}

}  // namespace pprt
