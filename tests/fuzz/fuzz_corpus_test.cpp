// Replays every committed fuzz input through its target in the normal build: the seed corpora
// (fuzz/corpus/<target>/) and the inputs of past findings (fuzz/regressions/<target>/). Each must
// keep the contract of fuzz/fuzz_target.h: accepted, or rejected with a ppc::UserError that says
// where; nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "compiler/layout.h"
#include "fuzz/fuzz_files.h"
#include "fuzz/fuzz_target.h"
#include "runtime/checkpoint/format.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/data/token_file.h"
#include "runtime/models/llama/architecture.h"
#include "tests/compiler/test_util.h"

namespace {

namespace fs = std::filesystem;

void throw_violation(const std::string& what) {
  throw ppfuzz::Violation(what);
}

std::vector<std::string> inputs(const std::string& dir) {
  std::vector<std::string> files;
  const fs::path p = pptest::source_path(dir);
  if (!fs::is_directory(p)) return files;
  for (const auto& e : fs::directory_iterator(p))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (const auto& t : ppfuzz::targets()) names.push_back(t.name);
  return names;
}

TEST(FuzzTargets, EveryListedTargetIsRegistered) {
  std::vector<std::string> listed;
  std::istringstream in(PP_FUZZ_TARGET_LIST);
  for (std::string name; std::getline(in, name, ',');) listed.push_back(name);
  std::vector<std::string> registered = target_names();
  std::sort(listed.begin(), listed.end());
  std::sort(registered.begin(), registered.end());
  EXPECT_EQ(listed, registered);
}

class FuzzCorpus : public testing::TestWithParam<std::string> {};

TEST_P(FuzzCorpus, EveryInputKeepsTheContract) {
  const std::string& name = GetParam();
  const auto& all = ppfuzz::targets();
  const auto target = std::find_if(all.begin(), all.end(), [&](auto& t) { return t.name == name; });
  ASSERT_NE(target, all.end());
  const std::vector<std::string> seeds = inputs("fuzz/corpus/" + name);
  EXPECT_GE(seeds.size(), 3u) << "fuzz/corpus/" << name << " needs seeds";
  std::vector<std::string> files = seeds;
  for (auto& f : inputs("fuzz/regressions/" + name)) files.push_back(f);
  ppfuzz::set_violation_handler(throw_violation);
  for (const std::string& f : files) {
    try {
      target->fn(pptest::slurp(f));
    } catch (const ppfuzz::Violation& v) {
      ADD_FAILURE() << f << ": " << v.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, testing::ValuesIn(target_names()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// --- The archive of the file-reading targets (fuzz/fuzz_files.h) ---------------------------------

TEST(FuzzFiles, AnArchiveSplitsIntoNamedFiles) {
  const auto files = ppfuzz::split_files("=== a\nxy\n\n=== d/b.bin\n\n=== e\n== not a separator");
  ASSERT_TRUE(files);
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].name, "a");
  EXPECT_EQ((*files)[0].bytes, "xy\n");  // the last newline belongs to the separator
  EXPECT_EQ((*files)[1].name, "d/b.bin");
  EXPECT_EQ((*files)[1].bytes, "");
  EXPECT_EQ((*files)[2].bytes, "== not a separator");
}

TEST(FuzzFiles, WhatIsNotAnArchiveIsIgnored) {
  for (const char* bad : {"", "x=== a\n", "=== a", "=== ../a\n", "=== a/b/c\n", "=== /a\n",
                          "=== a\n\n=== a\n", "=== a\n\n=== a/b\n", "=== .\n", "=== a b\n"})
    EXPECT_FALSE(ppfuzz::split_files(bad)) << bad;
  std::string many;
  for (size_t i = 0; i <= ppfuzz::kMaxFiles; ++i) many += "=== f" + std::to_string(i) + "\n\n";
  many.pop_back();
  EXPECT_FALSE(ppfuzz::split_files(many));
}

// The seeds of the file-reading targets reach past the readers' checks: each seed that is meant
// to be accepted is, so fuzzing starts from real checkpoints and token files.
std::string unpack(const std::string& seed, const std::string& sub) {
  const std::string archive = pptest::slurp(pptest::source_path(seed));
  const auto files = ppfuzz::split_files(archive);  // views into `archive`
  EXPECT_TRUE(files) << seed;
  const std::string dir = ppfuzz::scratch_dir() + "/" + sub;
  if (files) ppfuzz::write_files(dir, *files);
  return dir;
}

TEST(FuzzSeeds, TheCheckpointSeedsResumeAndExport) {
  for (const char* seed : {"pp2-1f1b", "pp1-tied-mtp-step-dir", "two-steps-no-latest"}) {
    SCOPED_TRACE(seed);
    const std::string dir = unpack(std::string("fuzz/corpus/checkpoint/") + seed, "ckpt");
    const pprt::Checkpoint ckpt(dir);
    const ppc::Layout layout = ppc::parse_layout(ckpt.state().layout);
    const pprt::ModelConfig model = pprt::parse_model_config(ckpt.state().model.dump(), "model");
    std::vector<pprt::ParamShape> params;
    for (const pprt::ParamSpec& p : pprt::model_params(model, layout))
      params.push_back({p.name, p.shape});
    EXPECT_NO_THROW(ckpt.check_params(params));
    using Params = const std::vector<pprt::ParamShape>*;
    for (Params expected : {Params{nullptr}, Params{&params}})
      EXPECT_EQ(pprt::export_checkpoint(
                    dir, (fs::path(dir).parent_path() / "out.safetensors").string(), expected),
                ckpt.model_tensors().size());
  }
}

TEST(FuzzSeeds, TheTokenFileSeedsOpen) {
  for (const auto& f : inputs("fuzz/corpus/token_file")) {
    SCOPED_TRACE(f);
    const std::string archive = pptest::slurp(f);
    const auto files = ppfuzz::split_files(archive);
    ASSERT_TRUE(files);
    std::istringstream args{std::string(files->front().bytes)};
    std::string format, path;
    int vocab = 0, seq_len = 0;
    ASSERT_TRUE(args >> format >> vocab >> seq_len >> path);
    const std::string dir = ppfuzz::scratch_dir() + "/data";
    ppfuzz::write_files(dir, std::vector<ppfuzz::NamedFile>(files->begin() + 1, files->end()));
    auto open = [&] {
      return pprt::TokenFile::open(dir + "/" + path, *pprt::parse_data_format(format), vocab,
                                   seq_len);
    };
    if (f.find("over-vocab") != std::string::npos)
      EXPECT_THROW(open(), ppc::UserError);
    else
      EXPECT_GT(open()->size(), static_cast<uint64_t>(seq_len));
  }
}

TEST(FuzzSeeds, TheSafetensorsSeedsOpen) {
  for (const auto& f : inputs("fuzz/corpus/safetensors")) {
    SCOPED_TRACE(f);
    EXPECT_NO_THROW(pprt::SafetensorsFile{f});
  }
}

}  // namespace
