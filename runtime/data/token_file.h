// Token files for --data: memory-mapped, validated when opened, read as one stream of token ids.
//
// Formats (docs/pprun.md, "Data"):
// - text:     any file, one token per byte (byte-level, vocab >= 256).
// - uint16, uint32: flat little-endian token ids with no header (nanoGPT's prepare.py writes
//   train.bin as uint16).
// - megatron: Megatron-LM's indexed dataset, PREFIX.bin (the tokens) and PREFIX.idx (the index:
//   magic "MMIDIDX\0\0", version 1, a dtype code, the sequence and document counts, the sequence
//   lengths, the sequence pointers, the document indices). The index is checked against the
//   .bin, then the .bin is read as one stream (as Megatron's GPT dataset concatenates documents).
// - auto: PREFIX, PREFIX.bin or PREFIX.idx with both PREFIX.bin and PREFIX.idx present is
//   megatron; another .bin is uint16; anything else is text.
//
// Opening checks everything before any compute: the files, the index, that every token id is
// below the model's vocab (one scan), that there is at least one sequence (seq_len + 1 tokens).
// Each problem is a ppc::UserError naming the file (and the field or offset).
//
// The file stays mapped while the TokenFile lives. check_unchanged() stats the files again and
// throws if one was replaced or modified since it was opened (so that a run stops with a message,
// instead of reading another file or taking SIGBUS on a truncated mapping).
// No LibTorch.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pprt {

enum class DataFormat : uint8_t { Auto, Text, Uint16, Uint32, Megatron };

std::string_view data_format_name(DataFormat f);  // "auto", "text", "uint16", ...
std::optional<DataFormat> parse_data_format(std::string_view name);

// What identifies the data a run trains on, for a checkpoint.
struct DataIdentity {
  std::string format;       // "synthetic", "text", "uint16", "uint32" or "megatron"
  std::string path;         // the token file (Megatron: PREFIX.bin); empty for synthetic
  std::string index_path;   // Megatron: PREFIX.idx; empty otherwise
  std::string token_type;   // "uint8", "uint16", "int32", ...; empty for synthetic
  uint64_t bytes = 0;       // size of the token file
  uint64_t tokens = 0;      // tokens in the stream
  std::string fingerprint;  // 16 hex digits: the files' sizes and a sample of their content
                            // (the first and last 64 KiB, 16 blocks between); the same for a
                            // copy of the files on another machine
};

// Which files `path` means under `format` (Auto resolved), without opening them.
struct DataFiles {
  DataFormat format = DataFormat::Text;
  std::string path;        // the token file
  std::string index_path;  // Megatron's .idx
};
DataFiles resolve_data_files(const std::string& path, DataFormat format);

class TokenFile {
 public:
  // Opens, maps and validates the data `path` names under `format`; throws ppc::UserError.
  static std::shared_ptr<const TokenFile> open(const std::string& path, DataFormat format,
                                               int vocab, int seq_len);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  DataFormat format() const { return format_; }
  uint64_t size() const { return tokens_; }  // tokens in the stream
  // Tokens [first, first + n) of the stream, widened to int64 (first + n <= size()).
  void copy(uint64_t first, size_t n, int64_t* out) const;

  // Megatron: the token where each document starts (document_indices over the sequences), in
  // order; empty for the other formats.
  const std::vector<uint64_t>& document_starts() const { return document_starts_; }
  // Where token `id` occurs in the stream, in order (one scan: --eod's documents).
  std::vector<uint64_t> positions_of(int64_t id) const;

  // "bytes of FILE (N bytes)", "uint16 tokens of FILE (N tokens)", "Megatron dataset PREFIX
  // (int32 tokens, D documents, S sequences, N tokens)"
  std::string describe() const;
  const DataIdentity& identity() const { return identity_; }

  // Throws ppc::UserError naming the file if it was replaced (another inode at the path),
  // removed, or modified (size or modification time) since open(). One stat per file.
  void check_unchanged() const;

  enum class Type : uint8_t { U8, I8, I16, U16, I32, U32, I64 };

 private:
  TokenFile() = default;
  struct Stat {
    std::string path;
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
  };

  DataFormat format_ = DataFormat::Text;
  Type type_ = Type::U8;
  int fd_ = -1;
  const void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint64_t tokens_ = 0;
  uint64_t documents_ = 0, sequences_ = 0;  // Megatron
  std::vector<uint64_t> document_starts_;   // Megatron
  std::string name_;                        // Megatron: the prefix
  DataIdentity identity_;
  std::vector<Stat> stats_;
};

}  // namespace pprt
