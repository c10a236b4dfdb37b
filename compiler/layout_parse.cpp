// The layout-language parser (grammar/Layout.g4).
//
// text -> checks on the raw bytes (size, UTF-8) -> tokens (the generated ANTLR lexer) -> checks on
// the token stream (unknown symbols, parentheses, nesting depth, empty input) -> parse tree (the
// generated ANTLR parser, whose syntax errors become UserErrors) -> checks on counts and on the
// expanded size -> expansion into stages.
//
// The token checks run before the parser so that its recursive descent never sees more than
// kMaxLayoutNesting nested groups, and the size checks run before the expansion so that it never
// builds more than kMaxLayoutItems layers and separators. ANTLR never prints anything: its console
// listeners are removed and the first syntax error is thrown as a UserError.
#include <antlr4-runtime.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "LayoutLexer.h"
#include "LayoutParser.h"
#include "compiler/layout.h"

namespace ppc {

namespace {

using antlr4::Token;
using ppgrammar::LayoutLexer;
using ppgrammar::LayoutParser;

// --- Positions -------------------------------------------------------------------------------

// The text being parsed, for building error locations.
struct Source {
  std::string input;               // name for messages
  std::vector<std::string> lines;  // display lines

  SourceLocation at(int line, int column) const { return location_in(input, lines, line, column); }
  SourceLocation at(const Token* t) const {
    return at(static_cast<int>(t->getLine()), static_cast<int>(t->getCharPositionInLine()) + 1);
  }
  [[noreturn]] void fail(const Token* t, std::string message) const {
    throw UserError(std::move(message), at(t));
  }
};

// --- Messages ---------------------------------------------------------------------------------

constexpr const char* kLayerList = "the layers are E (embedding), t (decoder), m (MTP), L (loss)";

// "'x'" for a printable character, "'é' (U+00E9)" for other printable ones, "U+0001" otherwise.
std::string describe_char(std::string_view utf8) {
  char32_t cp = 0;
  if (utf8.empty() || decode_utf8(utf8, 0, &cp) == 0) return "an invalid character";
  if (cp >= 0x20 && cp < 0x7F) return fmt::format("'{}'", static_cast<char>(cp));
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || cp == 0xFEFF)
    return fmt::format("U+{:04X}", static_cast<uint32_t>(cp));
  return fmt::format("'{}' (U+{:04X})", utf8, static_cast<uint32_t>(cp));
}

std::string unknown_symbol_message(const Token* t, bool is_file, std::string_view own) {
  const std::string text = t->getText();
  std::string msg = fmt::format("unknown symbol {}", describe_char(text));
  if (text == "#") {
    msg += is_file ? "" : "; '#' comments are only allowed in layout files";
    return msg;
  }
  const char* hint = nullptr;
  if (text == "T") hint = "t";
  if (text == "e") hint = "E";
  if (text == "l") hint = "L";
  if (text == "M") hint = "m";
  if (hint != nullptr) msg += fmt::format(" (did you mean '{}'?)", hint);
  msg += "; ";
  msg += kLayerList;
  if (!own.empty()) {  // (none declared: the message is as it was before a model could declare)
    msg += ", and the model's own";
    for (char c : own) msg += fmt::format(" '{}'", c);
  }
  return msg;
}

std::string describe_token(const Token* t) {
  if (t->getType() == Token::EOF) return "the end of the layout";
  return fmt::format("'{}'", t->getText());
}

// --- ANTLR error listener ---------------------------------------------------------------------

// Turns the first syntax error into a UserError, with a message chosen from the offending token
// and the one before it (the checks on the token stream have already ruled out unknown symbols
// and unbalanced parentheses, so the remaining errors are about '*', counts and groups).
class ThrowingErrorListener : public antlr4::BaseErrorListener {
 public:
  ThrowingErrorListener(const Source& src, antlr4::BufferedTokenStream* tokens)
      : src_(src), tokens_(tokens) {}

  void syntaxError(antlr4::Recognizer* /*recognizer*/, Token* offending, size_t line,
                   size_t char_position, const std::string& msg,
                   std::exception_ptr /*e*/) override {
    if (offending == nullptr || tokens_ == nullptr) {
      throw UserError(fmt::format("syntax error: {}", msg),
                      src_.at(static_cast<int>(line), static_cast<int>(char_position) + 1));
    }
    const size_t index = offending->getTokenIndex();
    const Token* prev = index > 0 && index != kNoIndex ? tokens_->get(index - 1) : nullptr;
    const size_t type = offending->getType();
    const size_t prev_type = prev != nullptr ? prev->getType() : Token::INVALID_TYPE;

    if (prev_type == LayoutParser::STAR && type != LayoutParser::COUNT)
      src_.fail(prev, "'*' must be followed by a count, as in 't*4'");
    if (type == LayoutParser::STAR) {
      if (prev == nullptr || prev_type == LayoutParser::LPAREN)
        src_.fail(offending, "'*' has nothing before it to repeat");
      if (prev_type == LayoutParser::COUNT)
        src_.fail(offending,
                  "'*' after a count: counts cannot be chained; repeat a group instead, as in "
                  "'(t*2|)*3'");
    }
    if (prev_type == LayoutParser::LPAREN && type == LayoutParser::RPAREN)
      src_.fail(prev, "empty group '()': a group needs at least one layer or '|'");
    if (prev_type == LayoutParser::RPAREN && type != LayoutParser::STAR)
      src_.fail(prev, "a group must be followed by a count, as in '(tt|)*4'");
    if (type == LayoutParser::COUNT)
      src_.fail(offending,
                fmt::format("count '{}' without '*' before it (repeat with '*', as in 't*4')",
                            offending->getText()));
    src_.fail(offending, fmt::format("unexpected {}", describe_token(offending)));
  }

 private:
  static constexpr size_t kNoIndex = static_cast<size_t>(-1);
  const Source& src_;
  antlr4::BufferedTokenStream* tokens_;
};

// --- Checks on the token stream ---------------------------------------------------------------

void check_tokens(const Source& src, const std::vector<Token*>& tokens, bool is_file,
                  std::string_view own) {
  std::vector<const Token*> open;  // unclosed '(' tokens
  bool any = false;
  for (const Token* t : tokens) {
    switch (t->getType()) {
      case Token::EOF:
        break;
      case LayoutParser::UNKNOWN:
        src.fail(t, unknown_symbol_message(t, is_file, own));
      case LayoutParser::OWN:
        if (own.find(t->getText().front()) == std::string_view::npos)
          src.fail(t, unknown_symbol_message(t, is_file, own));
        break;
      case LayoutParser::LPAREN:
        open.push_back(t);
        if (open.size() > static_cast<size_t>(kMaxLayoutNesting))
          src.fail(
              t, fmt::format("groups nested too deeply (more than {} levels)", kMaxLayoutNesting));
        break;
      case LayoutParser::RPAREN:
        if (open.empty()) src.fail(t, "unmatched ')': no '(' before it");
        open.pop_back();
        break;
      default:
        break;
    }
    if (t->getType() != Token::EOF) any = true;
  }
  if (!open.empty()) src.fail(open.back(), "unmatched '(': no ')' closes it");
  if (!any) {
    throw UserError(is_file ? "layout file has no layout, only comments and blank lines"
                            : "empty layout: write at least one layer or '|'",
                    src.at(1, 1));
  }
}

// --- Counts, sizes and expansion --------------------------------------------------------------

using Items = std::vector<LayoutParser::ItemContext*>;

// Builds the stages and their source positions.
class StageBuilder {
 public:
  explicit StageBuilder(Layout& out) : out_(out) { new_stage(); }

  void layer(LayerKind kind, int line, int column) {
    mark(line, column);
    out_.stages.back().push_back(kind);
    out_.layer_lines.back().push_back(line);
    out_.layer_columns.back().push_back(column);
  }
  void separator(int line, int column) {
    mark(line, column);
    new_stage();
  }
  // A stage with nothing in it at the end of the input starts there.
  void finish(int line, int column) { mark(line, column); }

 private:
  void new_stage() {
    out_.stages.emplace_back();
    out_.layer_lines.emplace_back();
    out_.layer_columns.emplace_back();
    out_.stage_lines.push_back(0);
    out_.stage_columns.push_back(0);
    started_ = false;
  }
  void mark(int line, int column) {
    if (started_) return;
    out_.stage_lines.back() = line;
    out_.stage_columns.back() = column;
    started_ = true;
  }

  Layout& out_;
  bool started_ = false;
};

class Expander {
 public:
  Expander(const Source& src, StageBuilder& builder) : src_(src), builder_(builder) {}

  // Checks every count and the expanded size (layers plus separators) of `items`, left to right,
  // and returns that size, which is at most kMaxLayoutItems.
  int64_t measure(const Items& items) const {
    int64_t total = 0;
    for (LayoutParser::ItemContext* item : items) {
      total += measure(item);
      if (total > kMaxLayoutItems) src_.fail(item->getStart(), too_large_message());
    }
    return total;
  }

  void expand(const Items& items) {
    for (LayoutParser::ItemContext* item : items) expand(item);
  }

 private:
  static std::string too_large_message() {
    return fmt::format(
        "layout is too large: it expands to more than {} layers and stage "
        "separators",
        kMaxLayoutItems);
  }

  // The value of a count (commas ignored), or kMaxLayoutItems + 1 if it is larger.
  static int64_t count_value(const Token* count) {
    int64_t value = 0;
    for (char c : count->getText()) {
      if (c < '0' || c > '9') continue;
      value = value * 10 + (c - '0');
      if (value > kMaxLayoutItems) return kMaxLayoutItems + 1;
    }
    return value;
  }

  int64_t checked_count(LayoutParser::RepeatContext* repeat) const {
    const Token* count = repeat->COUNT()->getSymbol();
    const int64_t value = count_value(count);
    if (value == 0)
      src_.fail(count, fmt::format("count must be at least 1, got '{}'", count->getText()));
    if (value > kMaxLayoutItems)
      src_.fail(count, fmt::format("count {} is too large (at most {})", count->getText(),
                                   kMaxLayoutItems));
    return value;
  }

  int64_t measure(LayoutParser::ItemContext* item) const {
    int64_t size = 1;
    LayoutParser::RepeatContext* repeat = nullptr;
    if (auto* layer = dynamic_cast<LayoutParser::LayerItemContext*>(item)) {
      repeat = layer->repeat();
    } else if (auto* sep = dynamic_cast<LayoutParser::SeparatorItemContext*>(item)) {
      repeat = sep->repeat();
    } else if (auto* group = dynamic_cast<LayoutParser::GroupItemContext*>(item)) {
      size = measure(group->group()->item());
      repeat = group->repeat();
    } else {
      PPC_INTERNAL_ASSERT(false, "unknown layout item");
    }
    if (repeat == nullptr) return size;
    size *= checked_count(repeat);  // both factors are at most kMaxLayoutItems: no overflow
    if (size > kMaxLayoutItems) src_.fail(repeat->COUNT()->getSymbol(), too_large_message());
    return size;
  }

  static LayerKind kind_of(const Token* symbol) {
    switch (symbol->getType()) {
      case LayoutParser::EMBEDDING:
        return LayerKind::Embedding;
      case LayoutParser::DECODER:
        return LayerKind::Decoder;
      case LayoutParser::MTP:
        return LayerKind::Mtp;
      case LayoutParser::LOSS:
        return LayerKind::Loss;
      case LayoutParser::OWN:
        return own_layer(symbol->getText().front());
      default:
        break;
    }
    PPC_INTERNAL_ASSERT(false, "unknown layer token");
    return LayerKind::Decoder;
  }

  static int64_t repeats(LayoutParser::RepeatContext* repeat) {
    return repeat == nullptr ? 1 : count_value(repeat->COUNT()->getSymbol());
  }

  void expand(LayoutParser::ItemContext* item) {
    if (auto* layer = dynamic_cast<LayoutParser::LayerItemContext*>(item)) {
      const Token* symbol = layer->layer()->getStart();
      const LayerKind kind = kind_of(symbol);
      const int line = static_cast<int>(symbol->getLine());
      const int column = static_cast<int>(symbol->getCharPositionInLine()) + 1;
      for (int64_t i = repeats(layer->repeat()); i > 0; --i) builder_.layer(kind, line, column);
    } else if (auto* sep = dynamic_cast<LayoutParser::SeparatorItemContext*>(item)) {
      const Token* bar = sep->BAR()->getSymbol();
      const int line = static_cast<int>(bar->getLine());
      const int column = static_cast<int>(bar->getCharPositionInLine()) + 1;
      for (int64_t i = repeats(sep->repeat()); i > 0; --i) builder_.separator(line, column);
    } else if (auto* group = dynamic_cast<LayoutParser::GroupItemContext*>(item)) {
      const Items inner = group->group()->item();
      for (int64_t i = repeats(group->repeat()); i > 0; --i) expand(inner);
    } else {
      PPC_INTERNAL_ASSERT(false, "unknown layout item");
    }
  }

  const Source& src_;
  StageBuilder& builder_;
};

// The layout text of a file: each line without its comments, trimmed; blank lines dropped; the
// rest joined by single spaces (which, like line breaks, only separate tokens). A comment ends
// where the lexer ends it: at a '\n' or a '\r' (after a lone '\r' the line goes on).
std::string strip_comments(std::string_view text) {
  std::string out;
  std::string kept;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view raw = text.substr(start, nl - start);
    kept.clear();
    for (size_t i = 0; i < raw.size();) {
      const size_t hash = raw.find('#', i);
      kept.append(raw.substr(i, hash == std::string_view::npos ? raw.size() - i : hash - i));
      if (hash == std::string_view::npos) break;
      i = raw.find('\r', hash);
    }
    const std::string_view line = kept;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first != std::string_view::npos) {
      const size_t last = line.find_last_not_of(" \t\r");
      if (!out.empty()) out += ' ';
      out.append(line.substr(first, last - first + 1));
    }
    start = nl + 1;
  }
  return out;
}

Layout parse_text(std::string_view text, const std::string& input_name, bool is_file,
                  std::string_view own) {
  Source src{input_name, display_lines(text)};
  if (text.size() > static_cast<size_t>(kMaxLayoutInputBytes)) {
    throw UserError(
        fmt::format("layout is too long: {} bytes (at most {})", text.size(), kMaxLayoutInputBytes),
        src.at(1, 1));
  }
  // ANTLR's runtime throws on invalid UTF-8: report it ourselves, with its position.
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t len = decode_utf8(text, i, &cp);
    if (len == 0) {
      const int column = char_count(text.substr(line_start, i - line_start)) + 1;
      throw UserError(
          fmt::format("invalid UTF-8 byte 0x{:02X}", static_cast<unsigned char>(text[i])),
          src.at(line, column));
    }
    if (cp == '\n') ++line, line_start = i + 1;
    i += len;
  }

  Layout layout;
  layout.source = is_file ? strip_comments(text) : std::string(text);
  layout.input = input_name;
  layout.input_lines = src.lines;
  try {
    antlr4::ANTLRInputStream chars(text.data(), text.size());
    LayoutLexer lexer(&chars);
    lexer.allowComments = is_file;
    ThrowingErrorListener lexer_errors(src, nullptr);
    lexer.removeErrorListeners();
    lexer.addErrorListener(&lexer_errors);
    antlr4::CommonTokenStream tokens(&lexer);
    tokens.fill();
    const std::vector<Token*> all = tokens.getTokens();
    check_tokens(src, all, is_file, own);

    LayoutParser parser(&tokens);
    ThrowingErrorListener parser_errors(src, &tokens);
    parser.removeErrorListeners();
    parser.addErrorListener(&parser_errors);
    LayoutParser::LayoutContext* tree = parser.layout();
    PPC_INTERNAL_ASSERT(parser.getNumberOfSyntaxErrors() == 0, "unreported syntax error");

    const Items items = tree->item();
    StageBuilder builder(layout);
    Expander expander(src, builder);
    expander.measure(items);
    expander.expand(items);

    // The end of the layout: just after its last token (the one before EOF).
    const Token* last = all.size() >= 2 ? all[all.size() - 2] : nullptr;
    PPC_INTERNAL_ASSERT(last != nullptr, "non-empty layout without tokens");
    layout.end_line = static_cast<int>(last->getLine());
    layout.end_column =
        static_cast<int>(last->getCharPositionInLine()) + 1 + char_count(last->getText());
    builder.finish(layout.end_line, layout.end_column);
  } catch (const UserError&) {
    throw;
  } catch (const InternalError&) {
    throw;
  } catch (const std::exception& e) {
    // Not expected (the input was checked above), but a user's text must never escape as another
    // kind of exception.
    throw UserError(fmt::format("cannot parse the layout: {}", e.what()), src.at(1, 1));
  }
  return layout;
}

}  // namespace

Layout parse_layout(std::string_view text, const std::string& input_name,
                    std::string_view own_symbols) {
  return parse_text(text, input_name, /*is_file=*/false, own_symbols);
}

Layout parse_layout_file(const std::string& path, std::string_view own_symbols) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw UserError("cannot read layout file: it is a directory", input_location(path));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UserError(fmt::format("cannot open layout file: {}", std::strerror(errno)),
                    input_location(path));
  std::string text;
  char buffer[65536];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > static_cast<size_t>(kMaxLayoutInputBytes))
      throw UserError(
          fmt::format("layout file is too large (more than {} bytes)", kMaxLayoutInputBytes),
          input_location(path));
  }
  if (in.bad()) throw UserError("cannot read layout file: read error", input_location(path));
  return parse_layout_file_text(text, path, own_symbols);
}

Layout parse_layout_file_text(std::string_view text, const std::string& input_name,
                              std::string_view own_symbols) {
  // A UTF-8 byte order mark is not part of the layout.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  return parse_text(text, input_name, /*is_file=*/true, own_symbols);
}

}  // namespace ppc
