// Tests of the layout language: parsing (against Megatron-LM's own test cases and a reference
// model of its parser), errors and their carets, model checks, placement, layout files and the
// layouts shipped in layouts/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "tests/compiler/error_cases.h"
#include "tests/compiler/megatron_model.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

// --- Helpers ----------------------------------------------------------------------------------

using pptest::compact;

std::vector<std::string> repeated(const std::string& stage, int n) {
  return std::vector<std::string>(static_cast<size_t>(n), stage);
}

std::vector<std::string> concat(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// Runs `f`, which must throw a UserError, and returns it.
template <typename F>
UserError expect_user_error(F&& f, const std::string& context) {
  try {
    f();
  } catch (const UserError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": threw a non-UserError: " << e.what();
    return UserError("wrong exception");
  }
  ADD_FAILURE() << context << ": did not throw";
  return UserError("no exception");
}

UserError parse_error(const std::string& text) {
  return expect_user_error([&] { parse_layout(text); }, "parse_layout(\"" + text + "\")");
}

// The caret line of a formatted error must put '^' under the column. A line up to 100 characters
// is shown whole; a longer one as 100 characters around the column, "..." marking what is cut.
void expect_caret(const UserError& e) {
  const std::string f = e.format();
  const auto& where = e.where();
  ASSERT_GE(where.column, 1) << f;
  ASSERT_FALSE(where.source_line.empty()) << f;
  const std::string& line = where.source_line;
  if (line.size() <= 100) {
    const std::string expected =
        "\n  " + line + "\n  " + std::string(static_cast<size_t>(where.column - 1), ' ') + "^";
    EXPECT_NE(f.find(expected), std::string::npos) << f;
    return;
  }
  const size_t caret_start = f.rfind('\n'), shown_start = f.rfind('\n', caret_start - 1);
  ASSERT_NE(shown_start, std::string::npos) << f;
  std::string shown = f.substr(shown_start + 3, caret_start - shown_start - 3);  // after "\n  "
  const std::string caret = f.substr(caret_start + 3);
  ASSERT_FALSE(caret.empty()) << f;
  ASSERT_EQ(caret.find_first_not_of(' '), caret.size() - 1) << f;
  ASSERT_EQ(caret.back(), '^') << f;
  size_t offset = 0;  // where `shown` starts in the line
  if (shown.rfind("...", 0) == 0) {
    shown.erase(0, 3);
    offset = 3;
  }
  if (shown.size() >= 3 && shown.compare(shown.size() - 3, 3, "...") == 0 &&
      line.find(shown) == std::string::npos)
    shown.resize(shown.size() - 3);
  ASSERT_LE(shown.size(), 100u) << f;
  const size_t at = caret.size() - 1 - offset;  // the caret's index in `shown`
  ASSERT_LT(at, shown.size()) << f;
  // `shown` is the part of the line that puts the caret's character at the column.
  const size_t begin = static_cast<size_t>(where.column - 1) - at;
  EXPECT_EQ(line.substr(begin, shown.size()), shown) << f;
}

// --- Megatron-LM's test cases -----------------------------------------------------------------

struct MegatronCase {
  std::string text;
  int pp;
  std::vector<std::string> stages;
  int vpp;
  int decoder_layers;
};

// The layout strings of Megatron-LM's unit tests for its layout parser, with the stage lists those
// tests expect (written there as lists of layer-type names).
std::vector<MegatronCase> megatron_cases() {
  return {
      {"Et|t*4|t|tL", 2, {"Et", "tttt", "t", "tL"}, 2, 7},
      {"E|t*6|t|L", 2, {"E", "tttttt", "t", "L"}, 2, 7},
      {"E|t|t*2|t||(t|)*2,t*2,L", 4, {"E", "t", "tt", "t", "", "t", "t", "ttL"}, 2, 8},
      {"Et*3|(tt|)*29,m|L", 8, concat({{"Ettt"}, repeated("tt", 29), {"m", "L"}}), 4, 61},
      {"Et*3|(tt|)*29,m|L", 16, concat({{"Ettt"}, repeated("tt", 29), {"m", "L"}}), 2, 61},
      {"Et*3|(tt|)*13,m|L", 8, concat({{"Ettt"}, repeated("tt", 13), {"m", "L"}}), 2, 29},
      {"Et*2|(tt|)*29,t|mL", 16, concat({{"Ett"}, repeated("tt", 29), {"t", "mL"}}), 2, 61},
      {"E|t|tt|t||t|t|ttL", 4, {"E", "t", "tt", "t", "", "t", "t", "ttL"}, 2, 8},
      // The example in the docstring of Megatron's parser.
      {"Ettt|(tt|)*29,m|L", 16, concat({{"Ettt"}, repeated("tt", 29), {"m", "L"}}), 2, 61},
      // A layout with a single loss stage from its loss-split tests.
      {"E|t|t|m|m|m|L", 7, {"E", "t", "t", "m", "m", "m", "L"}, 1, 2},
  };
}

TEST(LayoutMegatron, ParsesLikeMegatron) {
  for (const auto& c : megatron_cases()) {
    SCOPED_TRACE(c.text + " at pp " + std::to_string(c.pp));
    const Layout layout = parse_layout(c.text);
    EXPECT_EQ(compact(layout), c.stages);
    EXPECT_EQ(layout.num_stages(), static_cast<int>(c.stages.size()));
    EXPECT_EQ(layout.source, c.text);
    EXPECT_EQ(layout.count(LayerKind::Decoder), c.decoder_layers);
    EXPECT_EQ(layout.count(LayerKind::Embedding), 1);
    EXPECT_EQ(layout.count(LayerKind::Loss), 1);
    EXPECT_NO_THROW(check_model(layout, c.decoder_layers));
    EXPECT_NO_THROW(check_model(layout));

    const Placement p = place_layout(layout, c.pp, std::nullopt, PlacementStyle::Loop);
    EXPECT_EQ(p.pp, c.pp);
    EXPECT_EQ(p.vpp, c.vpp);
    EXPECT_EQ(p.num_stages(), layout.num_stages());
    EXPECT_EQ(place_layout(layout, c.pp, c.vpp, PlacementStyle::Loop), p);
    // Megatron's 2-D layout: rank r's virtual stage v is stage v * pp + r.
    ASSERT_EQ(p.rank_stages.size(), static_cast<size_t>(c.pp));
    for (int r = 0; r < c.pp; ++r) {
      ASSERT_EQ(p.rank_stages[static_cast<size_t>(r)].size(), static_cast<size_t>(c.vpp));
      for (int v = 0; v < c.vpp; ++v) {
        const int s = v * c.pp + r;
        EXPECT_EQ(p.rank_stages[static_cast<size_t>(r)][static_cast<size_t>(v)], s);
        EXPECT_EQ(p.stage_rank[static_cast<size_t>(s)], r);
        EXPECT_EQ(p.stage_chunk[static_cast<size_t>(s)], v);
      }
    }
  }
}

// Megatron's layer-number test: with "E|t|tt|t||t|t|ttL" at pp 4, vpp 2, decoder layers are
// numbered in stage order, so rank r, virtual stage v holds these 1-based layer numbers.
TEST(LayoutMegatron, DecoderLayerNumbersPerRankAndChunk) {
  const Layout layout = parse_layout("E|t|tt|t||t|t|ttL");
  const Placement p = place_layout(layout, 4, 2, PlacementStyle::Loop);
  std::vector<std::vector<int>> first_number;  // per stage: numbers of its decoder layers
  std::vector<std::vector<std::vector<int>>> numbers(4, std::vector<std::vector<int>>(2));
  int next = 1;
  for (int s = 0; s < layout.num_stages(); ++s) {
    for (LayerKind k : layout.stages[static_cast<size_t>(s)]) {
      if (k != LayerKind::Decoder) continue;
      numbers[static_cast<size_t>(p.stage_rank[static_cast<size_t>(s)])]
             [static_cast<size_t>(p.stage_chunk[static_cast<size_t>(s)])]
                 .push_back(next++);
    }
  }
  const std::vector<std::vector<std::vector<int>>> golden = {
      {{}, {}}, {{1}, {5}}, {{2, 3}, {6}}, {{4}, {7, 8}}};
  EXPECT_EQ(numbers, golden);
}

// Newer Megatron tests split the loss over several stages ("LL|LL"). Those strings parse the same
// here; check_model keeps the rule of exactly one loss (see docs/layout-language.md).
TEST(LayoutMegatron, LossSplitStringsParse) {
  const Layout split = parse_layout("E|t|t|m|m|m|LL|LL");
  EXPECT_EQ(compact(split), (std::vector<std::string>{"E", "t", "t", "m", "m", "m", "LL", "LL"}));
  EXPECT_EQ(parse_layout("E|(t|)*2m|m|m|LL|LL"), split);
  EXPECT_EQ(split.count(LayerKind::Loss), 4);
  EXPECT_EQ(split.count(LayerKind::Mtp), 3);
  EXPECT_EQ(place_layout(split, 8, std::nullopt, PlacementStyle::Loop).vpp, 1);
  const UserError e = expect_user_error([&] { check_model(split); }, "check_model(loss split)");
  EXPECT_EQ(first_line(e.format()),
            "layout:1:14: second loss 'L': a model has exactly one, as its last layer");
}

// The examples in the comments of Megatron's expansion patterns, with layer symbols for letters.
TEST(LayoutMegatron, GroupExpansionExamples) {
  // xy(ab|cd|ef)*2,pq -> xyab|cd|efab|cd|efpq
  EXPECT_EQ(compact(parse_layout("Et(tm|LE|mt)*2,LL")),
            (std::vector<std::string>{"Ettm", "LE", "mttm", "LE", "mtLL"}));
  // (ab)*3 -> ababab
  EXPECT_EQ(compact(parse_layout("(Et)*3")), (std::vector<std::string>{"EtEtEt"}));
  // ab,(cd|)*2 -> abcd|cd|
  EXPECT_EQ(compact(parse_layout("Et,(mL|)*2")), (std::vector<std::string>{"EtmL", "mL", ""}));
  // (|ab)*2,cd -> |ab|abcd
  EXPECT_EQ(compact(parse_layout("(|Et)*2,mL")), (std::vector<std::string>{"", "Et", "EtmL"}));
}

// --- The language -----------------------------------------------------------------------------

TEST(LayoutParse, StageSeparators) {
  EXPECT_EQ(compact(parse_layout("t")), (std::vector<std::string>{"t"}));
  EXPECT_EQ(compact(parse_layout("t|t")), (std::vector<std::string>{"t", "t"}));
  EXPECT_EQ(compact(parse_layout("t|")), (std::vector<std::string>{"t", ""}));
  EXPECT_EQ(compact(parse_layout("|t")), (std::vector<std::string>{"", "t"}));
  EXPECT_EQ(compact(parse_layout("t||t")), (std::vector<std::string>{"t", "", "t"}));
  EXPECT_EQ(compact(parse_layout("|")), (std::vector<std::string>{"", ""}));
}

TEST(LayoutParse, RepeatingASeparator) {
  // Megatron's "(.)\*(\d+)" repeats any single character, '|' included.
  EXPECT_EQ(compact(parse_layout("t|*3")), (std::vector<std::string>{"t", "", "", ""}));
  EXPECT_EQ(compact(parse_layout("E|*2L")), (std::vector<std::string>{"E", "", "L"}));
  EXPECT_EQ(compact(parse_layout("(|)*3")), (std::vector<std::string>{"", "", "", ""}));
}

TEST(LayoutParse, CommasAreCosmetic) {
  EXPECT_EQ(parse_layout("E,t,t|t,L"), parse_layout("Ett|tL"));
  EXPECT_EQ(parse_layout("t,*,3"), parse_layout("ttt"));
  EXPECT_EQ(parse_layout("(t,|),*2"), parse_layout("t|t|"));
  // As in Megatron, commas are removed before counts are read: "1,2" is 12.
  EXPECT_EQ(parse_layout("t*1,2").count(LayerKind::Decoder), 12);
  EXPECT_EQ(parse_layout("t*1,000").count(LayerKind::Decoder), 1000);
  EXPECT_EQ(parse_layout("t*007").count(LayerKind::Decoder), 7);
}

TEST(LayoutParse, RepeatsInsideGroups) {
  EXPECT_EQ(compact(parse_layout("(t*2|)*3")), (std::vector<std::string>{"tt", "tt", "tt", ""}));
  EXPECT_EQ(compact(parse_layout("(t|t*2)*2")), (std::vector<std::string>{"t", "ttt", "tt"}));
}

TEST(LayoutParse, NestedGroupsAndWhitespace) {
  EXPECT_EQ(compact(parse_layout("((t|)*2,m|)*3")),
            (std::vector<std::string>{"t", "t", "m", "t", "t", "m", "t", "t", "m", ""}));
  EXPECT_EQ(parse_layout(" E t * 3 |\t( t t | ) * 29 , m | L "), parse_layout("Et*3|(tt|)*29,m|L"));
  EXPECT_EQ(parse_layout("Et*3|\n(tt|)*29,\r\nm|L"), parse_layout("Et*3|(tt|)*29,m|L"));
  std::string deep;
  for (int i = 0; i < kMaxLayoutNesting; ++i) deep += '(';
  deep += 't';
  for (int i = 0; i < kMaxLayoutNesting; ++i) deep += ")*1";
  EXPECT_EQ(compact(parse_layout(deep)), (std::vector<std::string>{"t"}));
}

TEST(LayoutParse, Limits) {
  EXPECT_EQ(parse_layout("t*1000000").count(LayerKind::Decoder), 1000000);
  EXPECT_EQ(parse_layout("(t*999|)*1000").num_stages(), 1001);  // 999000 + 1000 separators
  EXPECT_EQ(first_line(parse_error("(t*1000|)*1000").format()),
            "layout:1:11: layout is too large: it expands to more than 1000000 layers and stage "
            "separators");
  EXPECT_EQ(first_line(parse_error("t*1000000t").format()),
            "layout:1:10: layout is too large: it expands to more than 1000000 layers and stage "
            "separators");
}

TEST(LayoutParse, Columns) {
  //                                     1234567890123456
  const Layout layout = parse_layout("Et*3|(tt|)*29,m|L");
  ASSERT_EQ(layout.num_stages(), 32);
  EXPECT_EQ(layout.stage_columns.size(), 32u);
  EXPECT_EQ(layout.layer_columns[0], (std::vector<int>{1, 2, 2, 2}));
  EXPECT_EQ(layout.stage_columns[0], 1);
  for (int s = 1; s <= 29; ++s) {
    EXPECT_EQ(layout.layer_columns[static_cast<size_t>(s)], (std::vector<int>{7, 8}));
    EXPECT_EQ(layout.stage_columns[static_cast<size_t>(s)], 7);
  }
  EXPECT_EQ(layout.layer_columns[30], (std::vector<int>{15}));
  EXPECT_EQ(layout.stage_columns[30], 15);
  EXPECT_EQ(layout.stage_columns[31], 17);
  EXPECT_EQ(layout.end_line, 1);
  EXPECT_EQ(layout.end_column, 18);
  for (int line : layout.stage_lines) EXPECT_EQ(line, 1);

  // An empty stage starts at the '|' that ends it; an empty last stage at the end of the text.
  const Layout empty = parse_layout("E||L|");
  EXPECT_EQ(empty.stage_columns, (std::vector<int>{1, 3, 4, 6}));
  const SourceLocation loc = empty.layer_location(2, 0);
  EXPECT_EQ(loc.input, "layout");
  EXPECT_EQ(loc.line, 1);
  EXPECT_EQ(loc.column, 4);
  EXPECT_EQ(loc.source_line, "E||L|");
}

// --- Errors -----------------------------------------------------------------------------------

// Every case of tests/compiler/errors/layout.txt: the message, and its caret under the column.
TEST(LayoutErrors, MessagesAndCarets) {
  for (const pptest::ErrorCase& c : pptest::error_cases("layout")) {
    SCOPED_TRACE(c.where);
    if (c.has("layout")) {
      const std::string name = c.has("name") ? c["name"] : "layout";
      const UserError e =
          expect_user_error([&] { parse_layout(c["layout"], name); }, "parse_layout");
      pptest::expect_message(c, e.format());
      expect_caret(e);
    } else {
      const Layout layout = parse_layout(c["model"]);
      std::optional<int> layers;
      if (c.has("num-layers")) layers = std::stoi(c["num-layers"]);
      const UserError e = expect_user_error([&] { check_model(layout, layers); }, "check_model");
      pptest::expect_message(c, e.format());
      if (e.where().line > 0) expect_caret(e);
    }
  }
}

TEST(LayoutErrors, EmptyInput) {
  const UserError e = parse_error("");
  EXPECT_EQ(first_line(e.format()), "layout:1:1: empty layout: write at least one layer or '|'");
  EXPECT_EQ(e.where().column, 1);
}

TEST(LayoutErrors, NestingTooDeep) {
  std::string deep;
  for (int i = 0; i <= kMaxLayoutNesting; ++i) deep += '(';
  deep += 't';
  for (int i = 0; i <= kMaxLayoutNesting; ++i) deep += ")*1";
  const UserError e = parse_error(deep);
  EXPECT_EQ(first_line(e.format()), "layout:1:65: groups nested too deeply (more than 64 levels)");
  expect_caret(e);
  const UserError huge = parse_error(std::string(100000, '('));
  EXPECT_EQ(first_line(huge.format()),
            "layout:1:65: groups nested too deeply (more than 64 levels)");
}

TEST(LayoutErrors, InputTooLong) {
  const UserError e = parse_error(std::string(static_cast<size_t>(kMaxLayoutInputBytes) + 1, 't'));
  EXPECT_EQ(first_line(e.format()),
            "layout:1:1: layout is too long: 262145 bytes (at most 262144)");
}

TEST(LayoutErrors, AntlrPrintsNothing) {
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  for (const char* bad : {"t*", "*3", "(t)", "()", "t3", "t*3*2", "(t", "t)", "x", "((t)*2)"}) {
    try {
      parse_layout(bad);
    } catch (const UserError&) {
    }
  }
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// --- Robustness -------------------------------------------------------------------------------

// Parses `text`; it must either succeed with a consistent result or throw a UserError with a
// position. Anything else fails the test.
void parse_safely(const std::string& text) {
  try {
    const Layout l = parse_layout(text);
    ASSERT_EQ(l.layer_columns.size(), l.stages.size());
    ASSERT_EQ(l.layer_lines.size(), l.stages.size());
    ASSERT_EQ(l.stage_columns.size(), l.stages.size());
    for (size_t s = 0; s < l.stages.size(); ++s) {
      ASSERT_EQ(l.layer_columns[s].size(), l.stages[s].size());
      ASSERT_GE(l.stage_columns[s], 1);
      for (int c : l.layer_columns[s]) ASSERT_GE(c, 1);
    }
    try {
      check_model(l);
    } catch (const UserError& e) {
      ASSERT_GE(e.where().column, 1) << e.format();
    }
  } catch (const UserError& e) {
    ASSERT_GE(e.where().line, 1) << e.format();
    ASSERT_GE(e.where().column, 1) << e.format();
    if (e.message().rfind("empty layout", 0) != 0) {
      ASSERT_FALSE(e.where().source_line.empty()) << e.format();
      // The caret is on the line or just after it.
      ASSERT_LE(static_cast<size_t>(e.where().column), e.where().source_line.size() + 1)
          << e.format();
    }
  } catch (const std::exception& e) {
    FAIL() << "non-UserError for input of " << text.size() << " bytes: " << e.what();
  } catch (...) {
    FAIL() << "unknown exception for input of " << text.size() << " bytes";
  }
}

TEST(LayoutRobustness, GarbageOnlyThrowsUserError) {
  std::mt19937 rng(12345);
  const std::string alphabet = "EtmL|()*,0123456789 \t\n#xT-";
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int len = static_cast<int>(rng() % 24);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    parse_safely(s);
  }
  for (int i = 0; i < 1000; ++i) {
    std::string s;
    const int len = static_cast<int>(rng() % 32);
    for (int k = 0; k < len; ++k) s += static_cast<char>(rng() % 256);
    parse_safely(s);
  }
  parse_safely(std::string(100000, '('));
  parse_safely(std::string(100000, ')'));
  parse_safely(std::string(50000, '(') + "t" + std::string(50000, ')'));
  std::string nested;
  for (int i = 0; i < 20000; ++i) nested += "(t|";
  parse_safely(nested);
  parse_safely("t*99999999999999999999");
  parse_safely("(t)*99999999999999999999999999999999999999999999999999");
  parse_safely("((((t*1000000)*1000000)*1000000)*1000000)*1000000");
  parse_safely(std::string(100000, '*'));
  parse_safely(std::string(100000, '|'));
  parse_safely(std::string(kMaxLayoutInputBytes, '7'));
  parse_safely(std::string("E|t\0|L", 6));
  parse_safely(
      "\xEF\xBB\xBF"
      "Et|L");
  parse_safely("\xED\xA0\x80");      // a UTF-16 surrogate
  parse_safely("\xC0\xAF");          // overlong
  parse_safely("\xF4\x90\x80\x80");  // above U+10FFFF
}

// --- A model of Megatron-LM's parser, for a differential test ---------------------------------

int paren_depth(const std::string& s) {
  int depth = 0;
  int max = 0;
  for (char c : s) {
    if (c == '(') max = std::max(max, ++depth);
    if (c == ')') --depth;
  }
  return max;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Every string Megatron accepts gives the same stages here, except the documented differences:
// count 0 and the empty layout are errors here, and counts must belong to the element just before
// the '*' (Megatron's textual rewriting lets "(t)*2*3" or "t(*2|t)*2" through). Every string
// accepted here and rejected by Megatron uses an extension (nested groups).
void compare_with_megatron(const std::string& text, int* both_accepted) {
  bool too_big = false;
  const auto reference = pptest::megatron_model(text, &too_big);
  if (too_big) return;
  std::optional<std::vector<std::string>> ours;
  std::string error;
  try {
    ours = compact(parse_layout(text));
  } catch (const UserError& e) {
    error = e.message();
  }
  if (reference && ours) {
    EXPECT_EQ(*ours, *reference) << "layout \"" << text << "\"";
    ++*both_accepted;
  } else if (reference) {
    // Megatron's "X*0" deletes X whatever it is (even a parenthesis or an unknown character), so
    // a string with a zero count may fail here for another reason first.
    std::string no_commas = text;
    no_commas.erase(std::remove(no_commas.begin(), no_commas.end(), ','), no_commas.end());
    const bool zero_count = std::regex_search(no_commas, std::regex(R"(\*0+(?![0-9]))"));
    const bool documented =
        zero_count || starts_with(error, "count must be at least 1") ||
        starts_with(error, "empty layout") || starts_with(error, "'*' after a count") ||
        starts_with(error, "'*' has nothing before it") ||
        starts_with(error, "'*' must be followed by a count") || starts_with(error, "count '");
    EXPECT_TRUE(documented) << "Megatron accepts \"" << text << "\" but here: " << error;
  } else if (ours) {
    EXPECT_GE(paren_depth(text), 2) << "accepted \"" << text << "\", which Megatron rejects";
  }
}

TEST(LayoutMegatron, RandomStringsAgreeWithMegatronModel) {
  std::mt19937 rng(2024);
  const std::string alphabet = "EtmL||||((()))****,,0123tttx";
  int both = 0;
  for (int i = 0; i < 6000; ++i) {
    std::string s;
    const int len = static_cast<int>(rng() % 14);
    for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    compare_with_megatron(s, &both);
  }
  EXPECT_GT(both, 100);  // the comparison is not vacuous
}

// Random layouts built from the grammar (flat groups, as Megatron allows) must agree too.
std::string random_flat_layout(std::mt19937& rng, bool in_group) {
  const std::string symbols = "EtmL|";
  std::string s;
  const int items = 1 + static_cast<int>(rng() % 5);
  for (int i = 0; i < items; ++i) {
    const unsigned pick = rng() % 10;
    if (pick < 6 || in_group) {
      s += symbols[rng() % symbols.size()];
      if (rng() % 3 == 0) {
        s += '*';
        s += std::to_string(1 + rng() % 12);
      }
    } else {
      s += '(';
      s += random_flat_layout(rng, true);
      s += ")*";
      s += std::to_string(1 + rng() % 5);
    }
    if (rng() % 4 == 0) s += ',';
  }
  return s;
}

TEST(LayoutMegatron, RandomValidLayoutsAgreeWithMegatronModel) {
  std::mt19937 rng(7);
  int both = 0;
  for (int i = 0; i < 3000; ++i) compare_with_megatron(random_flat_layout(rng, false), &both);
  EXPECT_GT(both, 2500);
}

// Nested groups (an extension): compare with the expansion computed while generating.
std::string random_nested_layout(std::mt19937& rng, int depth, std::string* expansion) {
  const std::string symbols = "EtmL|";
  std::string s;
  const int items = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < items; ++i) {
    if (depth < 4 && rng() % 3 == 0) {
      std::string inner;
      const std::string body = random_nested_layout(rng, depth + 1, &inner);
      const int n = 1 + static_cast<int>(rng() % 3);
      s += "( ";
      s += body;
      s += " )*";
      s += std::to_string(n);
      s += ' ';
      for (int k = 0; k < n; ++k) *expansion += inner;
    } else {
      const char c = symbols[rng() % symbols.size()];
      const int n = rng() % 2 == 0 ? 1 : 1 + static_cast<int>(rng() % 4);
      s += c;
      if (n > 1 || rng() % 5 == 0) {
        s += '*';
        s += std::to_string(n);
      }
      *expansion += std::string(static_cast<size_t>(n), c);
    }
  }
  return s;
}

TEST(LayoutParse, RandomNestedLayoutsExpandCorrectly) {
  std::mt19937 rng(99);
  for (int i = 0; i < 2000; ++i) {
    std::string expansion;
    const std::string text = random_nested_layout(rng, 0, &expansion);
    std::vector<std::string> expected(1);
    for (char c : expansion) {
      if (c == '|') {
        expected.emplace_back();
      } else {
        expected.back() += c;
      }
    }
    EXPECT_EQ(compact(parse_layout(text)), expected) << text;
  }
}

// --- Model checks -----------------------------------------------------------------------------

// The rejected models are in tests/compiler/errors/layout.txt.
TEST(LayoutModel, Accepted) {
  EXPECT_NO_THROW(check_model(parse_layout("Et|tL|")));  // an empty last stage is fine
  EXPECT_NO_THROW(check_model(parse_layout("E|L"), 0));
}

TEST(LayoutModel, GenericLayoutHasNoModel) {
  const Layout g = generic_layout(8);
  EXPECT_EQ(g.num_stages(), 8);
  EXPECT_EQ(g.source, "<8 generic stages>");
  EXPECT_TRUE(g.layer_columns.empty());
  EXPECT_TRUE(g.stage_columns.empty());
  for (const auto& s : g.stages) EXPECT_TRUE(s.empty());
  const UserError e = expect_user_error([&] { check_model(g); }, "check_model(generic)");
  EXPECT_EQ(first_line(e.format()),
            "--stages: layout has no layers: a model needs at least the embedding 'E' and the loss "
            "'L'");
  EXPECT_EQ(first_line(expect_user_error([] { generic_layout(0); }, "generic_layout(0)").format()),
            "--stages: must be at least 1, got 0");
}

// --- Small helpers ----------------------------------------------------------------------------

TEST(LayoutHelpers, SymbolsNamesCounts) {
  EXPECT_EQ(layer_symbol(LayerKind::Embedding), 'E');
  EXPECT_EQ(layer_symbol(LayerKind::Decoder), 't');
  EXPECT_EQ(layer_symbol(LayerKind::Mtp), 'm');
  EXPECT_EQ(layer_symbol(LayerKind::Loss), 'L');
  EXPECT_STREQ(placement_name(PlacementStyle::Loop), "loop");
  EXPECT_STREQ(placement_name(PlacementStyle::V), "v");
  const Layout l = parse_layout("Ett|t|mL");
  EXPECT_EQ(stage_symbols(l.stages[0]), "E t t");
  EXPECT_EQ(stage_symbols(l.stages[2]), "m L");
  EXPECT_EQ(stage_symbols({}), "(empty)");
  EXPECT_EQ(l.count(LayerKind::Decoder), 3);
  EXPECT_EQ(l.count(LayerKind::Mtp), 1);
}

// --- Placement --------------------------------------------------------------------------------

TEST(LayoutPlacement, Loop) {
  const Placement p = make_placement(8, 4, PlacementStyle::Loop);
  EXPECT_EQ(p.pp, 4);
  EXPECT_EQ(p.vpp, 2);
  EXPECT_EQ(p.style, PlacementStyle::Loop);
  EXPECT_EQ(p.stage_rank, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(p.stage_chunk, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(p.rank_stages, (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  const Placement one = make_placement(3, 1, PlacementStyle::Loop);
  EXPECT_EQ(one.rank_stages, (std::vector<std::vector<int>>{{0, 1, 2}}));
  EXPECT_EQ(one.vpp, 3);
}

TEST(LayoutPlacement, V) {
  const Placement p = make_placement(8, 4, PlacementStyle::V);
  EXPECT_EQ(p.vpp, 2);
  EXPECT_EQ(p.style, PlacementStyle::V);
  EXPECT_EQ(p.stage_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(p.stage_chunk, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(p.rank_stages, (std::vector<std::vector<int>>{{0, 7}, {1, 6}, {2, 5}, {3, 4}}));
  const Layout l = parse_layout("Et|t|t|tL");
  EXPECT_EQ(place_layout(l, 2, std::nullopt, PlacementStyle::V),
            make_placement(4, 2, PlacementStyle::V));
}

TEST(LayoutPlacement, MakePlacementErrors) {
  auto err = [](int stages, int pp, PlacementStyle style) {
    return first_line(
        expect_user_error([&] { make_placement(stages, pp, style); }, "make_placement").format());
  };
  EXPECT_EQ(err(8, 0, PlacementStyle::Loop), "--pp: must be at least 1, got 0");
  EXPECT_EQ(err(8, -2, PlacementStyle::Loop), "--pp: must be at least 1, got -2");
  EXPECT_EQ(err(0, 2, PlacementStyle::Loop), "--stages: must be at least 1, got 0");
  EXPECT_EQ(err(9, 4, PlacementStyle::Loop), "--pp: 9 stages is not a multiple of --pp 4");
  EXPECT_EQ(err(12, 4, PlacementStyle::V),
            "--placement: v placement needs exactly 2 stages per rank (2 * --pp 4 = 8), got 12 "
            "stages");
  EXPECT_EQ(err(4, 4, PlacementStyle::V),
            "--placement: v placement needs exactly 2 stages per rank (2 * --pp 4 = 8), got 4 "
            "stages");
}

TEST(LayoutPlacement, PlaceLayoutErrors) {
  const Layout nine = parse_layout("Et|t|t|t|t|t|t|t|tL");
  auto err = [](const Layout& l, int pp, std::optional<int> vpp, PlacementStyle style) {
    return expect_user_error([&] { place_layout(l, pp, vpp, style); }, "place_layout");
  };
  UserError e = err(nine, 4, std::nullopt, PlacementStyle::Loop);
  EXPECT_EQ(first_line(e.format()),
            "layout:1:20: layout has 9 stages, which is not a multiple of --pp 4");
  expect_caret(e);

  const Layout ds = parse_layout("Et*3|(tt|)*29,m|L");
  e = err(ds, 16, 4, PlacementStyle::Loop);
  EXPECT_EQ(first_line(e.format()),
            "layout:1:18: --vpp 4 disagrees with the layout: 32 stages at --pp 16 give vpp 2");
  expect_caret(e);
  e = err(ds, 8, std::nullopt, PlacementStyle::V);
  EXPECT_EQ(first_line(e.format()),
            "layout:1:18: v placement needs exactly 2 stages per rank (2 * --pp 8 = 16), but the "
            "layout has 32 stages");
  EXPECT_EQ(first_line(err(ds, 0, std::nullopt, PlacementStyle::Loop).format()),
            "--pp: must be at least 1, got 0");
  EXPECT_EQ(first_line(err(ds, 16, 0, PlacementStyle::Loop).format()),
            "--vpp: must be at least 1, got 0");
  EXPECT_EQ(first_line(err(generic_layout(6), 4, std::nullopt, PlacementStyle::Loop).format()),
            "--stages: layout has 6 stages, which is not a multiple of --pp 4");
  EXPECT_EQ(first_line(err(parse_layout("t"), 2, std::nullopt, PlacementStyle::Loop).format()),
            "layout:1:2: layout has 1 stage, which is not a multiple of --pp 2");
  EXPECT_EQ(place_layout(ds, 16, 2, PlacementStyle::Loop).vpp, 2);
  EXPECT_EQ(place_layout(ds, 32, std::nullopt, PlacementStyle::Loop).vpp, 1);
  EXPECT_EQ(place_layout(ds, 16, std::nullopt, PlacementStyle::V).vpp, 2);
}

// --- Layout files -----------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("ppc_layout_test_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string write(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

TEST(LayoutFile, CommentsBlankLinesAndWrapping) {
  TempDir dir;
  const std::string path = dir.write("ds.layout",
                                     "# DeepSeek-V3\n"
                                     "# layers: 61\n"
                                     "\n"
                                     "Et*3|        # embedding and 3 layers\n"
                                     "  (tt|)*29,  # 29 stages of 2 layers\n"
                                     "m|L\n");
  const Layout layout = parse_layout_file(path);
  EXPECT_EQ(layout, parse_layout("Et*3|(tt|)*29,m|L"));
  EXPECT_EQ(layout.source, "Et*3| (tt|)*29, m|L");
  EXPECT_EQ(parse_layout(layout.source), layout);
  EXPECT_EQ(layout.input, path);
  EXPECT_EQ(layout.layer_lines[0], (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(layout.layer_lines[1], (std::vector<int>{5, 5}));
  EXPECT_EQ(layout.layer_columns[1], (std::vector<int>{4, 5}));
  EXPECT_EQ(layout.stage_lines[30], 6);
  EXPECT_EQ(layout.stage_columns[31], 3);
  EXPECT_NO_THROW(check_model(layout, 61));

  // Model errors point into the file.
  const UserError e = expect_user_error([&] { check_model(layout, 60); }, "check_model");
  EXPECT_EQ(first_line(e.format()),
            path + ":5:5: too many decoder layers: the model has 60, and this is the 61st 't'");
  EXPECT_EQ(e.where().source_line, "  (tt|)*29,  # 29 stages of 2 layers");
  expect_caret(e);
  const UserError p = expect_user_error(
      [&] { place_layout(layout, 5, std::nullopt, PlacementStyle::Loop); }, "place_layout");
  EXPECT_EQ(first_line(p.format()),
            path + ":6:4: layout has 32 stages, which is not a multiple of --pp 5");
  expect_caret(p);
}

TEST(LayoutFile, ErrorOnTheSecondLine) {
  TempDir dir;
  const std::string path = dir.write("bad.layout", "# a comment\nEt*3|(tt|)*29,x|L\n");
  const UserError e = expect_user_error([&] { parse_layout_file(path); }, "parse_layout_file(bad)");
  EXPECT_EQ(e.format(), path +
                            ":2:15: unknown symbol 'x'; the layers are E (embedding), t (decoder), "
                            "m (MTP), L (loss)\n"
                            "  Et*3|(tt|)*29,x|L\n"
                            "                ^");

  const std::string unclosed = dir.write("unclosed.layout", "Et|\n  (tt|*4\n|L # end\n");
  EXPECT_EQ(
      first_line(expect_user_error([&] { parse_layout_file(unclosed); }, "unclosed").format()),
      unclosed + ":2:3: unmatched '(': no ')' closes it");
  const std::string crlf = dir.write("crlf.layout", "# x\r\nEt|\r\nt*3)\r\n");
  const UserError c = expect_user_error([&] { parse_layout_file(crlf); }, "crlf");
  EXPECT_EQ(first_line(c.format()), crlf + ":3:4: unmatched ')': no '(' before it");
  EXPECT_EQ(c.where().source_line, "t*3)");
}

TEST(LayoutFile, ACommentEndsAtALoneCarriageReturn) {
  // The lexer ends a comment at '\r' as at '\n': what follows a lone '\r' is layout, and the
  // layout's source (the text without comments) says so too. Found by fuzzing.
  TempDir dir;
  const std::string path = dir.write("cr.layout", "Et # one\rt|tL # two\n#\rm\n");
  const Layout layout = parse_layout_file(path);
  EXPECT_EQ(layout, parse_layout("Ett|tLm"));
  EXPECT_EQ(parse_layout(layout.source), layout);
}

TEST(LayoutFile, CommentsOnlyMissingAndDirectory) {
  TempDir dir;
  const std::string empty = dir.write("empty.layout", "# nothing here\n\n   \n");
  EXPECT_EQ(first_line(expect_user_error([&] { parse_layout_file(empty); }, "empty").format()),
            empty + ":1:1: layout file has no layout, only comments and blank lines");
  const std::string missing = dir.path() + "/missing.layout";
  EXPECT_EQ(first_line(expect_user_error([&] { parse_layout_file(missing); }, "missing").format()),
            missing + ": cannot open layout file: No such file or directory");
  EXPECT_EQ(
      first_line(expect_user_error([&] { parse_layout_file(dir.path()); }, "directory").format()),
      dir.path() + ": cannot read layout file: it is a directory");
  const std::string bom = dir.write("bom.layout",
                                    "\xEF\xBB\xBF"
                                    "Et|tL\n");
  EXPECT_EQ(parse_layout_file(bom), parse_layout("Et|tL"));
  const std::string big =
      dir.write("big.layout", std::string(static_cast<size_t>(kMaxLayoutInputBytes) + 10, '#'));
  EXPECT_EQ(first_line(expect_user_error([&] { parse_layout_file(big); }, "big").format()),
            big + ": layout file is too large (more than 262144 bytes)");
}

// --- The layouts shipped in layouts/ ----------------------------------------------------------

// "# key: value" lines of a layout file (see docs/layout-language.md, "Layout files").
std::map<std::string, std::string> layout_file_keys(const std::string& path) {
  std::map<std::string, std::string> keys;
  std::ifstream in(path);
  std::string line;
  const std::regex key_line(R"(^#\s*([a-z]+):\s*(.*?)\s*$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, key_line)) keys[m.str(1)] = m.str(2);
  }
  return keys;
}

TEST(LayoutFiles, ShippedLayoutsAreValid) {
  const std::filesystem::path dir = std::filesystem::path(PP_SOURCE_DIR) / "layouts";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".layout") continue;
    ++files;
    const std::string path = entry.path().string();
    SCOPED_TRACE(path);
    const auto keys = layout_file_keys(path);
    ASSERT_TRUE(keys.count("model")) << "missing '# model:' line";
    ASSERT_TRUE(keys.count("layers")) << "missing '# layers:' line";
    ASSERT_TRUE(keys.count("pp")) << "missing '# pp:' line";
    const int layers = std::stoi(keys.at("layers"));
    const int pp = std::stoi(keys.at("pp"));
    std::optional<int> vpp;
    if (keys.count("vpp")) vpp = std::stoi(keys.at("vpp"));

    Layout layout;
    try {
      layout = parse_layout_file(path);
      check_model(layout, layers);
    } catch (const UserError& e) {
      FAIL() << e.format();
    }
    EXPECT_EQ(layout.num_stages() % pp, 0)
        << layout.num_stages() << " stages is not a multiple of pp " << pp;
    try {
      const Placement p = place_layout(layout, pp, vpp, PlacementStyle::Loop);
      EXPECT_EQ(p.num_stages(), layout.num_stages());
    } catch (const UserError& e) {
      FAIL() << e.format();
    }
    if (keys.count("mtp")) {
      EXPECT_EQ(layout.count(LayerKind::Mtp), std::stoi(keys.at("mtp")));
    }
  }
  EXPECT_GE(files, 4);
}

TEST(LayoutFiles, DeepSeekV3) {
  const Layout layout = parse_layout_file(
      (std::filesystem::path(PP_SOURCE_DIR) / "layouts/deepseek-v3.layout").string());
  EXPECT_EQ(layout, parse_layout("Et*3|(tt|)*29,m|L"));
  EXPECT_EQ(place_layout(layout, 16, 2, PlacementStyle::Loop).vpp, 2);
}

}  // namespace
}  // namespace ppc
