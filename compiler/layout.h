// The layout language: a Megatron-style description of how a model's layers are split into
// pipeline stages, e.g. "Et*3|(tt|)*29,m|L". See docs/layout-language.md for the grammar.
//
// parse_layout() turns a string into a Layout (a list of stages, each a list of layers);
// place_layout() assigns stages to ranks and virtual chunks; check_model() enforces the rules
// that a layout describing a whole model must satisfy. All three throw ppc::UserError with a
// column and a caret on bad input, never anything else.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/diagnostic.h"

namespace ppc {

// A layer's kind is its layout symbol. E, t, m and L are built in; any other ASCII letter is a
// symbol of the model's own (an encoder layer, a vision block: docs/layout-language.md), held as
// the letter itself, e.g. LayerKind{'x'} (own_layer('x')).
enum class LayerKind : uint8_t {
  Embedding = 'E',
  Decoder = 't',
  Mtp = 'm',
  Loss = 'L',
};

constexpr char layer_symbol(LayerKind k) {
  return static_cast<char>(k);
}
constexpr bool is_builtin(LayerKind k) {
  return k == LayerKind::Embedding || k == LayerKind::Decoder || k == LayerKind::Mtp ||
         k == LayerKind::Loss;
}
// Whether `c` can be a layer symbol at all: an ASCII letter.
constexpr bool is_layer_symbol(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}
constexpr LayerKind own_layer(char c) {
  return static_cast<LayerKind>(static_cast<uint8_t>(c));
}

// Every ASCII letter: for re-reading a layout that was checked when it was written (a checkpoint's,
// a plan's), whatever symbols of its own its model declared.
inline constexpr std::string_view kAnySymbols =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

// Checks a declaration of a model's own symbols (ppcompile --symbols "xv"): ASCII letters other
// than E, t, m and L, each once. Throws UserError naming `flag` and the offending character.
void check_own_symbols(std::string_view symbols, const std::string& flag);

struct Layout {
  std::string source;                          // the text as given (for messages and plans)
  std::vector<std::vector<LayerKind>> stages;  // stage i's layers, in model order
  // Column (1-based, in `source`) of each layer's symbol, same shape as `stages` (a layer repeated
  // by `*N` or a group points at the one symbol it came from), and of the start of each stage.
  // Errors about a layer or a stage point there. Empty for generic layouts.
  // For a layout read from a file (or any input with several lines) the column is within the
  // input line given by `layer_lines` / `stage_lines`; for a one-line input every line is 1 and
  // the column is the column in `source`.
  std::vector<std::vector<int>> layer_columns;
  std::vector<int> stage_columns;

  // --- Added by the layout implementation (source positions for messages) ---
  // For a layout file, `source` is the layout text without comments and blank lines, its lines
  // joined by single spaces (it parses to the same layout).
  std::string input = "layout";          // input name for messages: "layout", a file name
  std::vector<std::string> input_lines;  // the input's lines (tabs shown as spaces), for carets
  std::vector<std::vector<int>> layer_lines;  // 1-based input line of each layer's symbol
  std::vector<int> stage_lines;               // 1-based input line of each stage's start
  int end_line = 0;                           // position just after the last token of the input
  int end_column = 0;

  // Where to point an error about layer `index` of stage `stage`, about a stage, or about the
  // layout as a whole (just after its end). Generic layouts give a location with no column.
  SourceLocation layer_location(int stage, int index) const;
  SourceLocation stage_location(int stage) const;
  SourceLocation end_location() const;

  int num_stages() const { return static_cast<int>(stages.size()); }
  int count(LayerKind k) const;
  bool operator==(const Layout& o) const { return stages == o.stages; }
};

// Limits of the language (see docs/layout-language.md): a layout expands to at most
// kMaxLayoutItems layers plus stage separators; a count is at most that too; groups nest at most
// kMaxLayoutNesting deep; the input text is at most kMaxLayoutInputBytes long.
inline constexpr int kMaxLayoutItems = 1'000'000;
inline constexpr int kMaxLayoutNesting = 64;
inline constexpr int kMaxLayoutInputBytes = 256 * 1024;

// Parses the layout language. `input_name` names the input in messages ("layout" for --layout,
// the file name for --layout-file). Files may hold '#' comments and blank lines; parse_layout_file
// strips them and keeps line/column information for errors. `own_symbols` are the letters the
// model declares as symbols of its own besides E, t, m and L (check_own_symbols); any other letter
// is an unknown symbol, reported with a caret (so that a typo such as 'T' for 't' is caught).
Layout parse_layout(std::string_view text, const std::string& input_name = "layout",
                    std::string_view own_symbols = {});
Layout parse_layout_file(const std::string& path, std::string_view own_symbols = {});
// What parse_layout_file does with the file's contents (a leading UTF-8 byte order mark is
// dropped); `input_name` names the file in messages.
Layout parse_layout_file_text(std::string_view text, const std::string& input_name,
                              std::string_view own_symbols = {});

// The layout on one line in Megatron-LM's layout syntax, compressed with "X*N" and groups
// "(...)*N" (never nested): parse_layout() reads it back to exactly the same stages
// (emit_layout_string.cpp).
std::string layout_string(const Layout& layout);

// A layout of `n` stages with no model (for --stages N): every stage empty.
Layout generic_layout(int n);

enum class PlacementStyle : uint8_t {
  Loop,  // stage i on rank i mod pp, chunk i div pp
  V,     // rank r holds stages r and 2*pp-1-r (exactly two stages per rank)
};

struct Placement {
  PlacementStyle style = PlacementStyle::Loop;
  int pp = 1;
  int vpp = 1;
  std::vector<int> stage_rank;   // stage -> rank
  std::vector<int> stage_chunk;  // stage -> local chunk index on its rank
  // rank -> stages it holds, in chunk order
  std::vector<std::vector<int>> rank_stages;

  int num_stages() const { return static_cast<int>(stage_rank.size()); }
  bool operator==(const Placement& o) const = default;
};

const char* placement_name(PlacementStyle s);

// Builds the placement of `num_stages` stages on `pp` ranks. Throws UserError (naming the flag:
// --pp, --stages or --placement) if pp or num_stages is below 1, if num_stages is not a multiple
// of pp, or if V placement is asked with num_stages != 2*pp.
Placement make_placement(int num_stages, int pp, PlacementStyle style);

// Like make_placement, for a parsed layout: vpp is inferred as num_stages / pp, and a given `vpp`
// must agree. Errors about the layout (stage count not a multiple of pp, vpp disagreeing, V
// placement without exactly 2*pp stages) point at the end of the layout text with a caret;
// errors about the flags alone (pp or vpp below 1) name "--pp" / "--vpp".
Placement place_layout(const Layout& layout, int pp, std::optional<int> vpp, PlacementStyle style);

// Model rules for a layout that describes a whole model: exactly one E and it is the first layer;
// exactly one L and it is the last layer; no t after an m; if num_layers is given, the number of
// t equals it. The rules say nothing of a model's own symbols (they may stand anywhere between E
// and L). Errors point at the offending symbol's column.
void check_model(const Layout& layout, std::optional<int> num_layers = std::nullopt);

// The symbols of the model's own (not E, t, m, L) that `layout` uses, in order of first use.
std::string own_symbols(const Layout& layout);

// "E t t t" or "(empty)"
std::string stage_symbols(const std::vector<LayerKind>& stage);

}  // namespace ppc
