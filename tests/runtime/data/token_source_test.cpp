// The training data (runtime/data/token_source.h): the synthetic language, byte-level files,
// their errors, --varlen's length buckets.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

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

// --varlen's length buckets: a slice's rows are the same rows (of (seed, step, row)), put in the
// order of their filled tokens, shortest first, so that microbatches cut from them in order pad
// less (the sum of --varlen's microbatch lengths is at most what the data order gives, here less).
TEST(Data, LengthBucketsOrderASlicesRowsByLength) {
  filetest::TempDir d;
  // Documents of 1 to 14 tokens, each ended by token 0.
  std::vector<uint16_t> ids;
  for (int k = 0; k < 60; ++k) {
    for (int i = 0; i < 1 + (k * 7) % 14; ++i)
      ids.push_back(static_cast<uint16_t>(1 + (k + i) % 9));
    ids.push_back(0);
  }
  const std::string path = d.write("docs.bin", filetest::le_array(ids));
  auto src = pprt::TokenSource::from_file(path, 16, 16, 3, pprt::DataFormat::Uint16);
  src.use_documents(pprt::RowMode::Pad, 0, 17);
  constexpr int kRows = 16, kLen = 17, kMicrobatches = 4;
  std::vector<int64_t> plain, bucketed;
  src.batch(2, 8, kRows, kLen, plain);
  EXPECT_FALSE(src.buckets());
  src.bucket_by_length(true);
  ASSERT_TRUE(src.buckets());
  src.batch(2, 8, kRows, kLen, bucketed);
  auto rows_of = [](const std::vector<int64_t>& v) {
    std::vector<std::vector<int64_t>> out;
    for (int r = 0; r < kRows; ++r)
      out.emplace_back(v.begin() + r * kLen, v.begin() + (r + 1) * kLen);
    return out;
  };
  auto a = rows_of(plain), b = rows_of(bucketed);
  ASSERT_NE(a, b);  // the data order is not sorted already
  for (int r = 1; r < kRows; ++r)
    EXPECT_LE(pprt::filled(b[r - 1].data(), kLen), pprt::filled(b[r].data(), kLen)) << r;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);  // the same rows
  auto padded = [](const std::vector<int64_t>& v) {
    int64_t sum = 0;
    for (int mb = 0; mb < kMicrobatches; ++mb)
      sum += pprt::varlen_length(v.data() + mb * 4 * kLen, 4, kLen, 1);
    return sum;
  };
  EXPECT_LT(padded(bucketed), padded(plain));
  // Windows have no lengths: no buckets.
  auto windows = pprt::TokenSource::from_file(path, 16, 16, 3, pprt::DataFormat::Uint16);
  windows.bucket_by_length(true);
  EXPECT_FALSE(windows.buckets());
}

}  // namespace
