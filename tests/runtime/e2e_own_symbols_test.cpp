// A layout symbol of a model's own (docs/library.md, "A symbol of your own"), in real processes:
// ppcompile --symbols x compiles 'Exx|xtL', a pprt::main program that maps 'x' to an encoder block
// of its own (own_symbol_model.cpp) trains the plan under 1F1B and ZBV with the losses of its own
// unpipelined run (--reference) within 1e-5 relative; pprun's built-in model, and a program that
// has no layer for a symbol of the plan, refuse it with one line naming the symbol and the stage.
#include <algorithm>
#include <cmath>

#include "e2e_util.h"

namespace {

using namespace pprun_e2e;

Proc own_model(const std::vector<std::string>& args) {
  return run(concat({OWN_SYMBOL_MODEL_BIN}, args));
}

std::string compile_own(const TempDir& d, const std::string& layout, const std::string& symbols,
                        int pp, const std::string& schedule, int mbs) {
  return compile(d, layout, pp, schedule, mbs, "plan.json", {"--symbols", symbols});
}

bool one_line(const std::string& s) {
  return std::count(s.begin(), s.end(), '\n') <= 1;
}

struct Case {
  std::string schedule, layout;
  int pp;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule;
}

class OwnSymbol : public ::testing::TestWithParam<Case> {};

TEST_P(OwnSymbol, LossesEqualItsReference) {
  const Case& c = GetParam();
  TempDir d;
  const int steps = 3;
  const std::string plan = compile_own(d, c.layout, "x", c.pp, c.schedule, 4);
  // A higher learning rate than the default, so that three steps of this small model learn.
  const auto common =
      std::vector<std::string>{"--plan",         plan, "--steps",    std::to_string(steps),
                               "--global-batch", "8",  "--vocab",    "32",
                               "--seq-len",      "8",  "--lr",       "0.03",
                               "--threads",      "1",  "--progress", "none"};
  const Proc pipe = own_model(concat(common, {"--metrics", d.file("p.jsonl")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  const Proc ref = own_model(concat(common, {"--reference", "--metrics", d.file("r.jsonl")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  EXPECT_NE(ref.out.find("model 'encoder'"), std::string::npos) << ref.out;

  const auto got = losses(d.file("p.jsonl")), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), size_t(steps));
  expect_losses_of(got, want);
  EXPECT_LT(got.back(), got.front());  // it learns
}

// ZBV runs I and W apart: the encoder block's backward is split through the autograd graph.
INSTANTIATE_TEST_SUITE_P(Schedules, OwnSymbol,
                         ::testing::Values(Case{"1F1B", "Exx|xtL", 2},
                                           Case{"ZBV", "Ex|x|xt|xL", 2}),
                         [](const auto& info) { return info.param.schedule; });

TEST(OwnSymbolErrors, PprunsOwnModelRefusesASymbolItHasNoLayerFor) {
  TempDir d;
  const std::string plan = compile_own(d, "Et|xtL", "x", 2, "1F1B", 2);
  const Proc p = pprun(concat(kModel, {"--plan", plan, "--steps", "1", "--vocab", "64"}));
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_TRUE(one_line(p.out)) << p.out;
  EXPECT_NE(p.out.find("error: layout: symbol 'x' (stage 1) has no layer in the model 'pprun'"),
            std::string::npos)
      << p.out;
}

TEST(OwnSymbolErrors, AProgramRefusesASymbolItHasNoLayerFor) {
  TempDir d;
  const std::string plan = compile_own(d, "Exv|tL", "xv", 2, "1F1B", 2);
  const Proc p = own_model({"--plan", plan, "--steps", "1", "--vocab", "32", "--seq-len", "8",
                            "--global-batch", "4", "--progress", "none"});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_TRUE(one_line(p.out)) << p.out;
  EXPECT_NE(p.out.find("own_symbol_model: error: layout: symbol 'v' (stage 0) has no layer in the "
                       "model 'encoder'"),
            std::string::npos)
      << p.out;
  // The same with --reference --layout: the layout takes any letter, the model names the one it
  // lacks.
  const Proc r = own_model({"--reference", "--layout", "Exv|tL", "--microbatches", "1", "--steps",
                            "1", "--vocab", "32", "--seq-len", "8", "--global-batch", "2"});
  EXPECT_EQ(r.exit_code(), 2) << r.out;
  EXPECT_NE(r.out.find("layout: symbol 'v' (stage 0) has no layer in the model 'encoder'"),
            std::string::npos)
      << r.out;
}

}  // namespace
