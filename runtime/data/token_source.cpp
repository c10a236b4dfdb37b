#include "runtime/data/token_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

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

void TokenSource::use_documents(RowMode mode, std::optional<int64_t> eod, int row) {
  PPC_INTERNAL_ASSERT(file_ && mode != RowMode::Windows, "documents of a data file");
  mode_ = mode;
  row_ = row;
  pieces_ = document_pieces(*file_, eod, row);
  PPC_INTERNAL_ASSERT(!pieces_.empty(), "a data file holds a sequence");
}

namespace {

// --pack, --pad, --varlen, --granule, --eod: what they need (docs/pprun.md, "Documents").
void check_document_flags(const Job& job) {
  const TrainOptions& t = job.train;
  const char* mode = t.rows == RowMode::Pack  ? "--pack"
                     : t.rows == RowMode::Pad ? "--pad"
                                              : nullptr;
  if (t.eod != -1 && t.data_path.empty()) fail("--eod", "needs --data FILE");
  if (t.eod != -1 && (t.eod < 0 || t.eod >= job.setup.vocab))
    fail("--eod",
         fmt::format("{} is not a token id of the model (vocab {})", t.eod, job.setup.vocab));
  if (t.granule > 0 && job.setup.seq_len % t.granule != 0)
    fail("--granule", fmt::format("{} does not divide --seq-len {}", t.granule, job.setup.seq_len));
  if (mode && t.data_path.empty()) fail(mode, "needs --data FILE: documents come from a data file");
  if (t.granule > 0 && t.data_path.empty())
    fail("--varlen", "needs --data FILE: the lengths come from a data file's documents");
}

}  // namespace

TokenSource open_training_data(const Job& job) {
  const TrainOptions& t = job.train;
  check_document_flags(job);
  if (t.data_path.empty()) {
    if (t.data_format != DataFormat::Auto && !job.eval.enabled())
      fail("--data-format", fmt::format("{} needs --data FILE (or --eval-data FILE)",
                                        data_format_name(t.data_format)));
    return TokenSource::synthetic(job.setup.vocab, t.seed);
  }
  TokenSource s = TokenSource::from_file(t.data_path, job.setup.vocab, job.setup.seq_len, t.seed,
                                         t.data_format);
  // --varlen without --pack: one document per row.
  const RowMode mode = t.rows == RowMode::Windows && t.granule > 0 ? RowMode::Pad : t.rows;
  if (mode != RowMode::Windows) {
    if (s.indexed_documents() || t.eod >= 0) {
      s.use_documents(mode, t.eod >= 0 ? std::optional<int64_t>(t.eod) : std::nullopt,
                      job.setup.seq_len + 1);
      s.bucket_by_length(t.granule > 0 && t.length_buckets);
    } else {
      fail(t.rows == RowMode::Pack  ? "--pack"
           : t.rows == RowMode::Pad ? "--pad"
                                    : "--varlen",
           fmt::format("'{}' has no documents: give --eod ID, or a Megatron dataset", t.data_path));
    }
  }
  return s;
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

namespace {

// `rows` rows of `len` tokens in `out`, stably sorted by their filled tokens (shortest first).
void sort_by_length(std::vector<int64_t>& out, int rows, int len) {
  std::vector<std::pair<int64_t, int>> order;  // (filled, row)
  order.reserve(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r)
    order.emplace_back(filled(out.data() + static_cast<ptrdiff_t>(r) * len, len), r);
  std::sort(order.begin(), order.end());
  std::vector<int64_t> sorted(out.size());
  for (int r = 0; r < rows; ++r)
    std::copy_n(out.data() + static_cast<ptrdiff_t>(order[static_cast<size_t>(r)].second) * len,
                len, sorted.data() + static_cast<ptrdiff_t>(r) * len);
  out.swap(sorted);
}

}  // namespace

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
    if (mode_ != RowMode::Windows) {
      PPC_INTERNAL_ASSERT(len == row_, "rows of documents as long as the pieces allow");
      document_row(*file_, pieces_, mix64(key) % pieces_.size(), mode_, len, row);
      continue;
    }
    const uint64_t span = file_->size() - static_cast<uint64_t>(len) + 1;
    file_->copy(mix64(key) % span, static_cast<size_t>(len), row);
  }
  if (buckets_) sort_by_length(out, rows, len);
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
  if (file_ && mode_ != RowMode::Windows)
    return fmt::format("{}, its documents {} ({} pieces of at most {} tokens){}", file_->describe(),
                       mode_ == RowMode::Pack ? "packed" : "one per sequence", pieces_.size(), row_,
                       buckets_ ? ", the rows grouped by length into microbatches" : "");
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
