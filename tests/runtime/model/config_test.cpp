// The model config (runtime/model/config.h): the JSON file over the defaults, flags over the
// file, errors naming the file and the field, and the writer a checkpoint uses.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/layout.h"
#include "file_test_util.h"
#include "runtime/model/architecture.h"
#include "runtime/model/config.h"

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
            "rope_theta, norm_eps, tie_embeddings)");
  // A key with a newline (fuzz finding: the message's first line was blank).
  EXPECT_EQ(filetest::user_error([] { pprt::parse_model_config(R"({"\n": 33})", "m.json"); }),
            "m.json: \\x0a: unknown field (expected hidden, heads, kv_heads, ffn, vocab, seq_len, "
            "rope_theta, norm_eps, tie_embeddings)");
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
}

}  // namespace
