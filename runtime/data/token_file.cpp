#include "runtime/data/token_file.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"

namespace pprt {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; this build reads them in place");

namespace {

std::string errno_text(int e) {
  return std::strerror(e);
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// Opens a regular file for reading (a FIFO must not block: O_NONBLOCK, then refused).
int open_regular(const std::string& path, struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    fail("--data", fmt::format("cannot open data file '{}'{}", path,
                               e == ENOENT ? "" : ": " + errno_text(e)));
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("--data", fmt::format("data file '{}' is not a regular file", path));
  }
  return fd;
}

// A read-only mapping of a whole file, unmapped on destruction.
class Mapping {
 public:
  Mapping(int fd, size_t bytes, const std::string& path) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) fail(path, "cannot map the file: " + errno_text(errno));
    p_ = p;
  }
  ~Mapping() {
    if (p_) ::munmap(p_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(p_); }
  size_t size() const { return bytes_; }
  // Hands the mapping over (it is no longer unmapped here).
  void* release() { return std::exchange(p_, nullptr); }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// A little-endian integer at an unaligned place.
template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// FNV-1a over the file's size and a sample of its content.
uint64_t sample_hash(uint64_t h, const unsigned char* p, uint64_t n) {
  auto mix = [&h](const unsigned char* b, uint64_t len) {
    for (uint64_t i = 0; i < len; ++i) h = (h ^ b[i]) * 0x100000001B3ull;
  };
  for (int i = 0; i < 8; ++i) mix(reinterpret_cast<const unsigned char*>(&n) + i, 1);
  constexpr uint64_t kEdge = 64 * 1024, kBlock = 4096, kBlocks = 16;
  if (n <= 2 * kEdge + kBlocks * kBlock) {
    mix(p, n);
    return h;
  }
  mix(p, kEdge);
  for (uint64_t b = 1; b <= kBlocks; ++b)
    mix(p + kEdge + (n - 2 * kEdge - kBlock) / (kBlocks + 1) * b, kBlock);
  mix(p + n - kEdge, kEdge);
  return h;
}

using Type = TokenFile::Type;

size_t type_size(Type t) {
  switch (t) {
    case Type::U8:
    case Type::I8:
      return 1;
    case Type::I16:
    case Type::U16:
      return 2;
    case Type::I32:
    case Type::U32:
      return 4;
    case Type::I64:
      return 8;
  }
  return 1;
}

const char* type_name(Type t) {
  switch (t) {
    case Type::U8:
      return "uint8";
    case Type::I8:
      return "int8";
    case Type::I16:
      return "int16";
    case Type::U16:
      return "uint16";
    case Type::I32:
      return "int32";
    case Type::U32:
      return "uint32";
    case Type::I64:
      return "int64";
  }
  return "?";
}

// The first token that is negative or not below `vocab`, if any. One pass over the data, chunk
// by chunk: an OR of comparisons of the ids as unsigned numbers (a negative id is a large one),
// which the compiler vectorizes (~10 GB/s); a bad chunk is then searched.
template <class T>
std::optional<uint64_t> first_bad_token(const T* p, uint64_t n, int64_t vocab) {
  using U = std::make_unsigned_t<T>;
  const auto top = static_cast<int64_t>(std::numeric_limits<T>::max());  // T is at most int64
  if (std::is_unsigned_v<T> && vocab > top) return std::nullopt;  // every value is a valid id
  // Valid ids are [0, min(vocab, top + 1)): as unsigned numbers, those below `limit`.
  const U limit = vocab <= top ? static_cast<U>(vocab) : static_cast<U>(static_cast<U>(top) + 1);
  constexpr uint64_t kChunk = 1 << 16;
  for (uint64_t c = 0; c < n; c += kChunk) {
    const uint64_t e = std::min(n, c + kChunk);
    unsigned bad = 0;
    for (uint64_t i = c; i < e; ++i) bad |= static_cast<U>(p[i]) >= limit;
    if (bad)
      for (uint64_t i = c; i < e; ++i)
        if (static_cast<U>(p[i]) >= limit) return i;
  }
  return std::nullopt;
}

template <class Fn>
auto with_type(Type t, const void* p, Fn&& fn) {
  switch (t) {
    case Type::U8:
      return fn(static_cast<const uint8_t*>(p));
    case Type::I8:
      return fn(static_cast<const int8_t*>(p));
    case Type::I16:
      return fn(static_cast<const int16_t*>(p));
    case Type::U16:
      return fn(static_cast<const uint16_t*>(p));
    case Type::I32:
      return fn(static_cast<const int32_t*>(p));
    case Type::U32:
      return fn(static_cast<const uint32_t*>(p));
    case Type::I64:
      return fn(static_cast<const int64_t*>(p));
  }
  return fn(static_cast<const uint8_t*>(p));
}

// Megatron's index: what the .bin must hold.
struct MegatronIndex {
  Type type = Type::U16;
  uint64_t sequences = 0, documents = 0, tokens = 0;
  uint64_t hash = 0;
  std::vector<uint64_t> document_starts;  // the token where each document starts
};

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kIndexHeader = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, two counts

MegatronIndex read_megatron_index(const std::string& path) {
  struct stat st {};
  const int fd = open_regular(path, st);
  const auto size = static_cast<uint64_t>(st.st_size);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (size < kIndexHeader)
    fail(path, fmt::format("truncated Megatron index: {} bytes, its header alone has {}", size,
                           kIndexHeader));
  MegatronIndex ix;
  Mapping map(fd, size, path);
  const unsigned char* p = map.bytes();
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail(path, "bytes 0-8: not a Megatron index (expected the magic \"MMIDIDX\\0\\0\")");
  if (const auto v = load<uint64_t>(p + 9); v != 1)
    fail(path, fmt::format("version (byte 9): {}, this build reads version 1", v));
  switch (const int code = p[17]) {
    case 1:
      ix.type = Type::U8;
      break;
    case 2:
      ix.type = Type::I8;
      break;
    case 3:
      ix.type = Type::I16;
      break;
    case 4:
      ix.type = Type::I32;
      break;
    case 5:
      ix.type = Type::I64;
      break;
    case 8:
      ix.type = Type::U16;
      break;
    case 6:
    case 7:
      fail(path, fmt::format("dtype code (byte 17): {} is {}; token ids must be integers", code,
                             code == 6 ? "float64" : "float32"));
    default:
      fail(path,
           fmt::format("dtype code (byte 17): unknown code {} (Megatron's are 1 to 8)", code));
  }
  ix.sequences = load<uint64_t>(p + 18);
  ix.documents = load<uint64_t>(p + 26);
  const uint64_t S = ix.sequences, D = ix.documents;
  // 34 + 12 S + 8 D bytes, and S more when the dataset is multimodal (one mode byte per
  // sequence, after the document indices; pprun ignores the modes).
  if (S > size / 12 || D > size / 8)
    fail(path, fmt::format("sequence count (byte 18) {} and document count (byte 26) {} do not "
                           "fit in the index's {} bytes",
                           S, D, size));
  const uint64_t need = kIndexHeader + 12 * S + 8 * D;
  if (size != need && size != need + S)
    fail(path, fmt::format("sequence count (byte 18) {} and document count (byte 26) {} need {} "
                           "bytes of index (or {} with sequence modes), the file has {}",
                           S, D, need, need + S, size));
  const unsigned char* lengths = p + kIndexHeader;
  const unsigned char* pointers = lengths + 4 * S;
  const unsigned char* docs = pointers + 8 * S;
  const uint64_t tsize = type_size(ix.type);
  uint64_t expect = 0;  // the byte where sequence i must start: the previous ones end there
  std::vector<uint64_t> sequence_starts;  // in tokens
  sequence_starts.reserve(S + 1);
  for (uint64_t i = 0; i < S; ++i) {
    sequence_starts.push_back(ix.tokens);
    const auto len = load<int32_t>(lengths + 4 * i);
    if (len < 0)
      fail(path, fmt::format("sequence_lengths[{}] (byte {}): {} is negative", i,
                             kIndexHeader + 4 * i, len));
    const auto ptr = load<int64_t>(pointers + 8 * i);
    if (ptr < 0 || static_cast<uint64_t>(ptr) != expect)
      fail(path, fmt::format("sequence_pointers[{}] (byte {}): {}, expected {} ({})", i,
                             kIndexHeader + 4 * S + 8 * i, ptr, expect,
                             i == 0 ? std::string("the first sequence starts the .bin")
                                    : fmt::format("sequence {} ends there", i - 1)));
    if (__builtin_add_overflow(expect, static_cast<uint64_t>(len) * tsize, &expect))
      fail(path,
           fmt::format("sequence_lengths: the sequences up to {} hold more than 2^64 bytes", i));
    ix.tokens += static_cast<uint64_t>(len);
  }
  sequence_starts.push_back(ix.tokens);
  if (D == 0) fail(path, "document count (byte 26): 0, the document indices start with a 0");
  int64_t prev = 0;
  for (uint64_t i = 0; i < D; ++i) {
    const auto d = load<int64_t>(docs + 8 * i);
    const uint64_t at = kIndexHeader + 12 * S + 8 * i;
    if (i == 0 && d != 0)
      fail(path, fmt::format("document_indices[0] (byte {}): {}, expected 0", at, d));
    if (d < prev)
      fail(path, fmt::format("document_indices[{}] (byte {}): {} is less than the previous {}", i,
                             at, d, prev));
    if (static_cast<uint64_t>(d) > S)
      fail(path,
           fmt::format("document_indices[{}] (byte {}): {} is more than the sequence count {}", i,
                       at, d, S));
    if (i + 1 == D && static_cast<uint64_t>(d) != S)
      fail(path, fmt::format("document_indices[{}] (byte {}): {}, expected the sequence count {}",
                             i, at, d, S));
    if (i + 1 < D) ix.document_starts.push_back(sequence_starts[static_cast<size_t>(d)]);
    prev = d;
  }
  ix.hash = sample_hash(0xCBF29CE484222325ull, p, size);
  return ix;
}

}  // namespace

std::string_view data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::Auto:
      return "auto";
    case DataFormat::Text:
      return "text";
    case DataFormat::Uint16:
      return "uint16";
    case DataFormat::Uint32:
      return "uint32";
    case DataFormat::Megatron:
      return "megatron";
  }
  return "?";
}

std::optional<DataFormat> parse_data_format(std::string_view name) {
  for (DataFormat f : {DataFormat::Auto, DataFormat::Text, DataFormat::Uint16, DataFormat::Uint32,
                       DataFormat::Megatron})
    if (data_format_name(f) == name) return f;
  return std::nullopt;
}

DataFiles resolve_data_files(const std::string& path, DataFormat format) {
  const bool bin = ends_with(path, ".bin"), idx = ends_with(path, ".idx");
  const std::string prefix = bin || idx ? path.substr(0, path.size() - 4) : path;
  const DataFiles megatron{DataFormat::Megatron, prefix + ".bin", prefix + ".idx"};
  switch (format) {
    case DataFormat::Megatron:
      return megatron;
    case DataFormat::Auto:
      if (idx) return megatron;  // an index alone: the error will name the missing .bin
      if (bin)
        return is_file(megatron.index_path) ? megatron : DataFiles{DataFormat::Uint16, path, ""};
      if (!is_file(path) && is_file(megatron.path) && is_file(megatron.index_path)) return megatron;
      return {DataFormat::Text, path, ""};
    default:
      return {format, path, ""};
  }
}

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path, DataFormat format,
                                                 int vocab, int seq_len) {
  const DataFiles files = resolve_data_files(path, format);
  std::shared_ptr<TokenFile> f(new TokenFile());
  f->format_ = files.format;
  const uint64_t need = static_cast<uint64_t>(seq_len) + 1;
  MegatronIndex ix;
  switch (files.format) {
    case DataFormat::Text:
      if (vocab < 256)
        fail("--data", fmt::format("byte-level data needs vocab >= 256, the model has {}", vocab));
      f->type_ = Type::U8;
      break;
    case DataFormat::Uint16:
      f->type_ = Type::U16;
      break;
    case DataFormat::Uint32:
      f->type_ = Type::U32;
      break;
    case DataFormat::Megatron:
      ix = read_megatron_index(files.index_path);
      f->type_ = ix.type;
      f->sequences_ = ix.sequences;
      f->documents_ = ix.documents - 1;
      f->document_starts_ = std::move(ix.document_starts);
      f->name_ = files.path.substr(0, files.path.size() - 4);
      break;
    case DataFormat::Auto:
      PPC_INTERNAL_ASSERT(false, "unresolved data format");
  }

  struct stat st {};
  f->fd_ = open_regular(files.path, st);  // closed by ~TokenFile
  const auto bytes = static_cast<uint64_t>(st.st_size);
  const uint64_t tsize = type_size(f->type_);
  const std::string& p = files.path;
  if (files.format == DataFormat::Megatron && bytes != ix.tokens * tsize)
    fail(p, fmt::format("{} bytes, but the index {} describes {} tokens of {} ({} bytes)", bytes,
                        files.index_path, ix.tokens, type_name(f->type_), ix.tokens * tsize));
  if (bytes % tsize != 0)
    fail(p, fmt::format("{} bytes is not a whole number of {} tokens ({} bytes each)", bytes,
                        type_name(f->type_), tsize));
  f->tokens_ = bytes / tsize;
  if (f->tokens_ < need) {
    if (files.format == DataFormat::Text)
      fail("--data", fmt::format("data file '{}' has {} bytes; one sequence needs seq_len + 1 = {}",
                                 p, bytes, need));
    fail(p, fmt::format("{} tokens of {}; one sequence needs seq_len + 1 = {}", f->tokens_,
                        type_name(f->type_), need));
  }
  PPC_INTERNAL_ASSERT(bytes <= std::numeric_limits<size_t>::max(), "file larger than memory");
  Mapping map(f->fd_, static_cast<size_t>(bytes), p);
  ::madvise(const_cast<unsigned char*>(map.bytes()), map.size(), MADV_SEQUENTIAL);
  const auto bad = with_type(f->type_, map.bytes(),
                             [&](const auto* t) { return first_bad_token(t, f->tokens_, vocab); });
  if (bad) {
    const int64_t id = with_type(f->type_, map.bytes(),
                                 [&](const auto* t) { return static_cast<int64_t>(t[*bad]); });
    fail(p, fmt::format("token {} at index {} (byte {}) {}", id, *bad, *bad * tsize,
                        id < 0 ? std::string("is negative")
                               : fmt::format("is not below the model's vocab {}", vocab)));
  }
  ::madvise(const_cast<unsigned char*>(map.bytes()), map.size(), MADV_NORMAL);

  DataIdentity& id = f->identity_;
  id.format = std::string(data_format_name(files.format));
  id.path = files.path;
  id.index_path = files.index_path;
  id.token_type = type_name(f->type_);
  id.bytes = bytes;
  id.tokens = f->tokens_;
  uint64_t h = sample_hash(0xCBF29CE484222325ull, map.bytes(), bytes);
  if (files.format == DataFormat::Megatron) h = (h ^ ix.hash) * 0x100000001B3ull;
  id.fingerprint = fmt::format("{:016x}", h);

  f->stats_.push_back({files.path, st.st_dev, st.st_ino, st.st_size, mtime_ns(st)});
  if (!files.index_path.empty()) {
    struct stat si {};
    if (::stat(files.index_path.c_str(), &si) == 0)
      f->stats_.push_back({files.index_path, si.st_dev, si.st_ino, si.st_size, mtime_ns(si)});
  }
  f->map_bytes_ = map.size();
  f->map_ = map.release();
  return f;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(const_cast<void*>(map_), map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::copy(uint64_t first, size_t n, int64_t* out) const {
  PPC_INTERNAL_ASSERT(first <= tokens_ && n <= tokens_ - first, "tokens out of range");
  with_type(type_, map_, [&](const auto* t) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(t[first + i]);
    return 0;
  });
}

std::vector<uint64_t> TokenFile::positions_of(int64_t id) const {
  std::vector<uint64_t> at;
  with_type(type_, map_, [&](const auto* t) {
    for (uint64_t i = 0; i < tokens_; ++i)
      if (static_cast<int64_t>(t[i]) == id) at.push_back(i);
    return 0;
  });
  return at;
}

std::string TokenFile::describe() const {
  switch (format_) {
    case DataFormat::Text:
      return fmt::format("bytes of {} ({} bytes)", identity_.path, tokens_);
    case DataFormat::Megatron:
      return fmt::format("Megatron dataset {} ({} tokens, {} documents, {} sequences, {} tokens)",
                         name_, identity_.token_type, documents_, sequences_, tokens_);
    default:
      return fmt::format("{} tokens of {} ({} tokens)", identity_.token_type, identity_.path,
                         tokens_);
  }
}

void TokenFile::check_unchanged() const {
  for (const Stat& s : stats_) {
    struct stat st {};
    if (::stat(s.path.c_str(), &st) != 0)
      fail(s.path,
           fmt::format("the data file is gone since pprun opened it: {}", errno_text(errno)));
    if (st.st_dev != s.dev || st.st_ino != s.ino)
      fail(s.path,
           "the data file was replaced since pprun opened it (another file is at its path)");
    if (st.st_size != s.size)
      fail(s.path, fmt::format("the data file was modified since pprun opened it ({} bytes then, "
                               "{} now)",
                               s.size, st.st_size));
    if (mtime_ns(st) != s.mtime_ns)
      fail(s.path,
           "the data file was modified since pprun opened it (its modification time "
           "changed)");
  }
}

}  // namespace pprt
