// A model of Megatron-LM's layout parser (PipelineParallelLayerLayout.parse_str_to_list), for
// differential tests of the layout language and of the layout strings ppcompile writes.
#pragma once

#include <algorithm>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace pptest {

// Megatron-LM's parse_str_to_list, modelled from its documented behaviour: remove every comma;
// replace each "(...)*N" whose body holds no ')' (leftmost first, without rescanning); then
// replace each "X*N" for any single character X; then split on '|' and require E, t, m or L.
// Returns nullopt when Megatron rejects the string; sets *too_big when it would build a huge list.
inline std::optional<std::vector<std::string>> megatron_model(std::string s, bool* too_big) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  auto substitute = [&](const std::regex& pattern) {
    std::string out;
    auto begin = std::sregex_iterator(s.begin(), s.end(), pattern);
    size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      const std::smatch& m = *it;
      out += s.substr(last, static_cast<size_t>(m.position(0)) - last);
      const std::string digits = m.str(2);
      if (digits.size() > 6) {
        *too_big = true;
        return;
      }
      const int n = std::stoi(digits);
      for (int k = 0; k < n; ++k) out += m.str(1);
      if (out.size() > 200000) {
        *too_big = true;
        return;
      }
      last = static_cast<size_t>(m.position(0) + m.length(0));
    }
    out += s.substr(last);
    s = out;
  };
  substitute(std::regex(R"(\(([^)]+)\)\*(\d+))"));
  if (*too_big) return std::nullopt;
  substitute(std::regex(R"((.)\*(\d+))"));
  if (*too_big) return std::nullopt;
  std::vector<std::string> stages(1);
  for (char c : s) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E' || c == 't' || c == 'm' || c == 'L') {
      stages.back() += c;
    } else {
      return std::nullopt;
    }
  }
  return stages;
}

}  // namespace pptest
