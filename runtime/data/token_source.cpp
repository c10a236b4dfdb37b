#include "runtime/data/token_source.h"

#include <fmt/format.h>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"
#include "runtime/job.h"

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

TokenSource TokenSource::from_file(const std::string& path, int vocab, int seq_len, uint64_t seed,
                                   DataFormat format) {
  TokenSource s;
  s.file_ = TokenFile::open(path, format, vocab, seq_len);
  s.vocab_ = vocab;
  s.seed_ = seed;
  return s;
}

TokenSource open_training_data(const Job& job) {
  const TrainOptions& t = job.train;
  if (t.data_path.empty()) {
    if (t.data_format != DataFormat::Auto && !job.eval.enabled())
      fail("--data-format", fmt::format("{} needs --data FILE (or --eval-data FILE)",
                                        data_format_name(t.data_format)));
    return TokenSource::synthetic(job.setup.vocab, t.seed);
  }
  return TokenSource::from_file(t.data_path, job.setup.vocab, job.setup.seq_len, t.seed,
                                t.data_format);
}

TokenSource open_eval_data(const Job& job) {
  PPC_INTERNAL_ASSERT(job.eval.enabled(), "--eval-data given");
  return TokenSource::from_file(job.eval.data_path, job.setup.vocab, job.setup.seq_len,
                                job.train.seed, job.train.data_format);
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

void TokenSource::batch(int64_t step, int64_t first_row, int rows, int len,
                        std::vector<int64_t>& out) const {
  PPC_INTERNAL_ASSERT(first_row >= 0 && rows >= 0 && len >= 0, "negative batch slice");
  PPC_INTERNAL_ASSERT(!file_ || static_cast<uint64_t>(len) <= file_->size(),
                      "sequences longer than the data");
  out.resize(static_cast<size_t>(rows) * static_cast<size_t>(len));
  const uint64_t step_key = mix64(seed_, static_cast<uint64_t>(step));
  for (int r = 0; r < rows; ++r) {
    const uint64_t key = mix64(step_key, static_cast<uint64_t>(first_row + r));
    int64_t* row = out.data() + static_cast<size_t>(r) * static_cast<size_t>(len);
    if (!file_) {
      synthetic_row(key, len, row);
      continue;
    }
    const uint64_t span = file_->size() - static_cast<uint64_t>(len) + 1;
    file_->copy(mix64(key) % span, static_cast<size_t>(len), row);
  }
}

int64_t TokenSource::sequence_count(int len) const {
  PPC_INTERNAL_ASSERT(file_ && len >= 2 && static_cast<uint64_t>(len) <= file_->size(),
                      "evaluation sequences come from a data file holding one");
  return static_cast<int64_t>((file_->size() - 1) / static_cast<uint64_t>(len - 1));
}

void TokenSource::sequences(int64_t first, int rows, int len, std::vector<int64_t>& out) const {
  const int64_t n = sequence_count(len);
  out.resize(static_cast<size_t>(rows) * static_cast<size_t>(len));
  for (int r = 0; r < rows; ++r) {
    const auto i = static_cast<uint64_t>((first + r) % n);
    file_->copy(i * static_cast<uint64_t>(len - 1), static_cast<size_t>(len),
                out.data() + static_cast<size_t>(r) * static_cast<size_t>(len));
  }
}

std::string TokenSource::describe() const {
  if (file_) return file_->describe();
  return fmt::format("synthetic language (vocab {})", vocab_);
}

DataIdentity TokenSource::identity() const {
  if (file_) return file_->identity();
  DataIdentity id;
  id.format = "synthetic";
  return id;
}

void TokenSource::check_unchanged() const {
  if (file_) file_->check_unchanged();
}

}  // namespace pprt
