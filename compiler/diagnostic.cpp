#include "compiler/diagnostic.h"

#include <fmt/format.h>

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
    out += "\n  ";
    out += where_.source_line;
    if (where_.column > 0) {
      out += "\n  ";
      out += std::string(static_cast<size_t>(where_.column - 1), ' ');
      out += '^';
    }
  }
  return out;
}

void internal_error(const char* file, int line, const std::string& what) {
  throw InternalError(fmt::format("internal error at {}:{}: {}", file, line, what));
}

}  // namespace ppc
