// The checkpoint directory (runtime/checkpoint/format.h), without LibTorch: the state file, which
// step directory is the latest, the crash-safe commit, --keep, and everything that must be refused
// with a message naming the file and the tensor or field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compiler/layout.h"
#include "file_test_util.h"
#include "runtime/checkpoint/format.h"
#include "runtime/models/llama/architecture.h"
#include "runtime/models/llama/config.h"
#include "tests/compiler/error_cases.h"

namespace {

using pptest::message_of;

namespace fs = std::filesystem;
using filetest::TempDir;

pprt::ModelConfig tiny() {
  pprt::ModelConfig c;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.ffn = 16;
  c.vocab = 16;
  c.seq_len = 8;
  return c;
}

// The parameters as a model lists them (pprt::Model::parameters).
std::vector<pprt::ParamShape> shapes(const std::vector<pprt::ParamSpec>& params) {
  std::vector<pprt::ParamShape> out;
  for (const pprt::ParamSpec& p : params) out.push_back({p.name, p.shape});
  return out;
}

pprt::CheckpointState state(int64_t step, int pp) {
  pprt::CheckpointState s;
  s.step = step;
  s.model = pprt::model_config_json(tiny());
  s.layout = "Et|tL";
  s.plan_json = R"({"format":"ppcompile-plan"})";
  s.pp = pp;
  s.train.steps = 10;
  s.train.seed = 77;
  s.data.format = "synthetic";
  s.rng_state = "00ff";
  return s;
}

// A whole checkpoint of the model `Et|tL` at `tiny()` size, its parameters split over `pp`
// shards as the ranks would write them, every value = `fill`.
struct Written {
  std::vector<pprt::ParamSpec> params;
  std::vector<std::vector<float>> data;  // parameters, then two moments each
};

Written write_checkpoint(const std::string& dir, int64_t step, int pp, float fill, int keep = 0) {
  const ppc::Layout layout = ppc::parse_layout("Et|tL");
  Written w;
  w.params = pprt::model_params(tiny(), layout);
  const std::string tmp = pprt::prepare_checkpoint(dir, step);
  for (int shard = 0; shard < pp; ++shard) {
    std::vector<pprt::TensorWrite> model, optimizer;
    for (size_t i = 0; i < w.params.size(); ++i) {
      if (static_cast<int>(i) % pp != shard) continue;
      const pprt::ParamSpec& p = w.params[i];
      for (const std::string suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
        auto& buf = w.data.emplace_back(static_cast<size_t>(p.numel()), fill);
        (suffix.empty() ? model : optimizer)
            .push_back({p.name + suffix, pprt::TensorDtype::F32, p.shape, buf.data(),
                        buf.size() * sizeof(float)});
      }
    }
    pprt::write_checkpoint_shard(tmp, shard, pp, model, optimizer);
  }
  pprt::commit_checkpoint(dir, tmp, state(step, pp), keep);
  return w;
}

TEST(Checkpoint, StateRoundTripsAndRejectsWhatItDoesNotKnow) {
  pprt::CheckpointState s = state(6, 2);
  s.model["tie_embeddings"] = true;  // the model's configuration, kept as it was written
  s.train.mtp_loss_weight = 0.25;
  s.data = {"uint16", "/data/train.bin", "", "uint16", 2048, 1024, "0123456789abcdef"};
  const std::string text = pprt::checkpoint_state_json(s);
  const pprt::CheckpointState r = pprt::parse_checkpoint_state(text, "s.json");
  EXPECT_EQ(r.step, 6);
  EXPECT_EQ(r.model, s.model);
  EXPECT_EQ(r.layout, "Et|tL");
  EXPECT_EQ(r.pp, 2);
  EXPECT_EQ(r.train.seed, 77u);
  EXPECT_EQ(r.train.mtp_loss_weight, 0.25);
  EXPECT_EQ(r.data.fingerprint, "0123456789abcdef");
  EXPECT_EQ(r.data.tokens, 1024u);
  EXPECT_EQ(r.rng_state, "00ff");
  EXPECT_EQ(nlohmann::json::parse(r.plan_json)["format"], "ppcompile-plan");

  nlohmann::json j = nlohmann::json::parse(text);
  j["version"] = 9;
  EXPECT_EQ(message_of([&] { pprt::parse_checkpoint_state(j.dump(), "s.json"); }),
            "s.json: version: unsupported checkpoint version 9 (this build reads version 1)");
  j = nlohmann::json::parse(text);
  j["format"] = "something-else";
  EXPECT_EQ(message_of([&] { pprt::parse_checkpoint_state(j.dump(), "s.json"); }),
            "s.json: format: expected \"pprun-checkpoint\" (not a pprun checkpoint)");
  j["format"] = 5;  // (a finding of the fuzz target: value() threw a type_error)
  EXPECT_EQ(message_of([&] { pprt::parse_checkpoint_state(j.dump(), "s.json"); }),
            "s.json: format: expected \"pprun-checkpoint\" (not a pprun checkpoint)");
  j = nlohmann::json::parse(text);
  j["training"].erase("lr");
  EXPECT_EQ(message_of([&] { pprt::parse_checkpoint_state(j.dump(), "s.json"); }),
            "s.json: training.lr: missing");
  j = nlohmann::json::parse(text);
  j["step"] = -1;
  EXPECT_EQ(message_of([&] { pprt::parse_checkpoint_state(j.dump(), "s.json"); }),
            "s.json: step: expected an integer of at least 0, got -1");
  EXPECT_EQ(message_of([&] {
              pprt::parse_checkpoint_state("{\"format\":", "s.json");
            }).rfind("s.json: not valid JSON", 0),
            0u);
}

TEST(Checkpoint, CommitRenamesIntoPlaceThenPointsLatestAtIt) {
  TempDir d;
  const std::string dir = d.file("ck");
  const Written w = write_checkpoint(dir, 3, 2, 0.5f);
  EXPECT_FALSE(fs::exists(dir + "/.tmp-step-00000003"));
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "optimizer-00001-of-00002.safetensors", "model.safetensors.index.json",
                        "optimizer.safetensors.index.json", "trainer_state.json"})
    EXPECT_TRUE(fs::exists(dir + "/step-00000003/" + f)) << f;
  std::ifstream latest(dir + "/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000003");
  // The index is Hugging Face's: weight_map from tensor to shard, the size in the metadata.
  std::ifstream idx(dir + "/step-00000003/model.safetensors.index.json");
  const nlohmann::json j = nlohmann::json::parse(idx);
  EXPECT_EQ(j["weight_map"]["embed.weight"], "model-00001-of-00002.safetensors");
  int64_t total = 0;
  for (const auto& p : w.params) total += p.numel() * 4;
  EXPECT_EQ(j["metadata"]["total_size"], total);

  const pprt::Checkpoint ck(dir);
  EXPECT_EQ(ck.state().step, 3);
  EXPECT_EQ(ck.model_tensors().size(), w.params.size());
  ck.check_params(shapes(w.params));
  std::vector<float> got(static_cast<size_t>(w.params[0].numel()));
  ck.read(w.params[0].name + ".exp_avg_sq", true, w.params[0].shape, got.data(),
          got.size() * sizeof(float));
  EXPECT_EQ(got, std::vector<float>(got.size(), 0.5f));
}

TEST(Checkpoint, KeepsTheNewestAndResumesFromLatest) {
  TempDir d;
  const std::string dir = d.file("ck");
  for (int64_t step : {2, 4, 6}) write_checkpoint(dir, step, 1, static_cast<float>(step), 2);
  EXPECT_FALSE(fs::exists(dir + "/step-00000002"));
  EXPECT_TRUE(fs::exists(dir + "/step-00000004"));
  EXPECT_EQ(pprt::find_checkpoint(dir), dir + "/step-00000006");
  EXPECT_EQ(pprt::find_checkpoint(dir + "/step-00000004"), dir + "/step-00000004");
}

// A save that crashed leaves a temporary directory (ignored) and never moves `latest`; without
// `latest`, only a step directory holding its state file counts.
TEST(Checkpoint, NothingHalfWrittenIsPickedAsTheLatest) {
  TempDir d;
  const std::string dir = d.file("ck");
  write_checkpoint(dir, 3, 1, 1.0f);
  const std::string tmp = pprt::prepare_checkpoint(dir, 6);  // a crash after this
  d.write("ck/.tmp-step-00000006/model-00001-of-00001.safetensors", "garbage");
  EXPECT_EQ(pprt::find_checkpoint(dir), dir + "/step-00000003");
  fs::remove(dir + "/latest");
  fs::create_directories(dir + "/step-00000009");  // no trainer_state.json: not a checkpoint
  EXPECT_EQ(pprt::find_checkpoint(dir), dir + "/step-00000003");
  (void)tmp;
}

// --resume auto starts fresh where there is no checkpoint at all, and resumes (or says what is
// wrong) wherever there is one.
TEST(Checkpoint, WhatHoldsACheckpointToResumeFrom) {
  TempDir d;
  EXPECT_FALSE(pprt::holds_checkpoint(d.file("nope")));
  fs::create_directories(d.file("ck"));
  EXPECT_FALSE(pprt::holds_checkpoint(d.file("ck")));
  pprt::prepare_checkpoint(d.file("ck"), 3);           // a first save that crashed
  fs::create_directories(d.file("ck/step-00000004"));  // no state file
  EXPECT_FALSE(pprt::holds_checkpoint(d.file("ck")));
  write_checkpoint(d.file("ck"), 6, 1, 1.0f);
  EXPECT_TRUE(pprt::holds_checkpoint(d.file("ck")));
  fs::remove(d.file("ck/latest"));
  EXPECT_TRUE(pprt::holds_checkpoint(d.file("ck")));  // the newest complete step directory
  d.write("ck/latest", "garbage\n");
  EXPECT_TRUE(pprt::holds_checkpoint(d.file("ck")));  // (damaged: --resume says so)
}

TEST(Checkpoint, EmptyOrMissingDirectoriesAreUserErrors) {
  TempDir d;
  fs::create_directories(d.file("empty"));
  EXPECT_EQ(message_of([&] { pprt::Checkpoint c(d.file("empty")); }),
            d.file("empty") + ": holds no checkpoint (no 'latest' and no step-* directory)");
  EXPECT_EQ(message_of([&] { pprt::Checkpoint c(d.file("nope")); }),
            d.file("nope") + ": no such checkpoint directory");
  write_checkpoint(d.file("ck"), 3, 1, 1.0f);
  d.write("ck/latest", "step-00000004\n");
  EXPECT_EQ(message_of([&] { pprt::Checkpoint c(d.file("ck")); }),
            d.file("ck/latest") + ": names " + d.file("ck/step-00000004") +
                ", which holds no checkpoint");
}

// (The same model in words, its sizes and layer counts, is the model family's check: pprun's in
// tests/runtime/models/llama/config_test.cpp.)
TEST(Checkpoint, ADifferentModelIsRefusedNamingTheMismatch) {
  TempDir d;
  const Written w = write_checkpoint(d.file("ck"), 3, 1, 1.0f);
  const pprt::Checkpoint ck(d.file("ck"));
  const std::string step = d.file("ck/step-00000003");
  const ppc::Layout deeper = ppc::parse_layout("Ett|tL");
  EXPECT_EQ(
      message_of([&] { ck.check_params(shapes(pprt::model_params(tiny(), deeper))); }),
      step + ": parameter 'layers.2.attn_norm.weight' of this model is not in the checkpoint");
  // A tensor the plan's model lacks, and one of another shape.
  std::vector<pprt::ParamSpec> fewer(w.params.begin() + 1, w.params.end());
  EXPECT_EQ(message_of([&] { ck.check_params(shapes(fewer)); }),
            step + "/model-00001-of-00001.safetensors: tensor '" + w.params[0].name +
                "' is not a parameter of this model");
  std::vector<pprt::ParamSpec> reshaped = w.params;
  reshaped[0].shape = {4, 4};
  EXPECT_EQ(message_of([&] { ck.check_params(shapes(reshaped)); }),
            step + "/model-00001-of-00001.safetensors: tensor '" + w.params[0].name +
                "': shape [16, 8], this model's is [4, 4]");
}

TEST(Checkpoint, DamagedFilesAreRefusedNamingTheFileAndTensor) {
  TempDir d;
  write_checkpoint(d.file("ck"), 3, 1, 1.0f);
  const std::string step = d.file("ck/step-00000003");
  const std::string shard = step + "/model-00001-of-00001.safetensors";
  // Truncated.
  fs::resize_file(shard, fs::file_size(shard) - 10);
  EXPECT_EQ(message_of([&] { pprt::Checkpoint c(d.file("ck")); }).rfind(shard + ": ", 0), 0u)
      << message_of([&] { pprt::Checkpoint c(d.file("ck")); });
  // An index naming a tensor its shard does not hold.
  write_checkpoint(d.file("ck"), 3, 1, 1.0f);
  std::ifstream in(step + "/model.safetensors.index.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["weight_map"]["ghost.weight"] = "model-00001-of-00001.safetensors";
  d.write("ck/step-00000003/model.safetensors.index.json", j.dump());
  EXPECT_EQ(message_of([&] { pprt::Checkpoint c(d.file("ck")); }),
            step +
                "/model.safetensors.index.json: weight_map.ghost.weight: "
                "model-00001-of-00001.safetensors has no tensor 'ghost.weight'");
  // A tensor of another dtype.
  write_checkpoint(d.file("ck"), 3, 1, 1.0f);
  const double x[2] = {1, 2};
  pprt::TensorWrite f64{"head.norm.weight", pprt::TensorDtype::F64, {2}, x, sizeof x};
  const std::vector<pprt::ParamSpec> params = pprt::model_params(tiny(), ppc::parse_layout("EtL"));
  std::vector<std::vector<float>> bufs;
  std::vector<pprt::TensorWrite> model;
  for (const auto& p : params) {
    if (p.name == "head.norm.weight") {
      model.push_back(f64);
      continue;
    }
    auto& b = bufs.emplace_back(static_cast<size_t>(p.numel()), 0.0f);
    model.push_back({p.name, pprt::TensorDtype::F32, p.shape, b.data(), b.size() * 4});
  }
  pprt::write_safetensors(shard, model);
  EXPECT_EQ(message_of([&] { pprt::Checkpoint c(d.file("ck")); }),
            shard + ": tensor 'head.norm.weight': dtype F64, expected F32");
}

// Fuzzing findings (docs/reliability.md): a number too large for a double is nlohmann's
// out_of_range, not a parse_error; it escaped both JSON readers of a checkpoint.
TEST(Checkpoint, ANumberTooLargeToHoldIsAUserError) {
  EXPECT_EQ(message_of([&] {
              pprt::parse_checkpoint_state("{\"step\": 32e290000}", "s.json");
            }).rfind("s.json: not valid JSON: ", 0),
            0u);
  TempDir d;
  write_checkpoint(d.file("ck"), 3, 1, 1.0f);
  const std::string index = d.file("ck/step-00000003/model.safetensors.index.json");
  d.write("ck/step-00000003/model.safetensors.index.json",
          R"({"metadata": {"total_size": 1e400}, "weight_map": {}})");
  const std::string msg = message_of([&] { pprt::Checkpoint c(d.file("ck")); });
  EXPECT_EQ(msg.rfind(index + ": not valid JSON: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("number overflow"), std::string::npos) << msg;
}

// Fuzzing finding: --export made a buffer of the size trainer_state.json's model gives each
// tensor before it read the shard's header, so a damaged state asked for a terabyte.
TEST(Checkpoint, ExportChecksTheShapesBeforeItAllocates) {
  TempDir d;
  write_checkpoint(d.file("ck"), 3, 1, 1.0f);
  const std::string state_file = d.file("ck/step-00000003/trainer_state.json");
  nlohmann::json j = nlohmann::json::parse(filetest::read_file(state_file));
  j["model"]["hidden"] = 65536;
  j["model"]["vocab"] = 4194304;
  d.write("ck/step-00000003/trainer_state.json", j.dump());
  // The model's parameters as pprun's family lists them from that state.
  const auto params = shapes(pprt::model_params(
      pprt::parse_model_config(j["model"].dump(), "model"), ppc::parse_layout("Et|tL")));
  EXPECT_EQ(message_of(
                [&] { pprt::export_checkpoint(d.file("ck"), d.file("out.safetensors"), &params); }),
            d.file("ck/step-00000003") +
                ": tensor 'embed.weight': shape [16, 8] in the checkpoint's shards, but its model "
                "(trainer_state.json) has [4194304, 65536]");
  EXPECT_FALSE(fs::exists(d.file("out.safetensors")));
}

}  // namespace
