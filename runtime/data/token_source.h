// Training data: token sequences that every rank reads identically for a given step, so that
// the first stage (token ids) and the last stage (targets) agree without exchanging them.
//
// - synthetic (the default): a small learnable language. Each token has four possible
//   successors with fixed probabilities (a sparse bigram chain, entropy about 1.1 nats), and in
//   half of the sequences the second half repeats the first (learnable through attention only).
//   A model starts at ln(vocab) and goes well below 2 nats within a few hundred steps.
// - a data file (--data FILE, --data-format): byte-level text, flat uint16/uint32 token ids, or a
//   Megatron indexed dataset (token_file.h), memory-mapped and validated when opened.
//   Each sequence is a window at an offset drawn from (seed, step, row).
// Row j of step s depends on (seed, s, j) alone, so that any rank can draw any slice of a step's
// global batch without communication (data parallelism: replica r takes rows [r G/dp,
// (r+1) G/dp)).
// No LibTorch: rows are plain int64 vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/documents.h"
#include "runtime/data/token_file.h"

namespace pprt {

struct Job;

class TokenSource {
 public:
  // Opens a data file (TokenFile::open): throws ppc::UserError naming the file if it cannot be
  // read, is malformed, holds a token id >= vocab or is shorter than one sequence, or, for text,
  // if vocab < 256.
  static TokenSource from_file(const std::string& path, int vocab, int seq_len, uint64_t seed,
                               DataFormat format = DataFormat::Auto);
  static TokenSource synthetic(int vocab, uint64_t seed);

  // Rows of documents (documents.h) instead of windows: `mode` Pad or Pack, the documents
  // Megatron's index holds or those ending at `eod`, rows of `row` tokens (seq_len + 1). A data
  // file only. Row j of step s starts at the piece drawn from (seed, s, j).
  void use_documents(RowMode mode, std::optional<int64_t> eod, int row);
  RowMode rows() const { return mode_; }
  // --varlen's length buckets (on unless --no-length-buckets): batch() puts the rows it draws in
  // the order of their filled tokens (shortest first; ties in row order), so that the microbatches
  // cut from them in order hold rows of similar length and --varlen's microbatch lengths (each its
  // longest row's) pad little. The rows drawn stay those of (seed, step, row): a step's set of rows
  // is unchanged, only which of its microbatches a row lands in. Rows of documents only.
  void bucket_by_length(bool on) { buckets_ = on && mode_ != RowMode::Windows; }
  bool buckets() const { return buckets_; }
  // Whether the data file's index holds documents (Megatron's).
  bool indexed_documents() const { return file_ && !file_->document_starts().empty(); }
  size_t pieces() const { return pieces_.size(); }

  // Rows [first_row, first_row + rows) of step `step`'s global batch, `len` tokens each,
  // row-major, into `out` (resized). Global row j is drawn from (seed, step, j) alone (with length
  // buckets, the slice's rows are then put in the order of their lengths).
  void batch(int64_t step, int64_t first_row, int rows, int len, std::vector<int64_t>& out) const;
  // The first `rows` rows.
  void batch(int64_t step, int rows, int len, std::vector<int64_t>& out) const {
    batch(step, 0, rows, len, out);
  }

  // Evaluation's rows (a data file only): sequence i is the window of `len` tokens at token
  // i * (len - 1), so that consecutive sequences predict every token of the file once. Rows
  // [first, first + rows) of that list, each index taken modulo sequence_count(len), into `out`.
  void sequences(int64_t first, int rows, int len, std::vector<int64_t>& out) const;
  // The whole windows of `len` tokens the file holds at that stride (at least 1 once opened).
  int64_t sequence_count(int len) const;

  // "synthetic language (vocab 256)", "bytes of FILE (12345 bytes)", "uint16 tokens of FILE (N
  // tokens)", "Megatron dataset PREFIX (...)"
  std::string describe() const;
  // What the data is (for a checkpoint; format "synthetic" without a file).
  DataIdentity identity() const;
  // Throws ppc::UserError if the data file was replaced or modified since it was opened (one
  // stat per file; nothing for the synthetic language).
  void check_unchanged() const;

 private:
  TokenSource() = default;
  void synthetic_row(uint64_t key, int len, int64_t* out) const;

  std::shared_ptr<const TokenFile> file_;  // mapped data, shared by copies
  int vocab_ = 0;
  uint64_t seed_ = 0;
  std::vector<int32_t> successors_;  // synthetic: 4 per token
  RowMode mode_ = RowMode::Windows;
  std::vector<Piece> pieces_;  // the documents' pieces (use_documents)
  int row_ = 0;
  bool buckets_ = false;
};

// The data a job trains on: --data with --data-format, or the synthetic language.
TokenSource open_training_data(const Job& job);
// The held-out data it evaluates on (--eval-data, read with --data-format); job.eval.enabled().
TokenSource open_eval_data(const Job& job);

// Counter-based random numbers (splitmix64): the same on every rank and platform.
uint64_t mix64(uint64_t x);
inline uint64_t mix64(uint64_t a, uint64_t b) {
  return mix64(a ^ mix64(b + 0x9E3779B97F4A7C15ull));
}

}  // namespace pprt
