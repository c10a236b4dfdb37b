#include "compiler/diagnostic.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

namespace ppc {

namespace {

// A line as shown under an error: every character takes one column, as ANTLR counts them, so
// that the caret lines up. Tabs become spaces; other control characters and invalid bytes '?'.
std::string display_line(std::string_view raw) {
  if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    char32_t cp = 0;
    const size_t len = decode_utf8(raw, i, &cp);
    if (len == 0) {
      out += '?';
      ++i;
    } else if (cp == '\t') {
      out += ' ';
      i += len;
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      out += '?';
      i += len;
    } else {
      out.append(raw.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace

size_t decode_utf8(std::string_view text, size_t i, char32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len = 0;
  char32_t value = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  if (value < min || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  *cp = value;
  return len;
}

int char_count(std::string_view s) {
  int n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    char32_t cp = 0;
    const size_t len = decode_utf8(s, i, &cp);
    i += len == 0 ? 1 : len;
  }
  return n;
}

std::vector<std::string> display_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (true) {
    const size_t nl = text.find('\n', start);
    lines.push_back(display_line(
        text.substr(start, nl == std::string_view::npos ? text.size() - start : nl - start)));
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return lines;
}

SourceLocation location_in(std::string input, const std::vector<std::string>& lines, int line,
                           int column) {
  SourceLocation loc{std::move(input), line, column, ""};
  if (line >= 1 && static_cast<size_t>(line) <= lines.size())
    loc.source_line = lines[static_cast<size_t>(line - 1)];
  return loc;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out += ch;
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

std::string UserError::format() const {
  std::string out;
  if (!where_.input.empty()) {
    out += where_.input;
    if (where_.line > 0) out += fmt::format(":{}", where_.line);
    if (where_.column > 0) out += fmt::format(":{}", where_.column);
    out += ": ";
  }
  out += message_;
  if (!where_.source_line.empty()) {
    // A long line (a CSV row holds a rank's whole order) is shown as a window around the column.
    constexpr size_t kWidth = 100;
    const std::string_view line = where_.source_line;
    const size_t at = where_.column > 0 ? static_cast<size_t>(where_.column - 1) : 0;
    size_t begin = 0;
    if (line.size() > kWidth && at > kWidth / 2)
      begin = std::min(at - kWidth / 2, line.size() - kWidth);
    const std::string_view shown = line.substr(begin, kWidth);
    const std::string_view before = begin > 0 ? "..." : "";
    out += "\n  ";
    out += before;
    out += shown;
    if (begin + shown.size() < line.size()) out += "...";
    if (where_.column > 0) {
      out += "\n  ";
      out += std::string(before.size() + at - begin, ' ');
      out += '^';
    }
  }
  return out;
}

void internal_error(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("internal error at {}:{}: {}", file, line, what));
}

}  // namespace ppc
