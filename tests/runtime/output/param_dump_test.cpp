// --dump-params (runtime/output/param_dump.h): floats read back exactly, shared copies compared.

#include <gtest/gtest.h>
#include <filesystem>

#include "file_test_util.h"
#include "runtime/output/param_dump.h"

namespace {

TEST(ParamDump, RoundTripsFloatsExactlyAndCompares) {
  filetest::TempDir d;
  std::filesystem::create_directories(d.file("a"));
  std::filesystem::create_directories(d.file("b"));
  const std::vector<float> x{0.1f, -3.25e-8f, 1.0f / 3.0f, 12345.678f};
  std::vector<float> y = x;
  y[2] += 1e-5f;
  d.write("a/params.rank0.jsonl", pprt::param_dump_line("w", {2, 2}, x.data(), 4) +
                                      pprt::param_dump_line("only_a", {1}, x.data(), 1));
  d.write("b/params.rank1.jsonl", pprt::param_dump_line("w", {2, 2}, y.data(), 4));
  const auto a = pprt::read_param_dump(d.file("a"));
  EXPECT_EQ(a.at("w").data, x);
  EXPECT_EQ(a.at("w").shape, std::vector<int64_t>({2, 2}));
  const auto c = pprt::compare_param_dumps(a, pprt::read_param_dump(d.file("b")));
  EXPECT_EQ(c.compared, 1u);
  EXPECT_EQ(c.only_in_a, std::vector<std::string>({"only_a"}));
  EXPECT_EQ(c.worst, "w");
  EXPECT_NEAR(c.max_abs_diff, 1e-5, 1e-7);
}

// A shared parameter appears in the dump of every rank holding a copy: the merged view accepts it
// only if the copies are identical.
TEST(ParamDump, SharedCopiesMustBeIdentical) {
  filetest::TempDir d;
  std::filesystem::create_directories(d.file("same"));
  std::filesystem::create_directories(d.file("differ"));
  const std::vector<float> x{0.5f, 0.25f}, y{0.5f, 0.2500001f};
  d.write("same/params.rank0.jsonl", pprt::param_dump_line("embed.weight", {2}, x.data(), 2));
  d.write("same/params.rank14.jsonl", pprt::param_dump_line("embed.weight", {2}, x.data(), 2));
  const auto by_rank = pprt::read_param_dump_by_rank(d.file("same"));
  ASSERT_EQ(by_rank.size(), 2u);
  EXPECT_TRUE(by_rank.count(14) && by_rank.at(14).count("embed.weight"));
  EXPECT_EQ(pprt::read_param_dump(d.file("same")).at("embed.weight").data, x);
  d.write("differ/params.rank0.jsonl", pprt::param_dump_line("embed.weight", {2}, x.data(), 2));
  d.write("differ/params.rank3.jsonl", pprt::param_dump_line("embed.weight", {2}, y.data(), 2));
  EXPECT_EQ(filetest::user_error([&] { pprt::read_param_dump(d.file("differ")); }),
            d.file("differ") +
                ": the copies of shared parameter 'embed.weight' differ between params.rank0.jsonl "
                "and params.rank3.jsonl");
}

}  // namespace
