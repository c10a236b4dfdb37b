#include "runtime/data/documents.h"

#include <algorithm>

#include "compiler/diagnostic.h"
#include "runtime/data/token_file.h"

namespace pprt {

std::vector<Piece> pieces_of(const std::vector<uint64_t>& starts, uint64_t tokens, int row) {
  PPC_INTERNAL_ASSERT(row >= 2, "rows of at least two tokens");
  std::vector<Piece> pieces;
  const auto step = static_cast<uint64_t>(row - 1);
  for (size_t d = 0; d < starts.size(); ++d) {
    const uint64_t begin = starts[d], end = d + 1 < starts.size() ? starts[d + 1] : tokens;
    if (end <= begin) continue;
    // [begin, end) in pieces of `row` tokens at strides of row - 1 (the last may be shorter).
    for (uint64_t at = begin;; at += step) {
      const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(row), end - at);
      pieces.push_back(Piece{at, static_cast<uint32_t>(n)});
      if (at + n == end) break;
    }
  }
  return pieces;
}

std::vector<Piece> document_pieces(const TokenFile& file, std::optional<int64_t> eod, int row) {
  std::vector<uint64_t> starts;
  if (!file.document_starts().empty()) {
    starts = file.document_starts();
  } else {
    starts.push_back(0);
    if (eod)
      for (uint64_t at : file.positions_of(*eod))
        if (at + 1 < file.size()) starts.push_back(at + 1);
  }
  return pieces_of(starts, file.size(), row);
}

std::vector<uint64_t> row_pieces(const std::vector<Piece>& pieces, uint64_t first, RowMode mode,
                                 int row) {
  PPC_INTERNAL_ASSERT(!pieces.empty() && mode != RowMode::Windows, "a row of documents");
  const uint64_t n = pieces.size();
  std::vector<uint64_t> out{first % n};
  if (mode == RowMode::Pad) return out;
  // Best fit over the window: the longest piece that still fits, while one does.
  const uint64_t window = std::min<uint64_t>(kPackWindow, n - 1);
  std::vector<bool> taken(window + 1, false);
  int64_t left = row - static_cast<int64_t>(pieces[out[0]].length);
  while (left > 0) {
    uint64_t best = 0;
    for (uint64_t k = 1; k <= window; ++k) {
      const auto len = static_cast<int64_t>(pieces[(first + k) % n].length);
      if (!taken[k] && len <= left && (best == 0 || len > pieces[(first + best) % n].length))
        best = k;
    }
    if (best == 0) break;
    taken[best] = true;
    out.push_back((first + best) % n);
    left -= pieces[out.back()].length;
  }
  return out;
}

void document_row(const TokenFile& file, const std::vector<Piece>& pieces, uint64_t first,
                  RowMode mode, int row, int64_t* out) {
  int at = 0;
  for (uint64_t p : row_pieces(pieces, first, mode, row)) {
    const Piece& piece = pieces[p];
    file.copy(piece.start, piece.length, out + at);
    for (uint32_t i = 0; i < piece.length; ++i) out[at + i] = document_token(out[at + i], i);
    at += static_cast<int>(piece.length);
  }
  std::fill(out + at, out + row, padding_token());
}

int64_t filled(const int64_t* row, int64_t n) {
  while (n > 0 && is_padding(row[n - 1])) --n;
  return n;
}

int64_t predicted_targets(const int64_t* row, int64_t n) {
  if (n < 2) return 0;
  if (document_position(row[0]) < 0) return n - 1;
  int64_t k = 0;
  for (int64_t j = 0; j + 1 < n; ++j)
    k += document_position(row[j + 1]) == document_position(row[j]) + 1 ? 1 : 0;
  return k;
}

int64_t varlen_length(const int64_t* rows, int64_t count, int64_t n, int granule) {
  int64_t longest = 1;
  for (int64_t r = 0; r < count; ++r) longest = std::max(longest, filled(rows + r * n, n) - 1);
  const int64_t g = granule;
  return std::min(n - 1, (longest + g - 1) / g * g);
}

}  // namespace pprt
