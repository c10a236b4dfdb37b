#include "runtime/data.h"

#include <fmt/format.h>

#include <fstream>

#include "compiler/diagnostic.h"

namespace pprt {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

// A small stream of random numbers from one key.
class Rng {
 public:
  explicit Rng(uint64_t key) : state_(key) {}
  uint64_t next() { return mix64(state_++); }
  // Uniform in [0, n).
  uint64_t below(uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

constexpr int kSuccessors = 4;
constexpr double kSuccessorCdf[kSuccessors] = {0.55, 0.80, 0.95, 1.0};

}  // namespace

TokenSource TokenSource::synthetic(int vocab, uint64_t seed) {
  TokenSource s;
  s.vocab_ = vocab;
  s.seed_ = seed;
  s.successors_.resize(static_cast<size_t>(vocab) * kSuccessors);
  for (int t = 0; t < vocab; ++t)
    for (int k = 0; k < kSuccessors; ++k)
      s.successors_[static_cast<size_t>(t * kSuccessors + k)] = static_cast<int32_t>(
          mix64(mix64(seed, 0x5EED), static_cast<uint64_t>(t * kSuccessors + k)) %
          static_cast<uint64_t>(vocab));
  return s;
}

TokenSource TokenSource::from_file(const std::string& path, int vocab, int seq_len, uint64_t seed) {
  if (vocab < 256)
    throw ppc::UserError(fmt::format("byte-level data needs vocab >= 256, the model has {}", vocab),
                         ppc::SourceLocation{"--data", 0, 0, ""});
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ppc::UserError(fmt::format("cannot open data file '{}'", path),
                         ppc::SourceLocation{"--data", 0, 0, ""});
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::istreambuf_iterator<char>(in),
                                                      std::istreambuf_iterator<char>());
  if (in.bad())
    throw ppc::UserError(fmt::format("error reading data file '{}'", path),
                         ppc::SourceLocation{"--data", 0, 0, ""});
  if (bytes->size() < static_cast<size_t>(seq_len) + 1)
    throw ppc::UserError(
        fmt::format("data file '{}' has {} bytes; one sequence needs seq_len + 1 = {}", path,
                    bytes->size(), seq_len + 1),
        ppc::SourceLocation{"--data", 0, 0, ""});
  TokenSource s;
  s.path_ = path;
  s.bytes_ = std::move(bytes);
  s.vocab_ = vocab;
  s.seed_ = seed;
  return s;
}

void TokenSource::synthetic_row(uint64_t key, int len, int64_t* out) const {
  Rng rng(key);
  const bool copy = rng.below(2) == 1;
  const int fresh = copy ? (len + 1) / 2 : len;
  int64_t t = static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab_)));
  for (int i = 0; i < fresh; ++i) {
    out[i] = t;
    const double u = rng.unit();
    int k = 0;
    while (k + 1 < kSuccessors && u >= kSuccessorCdf[k]) ++k;
    t = successors_[static_cast<size_t>(t * kSuccessors + k)];
  }
  for (int i = fresh; i < len; ++i) out[i] = out[i - fresh];
}

void TokenSource::batch(int64_t step, int rows, int len, std::vector<int64_t>& out) const {
  out.resize(static_cast<size_t>(rows) * static_cast<size_t>(len));
  for (int r = 0; r < rows; ++r) {
    const uint64_t key = mix64(mix64(seed_, static_cast<uint64_t>(step)), static_cast<uint64_t>(r));
    int64_t* row = out.data() + static_cast<size_t>(r) * static_cast<size_t>(len);
    if (!bytes_) {
      synthetic_row(key, len, row);
      continue;
    }
    const uint64_t span = bytes_->size() - static_cast<uint64_t>(len) + 1;
    const uint64_t off = mix64(key) % span;
    for (int i = 0; i < len; ++i) row[i] = (*bytes_)[off + static_cast<uint64_t>(i)];
  }
}

std::string TokenSource::describe() const {
  if (bytes_) return fmt::format("bytes of {} ({} bytes)", path_, bytes_->size());
  return fmt::format("synthetic language (vocab {})", vocab_);
}

}  // namespace pprt
