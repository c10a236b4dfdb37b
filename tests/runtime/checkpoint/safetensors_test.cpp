// runtime/checkpoint/safetensors.h against the published format: hand-built files byte by byte, the
// header rules, padding and alignment, the order of offsets, every rejection and its message, a
// round trip of every dtype, and a file that an independent reader (Python and torch) loads.
#include "runtime/checkpoint/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "file_test_util.h"

namespace {

using filetest::le;
using filetest::TempDir;
using filetest::user_error;
using pprt::SafetensorsFile;
using pprt::TensorDtype;

// A safetensors file: the 8-byte size of `json`, `json`, then `data`.
std::string st_bytes(const std::string& json, const std::string& data = "") {
  return le<uint64_t>(json.size()) + json + data;
}

// The error that opening a file of `bytes` gives, without the leading "PATH: ".
std::string open_error(const std::string& bytes) {
  TempDir d;
  const std::string path = d.write("x.safetensors", bytes);
  std::string e = user_error([&] { SafetensorsFile f(path); });
  if (e.rfind(path + ": ", 0) == 0) return e.substr(path.size() + 2);
  return "(no path) " + e;
}

TEST(Safetensors, ReadsTheReadmeExample) {
  // The reference implementation's documented example: a 2x2 I32 tensor, a 60-byte header.
  const std::string json = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  ASSERT_EQ(json.size(), 60u);
  std::string bytes = "<" + std::string(7, '\0') + json;
  const std::vector<int32_t> values = {1, -2, 3, 1 << 30};
  bytes += filetest::le_array(values);
  TempDir d;
  const SafetensorsFile f(d.write("example.safetensors", bytes));
  EXPECT_EQ(f.header_size(), 60u);
  EXPECT_EQ(f.data_start(), 68u);
  ASSERT_EQ(f.tensors().size(), 1u);
  const pprt::TensorInfo& t = f.tensors()[0];
  EXPECT_EQ(t.name, "test");
  EXPECT_EQ(t.dtype, TensorDtype::I32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.begin, 0u);
  EXPECT_EQ(t.end, 16u);
  EXPECT_EQ(t.numel(), 4u);
  EXPECT_TRUE(f.metadata().empty());
  std::vector<int32_t> got(4);
  f.read("test", TensorDtype::I32, std::vector<int64_t>{2, 2}, got.data(), 16);
  EXPECT_EQ(got, values);
}

TEST(Safetensors, HeaderRulesThatAreAccepted) {
  TempDir d;
  // No tensors at all; whitespace in the JSON; padding with spaces; a header whose length is not
  // a multiple of 8 (alignment is the writer's choice, not a rule); metadata.
  EXPECT_TRUE(SafetensorsFile(d.write("a", st_bytes("{}"))).tensors().empty());
  const std::string json =
      R"({ "__metadata__" : {"format": "pt", "note": ""} ,)"
      "\n"
      R"( "w" : { "shape" : [ 3 ] , "data_offsets" : [0, 3], "dtype" : "U8" } })"
      "    ";
  ASSERT_NE(json.size() % 8, 0u);
  const SafetensorsFile f(d.write("b", st_bytes(json, "abc")));
  EXPECT_EQ(f.metadata(), (pprt::SafetensorsMetadata{{"format", "pt"}, {"note", ""}}));
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.data_start(), 8 + json.size());  // not 8-byte aligned: still valid
  std::string got(3, '\0');
  f.read("w", TensorDtype::U8, std::vector<int64_t>{3}, got.data(), 3);
  EXPECT_EQ(got, "abc");
  // Scalars (shape []) hold one element; empty tensors (a 0 dimension) hold no bytes.
  const SafetensorsFile g(
      d.write("c", st_bytes(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                            R"("e":{"dtype":"F32","shape":[0,5],"data_offsets":[8,8]},)"
                            R"("z":{"dtype":"BF16","shape":[4,0],"data_offsets":[8,8]}})",
                            le<double>(2.5))));
  ASSERT_EQ(g.tensors().size(), 3u);
  double s = 0;
  g.read("s", TensorDtype::F64, std::vector<int64_t>{}, &s, 8);
  EXPECT_EQ(s, 2.5);
  EXPECT_EQ(g.info("e").bytes(), 0u);
  g.read("e", TensorDtype::F32, std::vector<int64_t>{0, 5}, nullptr, 0);
}

TEST(Safetensors, OffsetsMayBeListedInAnyOrderButTileTheBuffer) {
  // The JSON lists b before a; the tensors are reported in the order of their offsets.
  TempDir d;
  const SafetensorsFile f(
      d.write("x", st_bytes(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
                            R"("a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})",
                            "AABBcd")));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[1].name, "b");
  std::string b(2, '\0');
  f.read("b", TensorDtype::U8, std::vector<int64_t>{2}, b.data(), 2);
  EXPECT_EQ(b, "cd");
}

TEST(Safetensors, EveryRejectionNamesTheFileAndTheField) {
  const auto entry = [](const std::string& name, const std::string& body) {
    return "{\"" + name + "\":{" + body + "}}";
  };
  // Sizes.
  EXPECT_EQ(open_error("\x01\x02\x03\x04\x05"),
            "not a safetensors file: 5 bytes, less than the 8-byte header size");
  EXPECT_EQ(open_error(le<uint64_t>(4096) + std::string(92, ' ')),
            "truncated: the header says 4096 bytes but the file has 100");
  EXPECT_EQ(open_error(le<uint64_t>(~uint64_t{0}) + "{}"),
            "truncated: the header says 18446744073709551615 bytes but the file has 10");
  EXPECT_EQ(open_error(le<uint64_t>(0)),
            "header: does not start with '{' (not a safetensors file?)");
  EXPECT_EQ(open_error(st_bytes(" {}")),
            "header: does not start with '{' (not a safetensors file?)");
  EXPECT_EQ(open_error(st_bytes("[1]")),
            "header: does not start with '{' (not a safetensors file?)");
  // JSON.
  EXPECT_EQ(open_error(st_bytes("{\"a\":")),
            "header: invalid JSON at byte 6 of the header: parse error at line 1, column 6: syntax "
            "error while parsing value - unexpected end of input; expected '[', '{', or a literal");
  EXPECT_EQ(
      open_error(st_bytes("{} x")),
      "header: invalid JSON at byte 4 of the header: parse error at line 1, column 4: syntax "
      "error while parsing value - invalid literal; last read: '{} x'; expected end of input");
  EXPECT_EQ(open_error(st_bytes("{\"\xff\":1}")),
            "header: invalid JSON at byte 3 of the header: parse error at line 1, column 3: syntax "
            "error while parsing object key - invalid string: ill-formed UTF-8 byte; last read: "
            "'\"?'; expected string literal");
  EXPECT_EQ(open_error(st_bytes("{}\n// comment")).rfind("header: invalid JSON at byte", 0), 0u);
  // Entries.
  EXPECT_EQ(open_error(st_bytes(R"({"a":1})")),
            "tensor 'a': expected an object with dtype, shape and data_offsets, found a number");
  EXPECT_EQ(open_error(st_bytes(R"({"a":[]})")),
            "tensor 'a': expected an object with dtype, shape and data_offsets, found an array");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F33","shape":[1],"data_offsets":[0,4])"))),
            "tensor 'a': unknown dtype 'F33'");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":4,"shape":[1],"data_offsets":[0,4])"))),
            "tensor 'a': dtype must be a string, found a number");
  EXPECT_EQ(
      open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[-1],"data_offsets":[0,4])"))),
      "tensor 'a': shape must be an array of non-negative integers, found a negative integer");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[1.0],"data_offsets":[0,4])"))),
            "tensor 'a': shape must be an array of non-negative integers, found a non-integer "
            "number");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":4,"data_offsets":[0,4])"))),
            "tensor 'a': shape must be an array of non-negative integers, found a number");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[[1]],"data_offsets":[0,4])"))),
            "tensor 'a': shape must be an array of non-negative integers, found an array");
  EXPECT_EQ(open_error(st_bytes(
                entry("a", R"("dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4])"))),
            "tensor 'a': shape dimension 9223372036854775808 is too large");
  for (const char* offsets : {"[0]", "[0,4,8]", "[-1,4]", "[0,4.5]", "{}", "\"0,4\"", "[[0],4]"})
    EXPECT_EQ(open_error(st_bytes(entry(
                  "a", std::string(R"("dtype":"F32","shape":[1],"data_offsets":)") + offsets))),
              "tensor 'a': data_offsets must be two non-negative integers [begin, end]")
        << offsets;
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[1],"data_offsets":[8,4])"),
                                std::string(8, '\0'))),
            "tensor 'a': data_offsets [8, 4] end before they begin");
  EXPECT_EQ(open_error(st_bytes(
                entry("embed.weight", R"("dtype":"F32","shape":[4,8],"data_offsets":[0,100])"),
                std::string(100, '\0'))),
            "tensor 'embed.weight': data_offsets [0, 100] do not match shape [4, 8] of F32 (128 "
            "bytes)");
  EXPECT_EQ(open_error(st_bytes(entry(
                "a", R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0])"))),
            "tensor 'a': shape [4294967296, 4294967296] of F32 overflows 64 bits");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[1])"))),
            "tensor 'a': missing field 'data_offsets'");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","data_offsets":[0,4])"))),
            "tensor 'a': missing field 'shape'");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("shape":[1],"data_offsets":[0,4])"))),
            "tensor 'a': missing field 'dtype'");
  EXPECT_EQ(open_error(st_bytes(
                entry("a", R"("dtype":"F32","shape":[1],"data_offsets":[0,4],"offsets":[0,4])"))),
            "tensor 'a': unknown field 'offsets' (expected dtype, shape and data_offsets)");
  EXPECT_EQ(open_error(st_bytes(
                entry("a", R"("dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4])"))),
            "tensor 'a': duplicate field 'dtype'");
  EXPECT_EQ(open_error(st_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                "xy")),
            "duplicate tensor 'a'");
  EXPECT_EQ(open_error(st_bytes("{\"a\\nb\":1}")),
            "tensor 'a\\x0ab': expected an object with dtype, shape and data_offsets, found a "
            "number");
  // Metadata.
  EXPECT_EQ(open_error(st_bytes(R"({"__metadata__":["x"]})")),
            "__metadata__ must be an object of strings, found an array");
  EXPECT_EQ(open_error(st_bytes(R"({"__metadata__":{"n":1}})")),
            "__metadata__: the value of 'n' must be a string, found a number");
  EXPECT_EQ(open_error(st_bytes(R"({"__metadata__":{"n":{}}})")),
            "__metadata__: the value of 'n' must be a string, found an object");
  EXPECT_EQ(open_error(st_bytes(R"({"__metadata__":{"n":"1","n":"2"}})")),
            "__metadata__: duplicate key 'n'");
  EXPECT_EQ(open_error(st_bytes(R"({"__metadata__":{},"__metadata__":{}})")),
            "duplicate __metadata__");
  // Offsets against each other and against the file.
  EXPECT_EQ(open_error(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                std::string(12, '\0'))),
            "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
  EXPECT_EQ(open_error(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                std::string(12, '\0'))),
            "tensor 'b': data_offsets [8, 12] leave bytes [4, 8) of the buffer to no tensor (holes "
            "are not allowed)");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[1],"data_offsets":[4,8])"),
                                std::string(8, '\0'))),
            "tensor 'a': data_offsets [4, 8] leave bytes [0, 4) of the buffer to no tensor (holes "
            "are not allowed)");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])"),
                                std::string(12, '\0'))),
            "the tensors cover 8 bytes but the file has 12 after the header (holes are not "
            "allowed)");
  EXPECT_EQ(open_error(st_bytes(entry("a", R"("dtype":"F32","shape":[4],"data_offsets":[0,16])"),
                                std::string(8, '\0'))),
            "truncated: the tensors need 16 bytes of data but the file has 8 after the header");
  EXPECT_EQ(
      open_error(st_bytes("{}", "x")),
      "the tensors cover 0 bytes but the file has 1 after the header (holes are not allowed)");
}

TEST(Safetensors, HeaderSizeLimitAndNonFiles) {
  TempDir d;
  // A sparse 200 MB file whose header claims 150 MB: refused before anything is allocated.
  const std::string big = d.file("big.safetensors");
  {
    const int fd = ::open(big.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    const std::string size = le<uint64_t>(150'000'000) + "{";
    ASSERT_EQ(::write(fd, size.data(), size.size()), 9);
    ASSERT_EQ(::ftruncate(fd, 200'000'000), 0);
    ::close(fd);
  }
  EXPECT_EQ(user_error([&] { SafetensorsFile f(big); }),
            big + ": header of 150000000 bytes is larger than the limit of 100000000");
  EXPECT_EQ(user_error([&] { SafetensorsFile f(d.file("missing")); }),
            d.file("missing") + ": cannot open: No such file or directory");
  EXPECT_EQ(user_error([&] { SafetensorsFile f(d.path()); }), d.path() + ": not a regular file");
  // A FIFO without a writer: refused at once, not waited on.
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);
  EXPECT_EQ(user_error([&] { SafetensorsFile f(d.file("fifo")); }),
            d.file("fifo") + ": not a regular file");
}

TEST(Safetensors, ReadChecksNameDtypeAndShape) {
  TempDir d;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<pprt::TensorWrite> ts = {{"w", TensorDtype::F32, {2, 3}, w.data(), 24}};
  const std::string path = d.file("m.safetensors");
  pprt::write_safetensors(path, ts);
  const SafetensorsFile f(path);
  std::vector<float> got(6);
  EXPECT_EQ(user_error([&] {
              f.read("w", TensorDtype::F32, std::vector<int64_t>{3, 2}, got.data(), 24);
            }),
            path + ": tensor 'w': the file has F32 [2, 3], expected F32 [3, 2]");
  EXPECT_EQ(user_error([&] {
              f.read("w", TensorDtype::BF16, std::vector<int64_t>{2, 3}, got.data(), 12);
            }),
            path + ": tensor 'w': the file has F32 [2, 3], expected BF16 [2, 3]");
  EXPECT_EQ(user_error([&] {
              f.read("v", TensorDtype::F32, std::vector<int64_t>{2, 3}, got.data(), 24);
            }),
            path + ": no tensor 'v' (the file has 1 tensor)");
  EXPECT_EQ(f.find("v"), nullptr);
  EXPECT_THROW(f.read("w", TensorDtype::F32, std::vector<int64_t>{2, 3}, got.data(), 20),
               ppc::InternalError);
  f.read("w", TensorDtype::F32, std::vector<int64_t>{2, 3}, got.data(), 24);
  EXPECT_EQ(got, w);
  // The file cut short after it was opened: the read says so instead of returning garbage.
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(f.data_start() + 10)), 0);
  EXPECT_EQ(user_error([&] {
              f.read("w", TensorDtype::F32, std::vector<int64_t>{2, 3}, got.data(), 24);
            }),
            path +
                ": tensor 'w': truncated: read 10 of its 24 bytes (the file changed since it "
                "was opened)");
}

TEST(Safetensors, WriterPadsTheHeaderAndLaysTensorsOutInOrder) {
  TempDir d;
  const std::vector<float> a = {1.5f, -2};
  const std::string b = "xyz";
  const std::vector<pprt::TensorWrite> ts = {{"a", TensorDtype::F32, {2}, a.data(), 8},
                                             {"b", TensorDtype::U8, {3}, b.data(), 3},
                                             {"e", TensorDtype::I64, {0}, nullptr, 0}};
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]},)"
      R"("e":{"dtype":"I64","shape":[0],"data_offsets":[11,11]}})";
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  ASSERT_EQ(padded.size() % 8, 0u);
  const std::string header = pprt::safetensors_header(ts, {{"format", "pt"}});
  EXPECT_EQ(header, le<uint64_t>(padded.size()) + padded);
  const std::string path = d.file("m.safetensors");
  pprt::write_safetensors(path, ts, {{"format", "pt"}});
  EXPECT_EQ(filetest::read_file(path),
            header + std::string(reinterpret_cast<const char*>(a.data()), 8) + b);
  const SafetensorsFile f(path);
  EXPECT_EQ(f.data_start() % 8, 0u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // Every header length modulo 8 is padded to the next multiple of 8.
  for (int len = 1; len <= 16; ++len) {
    const std::vector<pprt::TensorWrite> one = {
        {std::string(static_cast<size_t>(len), 'n'), TensorDtype::U8, {1}, "q", 1}};
    const std::string h = pprt::safetensors_header(one);
    EXPECT_EQ(h.size() % 8, 0u);
    EXPECT_EQ(h.find_last_not_of(' '), h.find_last_of('}'));
  }
  // Writing over an existing file truncates it.
  pprt::write_safetensors(path, {});
  EXPECT_EQ(filetest::read_file(path), le<uint64_t>(8) + "{}      ");
}

TEST(Safetensors, WriterErrors) {
  TempDir d;
  const std::string path = d.file("no/such/dir/m.safetensors");
  EXPECT_EQ(user_error([&] { pprt::write_safetensors(path, {}); }),
            path + ": cannot create: No such file or directory");
  const float x = 1;
  const std::vector<pprt::TensorWrite> wrong = {{"x", TensorDtype::F32, {2}, &x, 4}};
  EXPECT_THROW(pprt::write_safetensors(d.file("w"), wrong), ppc::InternalError);
  const std::vector<pprt::TensorWrite> dup = {{"x", TensorDtype::F32, {1}, &x, 4},
                                              {"x", TensorDtype::F32, {1}, &x, 4}};
  EXPECT_THROW(pprt::write_safetensors(d.file("w"), dup), ppc::InternalError);
  EXPECT_FALSE(std::filesystem::exists(d.file("w")));
  // Located at a flag instead (pprun --export).
  EXPECT_EQ(user_error([&] { pprt::write_safetensors(path, {}, {}, "--export"); }),
            "--export: cannot create '" + path + "': No such file or directory");
}

// Random bytes for every dtype; floats without NaN or infinity (their patterns compare exactly).
std::string tensor_bytes(TensorDtype t, size_t numel, std::mt19937_64& rng) {
  std::string s(numel * pprt::dtype_size(t), '\0');
  for (char& c : s) c = static_cast<char>(rng());
  for (size_t i = 0; i < numel; ++i) {
    char* e = s.data() + i * pprt::dtype_size(t);
    switch (t) {
      case TensorDtype::BOOL:
        e[0] = static_cast<char>(rng() & 1);
        break;
      case TensorDtype::F16:
        e[1] = static_cast<char>(e[1] & ~0x40);  // exponent < 31
        break;
      case TensorDtype::BF16:
      case TensorDtype::F32:
        e[pprt::dtype_size(t) - 1] = static_cast<char>(e[pprt::dtype_size(t) - 1] & ~0x40);
        break;
      case TensorDtype::C64:
        e[3] = static_cast<char>(e[3] & ~0x40);
        e[7] = static_cast<char>(e[7] & ~0x40);
        break;
      case TensorDtype::F64:
        e[7] = static_cast<char>(e[7] & ~0x40);
        break;
      default:
        break;
    }
  }
  return s;
}

TEST(Safetensors, RoundTripOfEveryDtype) {
  TempDir d;
  std::mt19937_64 rng(7);
  std::vector<std::string> data;
  data.reserve(std::size(pprt::kAllTensorDtypes));  // the writes point into these strings
  std::vector<pprt::TensorWrite> ts;
  const std::vector<int64_t> shape = {3, 5};
  for (TensorDtype t : pprt::kAllTensorDtypes) {
    data.push_back(tensor_bytes(t, 15, rng));
    ts.push_back({"t." + std::string(pprt::dtype_name(t)), t, shape, data.back().data(),
                  data.back().size()});
    EXPECT_EQ(pprt::dtype_from_name(pprt::dtype_name(t)), t);
  }
  const std::string path = d.file("all.safetensors");
  pprt::write_safetensors(path, ts, {{"k", "v"}});
  const SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(f.tensors()[i].name, ts[i].name);  // in the order written
    std::string got(data[i].size(), '\0');
    f.read(ts[i].name, ts[i].dtype, shape, got.data(), got.size());
    EXPECT_EQ(got, data[i]) << ts[i].name;
  }
}

double half_to_double(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

// The values the Python reader prints for a tensor of `t` holding `bytes`.
nlohmann::json expected_values(TensorDtype t, const std::string& bytes) {
  nlohmann::json v = nlohmann::json::array();
  const size_t n = bytes.size() / pprt::dtype_size(t);
  auto at = [&](size_t i, auto zero) {
    decltype(zero) x;
    std::memcpy(&x, bytes.data() + i * sizeof x, sizeof x);
    return x;
  };
  for (size_t i = 0; i < n; ++i) switch (t) {
      case TensorDtype::BOOL:
        v.push_back(bytes[i] != 0);
        break;
      case TensorDtype::U8:
      case TensorDtype::F8_E5M2:
      case TensorDtype::F8_E4M3:
      case TensorDtype::F8_E8M0:
        v.push_back(at(i, uint8_t{}));
        break;
      case TensorDtype::I8:
        v.push_back(at(i, int8_t{}));
        break;
      case TensorDtype::I16:
        v.push_back(at(i, int16_t{}));
        break;
      case TensorDtype::U16:
        v.push_back(at(i, uint16_t{}));
        break;
      case TensorDtype::F16:
        v.push_back(half_to_double(at(i, uint16_t{})));
        break;
      case TensorDtype::BF16: {
        const uint32_t bits = static_cast<uint32_t>(at(i, uint16_t{})) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        v.push_back(static_cast<double>(f));
        break;
      }
      case TensorDtype::I32:
        v.push_back(at(i, int32_t{}));
        break;
      case TensorDtype::U32:
        v.push_back(at(i, uint32_t{}));
        break;
      case TensorDtype::F32:
        v.push_back(static_cast<double>(at(i, float{})));
        break;
      case TensorDtype::I64:
        v.push_back(at(i, int64_t{}));
        break;
      case TensorDtype::U64:
        v.push_back(at(i, uint64_t{}));
        break;
      case TensorDtype::F64:
        v.push_back(at(i, double{}));
        break;
      case TensorDtype::C64: {
        float re, im;
        std::memcpy(&re, bytes.data() + 8 * i, 4);
        std::memcpy(&im, bytes.data() + 8 * i + 4, 4);
        v.push_back({static_cast<double>(re), static_cast<double>(im)});
        break;
      }
    }
  return v;
}

TEST(Safetensors, PythonAndTorchReadWhatTheWriterWrote) {
  TempDir d;
  std::mt19937_64 rng(11);
  std::vector<std::string> data;
  data.reserve(std::size(pprt::kAllTensorDtypes));  // the writes point into these strings
  std::vector<pprt::TensorWrite> ts;
  const std::vector<std::vector<int64_t>> shapes = {{2, 3, 4}, {7}, {}, {1, 5}, {0, 3}};
  size_t k = 0;
  for (TensorDtype t : pprt::kAllTensorDtypes) {
    const std::vector<int64_t>& shape = shapes[k++ % shapes.size()];
    size_t numel = 1;
    for (int64_t s : shape) numel *= static_cast<size_t>(s);
    data.push_back(tensor_bytes(t, numel, rng));
    ts.push_back({"layers." + std::to_string(k) + "." + std::string(pprt::dtype_name(t)), t, shape,
                  data.back().data(), data.back().size()});
  }
  const std::string path = d.file("model.safetensors");
  pprt::write_safetensors(path, ts, {{"format", "pt"}, {"step", "3"}});
  const std::string cmd = std::string(PP_PYTHON) + " " + PP_SOURCE_DIR +
                          "/tests/runtime/safetensors_reader.py " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["metadata"], (nlohmann::json{{"format", "pt"}, {"step", "3"}}));
  ASSERT_EQ(j["tensors"].size(), ts.size()) << out;
  for (size_t i = 0; i < ts.size(); ++i) {
    const nlohmann::json& t = j["tensors"][ts[i].name];
    EXPECT_EQ(t["dtype"], pprt::dtype_name(ts[i].dtype));
    EXPECT_EQ(t["shape"].get<std::vector<int64_t>>(), ts[i].shape) << ts[i].name;
    EXPECT_EQ(t["values"], expected_values(ts[i].dtype, data[i])) << ts[i].name;
  }
}

}  // namespace
