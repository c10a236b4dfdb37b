// --emit layout-string: every layout string reads back to exactly the same stages, here and in a
// model of Megatron-LM's parser, and is compressed the way people write layouts.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "tests/compiler/megatron_model.h"
#include "tests/compiler/plan_text.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

using pptest::compact;

int paren_depth(const std::string& s) {
  int depth = 0, max = 0;
  for (char c : s) {
    if (c == '(') max = std::max(max, ++depth);
    if (c == ')') --depth;
  }
  return max;
}

// The string reads back to the same stages, here and in Megatron-LM, without nested groups.
void expect_round_trip(const Layout& layout) {
  const std::string text = layout_string(layout);
  Layout back;
  ASSERT_NO_THROW(back = parse_layout(text)) << text;
  EXPECT_EQ(back.stages, layout.stages) << text;
  EXPECT_LE(paren_depth(text), 1) << text;
  EXPECT_EQ(text.find_first_of(" \t\n"), std::string::npos) << text;
  bool too_big = false;
  const auto megatron = pptest::megatron_model(text, &too_big);
  ASSERT_FALSE(too_big) << text;
  ASSERT_TRUE(megatron.has_value()) << "Megatron-LM would reject " << text;
  EXPECT_EQ(*megatron, compact(layout)) << text;
}

TEST(LayoutString, CompressesLikeAPerson) {
  EXPECT_EQ(layout_string(parse_layout("Et*3|(tt|)*29,m|L")), "Et*3|(tt|)*29,m|L");
  EXPECT_EQ(layout_string(parse_layout("Etttt|tttt|tttt|tttt|tttt|ttttL")), "Et*4|(t*4|)*4,t*4,L");
  // Ties go to the plain form.
  EXPECT_EQ(layout_string(parse_layout("Etttt|tttt|tttt|ttttL")), "Et*4|t*4|t*4|t*4,L");
  EXPECT_EQ(layout_string(parse_layout("Ett|(tt|)*29,tm|L")), "Ett|(tt|)*29,tm|L");
  EXPECT_EQ(layout_string(parse_layout("EtL")), "EtL");
  EXPECT_EQ(layout_string(parse_layout("Et|||||||tL")), "Et|*7,tL");
  EXPECT_EQ(layout_string(parse_layout("EtL|||||")), "EtL|*5");
  EXPECT_EQ(layout_string(parse_layout("|||||EtL")), "|*5,EtL");
  EXPECT_EQ(layout_string(parse_layout("Et||||tL")), "Et||||tL");
  EXPECT_EQ(layout_string(parse_layout("|EtL|")), "|EtL|");
  // Two-stage periods (a V-shaped or interleaved pattern).
  EXPECT_EQ(layout_string(parse_layout("E|(t|tt|)*8,L")), "E|(t|tt|)*8,L");
}

TEST(LayoutString, ShippedLayoutsRoundTrip) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(pptest::source_path("layouts"))) {
    if (entry.path().extension() != ".layout") continue;
    const Layout layout = parse_layout_file(entry.path().string());
    expect_round_trip(layout);
    EXPECT_LE(layout_string(layout).size(), layout.source.size() + 2) << entry.path();
    ++files;
  }
  EXPECT_GE(files, 5);
}

// Random layouts: random stage contents, empty stages, and stretches of a repeated pattern of
// stages so that groups are used.
TEST(LayoutString, RandomLayoutsRoundTrip) {
  std::mt19937 rng(2024);
  const LayerKind kinds[] = {LayerKind::Embedding, LayerKind::Decoder, LayerKind::Mtp,
                             LayerKind::Loss};
  auto random_stage = [&]() {
    std::vector<LayerKind> stage;
    const int runs = static_cast<int>(rng() % 4);
    for (int r = 0; r < runs; ++r) stage.insert(stage.end(), rng() % 5, kinds[rng() % 4]);
    return stage;
  };
  int grouped = 0;
  for (int rep = 0; rep < 3000; ++rep) {
    Layout layout;
    const int pieces = 1 + static_cast<int>(rng() % 8);
    for (int p = 0; p < pieces; ++p) {
      if (rng() % 2) {
        layout.stages.push_back(random_stage());
      } else {
        std::vector<std::vector<LayerKind>> pattern(1 + rng() % 3);
        for (auto& s : pattern) s = random_stage();
        const int times = 1 + static_cast<int>(rng() % 12);
        for (int t = 0; t < times; ++t)
          layout.stages.insert(layout.stages.end(), pattern.begin(), pattern.end());
      }
    }
    if (layout.stages.size() == 1 && layout.stages[0].empty()) continue;  // has no text
    expect_round_trip(layout);
    grouped += layout_string(layout).find('(') != std::string::npos;
    if (HasFailure()) return;
  }
  EXPECT_GT(grouped, 500);
}

TEST(LayoutString, HugeLayoutsStayLinear) {
  // 200,000 one-layer stages and a long period-3 pattern: no quadratic blow-up.
  Layout layout;
  for (int s = 0; s < 200000; ++s) layout.stages.push_back({LayerKind::Decoder});
  EXPECT_EQ(layout_string(layout), "(t|)*199999,t");
  Layout pattern;
  for (int s = 0; s < 30000; ++s)
    pattern.stages.push_back(std::vector<LayerKind>(1 + s % 3, LayerKind::Decoder));
  expect_round_trip(pattern);
}

TEST(LayoutString, OneEmptyStageHasNoText) {
  Layout layout;
  layout.stages.push_back({});
  EXPECT_THROW(layout_string(layout), UserError);
}

// As a user runs it.
TEST(LayoutString, EmitLayoutStringFromTheCli) {
  auto r =
      pptest::run_ppcompile({"--layout", "Et|tt|tt|tt|tt|tt|tt|tL", "--pp", "4", "--schedule",
                             "Interleaved1F1B", "--microbatches", "8", "--emit", "layout-string"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Et|(tt|)*6,tL\n");
  // Without a model: tests/compiler/errors/ppcompile.txt.
}

}  // namespace
}  // namespace ppc
