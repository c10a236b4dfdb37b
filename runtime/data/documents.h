// Documents in token files, and the rows made of them (issue 41; docs/pprun.md, "Documents").
//
// A data file's documents: Megatron's .bin/.idx documents (document_indices over its sequences),
// or, in a flat file, the tokens up to and including each end-of-document token (--eod ID; the
// tokens after the last one are a document too). A document longer than a row (seq_len + 1
// tokens) is split into pieces of seq_len + 1 tokens that overlap by one token, so that every
// prediction inside it is made once: each piece is then a document of its own (its positions
// restart; it does not see the piece before it).
//
// Rows that hold documents carry them in the high bits of each int64 token (every rank reads
// the rows itself, so every stage of a microbatch knows its documents without a message):
//   bits 0-31:  the token id
//   bits 32-61: 1 + the token's position in its document (0: a row without documents, as the
//               windows of --data and the synthetic language are)
//   bit 62:     padding (a slot no document fills; it is a document of one token of its own)
// so that a token sees the tokens of its own document only, its rotary position is its position
// in its document, and a target is predicted only if it continues the document (targets that
// start a document, and padding, are not). Microbatch::inputs() and targets() give the ids alone.
//
// RowMode::Pack fills a row with whole pieces: the piece drawn from (seed, step, row), then, best
// fit over the window of the kPackWindow pieces after it (in the corpus's order, wrapping
// around), the longest that still fits, while one does; the rest is padding. RowMode::Pad puts one
// piece per row and
// pads the rest (every sequence padded to seq_len: the baseline --pack and --varlen are measured
// against). No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pprt {

class TokenFile;

enum class RowMode : uint8_t { Windows, Pad, Pack };

constexpr int kDocumentShift = 32;
constexpr int64_t kTokenMask = (int64_t{1} << kDocumentShift) - 1;
constexpr int64_t kPositionMask = (int64_t{1} << 30) - 1;  // of the value shifted down
constexpr int64_t kPaddingBit = int64_t{1} << 62;

// A row token: `id` at position `position` of its document.
constexpr int64_t document_token(int64_t id, int64_t position) {
  return id | ((position + 1) << kDocumentShift);
}
constexpr int64_t padding_token() {
  return document_token(0, 0) | kPaddingBit;
}
constexpr int64_t token_id(int64_t v) {
  return v & kTokenMask;
}
// -1 in a row without documents.
constexpr int64_t document_position(int64_t v) {
  return ((v >> kDocumentShift) & kPositionMask) - 1;
}
constexpr bool is_padding(int64_t v) {
  return (v & kPaddingBit) != 0;
}

// A stretch of the token stream that a row takes whole.
struct Piece {
  uint64_t start = 0;
  uint32_t length = 0;
};

// The documents of `file` (Megatron's, or those ending at each `eod`), cut into pieces of at most
// `row` tokens (consecutive pieces of one document share a token). Empty documents are dropped.
std::vector<Piece> document_pieces(const TokenFile& file, std::optional<int64_t> eod, int row);
// The same from the documents' first tokens (sorted, in a stream of `tokens` tokens).
std::vector<Piece> pieces_of(const std::vector<uint64_t>& starts, uint64_t tokens, int row);

// --pack's window: the pieces after the drawn one that a row may take.
constexpr uint64_t kPackWindow = 64;

// The pieces of a row of `row` tokens from pieces[first % size]: that piece alone (Pad), or with
// the pieces best fit adds (Pack), in the order they are taken.
std::vector<uint64_t> row_pieces(const std::vector<Piece>& pieces, uint64_t first, RowMode mode,
                                 int row);
// One row of `row` tokens of row_pieces(pieces, first, mode, row), encoded as above; the rest
// padding.
void document_row(const TokenFile& file, const std::vector<Piece>& pieces, uint64_t first,
                  RowMode mode, int row, int64_t* out);

// The tokens of a row that a document fills (the slots before its first padding).
int64_t filled(const int64_t* row, int64_t n);
// The targets a row of `n` tokens predicts: n - 1 without documents; with documents, those that
// continue their position's document.
int64_t predicted_targets(const int64_t* row, int64_t n);
// --varlen: the inputs a microbatch of `rows` rows of `n` tokens needs, in multiples of `granule`:
// its longest row's filled tokens less one, rounded up (at least one granule, at most n - 1).
int64_t varlen_length(const int64_t* rows, int64_t count, int64_t n, int granule);

}  // namespace pprt
