// The model config (runtime/models/llama/config.h): the JSON file over the defaults, flags over the
// file, errors naming the file and the field, and the writer a checkpoint uses.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler/layout.h"
#include "file_test_util.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/config.h"

namespace {

TEST(ModelConfig, ReadsFieldsOverDefaults) {
  const pprt::ModelConfig c =
      pprt::parse_model_config(R"({"hidden": 128, "heads": 8, "seq_len": 32})", "m.json");
  EXPECT_EQ(c.hidden, 128);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.seq_len, 32);
  EXPECT_EQ(pprt::describe(c), "hidden 128, heads 8 (kv 2), ffn 176, vocab 256, seq 32");
}

TEST(ModelConfig, ErrorsNameTheFileAndField) {
  EXPECT_EQ(filetest::user_error([] { pprt::parse_model_config(R"({"hiden": 64})", "m.json"); }),
            "m.json: hiden: unknown field (expected hidden, heads, kv_heads, ffn, vocab, seq_len, "
            "rope_theta, norm_eps, tie_embeddings, head_dim, rope_scaling, qkv_bias, "
            "sliding_window, layer_types, hf_family, hf_max_positions, hf_fields, or a mixture of "
            "experts' field: docs/pprun.md)");
  // A key with a newline (fuzz finding: the message's first line was blank).
  EXPECT_EQ(filetest::user_error([] { pprt::parse_model_config(R"({"\n": 33})", "m.json"); }),
            "m.json: \\x0a: unknown field (expected hidden, heads, kv_heads, ffn, vocab, seq_len, "
            "rope_theta, norm_eps, tie_embeddings, head_dim, rope_scaling, qkv_bias, "
            "sliding_window, layer_types, hf_family, hf_max_positions, hf_fields, or a mixture of "
            "experts' field: docs/pprun.md)");
  EXPECT_EQ(filetest::user_error([] { pprt::parse_model_config(R"({"heads": -1})", "m.json"); }),
            "m.json: heads: expected a positive integer, got -1");
  EXPECT_EQ(
      filetest::user_error([] { pprt::parse_model_config(R"({"tie_embeddings": 1})", "m.json"); }),
      "m.json: tie_embeddings: expected true or false, got 1");
  EXPECT_TRUE(pprt::parse_model_config(R"({"tie_embeddings": true})", "m.json").tie_embeddings);
  EXPECT_EQ(filetest::user_error(
                [] { pprt::parse_model_config(R"({"hidden": 60, "heads": 8})", "m.json"); }),
            "m.json: hidden 60 is not a multiple of heads 8");
  EXPECT_EQ(filetest::user_error(
                [] { pprt::parse_model_config(R"({"heads": 4, "kv_heads": 3})", "m.json"); }),
            "m.json: heads 4 is not a multiple of kv_heads 3");
  EXPECT_EQ(filetest::user_error([] {
              pprt::parse_model_config("[1,", "m.json");
            }).rfind("m.json: not valid JSON", 0),
            0u);
}

TEST(ModelConfig, FlagsOverrideTheFile) {
  filetest::TempDir d;
  const std::string path = d.write("m.json", R"({"hidden": 96, "heads": 6, "kv_heads": 3})");
  pprt::ModelOverrides o;
  o.hidden = 48;
  const pprt::ModelConfig c = pprt::resolve_model_config(path, o);
  EXPECT_EQ(c.hidden, 48);
  EXPECT_EQ(c.heads, 6);
  EXPECT_EQ(pprt::count_parameters(pprt::ModelConfig{}, ppc::parse_layout("EtL")),
            256 * 64 + (2 * 64 + (4 + 4) * 16 * 64 + 64 * 64 + 3 * 176 * 64) + 64 + 256 * 64);
}

// --resume: pprun's family says in words how a checkpoint's model differs from the run's (before
// the runtime compares the parameters: tests/runtime/checkpoint/format_test.cpp).
TEST(ModelConfig, ADifferentModelOnResumeIsNamedInWords) {
  pprt::ModelConfig tiny;
  tiny.hidden = 8;
  tiny.heads = 2;
  tiny.kv_heads = 1;
  pprt::ModelConfig wide = tiny;
  wide.hidden = 16;
  const pprt::LayoutInfo layout{"Et|tL", {"Et", "tL"}}, deeper{"Ett|tL", {"Ett", "tL"}};
  EXPECT_EQ(filetest::user_error(
                [&] { pprt::check_same_model(tiny, layout, wide, layout, "ck/step-00000003"); }),
            "ck/step-00000003: the checkpoint's model has hidden 8, this run's 16 (a checkpoint "
            "resumes only the same model)");
  EXPECT_EQ(filetest::user_error(
                [&] { pprt::check_same_model(tiny, layout, tiny, deeper, "ck/step-00000003"); }),
            "ck/step-00000003: the checkpoint's model has 2 decoder layers (Et|tL), this plan's 3 "
            "(Ett|tL)");
  pprt::check_same_model(tiny, layout, tiny, pprt::LayoutInfo{"Ett|L", {"Ett", "L"}},
                         "ck");  // any split of the same model
}

TEST(ModelConfig, WriterAndReaderRoundTrip) {
  pprt::ModelConfig c;
  c.hidden = 96;
  c.heads = 6;
  c.kv_heads = 3;
  c.rope_theta = 5e5;
  c.tie_embeddings = true;
  const std::string text = pprt::model_config_json(c).dump();
  EXPECT_EQ(text.rfind(R"({"hidden":96,"heads":6,"kv_heads":3,"ffn":176,)", 0), 0u) << text;
  EXPECT_EQ(pprt::parse_model_config(text, "state"), c);
  EXPECT_EQ(text.find("head_dim"), std::string::npos) << "defaults of the Hugging Face fields";
}

// The fields a Hugging Face model brings (--init-from): written only where not their defaults,
// read back equal; head_dim lifts the hidden % heads rule.
TEST(ModelConfig, HuggingFaceFieldsRoundTrip) {
  pprt::ModelConfig c;
  c.hidden = 60;
  c.heads = 4;
  c.head_size = 32;
  c.rope_scaling = {8.0, 1.0, 4.0, 8192};
  c.hf_family = "mistral";
  c.hf_max_positions = 4096;
  const std::string text = pprt::model_config_json(c).dump();
  EXPECT_EQ(pprt::parse_model_config(text, "state"), c);
  EXPECT_EQ(c.head_dim(), 32);
  EXPECT_EQ(pprt::describe(c),
            "hidden 60, heads 4 (kv 2, head_dim 32), ffn 176, vocab 256, seq 64, llama3 rope "
            "scaling");
  EXPECT_EQ(
      filetest::user_error([] { pprt::parse_model_config(R"({"hf_family": "gpt2"})", "m.json"); }),
      "m.json: hf_family: expected \"llama\", \"mistral\", \"qwen2\", \"mixtral\" or "
      "\"qwen2_moe\", got \"gpt2\"");
  // Qwen2's q/k/v biases: written only when on, and the family must agree.
  pprt::ModelConfig q;
  q.qkv_bias = true;
  q.hf_family = "qwen2";
  EXPECT_EQ(pprt::parse_model_config(pprt::model_config_json(q).dump(), "state"), q);
  EXPECT_FALSE(pprt::model_config_json(pprt::ModelConfig{}).contains("qkv_bias"));
  EXPECT_EQ(pprt::describe(q),
            "hidden 64, heads 4 (kv 2), ffn 176, vocab 256, seq 64, q/k/v biases");
  EXPECT_TRUE(pprt::parse_model_config(R"({"qkv_bias": true})", "m.json").qkv_bias);
  EXPECT_EQ(
      filetest::user_error([] { pprt::parse_model_config(R"({"hf_family": "qwen2"})", "m.json"); }),
      "m.json: qkv_bias is false, but the Hugging Face family qwen2 has q/k/v biases");
  EXPECT_EQ(filetest::user_error([] {
              pprt::parse_model_config(R"({"hf_family": "llama", "qkv_bias": true})", "m.json");
            }),
            "m.json: qkv_bias is true, but the Hugging Face family llama has no q/k/v biases");
  EXPECT_EQ(filetest::user_error(
                [] { pprt::parse_model_config(R"({"rope_scaling": {"factr": 8}})", "m.json"); }),
            "m.json: rope_scaling.factr: unknown field or not a whole number (expected factor, "
            "low_freq_factor, high_freq_factor, original_max_positions)");
}

// The sliding window (Mistral's, Qwen2's per layer) and the config.json fields kept for the
// export: written only when given, read back equal; which layers slide; the errors.
TEST(ModelConfig, SlidingWindowAndKeptFieldsRoundTrip) {
  pprt::ModelConfig c;
  c.sliding_window = 32;
  c.layer_types = {"full_attention", "sliding_attention", "sliding_attention"};
  c.hf_family = "qwen2";
  c.qkv_bias = true;
  c.hf_fields = {{"bos_token_id", "151643"},
                 {"eos_token_id", "[151645,151643]"},
                 {"pad_token_id", "null"},
                 {"max_window_layers", "1"}};
  const nlohmann::ordered_json j = pprt::model_config_json(c);
  EXPECT_EQ(j.at("hf_fields").dump(),
            R"({"bos_token_id":151643,"eos_token_id":[151645,151643],"max_window_layers":1,)"
            R"("pad_token_id":null})");
  EXPECT_EQ(pprt::parse_model_config(j.dump(), "state"), c);
  EXPECT_EQ(std::vector<int>({c.window_of(0), c.window_of(1), c.window_of(2), c.window_of(-1)}),
            std::vector<int>({0, 32, 32, 0}));
  EXPECT_EQ(pprt::describe(c),
            "hidden 64, heads 4 (kv 2), ffn 176, vocab 256, seq 64, q/k/v "
            "biases, sliding window 32 on 2 of 3 layers");
  pprt::ModelConfig m;  // Mistral's: every layer, MTP depths too
  m.sliding_window = 16;
  EXPECT_EQ(std::vector<int>({m.window_of(0), m.window_of(5), m.window_of(-1)}),
            std::vector<int>({16, 16, 16}));
  EXPECT_EQ(pprt::parse_model_config(pprt::model_config_json(m).dump(), "state"), m);
  EXPECT_EQ(pprt::parse_model_config(R"({"sliding_window": null})", "m.json").sliding_window, 0);
  const pprt::ModelConfig none;
  EXPECT_EQ(none.window_of(0), 0);
  for (const char* k : {"sliding_window", "layer_types", "hf_fields"})
    EXPECT_FALSE(pprt::model_config_json(none).contains(k)) << k;
  EXPECT_EQ(filetest::user_error([] {
              pprt::parse_model_config(R"({"layer_types": ["full_attention"]})", "m.json");
            }),
            "m.json: layer_types: needs a sliding_window (the window of its sliding_attention "
            "layers)");
  EXPECT_EQ(filetest::user_error([] {
              pprt::parse_model_config(
                  R"({"sliding_window": 8, "layer_types": ["full_attention", "chunked"]})",
                  "m.json");
            }),
            "m.json: layer_types[1]: 'chunked' is not supported (expected full_attention or "
            "sliding_attention)");
  EXPECT_EQ(
      filetest::user_error([] { pprt::parse_model_config(R"({"sliding_window": 0})", "m.json"); }),
      "m.json: sliding_window: expected a positive integer, got 0");
}

// Mixtures of experts (moe_config.h): the fields under pprun's names and DeepSeek's and Hugging
// Face's, round trip through a checkpoint's model, flags over the file, the checks, the layers that
// stay dense, and the parameters a MoE layer has instead of its dense MLP.
TEST(ModelConfig, MixtureOfExpertsFields) {
  const pprt::ModelConfig c = pprt::parse_model_config(
      R"({"n_routed_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 24,
          "n_shared_experts": 2, "first_k_dense_replace": 1, "dense_layers": [3],
          "scoring_func": "sigmoid", "norm_topk_prob": false, "routed_scaling_factor": 2.5,
          "aux_loss_coef": 0.01, "bias_update_rate": 0.001})",
      "m.json");
  EXPECT_EQ(c.moe.experts, 8);
  EXPECT_EQ(c.moe.top_k, 3);
  EXPECT_EQ(c.moe.expert_width(c.ffn), 24);
  EXPECT_EQ(c.moe.shared_width(c.ffn), 48);
  EXPECT_EQ(c.moe.score, "sigmoid");
  EXPECT_FALSE(c.moe.norm_topk);
  EXPECT_EQ(pprt::parse_model_config(pprt::model_config_json(c).dump(), "state"), c);
  EXPECT_FALSE(pprt::model_config_json(pprt::ModelConfig{}).contains("experts"));
  for (int layer : {0, 3}) EXPECT_FALSE(c.moe.is_moe(layer)) << layer;
  for (int layer : {1, 2, 4}) EXPECT_TRUE(c.moe.is_moe(layer)) << layer;
  EXPECT_EQ(pprt::describe(c),
            "hidden 64, heads 4 (kv 2), ffn 176, vocab 256, seq 64, 8 experts (top 3, width 24, "
            "shared 2, sigmoid), first 1 dense");

  pprt::ModelOverrides o;
  o.experts = 4;
  o.top_k = 1;
  o.shared_experts = 0;
  o.first_dense = 2;
  const pprt::ModelConfig f = pprt::resolve_model_config("", o, c);
  EXPECT_EQ(f.moe.experts, 4);
  EXPECT_EQ(f.moe.top_k, 1);
  EXPECT_FALSE(f.moe.has_shared());
  EXPECT_EQ(f.moe.first_dense, 2);

  EXPECT_EQ(filetest::user_error(
                [] { pprt::parse_model_config(R"({"experts": 4, "top_k": 5})", "m.json"); }),
            "m.json: top_k is 5, but a token can choose 1..4 of the 4 experts");
  EXPECT_EQ(filetest::user_error([] {
              pprt::parse_model_config(R"({"experts": 4, "router_score": "relu"})", "m.json");
            }),
            "m.json: router_score: expected \"softmax\" or \"sigmoid\", got \"relu\"");
  EXPECT_EQ(filetest::user_error([] {
              pprt::parse_model_config(R"({"experts": 4, "shared_gate": true})", "m.json");
            }),
            "m.json: shared_gate: needs shared experts (shared_experts or shared_ffn)");

  // A MoE layer's parameters: the router, each expert's SwiGLU, the shared one; no mlp.w1.
  std::set<std::string> names;
  for (const pprt::ParamSpec& p : pprt::model_params(c, ppc::parse_layout("EttL")))
    names.insert(p.name);
  for (const char* n :
       {"layers.0.mlp.w1.weight", "layers.1.mlp.router.weight", "layers.1.mlp.router.bias",
        "layers.1.mlp.experts.7.w2.weight", "layers.1.mlp.shared.w3.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("layers.1.mlp.w1.weight"));
  EXPECT_FALSE(names.count("layers.1.mlp.shared_gate.weight"));
}

}  // namespace
