// docs/architecture.md names the files a reader needs: every one of them must exist. A name is a
// path in backquotes (`compiler/verify.cpp`, `emit_layout*.cpp`, `tests/compiler/golden/`), a
// link target (library.md, relative to docs/) or a bare path with a folder (docs/schedules.md).
// A name without its folder (`layout.h` beside `compiler/layout_parse.cpp`) is found in the
// folders of the full paths of its table row or paragraph, or of its section, or their parents.
// Placeholders (`runtime/transport/<name>.cpp`) are not names.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/compiler/test_util.h"

namespace {

namespace fs = std::filesystem;

// `pattern` (a path relative to the repository, '*' matching within one name) names something
// that exists.
bool exists_in_repo(const std::string& pattern) {
  const fs::path root = pptest::source_path("");
  if (pattern.find('*') == std::string::npos) return fs::exists(root / pattern);
  const fs::path p(pattern);
  const fs::path dir = root / p.parent_path();
  if (!fs::is_directory(dir)) return false;
  // '*' becomes ".*" and the rest is matched as written.
  std::string re;
  for (char c : p.filename().string())
    re += c == '*' ? std::string(".*")
                   : std::regex_replace(std::string(1, c), std::regex(R"([.^$|()\[\]{}+?\\])"),
                                        R"(\$&)");
  const std::regex name(re);
  for (const auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), name)) return true;
  return false;
}

bool looks_like_path(const std::string& s) {
  static const std::regex file(
      R"(^[A-Za-z0-9_.*/<>-]+\.(cpp|h|md|g4|sh|cmake|in|txt|py|json|layout|\*)$)");
  static const std::regex folder(R"(^[A-Za-z0-9_.<>-]+(/[A-Za-z0-9_.<>-]+)*/$)");
  static const std::regex glob(R"(^([A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]*\*[A-Za-z0-9_.*-]*$)");
  return std::regex_match(s, file) || std::regex_match(s, folder) || std::regex_match(s, glob);
}

struct Name {
  std::string text;
  int line;
  bool link;  // a link target: relative to docs/
};

TEST(ArchitectureDoc, EveryPathItNamesExists) {
  std::ifstream in(pptest::source_path("docs/architecture.md"));
  ASSERT_TRUE(in) << "docs/architecture.md";
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);

  static const std::regex quoted("`([^`]+)`");
  static const std::regex link(R"(\]\(([^)#]+)(#[^)]*)?\))");
  static const std::regex bare(R"((^|[\s(])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.*-]+\.[a-z]+)\b)");
  // Blocks: a table row, a bullet with its continuation lines, a paragraph; sections: "## ".
  std::vector<std::vector<Name>> blocks;
  std::vector<size_t> section_of;  // per block
  size_t section = 0;
  bool open = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.rfind("## ", 0) == 0) ++section;
    const bool starts = l.empty() || l[0] == '|' || l.rfind("- ", 0) == 0 || l[0] == '#';
    if (starts || !open) {
      blocks.emplace_back();
      section_of.push_back(section);
    }
    open = !l.empty() && l[0] != '#';
    // The text outside backquotes, for bare paths and links.
    std::string outside = std::regex_replace(l, quoted, " ");
    for (std::sregex_iterator it(l.begin(), l.end(), quoted), end; it != end; ++it)
      if (looks_like_path((*it)[1]))
        blocks.back().push_back({(*it)[1], static_cast<int>(i + 1), false});
    for (std::sregex_iterator it(outside.begin(), outside.end(), link), end; it != end; ++it)
      if ((*it)[1].str().find("://") == std::string::npos)
        blocks.back().push_back({(*it)[1], static_cast<int>(i + 1), true});
    const std::string no_links = std::regex_replace(outside, link, " ");
    for (std::sregex_iterator it(no_links.begin(), no_links.end(), bare), end; it != end; ++it)
      blocks.back().push_back({(*it)[2], static_cast<int>(i + 1), false});
  }

  // The folders a name without its own may be in: those of the full paths of its block, then of
  // its section, and their parents.
  auto folders_of = [&](const std::vector<Name>& names, std::set<std::string>& out) {
    for (const Name& n : names) {
      if (n.link || n.text.find('/') == std::string::npos) continue;
      // The folder it names or is in (a placeholder's: the one before it).
      std::string folder = n.text.substr(0, std::min(n.text.find('<'), n.text.size()));
      folder = folder.substr(0, folder.rfind('/'));
      if (!fs::is_directory(pptest::source_path(folder))) continue;
      for (fs::path p(folder); !p.empty(); p = p.parent_path()) out.insert(p.string());
    }
  };
  int checked = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::set<std::string> near, in_section;
    folders_of(blocks[b], near);
    for (size_t o = 0; o < blocks.size(); ++o)
      if (section_of[o] == section_of[b]) folders_of(blocks[o], in_section);
    for (const Name& n : blocks[b]) {
      if (n.text.find('<') != std::string::npos) continue;  // a placeholder
      bool found = n.link ? exists_in_repo("docs/" + n.text) : exists_in_repo(n.text);
      for (const auto* folders : {&near, &in_section})
        for (const std::string& f : *folders) found = found || exists_in_repo(f + "/" + n.text);
      EXPECT_TRUE(found) << "docs/architecture.md:" << n.line << ": " << n.text
                         << " names no file of the repository";
      ++checked;
    }
  }
  EXPECT_GT(checked, 80);  // the names of both pipelines' tables and the lists below them
}

}  // namespace
