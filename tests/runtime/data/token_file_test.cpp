// runtime/data/token_file.h and the file side of runtime/data/token_source.h: flat uint16/uint32
// token files, Megatron indexed datasets built byte by byte from the format, format detection,
// validation messages, windows, determinism, batch slices over replicas, and check_unchanged().
#include "runtime/data/token_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>

#include "file_test_util.h"
#include "runtime/data/documents.h"
#include "runtime/data/token_source.h"

namespace {

namespace fs = std::filesystem;
using filetest::le;
using filetest::le_array;
using filetest::TempDir;
using filetest::user_error;
using pprt::DataFormat;
using pprt::TokenFile;
using pprt::TokenSource;

// Megatron's .idx, field by field (megatron/core/datasets/indexed_dataset.py, _IndexWriter).
struct MegatronIndex {
  std::string magic = std::string("MMIDIDX\0\0", 9);
  uint64_t version = 1;
  uint8_t code = 8;  // uint16
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;  // empty: computed from the lengths
  std::vector<int64_t> documents;
  std::optional<uint64_t> sequence_count, document_count;  // default: the vectors' sizes
  std::string modes;                                       // multimodal: one byte per sequence

  std::string bytes(size_t token_size = 2) const {
    std::vector<int64_t> ptr = pointers;
    if (ptr.empty()) {
      int64_t p = 0;
      for (int32_t l : lengths) {
        ptr.push_back(p);
        p += l * static_cast<int64_t>(token_size);
      }
    }
    return magic + le<uint64_t>(version) + std::string(1, static_cast<char>(code)) +
           le<uint64_t>(sequence_count.value_or(lengths.size())) +
           le<uint64_t>(document_count.value_or(documents.size())) + le_array(lengths) +
           le_array(ptr) + le_array(documents) + modes;
  }
};

// Three documents of uint16 tokens (the second split into two sequences), 18 tokens in all:
// the stream is 1..5, 10..12, 20..29.
struct Dataset {
  static MegatronIndex make_index() {
    MegatronIndex ix;
    ix.lengths = {5, 2, 1, 10};
    ix.documents = {0, 1, 3, 4};
    return ix;
  }
  MegatronIndex index = make_index();
  std::vector<uint16_t> tokens = {1,  2,  3,  4,  5,  10, 11, 12, 20,
                                  21, 22, 23, 24, 25, 26, 27, 28, 29};

  std::string write(const TempDir& d, const std::string& prefix) const {
    d.write(prefix + ".idx", index.bytes());
    d.write(prefix + ".bin", le_array(tokens));
    return d.file(prefix);
  }
};

std::vector<uint16_t> iota16(size_t n, uint16_t mod) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(i % mod);
  return v;
}

// Every row of `rows` (of `len` tokens) is a window of `stream`.
void expect_windows(const std::vector<int64_t>& rows, int len, const std::vector<int64_t>& stream) {
  ASSERT_EQ(rows.size() % static_cast<size_t>(len), 0u);
  for (size_t r = 0; r < rows.size(); r += static_cast<size_t>(len)) {
    bool found = false;
    for (size_t off = 0; off + static_cast<size_t>(len) <= stream.size() && !found; ++off)
      found = std::equal(rows.begin() + static_cast<ptrdiff_t>(r),
                         rows.begin() + static_cast<ptrdiff_t>(r) + len,
                         stream.begin() + static_cast<ptrdiff_t>(off));
    EXPECT_TRUE(found) << "row " << r / static_cast<size_t>(len) << " is not a window";
  }
}

TEST(TokenFile, FormatNames) {
  for (DataFormat f : {DataFormat::Auto, DataFormat::Text, DataFormat::Uint16, DataFormat::Uint32,
                       DataFormat::Megatron})
    EXPECT_EQ(pprt::parse_data_format(pprt::data_format_name(f)), f);
  EXPECT_EQ(pprt::parse_data_format("int16"), std::nullopt);
}

TEST(TokenFile, AutoDetection) {
  TempDir d;
  d.write("nano.bin", le_array(iota16(100, 50)));
  Dataset().write(d, "mega");
  d.write("text.txt", "hello world, hello world");
  const auto r = [](const std::string& p, DataFormat f = DataFormat::Auto) {
    return pprt::resolve_data_files(p, f);
  };
  EXPECT_EQ(r(d.file("nano.bin")).format, DataFormat::Uint16);  // nanoGPT's train.bin
  EXPECT_EQ(r(d.file("nano.bin")).path, d.file("nano.bin"));
  for (const std::string p : {"mega", "mega.bin", "mega.idx"}) {
    const pprt::DataFiles f = r(d.file(p));
    EXPECT_EQ(f.format, DataFormat::Megatron) << p;
    EXPECT_EQ(f.path, d.file("mega.bin")) << p;
    EXPECT_EQ(f.index_path, d.file("mega.idx")) << p;
  }
  EXPECT_EQ(r(d.file("text.txt")).format, DataFormat::Text);
  EXPECT_EQ(r(d.file("missing")).format, DataFormat::Text);
  EXPECT_EQ(r(d.file("nano.bin"), DataFormat::Uint32).format, DataFormat::Uint32);
  EXPECT_EQ(r(d.file("mega.bin"), DataFormat::Text).format, DataFormat::Text);
  EXPECT_EQ(r(d.file("nano"), DataFormat::Megatron).index_path, d.file("nano.idx"));
  // What pprun prints.
  EXPECT_EQ(TokenSource::from_file(d.file("nano.bin"), 50, 8, 1).describe(),
            "uint16 tokens of " + d.file("nano.bin") + " (100 tokens)");
  EXPECT_EQ(TokenSource::from_file(d.file("mega"), 30, 8, 1).describe(),
            "Megatron dataset " + d.file("mega") +
                " (uint16 tokens, 3 documents, 4 sequences, 18 tokens)");
  EXPECT_EQ(TokenSource::from_file(d.file("text.txt"), 256, 8, 1).describe(),
            "bytes of " + d.file("text.txt") + " (24 bytes)");
}

TEST(TokenFile, Uint16AndUint32StreamsAndWindows) {
  TempDir d;
  const std::string p16 = d.write("a.bin", le_array(iota16(1000, 1000)));
  std::vector<uint32_t> ids(3000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(70000 + i);
  const std::string p32 = d.write("b.u32", le_array(ids));
  const auto f16 = TokenFile::open(p16, DataFormat::Auto, 1000, 16);
  EXPECT_EQ(f16->format(), DataFormat::Uint16);
  EXPECT_EQ(f16->size(), 1000u);
  const auto f32 = TokenFile::open(p32, DataFormat::Uint32, 80000, 16);
  EXPECT_EQ(f32->size(), 3000u);
  std::vector<int64_t> got(5);
  f32->copy(2995, 5, got.data());
  EXPECT_EQ(got, (std::vector<int64_t>{72995, 72996, 72997, 72998, 72999}));
  // Windows of consecutive ids, from the file, for every row.
  const auto src = TokenSource::from_file(p32, 80000, 16, 3, DataFormat::Uint32);
  std::vector<int64_t> rows;
  src.batch(5, 40, 17, rows);
  ASSERT_EQ(rows.size(), 40u * 17);
  for (size_t r = 0; r < 40; ++r) {
    EXPECT_GE(rows[r * 17], 70000);
    EXPECT_LE(rows[r * 17], 70000 + 3000 - 17);
    for (size_t i = 1; i < 17; ++i) EXPECT_EQ(rows[r * 17 + i], rows[r * 17 + i - 1] + 1);
  }
  const pprt::DataIdentity id = src.identity();
  EXPECT_EQ(id.format, "uint32");
  EXPECT_EQ(id.path, p32);
  EXPECT_EQ(id.index_path, "");
  EXPECT_EQ(id.token_type, "uint32");
  EXPECT_EQ(id.bytes, 12000u);
  EXPECT_EQ(id.tokens, 3000u);
  EXPECT_EQ(id.fingerprint.size(), 16u);
}

TEST(TokenFile, MegatronStreamIsTheConcatenatedDocuments) {
  TempDir d;
  const Dataset ds;
  const std::string prefix = ds.write(d, "corpus_text_document");
  const auto f = TokenFile::open(prefix, DataFormat::Megatron, 30, 4);
  ASSERT_EQ(f->size(), 18u);
  std::vector<int64_t> stream(18);
  f->copy(0, 18, stream.data());
  EXPECT_EQ(stream, std::vector<int64_t>(ds.tokens.begin(), ds.tokens.end()));
  const auto src = TokenSource::from_file(prefix + ".bin", 30, 4, 9);
  std::vector<int64_t> rows;
  src.batch(0, 64, 5, rows);
  expect_windows(rows, 5, stream);
  const pprt::DataIdentity id = src.identity();
  EXPECT_EQ(id.format, "megatron");
  EXPECT_EQ(id.path, prefix + ".bin");
  EXPECT_EQ(id.index_path, prefix + ".idx");
  EXPECT_EQ(id.tokens, 18u);
  EXPECT_EQ(id.bytes, 36u);
  // Other token types: int32 (Megatron's choice for large vocabularies), and the multimodal
  // index (a mode byte per sequence after the document indices).
  MegatronIndex i32 = ds.index;
  i32.code = 4;
  i32.modes = std::string(4, '\0');
  d.write("i32.idx", i32.bytes(4));
  std::vector<int32_t> t32(ds.tokens.begin(), ds.tokens.end());
  t32[3] = 100000;
  d.write("i32.bin", le_array(t32));
  const auto g = TokenFile::open(d.file("i32"), DataFormat::Auto, 100001, 4);
  EXPECT_EQ(g->identity().token_type, "int32");
  g->copy(0, 18, stream.data());
  EXPECT_EQ(stream[3], 100000);
}

TEST(TokenFile, FingerprintFollowsTheContentNotThePath) {
  TempDir d;
  const std::string a = d.write("a.bin", le_array(iota16(300000, 1000)));
  fs::copy_file(a, d.file("copy.bin"));
  const std::string b = d.write("b.bin", le_array(iota16(300001, 1000)));
  const auto fp = [](const std::string& p) {
    return TokenFile::open(p, DataFormat::Auto, 1000, 8)->identity().fingerprint;
  };
  EXPECT_EQ(fp(a), fp(d.file("copy.bin")));
  EXPECT_NE(fp(a), fp(b));
  auto head = iota16(300000, 1000);
  head[0] = 999;
  EXPECT_NE(fp(a), fp(d.write("head.bin", le_array(head))));
}

TEST(TokenFile, FlatFileErrors) {
  TempDir d;
  const std::string odd = d.write("odd.bin", std::string(11, '\0'));
  EXPECT_EQ(user_error([&] { TokenFile::open(odd, DataFormat::Auto, 100, 4); }),
            odd + ": 11 bytes is not a whole number of uint16 tokens (2 bytes each)");
  EXPECT_EQ(user_error([&] { TokenFile::open(odd, DataFormat::Uint32, 100, 1); }),
            odd + ": 11 bytes is not a whole number of uint32 tokens (4 bytes each)");
  const std::string short16 = d.write("short.bin", le_array(iota16(4, 10)));
  EXPECT_EQ(user_error([&] { TokenFile::open(short16, DataFormat::Auto, 100, 4); }),
            short16 + ": 4 tokens of uint16; one sequence needs seq_len + 1 = 5");
  EXPECT_EQ(
      user_error([&] { TokenFile::open(d.write("empty.bin", ""), DataFormat::Auto, 100, 4); }),
      d.file("empty.bin") + ": 0 tokens of uint16; one sequence needs seq_len + 1 = 5");
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("none.bin"), DataFormat::Auto, 100, 4); }),
            "--data: cannot open data file '" + d.file("none.bin") + "'");
  EXPECT_EQ(user_error([&] { TokenFile::open(d.path(), DataFormat::Uint16, 100, 4); }),
            "--data: data file '" + d.path() + "' is not a regular file");
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);  // must not wait for a writer
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("fifo"), DataFormat::Auto, 256, 4); }),
            "--data: data file '" + d.file("fifo") + "' is not a regular file");
  // A token id at or above the vocab, found past the first chunk of the scan.
  auto ids = iota16(200000, 1000);
  ids[150001] = 1000;
  const std::string big = d.write("big.bin", le_array(ids));
  EXPECT_EQ(user_error([&] { TokenFile::open(big, DataFormat::Auto, 1000, 4); }),
            big + ": token 1000 at index 150001 (byte 300002) is not below the model's vocab 1000");
  EXPECT_EQ(TokenFile::open(big, DataFormat::Auto, 1001, 4)->size(), 200000u);
  // uint16 ids always fit a vocab above 65535; uint32 ids are checked.
  const std::string top = d.write("top.bin", le_array(std::vector<uint16_t>(8, 65535)));
  EXPECT_EQ(TokenFile::open(top, DataFormat::Auto, 65536, 4)->size(), 8u);
  EXPECT_EQ(user_error([&] { TokenFile::open(top, DataFormat::Auto, 65535, 4); }),
            top + ": token 65535 at index 0 (byte 0) is not below the model's vocab 65535");
  const std::string u32 = d.write("u32", le_array(std::vector<uint32_t>{1, 2, 3, 4, 0xFFFFFFFFu}));
  EXPECT_EQ(user_error([&] { TokenFile::open(u32, DataFormat::Uint32, 1 << 20, 4); }),
            u32 + ": token 4294967295 at index 4 (byte 16) is not below the model's vocab 1048576");
}

TEST(TokenFile, TextModeKeepsItsMessages) {
  TempDir d;
  const std::string small = d.write("s.txt", "abc");
  EXPECT_EQ(user_error([&] { TokenFile::open(small, DataFormat::Auto, 256, 8); }),
            "--data: data file '" + small + "' has 3 bytes; one sequence needs seq_len + 1 = 9");
  EXPECT_EQ(user_error([&] { TokenFile::open(small, DataFormat::Text, 100, 2); }),
            "--data: byte-level data needs vocab >= 256, the model has 100");
}

// The message of opening a Megatron dataset whose index is `ix` and .bin holds `bin`, without
// the leading "FILE: ", and which file it named.
std::string megatron_error(const MegatronIndex& ix, const std::string& bin, std::string* file) {
  TempDir d;
  d.write("m.idx", ix.bytes());
  d.write("m.bin", bin);
  const std::string e =
      user_error([&] { TokenFile::open(d.file("m"), DataFormat::Megatron, 30, 4); });
  for (const char* f : {"m.idx", "m.bin"})
    if (e.rfind(d.file(f) + ": ", 0) == 0) {
      *file = f;
      return e.substr(d.file(f).size() + 2);
    }
  *file = "";
  return e;
}

TEST(TokenFile, MegatronIndexErrorsNameTheFieldAndByte) {
  const Dataset ds;
  const std::string bin = le_array(ds.tokens);
  std::string file;
  auto check = [&](const MegatronIndex& ix, const std::string& message,
                   const std::string& in = "m.idx", const std::string& b = "") {
    EXPECT_EQ(megatron_error(ix, b.empty() ? bin : b, &file), message);
    EXPECT_EQ(file, in) << message;
  };
  MegatronIndex ix = ds.index;
  ix.magic = std::string("MMIDIDX\0\1", 9);
  check(ix, "bytes 0-8: not a Megatron index (expected the magic \"MMIDIDX\\0\\0\")");
  ix = ds.index;
  ix.version = 2;
  check(ix, "version (byte 9): 2, this build reads version 1");
  ix = ds.index;
  ix.code = 6;
  check(ix, "dtype code (byte 17): 6 is float64; token ids must be integers");
  ix.code = 7;
  check(ix, "dtype code (byte 17): 7 is float32; token ids must be integers");
  ix.code = 9;
  check(ix, "dtype code (byte 17): unknown code 9 (Megatron's are 1 to 8)");
  ix.code = 0;
  check(ix, "dtype code (byte 17): unknown code 0 (Megatron's are 1 to 8)");
  // Counts against the index's size: 34 + 12 S + 8 D bytes (+ S modes).
  ix = ds.index;
  ix.sequence_count = 5;
  check(ix,
        "sequence count (byte 18) 5 and document count (byte 26) 4 need 126 bytes of index "
        "(or 131 with sequence modes), the file has 114");
  ix.sequence_count = uint64_t{1} << 62;
  check(ix,
        "sequence count (byte 18) 4611686018427387904 and document count (byte 26) 4 do not "
        "fit in the index's 114 bytes");
  ix = ds.index;
  ix.document_count = ~uint64_t{0};
  check(ix,
        "sequence count (byte 18) 4 and document count (byte 26) 18446744073709551615 do not "
        "fit in the index's 114 bytes");
  ix = ds.index;
  ix.modes = "x";
  check(ix,
        "sequence count (byte 18) 4 and document count (byte 26) 4 need 114 bytes of index "
        "(or 118 with sequence modes), the file has 115");
  // Lengths and pointers.
  ix = ds.index;
  ix.lengths = {5, -2, 3, 10};
  check(ix, "sequence_lengths[1] (byte 38): -2 is negative");
  ix = ds.index;
  ix.pointers = {0, 10, 15, 16};
  check(ix, "sequence_pointers[2] (byte 66): 15, expected 14 (sequence 1 ends there)");
  ix.pointers = {4, 10, 14, 16};
  check(ix, "sequence_pointers[0] (byte 50): 4, expected 0 (the first sequence starts the .bin)");
  ix.pointers = {0, 10, 14, -1};
  check(ix, "sequence_pointers[3] (byte 74): -1, expected 16 (sequence 2 ends there)");
  // Document indices.
  ix = ds.index;
  ix.documents = {1, 1, 3, 4};
  check(ix, "document_indices[0] (byte 82): 1, expected 0");
  ix.documents = {0, 3, 1, 4};
  check(ix, "document_indices[2] (byte 98): 1 is less than the previous 3");
  ix.documents = {0, 1, 3, 3};
  check(ix, "document_indices[3] (byte 106): 3, expected the sequence count 4");
  ix.documents = {};
  check(ix, "document count (byte 26): 0, the document indices start with a 0");
  // The unchanged dataset opens.
  EXPECT_EQ(megatron_error(ds.index, bin, &file), "(no error)");
}

TEST(TokenFile, MegatronFilesAndTokens) {
  TempDir d;
  Dataset ds;
  // The .bin against the index: message names both files.
  ds.write(d, "m");
  d.write("m.bin", le_array(ds.tokens) + "xy");
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("m"), DataFormat::Auto, 30, 4); }),
            d.file("m.bin") + ": 38 bytes, but the index " + d.file("m.idx") +
                " describes 18 tokens of uint16 (36 bytes)");
  // A truncated index, a missing .bin, a missing .idx.
  d.write("m.idx", ds.index.bytes().substr(0, 20));
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("m"), DataFormat::Megatron, 30, 4); }),
            d.file("m.idx") + ": truncated Megatron index: 20 bytes, its header alone has 34");
  d.write("n.idx", ds.index.bytes());
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("n.idx"), DataFormat::Auto, 30, 4); }),
            "--data: cannot open data file '" + d.file("n.bin") + "'");
  d.write("o.bin", le_array(ds.tokens));
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("o"), DataFormat::Megatron, 30, 4); }),
            "--data: cannot open data file '" + d.file("o.idx") + "'");
  // Too few tokens for one sequence, a token beyond the vocab, a negative token (int32).
  ds.write(d, "p");
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("p"), DataFormat::Auto, 30, 18); }),
            d.file("p.bin") + ": 18 tokens of uint16; one sequence needs seq_len + 1 = 19");
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("p"), DataFormat::Auto, 29, 4); }),
            d.file("p.bin") + ": token 29 at index 17 (byte 34) is not below the model's vocab 29");
  MegatronIndex i32 = ds.index;
  i32.code = 4;
  d.write("q.idx", i32.bytes(4));
  std::vector<int32_t> t32(ds.tokens.begin(), ds.tokens.end());
  t32[3] = -7;
  d.write("q.bin", le_array(t32));
  EXPECT_EQ(user_error([&] { TokenFile::open(d.file("q"), DataFormat::Auto, 30, 4); }),
            d.file("q.bin") + ": token -7 at index 3 (byte 12) is negative");
}

// Every integer dtype code of Megatron's: ids read back, a negative id and one at the vocab found.
template <class T>
void check_token_type(uint8_t code, const std::string& name, int64_t vocab) {
  TempDir d;
  MegatronIndex ix = Dataset::make_index();
  ix.code = code;
  d.write("t.idx", ix.bytes(sizeof(T)));
  std::vector<T> tokens(18);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<T>(vocab - 1 - static_cast<int64_t>(i));
  d.write("t.bin", le_array(tokens));
  const auto f = TokenFile::open(d.file("t"), DataFormat::Auto, static_cast<int>(vocab), 4);
  EXPECT_EQ(f->identity().token_type, name);
  std::vector<int64_t> got(18);
  f->copy(0, 18, got.data());
  for (size_t i = 0; i < 18; ++i) EXPECT_EQ(got[i], vocab - 1 - static_cast<int64_t>(i)) << name;
  tokens[11] = static_cast<T>(vocab);  // wraps to a negative id for int8 and int16 at their top
  d.write("t.bin", le_array(tokens));
  const auto bad = static_cast<int64_t>(tokens[11]);
  EXPECT_EQ(
      user_error(
          [&] { TokenFile::open(d.file("t"), DataFormat::Auto, static_cast<int>(vocab), 4); }),
      fmt::format("{}: token {} at index 11 (byte {}) {}", d.file("t.bin"), bad, 11 * sizeof(T),
                  bad < 0 ? std::string("is negative")
                          : fmt::format("is not below the model's vocab {}", vocab)));
  if constexpr (std::is_signed_v<T>) {
    tokens[11] = 0;
    tokens[17] = static_cast<T>(-1);
    d.write("t.bin", le_array(tokens));
    EXPECT_EQ(user_error([&] { TokenFile::open(d.file("t"), DataFormat::Auto, 1 << 30, 4); }),
              fmt::format("{}: token -1 at index 17 (byte {}) is negative", d.file("t.bin"),
                          17 * sizeof(T)));
  }
}

TEST(TokenFile, EveryMegatronTokenType) {
  check_token_type<uint8_t>(1, "uint8", 200);
  check_token_type<int8_t>(2, "int8", 128);  // vocab 128 wraps to -128
  check_token_type<int8_t>(2, "int8", 100);
  check_token_type<int16_t>(3, "int16", 32768);
  check_token_type<int32_t>(4, "int32", 1 << 30);
  check_token_type<int64_t>(5, "int64", 50257);
  check_token_type<uint16_t>(8, "uint16", 65535);
}

// --- batches: determinism and slices -----------------------------------------------------------

TEST(Data, SlicesOverReplicasMakeTheGlobalBatch) {
  TempDir d;
  const std::string path = d.write("t.bin", le_array(iota16(5000, 700)));
  std::string letters;
  for (int i = 0; i < 3000; ++i) letters += static_cast<char>(' ' + (i * i + 3 * i) % 95);
  const std::string text = d.write("t.txt", letters);
  const std::vector<TokenSource> sources = {TokenSource::synthetic(256, 5),
                                            TokenSource::from_file(path, 700, 16, 5),
                                            TokenSource::from_file(text, 256, 16, 5)};
  constexpr int kGlobal = 12, kLen = 17;
  for (const TokenSource& src : sources) {
    for (int64_t step : {0, 1, 7}) {
      std::vector<int64_t> global, again, other_step;
      src.batch(step, kGlobal, kLen, global);
      src.batch(step, 0, kGlobal, kLen, again);
      EXPECT_EQ(global, again);
      src.batch(step + 100, kGlobal, kLen, other_step);
      EXPECT_NE(global, other_step) << src.describe();
      for (int dp : {1, 2, 3, 4, 6, 12}) {
        std::vector<int64_t> joined, part;
        for (int r = 0; r < dp; ++r) {
          src.batch(step, r * kGlobal / dp, kGlobal / dp, kLen, part);
          joined.insert(joined.end(), part.begin(), part.end());
        }
        EXPECT_EQ(joined, global) << src.describe() << " dp " << dp << " step " << step;
      }
      // Row j alone is row j of the global batch.
      std::vector<int64_t> row;
      src.batch(step, 5, 1, kLen, row);
      EXPECT_TRUE(std::equal(row.begin(), row.end(), global.begin() + 5 * kLen));
    }
  }
}

TEST(Data, TextRowsAreTheWindowsOfTheCounterBasedOffsets) {
  // Global row j of step s starts at mix64(mix64(mix64(seed, s), j)) % (size - len + 1): the
  // rows pprun drew before slices existed, bit for bit.
  TempDir d;
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const std::string path = d.write("t.txt", text);
  const auto src = TokenSource::from_file(path, 256, 9, 42);
  std::vector<int64_t> rows;
  src.batch(3, 2, 6, 10, rows);
  for (int r = 0; r < 6; ++r) {
    const uint64_t key = pprt::mix64(pprt::mix64(42, 3), static_cast<uint64_t>(2 + r));
    const uint64_t off = pprt::mix64(key) % (text.size() - 10 + 1);
    for (int i = 0; i < 10; ++i)
      EXPECT_EQ(rows[static_cast<size_t>(r * 10 + i)],
                static_cast<unsigned char>(text[off + static_cast<size_t>(i)]));
  }
}

// --- check_unchanged ---------------------------------------------------------------------------

TEST(Data, CheckUnchangedNoticesAReplacedOrModifiedFile) {
  TempDir d;
  const std::string path = d.write("t.bin", le_array(iota16(100, 50)));
  const auto src = TokenSource::from_file(path, 50, 8, 1);
  src.check_unchanged();
  TokenSource::synthetic(50, 1).check_unchanged();
  // Appended in place.
  { std::ofstream(path, std::ios::binary | std::ios::app) << "ab"; }
  EXPECT_EQ(user_error([&] { src.check_unchanged(); }),
            path + ": the data file was modified since pprun opened it (200 bytes then, 202 now)");
  // Replaced by a rename (the mapping still reads the old file: the rows do not change).
  const std::string path2 = d.write("u.bin", le_array(iota16(100, 50)));
  const auto fresh = TokenSource::from_file(path2, 50, 8, 1);
  std::vector<int64_t> before, after;
  fresh.batch(0, 4, 9, before);
  d.write("new.bin", le_array(iota16(100, 40)));
  fs::rename(d.file("new.bin"), path2);
  EXPECT_EQ(user_error([&] { fresh.check_unchanged(); }),
            path2 +
                ": the data file was replaced since pprun opened it (another file is at its "
                "path)");
  fresh.batch(0, 4, 9, after);
  EXPECT_EQ(before, after);
  // Removed.
  const auto last = TokenSource::from_file(path2, 50, 8, 1);
  fs::remove(path2);
  EXPECT_EQ(user_error([&] { last.check_unchanged(); }),
            path2 + ": the data file is gone since pprun opened it: No such file or directory");
  // Megatron: the index too.
  const std::string prefix = Dataset().write(d, "m");
  const auto m = TokenSource::from_file(prefix, 30, 4, 1);
  m.check_unchanged();
  d.write("m2.idx", Dataset().index.bytes());
  fs::rename(d.file("m2.idx"), prefix + ".idx");
  EXPECT_EQ(user_error([&] { m.check_unchanged(); }),
            prefix +
                ".idx: the data file was replaced since pprun opened it (another file is at "
                "its path)");
}

}  // namespace

namespace {

// The ids and positions of a row of documents (runtime/data/documents.h), -1 for padding.
std::vector<std::pair<int64_t, int64_t>> decoded(const std::vector<int64_t>& row) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t v : row)
    out.emplace_back(pprt::is_padding(v) ? -1 : pprt::token_id(v),
                     pprt::is_padding(v) ? -1 : pprt::document_position(v));
  return out;
}

}  // namespace

// Megatron's documents (document_indices over the sequences) and --eod's, cut into pieces of at
// most a row (seq_len + 1 tokens) that overlap by one token; rows of --pad (one piece) and --pack
// (the drawn piece, then best fit: the longest of the pieces after it that still fits, while one
// does), the rest padding; every row starts a document.
TEST(TokenFile, DocumentsPiecesAndRows) {
  TempDir d;
  const Dataset ds;  // documents 1..5, 10..12, 20..29
  const auto f = TokenFile::open(ds.write(d, "docs"), DataFormat::Megatron, 30, 4);
  EXPECT_EQ(f->document_starts(), (std::vector<uint64_t>{0, 5, 8}));
  const auto pieces = pprt::document_pieces(*f, std::nullopt, 5);
  std::vector<std::pair<uint64_t, uint32_t>> got;
  for (const pprt::Piece& p : pieces) got.emplace_back(p.start, p.length);
  // The 10-token document in pieces of 5 at strides of 4: 20..24, 24..28, 28..29.
  EXPECT_EQ(got,
            (std::vector<std::pair<uint64_t, uint32_t>>{{0, 5}, {5, 3}, {8, 5}, {12, 5}, {16, 2}}));
  std::vector<int64_t> row(5);
  pprt::document_row(*f, pieces, 1, pprt::RowMode::Pack, 5, row.data());
  // 10..12, then neither 20..24 nor 24..28 fits, but 28..29 does: best fit takes it.
  EXPECT_EQ(decoded(row), (std::vector<std::pair<int64_t, int64_t>>{
                              {10, 0}, {11, 1}, {12, 2}, {28, 0}, {29, 1}}));
  EXPECT_EQ(pprt::filled(row.data(), 5), 5);
  pprt::document_row(*f, pieces, 4, pprt::RowMode::Pack, 5, row.data());
  // 28..29, then (round) 1..5 does not fit, 10..12 does.
  EXPECT_EQ(decoded(row), (std::vector<std::pair<int64_t, int64_t>>{
                              {28, 0}, {29, 1}, {10, 0}, {11, 1}, {12, 2}}));
  // Rows of 6: 10..12, then no piece of 3 tokens or fewer is left: padding.
  const auto six = pprt::document_pieces(*f, std::nullopt, 6);
  std::vector<int64_t> r6(6);
  pprt::document_row(*f, six, 1, pprt::RowMode::Pack, 6, r6.data());
  EXPECT_EQ(decoded(r6), (std::vector<std::pair<int64_t, int64_t>>{
                             {10, 0}, {11, 1}, {12, 2}, {-1, -1}, {-1, -1}, {-1, -1}}));
  pprt::document_row(*f, six, 0, pprt::RowMode::Pad, 6, r6.data());
  EXPECT_EQ(decoded(r6), (std::vector<std::pair<int64_t, int64_t>>{
                             {1, 0}, {2, 1}, {3, 2}, {4, 3}, {5, 4}, {-1, -1}}));

  // --eod: a flat file whose documents end with token 0 (the tokens after the last 0 are one).
  const std::vector<uint16_t> flat = {5, 6, 0, 7, 0, 8, 9, 9, 9, 9, 9, 0, 4, 4};
  d.write("flat.bin", le_array(flat));
  const auto g = TokenFile::open(d.file("flat.bin"), DataFormat::Uint16, 10, 4);
  std::vector<std::pair<uint64_t, uint32_t>> eod;
  for (const pprt::Piece& p : pprt::document_pieces(*g, 0, 5)) eod.emplace_back(p.start, p.length);
  EXPECT_EQ(eod,
            (std::vector<std::pair<uint64_t, uint32_t>>{{0, 3}, {3, 2}, {5, 5}, {9, 3}, {12, 2}}));
  pprt::document_row(*g, pprt::document_pieces(*g, 0, 5), 0, pprt::RowMode::Pack, 5, row.data());
  EXPECT_EQ(decoded(row),
            (std::vector<std::pair<int64_t, int64_t>>{{5, 0}, {6, 1}, {0, 2}, {7, 0}, {0, 1}}));
  // A token source of documents: every row starts a document, and rows follow (seed, step, row).
  auto src = TokenSource::from_file(d.file("flat.bin"), 10, 4, 9, DataFormat::Uint16);
  src.use_documents(pprt::RowMode::Pack, 0, 5);
  std::vector<int64_t> a, b;
  src.batch(3, 0, 8, 5, a);
  src.batch(3, 4, 4, 5, b);
  EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin() + 20));
  for (size_t r = 0; r < 8; ++r) EXPECT_EQ(pprt::document_position(a[r * 5]), 0) << r;
}
