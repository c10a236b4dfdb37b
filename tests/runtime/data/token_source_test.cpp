// The training data (runtime/data/token_source.h): the synthetic language, byte-level files,
// their errors.

#include <gtest/gtest.h>
#include <map>
#include <set>

#include "file_test_util.h"
#include "runtime/data/token_source.h"

namespace {

TEST(Data, SyntheticBatchesAreDeterministicPerStep) {
  const auto src = pprt::TokenSource::synthetic(256, 5);
  std::vector<int64_t> a, b, c;
  src.batch(3, 4, 17, a);
  pprt::TokenSource::synthetic(256, 5).batch(3, 4, 17, b);
  src.batch(4, 4, 17, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), 68u);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 256);
  EXPECT_EQ(src.describe(), "synthetic language (vocab 256)");
}

TEST(Data, SyntheticLanguageIsLearnable) {
  // Each token has at most four successors (or the sequence repeats its first half).
  const auto src = pprt::TokenSource::synthetic(64, 1);
  std::vector<int64_t> rows;
  src.batch(0, 200, 32, rows);
  std::map<int64_t, std::set<int64_t>> next;
  for (int r = 0; r < 200; ++r)
    for (int i = 0; i + 1 < 16; ++i)
      next[rows[static_cast<size_t>(r * 32 + i)]].insert(rows[static_cast<size_t>(r * 32 + i + 1)]);
  for (const auto& [t, s] : next) EXPECT_LE(s.size(), 4u) << "token " << t;
}

TEST(Data, FileWindowsAreBytes) {
  filetest::TempDir d;
  const std::string path = d.write("text.txt", "abcdefghijklmnopqrstuvwxyz");
  const auto src = pprt::TokenSource::from_file(path, 256, 4, 1);
  std::vector<int64_t> rows;
  src.batch(0, 3, 5, rows);
  for (int r = 0; r < 3; ++r)
    for (int i = 1; i < 5; ++i)
      EXPECT_EQ(rows[static_cast<size_t>(r * 5 + i)], rows[static_cast<size_t>(r * 5 + i - 1)] + 1);
  EXPECT_EQ(src.describe(), "bytes of " + path + " (26 bytes)");
}

TEST(Data, FileErrors) {
  filetest::TempDir d;
  EXPECT_EQ(filetest::user_error([] { pprt::TokenSource::from_file("/no/such/file", 256, 8, 1); }),
            "--data: cannot open data file '/no/such/file'");
  const std::string small = d.write("s.txt", "abc");
  EXPECT_EQ(filetest::user_error([&] { pprt::TokenSource::from_file(small, 256, 8, 1); }),
            "--data: data file '" + small + "' has 3 bytes; one sequence needs seq_len + 1 = 9");
  EXPECT_EQ(filetest::user_error([&] { pprt::TokenSource::from_file(small, 100, 2, 1); }),
            "--data: byte-level data needs vocab >= 256, the model has 100");
}

}  // namespace
