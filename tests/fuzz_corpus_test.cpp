// Replays every committed fuzz input through its target in the normal build: the seed corpora
// (fuzz/corpus/<target>/) and the inputs of past findings (fuzz/regressions/<target>/). Each must
// keep the contract of fuzz/fuzz_target.h: accepted, or rejected with a ppc::UserError that says
// where; nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "fuzz/fuzz_target.h"
#include "tests/test_util.h"

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

}  // namespace
