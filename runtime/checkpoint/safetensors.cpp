#include "runtime/checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "runtime/fail.h"

namespace pprt {

namespace {

struct DtypeRow {
  TensorDtype dtype;
  std::string_view name;
  size_t size;
};
constexpr DtypeRow kDtypes[] = {
    {TensorDtype::BOOL, "BOOL", 1},       {TensorDtype::U8, "U8", 1},
    {TensorDtype::I8, "I8", 1},           {TensorDtype::F8_E5M2, "F8_E5M2", 1},
    {TensorDtype::F8_E4M3, "F8_E4M3", 1}, {TensorDtype::F8_E8M0, "F8_E8M0", 1},
    {TensorDtype::I16, "I16", 2},         {TensorDtype::U16, "U16", 2},
    {TensorDtype::F16, "F16", 2},         {TensorDtype::BF16, "BF16", 2},
    {TensorDtype::I32, "I32", 4},         {TensorDtype::U32, "U32", 4},
    {TensorDtype::F32, "F32", 4},         {TensorDtype::I64, "I64", 8},
    {TensorDtype::U64, "U64", 8},         {TensorDtype::F64, "F64", 8},
    {TensorDtype::C64, "C64", 8},
};

const DtypeRow& row(TensorDtype t) {
  for (const DtypeRow& r : kDtypes)
    if (r.dtype == t) return r;
  PPC_INTERNAL_ASSERT(false, "unknown TensorDtype");
}

// A name from a file, quoted for a one-line message: control and non-ASCII bytes escaped, long
// names cut.
std::string quote_name(std::string_view s) {
  std::string out = "'";
  for (const char c : ppc::printable(s.substr(0, 200)))
    if (c == '\'')
      out += "\\x27";
    else
      out += c;
  if (s.size() > 200) out += "...";
  return out + "'";
}

// numel(shape) * size, or nullopt on overflow of 64 bits.
std::optional<uint64_t> byte_count(std::span<const int64_t> shape, size_t size) {
  uint64_t n = size;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  return n;
}

std::string errno_text(int e) {
  return std::strerror(e);
}

// --- reading the header ------------------------------------------------------------------------

// SAX handler that checks the header's structure event by event and builds the tensor list (no
// JSON DOM: a header of N bytes costs O(N) memory). The first error is kept; parsing stops.
class HeaderParser : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string error;
  std::vector<TensorInfo> tensors;  // in the header's order
  SafetensorsMetadata metadata;

  bool null() override { return unexpected("null"); }
  bool boolean(bool) override { return unexpected("a boolean"); }
  bool number_integer(number_integer_t) override { return unexpected("a negative integer"); }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::Shape) {
      if (v > static_cast<uint64_t>(INT64_MAX))
        return bad(fmt::format("{}: shape dimension {} is too large", where(), v));
      cur_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::Offsets) {
      if (n_offsets_ == 2) return bad(offsets_message());
      (n_offsets_++ == 0 ? cur_.begin : cur_.end) = v;
      return true;
    }
    return unexpected("a number");
  }
  bool number_float(number_float_t, const string_t&) override {
    return unexpected("a non-integer number");
  }
  bool binary(binary_t&) override { return unexpected("binary data"); }
  bool string(string_t& s) override {
    if (state_ == State::MetaValue) {
      metadata[meta_key_] = s;
      state_ = State::Meta;
      return true;
    }
    if (state_ == State::Field && field_ == "dtype") {
      const auto t = dtype_from_name(s);
      if (!t) return bad(fmt::format("{}: unknown dtype {}", where(), quote_name(s)));
      cur_.dtype = *t;
      state_ = State::Entry;
      return true;
    }
    return unexpected("a string");
  }
  bool start_object(std::size_t) override {
    switch (state_) {
      case State::Start:
        state_ = State::Top;
        return true;
      case State::TopValue:
        if (cur_.name == "__metadata__") {
          state_ = State::Meta;
          return true;
        }
        state_ = State::Entry;
        seen_fields_.clear();
        return true;
      default:
        return unexpected("an object");
    }
  }
  bool key(string_t& k) override {
    switch (state_) {
      case State::Top:
        if (!names_.insert(k).second)
          return bad(k == "__metadata__" ? "duplicate __metadata__"
                                         : fmt::format("duplicate tensor {}", quote_name(k)));
        cur_ = TensorInfo{};
        cur_.name = k;
        state_ = State::TopValue;
        return true;
      case State::Meta:
        if (metadata.count(k))
          return bad(fmt::format("__metadata__: duplicate key {}", quote_name(k)));
        meta_key_ = k;
        state_ = State::MetaValue;
        return true;
      case State::Entry:
        if (k != "dtype" && k != "shape" && k != "data_offsets")
          return bad(fmt::format("{}: unknown field {} (expected dtype, shape and data_offsets)",
                                 where(), quote_name(k)));
        if (!seen_fields_.insert(k).second)
          return bad(fmt::format("{}: duplicate field '{}'", where(), k));
        field_ = k;
        state_ = State::Field;
        return true;
      default:
        return unexpected("a key");
    }
  }
  bool end_object() override {
    switch (state_) {
      case State::Top:
        state_ = State::Done;
        return true;
      case State::Meta:
        state_ = State::Top;
        return true;
      case State::Entry:
        for (const char* f : {"dtype", "shape", "data_offsets"})
          if (!seen_fields_.count(f)) return bad(fmt::format("{}: missing field '{}'", where(), f));
        tensors.push_back(std::move(cur_));
        state_ = State::Top;
        return true;
      default:
        return unexpected("the end of an object");
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::Field && field_ == "shape") {
      state_ = State::Shape;
      return true;
    }
    if (state_ == State::Field && field_ == "data_offsets") {
      state_ = State::Offsets;
      n_offsets_ = 0;
      return true;
    }
    return unexpected("an array");
  }
  bool end_array() override {
    if (state_ == State::Shape) {
      state_ = State::Entry;
      return true;
    }
    if (state_ == State::Offsets) {
      if (n_offsets_ != 2) return bad(offsets_message());
      state_ = State::Entry;
      return true;
    }
    return unexpected("the end of an array");
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
    std::string what = ex.what();
    if (const size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    for (char& c : what)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) c = '?';
    if (what.size() > 300) what = what.substr(0, 300) + "...";
    return bad(fmt::format("header: invalid JSON at byte {} of the header: {}", position, what));
  }

 private:
  enum class State : uint8_t {
    Start,      // before the top-level object
    Top,        // in the top-level object, expecting a key
    TopValue,   // after a top-level key
    Meta,       // in __metadata__, expecting a key
    MetaValue,  // after a metadata key
    Entry,      // in a tensor's object, expecting a field
    Field,      // after a field name
    Shape,      // in the shape array
    Offsets,    // in the data_offsets array
    Done,
  };

  bool bad(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  std::string where() const { return "tensor " + quote_name(cur_.name); }
  std::string offsets_message() const {
    return where() + ": data_offsets must be two non-negative integers [begin, end]";
  }
  // A value or event that the state does not allow.
  bool unexpected(const char* what) {
    switch (state_) {
      case State::Start:
        return bad(fmt::format("header: expected a JSON object, found {}", what));
      case State::TopValue:
        if (cur_.name == "__metadata__")
          return bad(fmt::format("__metadata__ must be an object of strings, found {}", what));
        return bad(fmt::format(
            "{}: expected an object with dtype, shape and data_offsets, found {}", where(), what));
      case State::MetaValue:
        return bad(fmt::format("__metadata__: the value of {} must be a string, found {}",
                               quote_name(meta_key_), what));
      case State::Field:
        if (field_ == "dtype")
          return bad(fmt::format("{}: dtype must be a string, found {}", where(), what));
        if (field_ == "shape")
          return bad(fmt::format("{}: shape must be an array of non-negative integers, found {}",
                                 where(), what));
        return bad(offsets_message());
      case State::Shape:
        return bad(fmt::format("{}: shape must be an array of non-negative integers, found {}",
                               where(), what));
      case State::Offsets:
        return bad(offsets_message());
      default:
        return bad(fmt::format("header: unexpected {}", what));
    }
  }

  State state_ = State::Start;
  TensorInfo cur_;
  std::string field_, meta_key_;
  int n_offsets_ = 0;
  std::unordered_set<std::string> names_, seen_fields_;
};

// pread exactly n bytes at `offset`; returns the count read (short only at end of file).
size_t pread_full(int fd, void* dst, size_t n, uint64_t offset, int* err) {
  size_t done = 0;
  *err = 0;
  while (done < n) {
    const size_t chunk = std::min<size_t>(n - done, size_t{1} << 30);
    const ssize_t r =
        ::pread(fd, static_cast<char*>(dst) + done, chunk, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return done;
    }
    if (r == 0) return done;
    done += static_cast<size_t>(r);
  }
  return done;
}

}  // namespace

std::string_view dtype_name(TensorDtype t) {
  return row(t).name;
}

size_t dtype_size(TensorDtype t) {
  return row(t).size;
}

std::optional<TensorDtype> dtype_from_name(std::string_view name) {
  for (const DtypeRow& r : kDtypes)
    if (r.name == name) return r.dtype;
  return std::nullopt;
}

std::string shape_string(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// --- writing -----------------------------------------------------------------------------------

std::string safetensors_header(std::span<const TensorWrite> tensors,
                               const SafetensorsMetadata& metadata) {
  std::string json = "{";
  auto str = [](const std::string& s) { return nlohmann::json(s).dump(); };
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) json += ',';
      first = false;
      json += str(k) + ':' + str(v);
    }
    json += '}';
  }
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorWrite& t : tensors) {
    PPC_INTERNAL_ASSERT(t.name != "__metadata__", "a tensor may not be named __metadata__");
    PPC_INTERNAL_ASSERT(names.insert(t.name).second, "duplicate tensor name " + t.name);
    for (int64_t d : t.shape) PPC_INTERNAL_ASSERT(d >= 0, t.name + ": negative dimension");
    const auto bytes = byte_count(t.shape, dtype_size(t.dtype));
    PPC_INTERNAL_ASSERT(bytes && *bytes == t.bytes,
                        fmt::format("{}: {} bytes given for shape {} of {}", t.name, t.bytes,
                                    shape_string(t.shape), dtype_name(t.dtype)));
    PPC_INTERNAL_ASSERT(t.data || t.bytes == 0, t.name + ": no data");
    if (json.size() > 1) json += ',';
    json +=
        fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{},{}]}}", str(t.name),
                    dtype_name(t.dtype), nlohmann::json(t.shape).dump(), offset, offset + t.bytes);
    offset += t.bytes;
  }
  json += '}';
  json.resize((json.size() + 7) / 8 * 8, ' ');  // the buffer starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json;
}

void write_safetensors(const std::string& path, std::span<const TensorWrite> tensors,
                       const SafetensorsMetadata& metadata, const std::string& where) {
  const std::string header = safetensors_header(tensors, metadata);
  std::vector<std::string_view> pieces{header};
  for (const TensorWrite& t : tensors)
    pieces.emplace_back(static_cast<const char*>(t.data), t.bytes);
  ppc::AtomicFile f(path, where, ppc::AtomicFile::Sync::Fsync);
  f.write_pieces(pieces);
  f.commit();
}

// --- reading -----------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not a file).
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(path_, "cannot open: " + errno_text(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(path_, "cannot stat: " + errno_text(errno));
    if (!S_ISREG(st.st_mode)) fail(path_, "not a regular file");
    file_size_ = static_cast<uint64_t>(st.st_size);
    if (file_size_ < 8)
      fail(path_, fmt::format("not a safetensors file: {} bytes, less than the 8-byte header size",
                              file_size_));
    unsigned char size_bytes[8];
    int err = 0;
    if (pread_full(fd_, size_bytes, 8, 0, &err) != 8)
      fail(path_, "cannot read the header size: " + (err ? errno_text(err) : "end of file"));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | size_bytes[i];
    header_size_ = n;
    if (n > file_size_ - 8)
      fail(path_,
           fmt::format("truncated: the header says {} bytes but the file has {}", n, file_size_));
    if (n > kMaxHeaderBytes)
      fail(path_,
           fmt::format("header of {} bytes is larger than the limit of {}", n, kMaxHeaderBytes));
    std::string header(n, '\0');
    if (pread_full(fd_, header.data(), n, 8, &err) != n)
      fail(path_, "cannot read the header: " + (err ? errno_text(err) : "end of file"));
    if (header.empty() || header[0] != '{')
      fail(path_, "header: does not start with '{' (not a safetensors file?)");

    HeaderParser parser;
    const bool ok = nlohmann::json::sax_parse(header.begin(), header.end(), &parser,
                                              nlohmann::json::input_format_t::json, true, false);
    if (!ok || !parser.error.empty())
      fail(path_, parser.error.empty() ? "header: invalid JSON" : parser.error);
    metadata_ = std::move(parser.metadata);
    tensors_ = std::move(parser.tensors);

    // Each tensor: end >= begin, and end - begin = numel * dtype size.
    for (const TensorInfo& t : tensors_) {
      const std::string who = "tensor " + quote_name(t.name);
      if (t.end < t.begin)
        fail(path_,
             fmt::format("{}: data_offsets [{}, {}] end before they begin", who, t.begin, t.end));
      const auto bytes = byte_count(t.shape, dtype_size(t.dtype));
      if (!bytes)
        fail(path_, fmt::format("{}: shape {} of {} overflows 64 bits", who, shape_string(t.shape),
                                dtype_name(t.dtype)));
      if (t.end - t.begin != *bytes)
        fail(path_,
             fmt::format("{}: data_offsets [{}, {}] do not match shape {} of {} ({} bytes)", who,
                         t.begin, t.end, shape_string(t.shape), dtype_name(t.dtype), *bytes));
    }
    // In the order of offsets, the tensors tile the buffer from 0 with no hole and no overlap.
    std::stable_sort(tensors_.begin(), tensors_.end(),
                     [](const TensorInfo& a, const TensorInfo& b) {
                       return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                     });
    uint64_t covered = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const TensorInfo& t = tensors_[i];
      if (t.begin < covered)
        fail(path_,
             fmt::format("tensor {}: data_offsets [{}, {}] overlap tensor {} [{}, {}]",
                         quote_name(t.name), t.begin, t.end, quote_name(tensors_[i - 1].name),
                         tensors_[i - 1].begin, tensors_[i - 1].end));
      if (t.begin > covered)
        fail(path_, fmt::format("tensor {}: data_offsets [{}, {}] leave bytes [{}, {}) of the "
                                "buffer to no tensor (holes are not allowed)",
                                quote_name(t.name), t.begin, t.end, covered, t.begin));
      covered = t.end;
    }
    const uint64_t buffer = file_size_ - 8 - n;
    if (covered > buffer) {
      const TensorInfo* cut = nullptr;  // the first tensor past the end (in offset order)
      for (const TensorInfo& t : tensors_)
        if (!cut && t.end > buffer) cut = &t;
      fail(path_, fmt::format("truncated: the tensors need {} bytes of data but the file has {} "
                              "after the header (tensor {} is cut)",
                              covered, buffer, quote_name(cut->name)));
    }
    if (covered < buffer)
      fail(path_, fmt::format("the tensors cover {} bytes but the file has {} after the header "
                              "(holes are not allowed)",
                              covered, buffer));
    for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      file_size_(o.file_size_),
      header_size_(o.header_size_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    file_size_ = o.file_size_;
    header_size_ = o.header_size_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsFile::info(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  fail(path_, fmt::format("no tensor {} (the file has {} tensor{})", quote_name(name),
                          tensors_.size(), tensors_.size() == 1 ? "" : "s"));
}

void SafetensorsFile::read(std::string_view name, TensorDtype dtype, std::span<const int64_t> shape,
                           void* dst, size_t dst_bytes) const {
  const TensorInfo& t = info(name);
  if (t.dtype != dtype || !std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end()))
    fail(path_, fmt::format("tensor {}: the file has {} {}, expected {} {}", quote_name(name),
                            dtype_name(t.dtype), shape_string(t.shape), dtype_name(dtype),
                            shape_string(shape)));
  PPC_INTERNAL_ASSERT(dst_bytes == t.bytes(), fmt::format("{}: a buffer of {} bytes for {} bytes",
                                                          t.name, dst_bytes, t.bytes()));
  read_bytes(t, dst);
}

void SafetensorsFile::read_bytes(const TensorInfo& t, void* dst) const {
  PPC_INTERNAL_ASSERT(fd_ >= 0, "read from a moved-from SafetensorsFile");
  int err = 0;
  const size_t got = pread_full(fd_, dst, t.bytes(), data_start() + t.begin, &err);
  if (err)
    fail(path_, fmt::format("tensor {}: read error: {}", quote_name(t.name), errno_text(err)));
  if (got != t.bytes())
    fail(path_, fmt::format("tensor {}: truncated: read {} of its {} bytes (the file changed since "
                            "it was opened)",
                            quote_name(t.name), got, t.bytes()));
}

}  // namespace pprt
