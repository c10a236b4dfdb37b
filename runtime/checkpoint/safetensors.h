// Hugging Face's safetensors format, read and written without LibTorch.
//
// A file is an 8-byte little-endian unsigned header size N, N bytes of UTF-8 JSON (an object:
// tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative to the byte
// buffer, plus an optional "__metadata__" object of strings), possibly padded with spaces, then
// the byte buffer: every tensor's bytes, row-major and little-endian, with no holes.
//
// - write_safetensors() pads the header so that the data starts 8-byte aligned, lays the tensors
//   out in the given order and writes them straight from the caller's memory (writev, no copy)
//   into a ppc::AtomicFile: fsynced, then renamed into place (compiler/atomic_file.h).
// - SafetensorsFile validates the whole header when it is opened (sizes, JSON, dtypes, shapes,
//   offsets against the shapes and against the file size, no holes, no overlaps, no duplicates,
//   no unknown fields) and reads one tensor at a time straight into the caller's buffer (pread).
//
// Every problem with a file is a ppc::UserError whose input is the file's path and whose message
// names the tensor or field, e.g.
//   ckpt/model.safetensors: tensor 'embed.weight': data_offsets [0, 100] do not match shape [4, 8]
//   of F32 (128 bytes)
// Mistakes of the caller (a byte count that does not match the shape, a duplicate name) are
// ppc::InternalError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pprt {

// The element types of the format (the sub-byte F4/F6 types are not supported).
enum class TensorDtype : uint8_t {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  I64,
  U64,
  F64,
  C64,
};
inline constexpr TensorDtype kAllTensorDtypes[] = {
    TensorDtype::BOOL,    TensorDtype::U8,      TensorDtype::I8,  TensorDtype::F8_E5M2,
    TensorDtype::F8_E4M3, TensorDtype::F8_E8M0, TensorDtype::I16, TensorDtype::U16,
    TensorDtype::F16,     TensorDtype::BF16,    TensorDtype::I32, TensorDtype::U32,
    TensorDtype::F32,     TensorDtype::I64,     TensorDtype::U64, TensorDtype::F64,
    TensorDtype::C64};

std::string_view dtype_name(TensorDtype t);  // "F32", as the header spells it
size_t dtype_size(TensorDtype t);            // bytes per element
std::optional<TensorDtype> dtype_from_name(std::string_view name);

// "[4, 8]"
std::string shape_string(std::span<const int64_t> shape);

using SafetensorsMetadata = std::map<std::string, std::string>;

// One tensor to write. `data` is not copied: it must stay valid during write_safetensors().
struct TensorWrite {
  std::string name;
  TensorDtype dtype = TensorDtype::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // contiguous, row-major, little-endian
  size_t bytes = 0;            // must equal numel(shape) * dtype_size(dtype)
};

// The header as written: 8-byte size, then the JSON padded with spaces to a multiple of 8 bytes.
std::string safetensors_header(std::span<const TensorWrite> tensors,
                               const SafetensorsMetadata& metadata = {});

// Writes `path` (replacing it): the header and the tensors in the given order, fsynced, renamed
// into place. Throws ppc::UserError located at `where` (empty: `path`) if the file cannot be
// written (nothing is left behind).
void write_safetensors(const std::string& path, std::span<const TensorWrite> tensors,
                       const SafetensorsMetadata& metadata = {}, const std::string& where = "");

// A tensor as the header describes it.
struct TensorInfo {
  std::string name;
  TensorDtype dtype = TensorDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the start of the byte buffer
  uint64_t end = 0;
  uint64_t bytes() const { return end - begin; }
  uint64_t numel() const;
};

// An open safetensors file whose header has been validated. Move-only (owns a descriptor).
class SafetensorsFile {
 public:
  // Largest header accepted (the reference implementation's limit).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Opens and validates `path`; throws ppc::UserError naming the file and the field.
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t header_size() const { return header_size_; }     // N
  uint64_t data_start() const { return 8 + header_size_; }  // the byte buffer's file offset

  // In the order of their offsets in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const SafetensorsMetadata& metadata() const { return metadata_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  // Throws ppc::UserError "FILE: no tensor 'NAME' (the file has K tensors)".
  const TensorInfo& info(std::string_view name) const;

  // Checks that tensor `name` exists with exactly `dtype` and `shape` (a UserError names the
  // tensor, what the file has and what was expected), then reads its bytes into `dst`, which
  // has room for `dst_bytes` (must equal the tensor's size: else InternalError).
  void read(std::string_view name, TensorDtype dtype, std::span<const int64_t> shape, void* dst,
            size_t dst_bytes) const;
  // Reads the bytes of `t` (one of tensors()) into `dst` (t.bytes() of room), no other check.
  void read_bytes(const TensorInfo& t, void* dst) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
  SafetensorsMetadata metadata_;
};

}  // namespace pprt
