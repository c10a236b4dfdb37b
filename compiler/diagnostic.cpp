#include "compiler/diagnostic.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

namespace ppc {

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
