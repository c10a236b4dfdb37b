// User-facing errors of the compiler library.
//
// A UserError is a mistake in what the user gave us (a layout, a flag, a CSV, a JSON plan). It
// carries where the mistake is: the input's name (e.g. "layout", a file name), optionally a line
// and a column, and the source line so that format() can draw a caret under the column. Tools
// catch UserError, print format() on stderr and exit with code 2.
//
// Bugs in the compiler itself are not UserErrors: they are reported with PPC_INTERNAL_ASSERT,
// which throws InternalError (tools exit 1 and ask for a bug report).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ppc {

struct SourceLocation {
  std::string input;        // "layout", "plan.json", "schedule.csv", "--pp", ...
  int line = 0;             // 1-based; 0 = unknown
  int column = 0;           // 1-based; 0 = unknown
  std::string source_line;  // text of the line, for the caret; empty = none
};

// A location that only names the input (a flag, a file), with no line or column.
inline SourceLocation input_location(std::string input) {
  return SourceLocation{std::move(input), 0, 0, ""};
}

class UserError : public std::runtime_error {
 public:
  explicit UserError(std::string message)
      : std::runtime_error(message), message_(std::move(message)) {}
  UserError(std::string message, SourceLocation where)
      : std::runtime_error(message), message_(std::move(message)), where_(std::move(where)) {}

  const std::string& message() const { return message_; }
  const SourceLocation& where() const { return where_; }

  // "layout:1:7: unknown symbol 'x'" followed, when a source line is known, by the line and a
  // caret under the column. The first line is always self-contained.
  std::string format() const;

 private:
  std::string message_;
  SourceLocation where_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void internal_error(const char* file, int line, const std::string& what);

// --- Source text as messages show it -------------------------------------------------------------

// Decodes the UTF-8 sequence at text[i]: returns its length (1 to 4) and sets *cp, or returns 0 if
// the bytes there are not valid UTF-8 (overlong forms, surrogates and values above U+10FFFF are
// invalid too).
size_t decode_utf8(std::string_view text, size_t i, char32_t* cp);
// Number of characters (code points; a byte of invalid UTF-8 counts as one) in `s`: the unit of
// columns and carets (and of ANTLR's columns).
int char_count(std::string_view s);
// The lines of `text` as shown under an error: every character takes one column, so that a caret
// lines up. Tabs become spaces; other control characters and invalid bytes '?'; a line's '\r' end
// is dropped.
std::vector<std::string> display_lines(std::string_view text);
// A location at `line` and `column` of the input named `input`, whose display lines are `lines`,
// with the text of that line when there is one (for the caret).
SourceLocation location_in(std::string input, const std::vector<std::string>& lines, int line,
                           int column);

// `text` from the user (a JSON key, a tensor name) as it may appear inside a one-line message:
// printable ASCII as is; a backslash, control characters, DEL and non-ASCII bytes as \xNN.
std::string printable(std::string_view text);

}  // namespace ppc

#define PPC_INTERNAL_ASSERT(cond, what)                                                       \
  do {                                                                                        \
    if (!(cond)) ::ppc::internal_error(__FILE__, __LINE__, std::string(#cond ": ") + (what)); \
  } while (0)
