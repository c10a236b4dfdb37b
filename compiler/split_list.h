// The items of a comma-separated list given on the command line (--recompute's rules,
// --microbatches' counts): one home for the split, so that every list flag agrees on it.
#pragma once
#include <string_view>
#include <vector>

namespace ppc {

// `text` cut at every `separator`: n separators give n + 1 items, empty ones included (the caller
// says what an empty item means); the items view `text`, which must outlive them.
inline std::vector<std::string_view> split_list(std::string_view text, char separator = ',') {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(separator, start);
    out.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

}  // namespace ppc
