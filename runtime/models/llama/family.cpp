// pprun's own model family through the runtime's public interface (family.h).
#include "runtime/models/llama/family.h"

#include <fmt/format.h>

#include <memory>
#include <string>

#include "pprt/pprt.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/builtin.h"
#include "runtime/models/llama/hf_mapping.h"

namespace pprt {

namespace {

// The layout a hook is given, as the plain description of the model reads layouts.
ppc::Layout layout_of(const LayoutInfo& info) {
  ppc::Layout l;
  l.source = info.text;
  for (const std::string& stage : info.stages) {
    auto& kinds = l.stages.emplace_back();
    for (char c : stage) kinds.push_back(ppc::own_layer(c));
  }
  return l;
}

// "Ett|tL = 3 layers + 1 MTP depth (loss weight 0.1), 0.12M parameters (hidden 64, ...)"
std::string describe_run(const ModelConfig& c, const LayoutInfo& layout, double aux_loss_weight) {
  const ppc::Layout l = layout_of(layout);
  const int decoders = l.count(ppc::LayerKind::Decoder), depths = mtp_depths(l);
  const std::string layers =
      depths ? fmt::format("{} layers + {} MTP depth{} (loss weight {:g})", decoders, depths,
                           depths == 1 ? "" : "s", aux_loss_weight)
             : fmt::format("{} layers", decoders);
  return fmt::format("{} = {}, {:.2f}M parameters ({})", layout.text, layers,
                     count_parameters(c, l) / 1e6, describe(c));
}

// The model of `c` with the hooks that give it the rest of the runtime. `origin`: where its
// configuration came from, for messages (--config's file, else "model").
Model llama_model(const ModelConfig& c, const std::string& origin) {
  Model m = builtin_model(c, kernels_of(kernel_choice_from_env()));  // PPRUN_KERNELS
  m.mixed_precision(MixedPrecision::Layers)
      .parameters([c](const LayoutInfo& layout, const ModelSetup&) {
        std::vector<ParamShape> out;
        for (const ParamSpec& p : model_params(c, layout_of(layout)))
          out.push_back(ParamShape{p.name, p.shape});
        return out;
      })
      .check([c, origin](const LayoutInfo& layout, const ModelSetup& setup) {
        // A window per decoder layer (layer_types), for the layout's decoders.
        if (const size_t types = c.layer_types.size(),
            decoders = static_cast<size_t>(layout.count('t'));
            types > 0 && types != decoders)
          throw Error(origin, fmt::format("layer_types has {} entries, but the layout has {} "
                                          "decoder layers (t)",
                                          types, decoders));
        // Depth k predicts token i + 1 + k: the last depth still needs one position.
        if (const int depths = layout.count('m'); depths >= setup.seq_len)
          throw Error("--seq-len",
                      fmt::format("is {}, but the layout's {} MTP depths need at least {} tokens "
                                  "per sequence",
                                  setup.seq_len, depths, depths + 1));
      })
      .describe([c](const LayoutInfo& layout, const ModelSetup&, double aux_loss_weight) {
        return describe_run(c, layout, aux_loss_weight);
      })
      .hugging_face([c](const LayoutInfo& layout, const ModelSetup&, const std::string& dtype) {
        return hf_format(c, layout_of(layout), dtype);
      });
  return m;
}

}  // namespace

ModelConfig llama_config(const Config& config, const std::string& where) {
  return parse_model_config(config.dump(), where);
}

Family llama_family() {
  Family f("pprun");
  // The --config file the last configuration read (a run's messages name it): kept by the
  // family's hooks, not in the configuration (which checkpoints record).
  auto config_file = std::make_shared<std::string>();
  f.option("--config", OptionKind::File, "JSON model config (see examples/tiny-model.json)")
      .option("--hidden", OptionKind::Integer, "Model width (default 64)")
      .option("--heads", OptionKind::Integer, "Attention heads (default 4)")
      .option("--kv-heads", OptionKind::Integer, "Key/value heads (default 2)")
      .option("--ffn", OptionKind::Integer, "SwiGLU width (default 176)")
      .option("--tie-embeddings", OptionKind::Switch,
              "The output head uses the token embedding's weight (copies kept in sync)")
      .option("--experts", OptionKind::Integer,
              "Routed experts of each MoE decoder layer (default 0: dense; docs/pprun.md)")
      .option("--top-k", OptionKind::Integer, "Experts each token is routed to (default 2)")
      .option("--shared-experts", OptionKind::Integer,
              "Shared experts of each MoE layer, which every token passes (default 0)")
      .option("--first-dense", OptionKind::Integer,
              "The first decoder layers keep a dense MLP (first_k_dense_replace; default 0)")
      // The defaults (or the checkpoint's model), then --config, then the flags; then checked.
      .configure([config_file](const Config* base, const OptionValues& given) {
        *config_file = given.file("--config");
        ModelOverrides o;
        o.hidden = given.integer("--hidden");
        o.heads = given.integer("--heads");
        o.kv_heads = given.integer("--kv-heads");
        o.ffn = given.integer("--ffn");
        o.vocab = given.integer("--vocab");
        o.seq_len = given.integer("--seq-len");
        o.tie_embeddings = given.on("--tie-embeddings");
        o.experts = given.integer("--experts");
        o.top_k = given.integer("--top-k");
        o.shared_experts = given.integer("--shared-experts");
        o.first_dense = given.integer("--first-dense");
        const ModelConfig start =
            base ? llama_config(*base, "the checkpoint's model") : ModelConfig{};
        return Config(model_config_json(resolve_model_config(given.file("--config"), o, start)));
      })
      .make([config_file](const Config& config) {
        return llama_model(llama_config(config), config_file->empty() ? "model" : *config_file);
      })
      .check_resume([](const Config& theirs, const LayoutInfo& their_layout, const Config& mine,
                       const LayoutInfo& layout, const std::string& where) {
        check_same_model(llama_config(theirs), their_layout, llama_config(mine), layout, where);
      })
      .from_hugging_face([](const nlohmann::json& j, const std::string& file, int seq_len,
                            const LayoutInfo& layout) {
        const HfConfig hf = config_from_hf(j, file, seq_len);
        check_hf_layout(hf, file, layout);
        return Config(model_config_json(hf.model));
      });
  return f;
}

}  // namespace pprt
