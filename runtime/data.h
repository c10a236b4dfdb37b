// Training data: token sequences that every rank reads identically for a given step, so that
// the first stage (token ids) and the last stage (targets) agree without exchanging them.
//
// - synthetic (the default): a small learnable language. Each token has four possible
//   successors with fixed probabilities (a sparse bigram chain, entropy about 1.1 nats), and in
//   half of the sequences the second half repeats the first (learnable through attention only).
//   A model starts at ln(vocab) and goes well below 2 nats within a few hundred steps.
// - a text file (--data FILE): byte-level tokens (vocab >= 256); each sequence is a window at an
//   offset drawn from (seed, step, row).
// No LibTorch: rows are plain int64 vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pprt {

class TokenSource {
 public:
  // Throws ppc::UserError if the file cannot be read, is shorter than one sequence, or if
  // vocab < 256.
  static TokenSource from_file(const std::string& path, int vocab, int seq_len, uint64_t seed);
  static TokenSource synthetic(int vocab, uint64_t seed);

  // `rows` sequences of `len` tokens for `step`, row-major, into `out` (resized).
  void batch(int64_t step, int rows, int len, std::vector<int64_t>& out) const;

  std::string describe() const;  // "synthetic language (vocab 256)", "bytes of FILE (12345 bytes)"

 private:
  TokenSource() = default;
  void synthetic_row(uint64_t key, int len, int64_t* out) const;

  std::string path_;
  std::shared_ptr<const std::vector<uint8_t>> bytes_;  // file data, shared by copies
  int vocab_ = 0;
  uint64_t seed_ = 0;
  std::vector<int32_t> successors_;  // synthetic: 4 per token
};

// Counter-based random numbers (splitmix64): the same on every rank and platform.
uint64_t mix64(uint64_t x);
inline uint64_t mix64(uint64_t a, uint64_t b) {
  return mix64(a ^ mix64(b + 0x9E3779B97F4A7C15ull));
}

}  // namespace pprt
