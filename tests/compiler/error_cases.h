// Bad inputs and the messages they must give, kept as text in tests/compiler/errors/*.txt, so
// that a reader finds every message of a kind in one place and sees it as a user does.
//
// A file holds cases separated by blank lines ('#' lines are comments). A case is "key: value"
// lines, the keys being the test's (the input and its parameters; a key may repeat), then
// "error: " and the message's first line, then "| " and each further line of the message. A test
// compares as many lines of the message as the case gives. Values are C-escaped where the input
// needs it (\n, \r, \t, \\, \xNN); messages are written as they are printed.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "compiler/diagnostic.h"
#include "tests/compiler/test_util.h"

namespace pptest {

struct ErrorCase {
  std::string where;  // "file:line" of the case, for failure messages
  std::vector<std::pair<std::string, std::string>> fields;  // in order, unescaped
  std::vector<std::string> error;                           // the message's lines

  // The value of `key` (the first, if it repeats); throws if the case has none.
  const std::string& operator[](const std::string& key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return v;
    throw std::runtime_error(where + ": no '" + key + "'");
  }
  bool has(const std::string& key) const {
    for (const auto& f : fields)
      if (f.first == key) return true;
    return false;
  }
  std::vector<std::string> all(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& [k, v] : fields)
      if (k == key) out.push_back(v);
    return out;
  }
};

inline std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    switch (const char c = s[++i]) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'x':
        out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
        i += 2;
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The cases of tests/compiler/errors/NAME.txt.
inline std::vector<ErrorCase> error_cases(const std::string& name) {
  const std::string rel = "tests/compiler/errors/" + name + ".txt";
  std::istringstream in(slurp(source_path(rel)));
  std::vector<ErrorCase> cases;
  bool open = false;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) {
      open = false;
      continue;
    }
    if (line[0] == '#') continue;
    if (!open) cases.push_back({rel + ":" + std::to_string(n), {}, {}});
    open = true;
    ErrorCase& c = cases.back();
    if (line.rfind("| ", 0) == 0 && !c.error.empty()) {
      c.error.push_back(line.substr(2));
      continue;
    }
    if (line.back() == ':') line += ' ';  // an empty value
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) throw std::runtime_error(rel + ":" + std::to_string(n));
    const std::string key = line.substr(0, colon), value = line.substr(colon + 2);
    if (key == "error")
      c.error.push_back(value);
    else
      c.fields.emplace_back(key, unescape(value));
  }
  if (cases.empty()) throw std::runtime_error(rel + ": no cases");
  return cases;
}

// The message (UserError::format()) of what `f` throws; "(no error)" if it throws nothing.
template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const ppc::UserError& e) {
    return e.format();
  }
  return "(no error)";
}

// `message` begins with the lines the case gives (all of them, when it gives every line).
inline void expect_message(const ErrorCase& c, const std::string& message) {
  std::string expected;
  for (size_t i = 0; i < c.error.size(); ++i) expected += (i ? "\n" : "") + c.error[i];
  std::string got;
  std::istringstream lines(message);
  size_t i = 0;
  for (std::string line; i < c.error.size() && std::getline(lines, line); ++i)
    got += (i ? "\n" : "") + line;
  EXPECT_EQ(got, expected) << c.where << "\nthe whole message:\n" << message;
}

}  // namespace pptest
