// A model's own layer symbols besides E, t, m and L (docs/layout-language.md, "A model's own
// symbols"): parsing with and without a declaration, the errors and their carets, the model
// rules, the layout string and the JSON plan reading them back exactly, per-symbol costs in a cost
// file changing the simulation, the balancer moving such layers, and ppcompile's --symbols.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/balance.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan_json.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"
#include "tests/compiler/error_cases.h"
#include "tests/compiler/plan_text.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

using pptest::compact;
using pptest::message_of;

Plan compiled(const std::string& layout, const std::string& own, int pp,
              const std::string& schedule, int mbs) {
  CompileOptions o;
  o.layout = parse_layout(layout, "layout", own);
  o.has_model = true;
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = mbs;
  return lower_send_recv(compile(o));
}

TEST(OwnSymbols, ParseWhereDeclared) {
  const Layout l = parse_layout("Exx|x*2,v|(xv|)*2,tL", "layout", "xv");
  EXPECT_EQ(compact(l), (std::vector<std::string>{"Exx", "xxv", "xv", "xv", "tL"}));
  EXPECT_EQ(l.stages[0][1], own_layer('x'));
  EXPECT_FALSE(is_builtin(l.stages[0][1]));
  EXPECT_TRUE(is_builtin(l.stages[0][0]));
  EXPECT_EQ(l.count(own_layer('x')), 6);
  EXPECT_EQ(l.count(LayerKind::Decoder), 1);
  EXPECT_EQ(own_symbols(l), "xv");
  EXPECT_EQ(own_symbols(parse_layout("Et|tL")), "");
  // Upper case letters too; the built-in letters keep their meaning whatever is declared.
  EXPECT_EQ(compact(parse_layout("EV*3|L", "layout", "V")),
            (std::vector<std::string>{"EVVV", "L"}));
  EXPECT_NO_THROW(check_model(l));  // the model rules say nothing of x and v
}

TEST(OwnSymbols, UndeclaredLettersAreUnknownSymbolsWithACaret) {
  // Nothing declared: the message is the one a layout with a typo always got.
  EXPECT_EQ(message_of([] { parse_layout("Exx|L"); }),
            "layout:1:2: unknown symbol 'x'; the layers are E (embedding), t (decoder), m (MTP), "
            "L (loss)\n"
            "  Exx|L\n"
            "   ^");
  EXPECT_EQ(message_of([] { parse_layout("Ex|vL", "layout", "x"); }),
            "layout:1:4: unknown symbol 'v'; the layers are E (embedding), t (decoder), m (MTP), "
            "L (loss), and the model's own 'x'\n"
            "  Ex|vL\n"
            "     ^");
  // A typo keeps its hint unless the model declares the letter.
  EXPECT_NE(message_of([] { parse_layout("ET|L", "layout", "x"); }).find("did you mean 't'?"),
            std::string::npos);
  EXPECT_EQ(compact(parse_layout("ET|L", "layout", "T")), (std::vector<std::string>{"ET", "L"}));
  // Digits and punctuation where a symbol is expected stay syntax errors; a count may be followed
  // by a comma and a symbol of the model's own, as by a built-in one.
  EXPECT_EQ(message_of([] { parse_layout("Ex*|L", "layout", "x"); }),
            "layout:1:3: '*' must be followed by a count, as in 't*4'\n"
            "  Ex*|L\n"
            "    ^");
  EXPECT_EQ(message_of([] { parse_layout("E3x|L", "layout", "x"); }).substr(0, 45),
            "layout:1:2: count '3' without '*' before it (");
  EXPECT_EQ(message_of([] { parse_layout("Ex;|L", "layout", "x"); }).substr(0, 31),
            "layout:1:3: unknown symbol ';';");
  EXPECT_EQ(compact(parse_layout("Ex*1,000,x|L", "layout", "x")),
            (std::vector<std::string>{"E" + std::string(1001, 'x'), "L"}));
}

TEST(OwnSymbols, DeclarationErrors) {
  EXPECT_EQ(message_of([] { check_own_symbols("x1", "--symbols"); }),
            "--symbols: '1' is not a layer symbol: a model's own symbols are ASCII letters, as in "
            "--symbols xv");
  EXPECT_EQ(message_of([] { check_own_symbols("xt", "--symbols"); }),
            "--symbols: 't' is built in (decoder layer): a model's own symbols are letters other "
            "than E, t, m and L");
  EXPECT_EQ(message_of([] { check_own_symbols("xvx", "--symbols"); }),
            "--symbols: 'x' is declared twice");
  EXPECT_NO_THROW(check_own_symbols("", "--symbols"));
  EXPECT_NO_THROW(check_own_symbols("xvXV", "--symbols"));
}

TEST(OwnSymbols, ModelRulesStayForTheBuiltInSymbols) {
  const Layout first = parse_layout("xE|L", "layout", "x");
  EXPECT_EQ(message_of([&] { check_model(first); }),
            "layout:1:1: the model must start with the embedding 'E', but its first layer is 'x' "
            "(a layer of the model's own)\n"
            "  xE|L\n"
            "  ^");
  EXPECT_NO_THROW(check_model(parse_layout("Et|xtmx|vL", "layout", "xv")));
  EXPECT_NE(message_of([] {
              check_model(parse_layout("Etm|xt|L", "layout", "x"));
            }).find("decoder layer 't' after an MTP layer 'm'"),
            std::string::npos);
  EXPECT_NO_THROW(check_model(parse_layout("Ext|xxL", "layout", "x"), 1));  // --num-layers: t only
}

TEST(OwnSymbols, LayoutStringReadsBackExactly) {
  for (const char* text : {"Exxx|xvxv|xx|xx|xx|tL", "Ex*4,v|x*4,v|L", "E|x|x|x|x|L", "Exvxv|L"}) {
    SCOPED_TRACE(text);
    const Layout l = parse_layout(text, "layout", "xv");
    const std::string s = layout_string(l);
    EXPECT_EQ(parse_layout(s, "layout", "xv"), l) << s;
    EXPECT_EQ(parse_layout(s, "layout", kAnySymbols), l) << s;
  }
  // The cosmetic comma after a count comes before a symbol of the model's own too.
  EXPECT_EQ(layout_string(parse_layout("Exxxv|L", "layout", "xv")), "Ex*3,v|L");
  EXPECT_EQ(layout_string(parse_layout("E|xx|xx|xx|L", "layout", "x")), "E|(xx|)*3,L");
}

TEST(OwnSymbols, JsonPlanRoundTripsTheSymbols) {
  const Plan p = compiled("Exx|xtL", "x", 2, "1F1B", 4);
  std::ostringstream ss;
  emit_json(p, verify(p), ss);
  const std::string text = ss.str();
  EXPECT_NE(text.find(R"("symbols":"x")"), std::string::npos);
  EXPECT_NE(text.find(R"("stages":["E x x","x t L"])"), std::string::npos);
  const Plan q = read_plan_json(text, "plan.json");
  EXPECT_EQ(q, p);
  EXPECT_EQ(compact(q.layout), (std::vector<std::string>{"Exx", "xtL"}));

  // A plan of E, t, m and L has no such field (plans written before it read as before).
  std::ostringstream builtin;
  const Plan b = compiled("Et|tL", "", 2, "1F1B", 4);
  emit_json(b, verify(b), builtin);
  EXPECT_EQ(builtin.str().find("\"symbols\""), std::string::npos);
  EXPECT_EQ(read_plan_json(builtin.str(), "plan.json"), b);

  // A letter the plan does not list, and a bad list.
  std::string undeclared = text;
  undeclared.replace(undeclared.find(R"("symbols":"x")"), 13, R"("symbols":"v")");
  EXPECT_EQ(message_of([&] { read_plan_json(undeclared, "plan.json"); }),
            "plan.json: layout.stages[0]: unknown layer symbol 'x' in \"E x x\" (a model's own "
            "symbol is listed in layout.symbols)");
  std::string builtin_listed = text;
  builtin_listed.replace(builtin_listed.find(R"("symbols":"x")"), 13, R"("symbols":"t")");
  EXPECT_EQ(message_of([&] { read_plan_json(builtin_listed, "plan.json"); }),
            "plan.json: layout.symbols: 't' is built in (decoder layer): a model's own symbols are "
            "letters other than E, t, m and L");
}

TEST(OwnSymbols, CostFileGivesPerSymbolCosts) {
  const Plan plan = compiled("Exx|xtL", "x", 2, "1F1B", 4);
  const CostModel with_x = parse_cost_model(R"({"layers": {
      "E": {"f": 1, "b": 2}, "t": {"f": 2, "b": 4, "activation": 100, "params": 10},
      "L": {"f": 1, "b": 2},
      "x": {"f": 5, "i": 6, "w": 4, "activation": 300, "params": 70}}})",
                                            "cost.json");
  const std::vector<StageCost> c = stage_costs(plan, with_x);
  EXPECT_DOUBLE_EQ(c[0].f, 1 + 5 + 5);
  EXPECT_DOUBLE_EQ(c[0].b, 2 + 10 + 10);
  EXPECT_DOUBLE_EQ(c[0].i, 1 + 6 + 6);  // E: B alone, so I = W = B / 2
  EXPECT_DOUBLE_EQ(c[0].w, 1 + 4 + 4);
  EXPECT_DOUBLE_EQ(c[0].activation, 600);
  EXPECT_DOUBLE_EQ(c[0].params, 140);
  EXPECT_DOUBLE_EQ(c[1].f, 5 + 2 + 1);
  EXPECT_EQ(uncosted_own_symbols(with_x, plan.layout), "");

  // No entry for x: it costs what t costs, and the simulation follows.
  const CostModel without_x = parse_cost_model(R"({"layers": {
      "E": {"f": 1, "b": 2}, "t": {"f": 2, "b": 4, "activation": 100, "params": 10},
      "L": {"f": 1, "b": 2}}})",
                                               "cost.json");
  EXPECT_EQ(uncosted_own_symbols(without_x, plan.layout), "x");
  const std::vector<StageCost> d = stage_costs(plan, without_x);
  EXPECT_DOUBLE_EQ(d[0].f, 1 + 2 + 2);
  EXPECT_DOUBLE_EQ(d[0].activation, 200);
  const Simulation heavy = simulate(lower_send_recv(plan, lowering_costs(plan, with_x)), with_x);
  const Simulation light =
      simulate(lower_send_recv(plan, lowering_costs(plan, without_x)), without_x);
  EXPECT_GT(heavy.makespan, light.makespan);
  EXPECT_GT(heavy.peak_memory[0], light.peak_memory[0]);
  EXPECT_DOUBLE_EQ(heavy.param_memory[0], 140);
  EXPECT_DOUBLE_EQ(light.param_memory[0], 20);

  // Keys other than one letter are refused, with the field named.
  EXPECT_EQ(message_of([] { parse_cost_model(R"({"layers": {"xy": {"f": 1}}})", "cost.json"); }),
            "cost.json: layers.xy: unknown field (known: E, t, m, L and a model's own symbols, "
            "each one ASCII letter)");
  EXPECT_EQ(message_of([] { parse_cost_model(R"({"layers": {"x": {"f": -1}}})", "cost.json"); }),
            "cost.json: layers.x.f: expected a non-negative number, got -1");
}

TEST(OwnSymbols, BalanceMovesTheModelsOwnLayers) {
  BalanceOptions o;
  o.layout = parse_layout("Exxx|tttttL", "layout", "x");
  o.pp = 2;
  o.schedule = "1F1B";
  o.microbatches = 8;
  o.cost = parse_cost_model(R"({"layers": {"t": {"f": 1, "b": 2}, "x": {"f": 4, "b": 8}}})",
                            "cost.json");
  const BalanceResult heavy = balance_layout(o);
  // x costs four t (E and L nothing): two x (24) against one x and five t (27) is the best split.
  EXPECT_EQ(compact(heavy.layout), (std::vector<std::string>{"Exx", "xtttttL"}));
  EXPECT_EQ(parse_layout(heavy.layout.source, "layout", "x"), heavy.layout);
  o.cost = parse_cost_model(R"({"layers": {"t": {"f": 1, "b": 2}}})", "cost.json");  // x as t
  const BalanceResult even = balance_layout(o);
  EXPECT_EQ(compact(even.layout), (std::vector<std::string>{"Exxxt", "ttttL"}));
}

TEST(OwnSymbols, Ppcompile) {
  pptest::TempDir dir;
  const std::vector<std::string> base{"--layout",   "Exx|xtL", "--pp",           "2",
                                      "--schedule", "1F1B",    "--microbatches", "4"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return pptest::run_ppcompile(args);
  };
  const auto undeclared = run({});
  EXPECT_EQ(undeclared.exit_code, 2);
  EXPECT_EQ(undeclared.err,
            "ppcompile: error: layout:1:2: unknown symbol 'x'; the layers are E (embedding), t "
            "(decoder), m (MTP), L (loss)\n"
            "  Exx|xtL\n"
            "   ^\n");
  const auto bad = run({"--symbols", "xL"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "ppcompile: error: --symbols: 'L' is built in (loss): a model's own symbols are "
            "letters other than E, t, m and L\n");

  const auto json = run({"--symbols", "x", "--emit", "json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.err, "");
  EXPECT_EQ(read_plan_json(json.out, "plan").layout, parse_layout("Exx|xtL", "layout", "x"));

  // A cost file without x: a note, once.
  const std::string cost = dir.write("cost.json", R"({"layers": {"t": {"f": 2, "b": 4}}})");
  const auto noted = run({"--symbols", "x", "--cost", cost, "--emit", "stats"});
  EXPECT_EQ(noted.exit_code, 0) << noted.err;
  EXPECT_EQ(noted.err,
            "ppcompile: note: the cost model has no entry for 'x': it costs as much as a decoder "
            "layer 't'\n");

  // --compare, --balance, --autotune and Auto take the model's own symbols like any other.
  const std::vector<std::string> model{"--layout", "Exxx|tttttL", "--symbols", "x", "--pp", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = model;
    args.insert(args.end(), extra.begin(), extra.end());
    return pptest::run_ppcompile(args);
  };
  // (E and L cost something: with free layers, --autotune's Auto candidates stop with an internal
  // error, on main too: reported as a follow-up.)
  const std::string xcost = dir.write("x.json", R"({"layers": {"E": {"f": 0.5, "b": 1},
      "t": {"f": 1, "b": 2}, "x": {"f": 4, "b": 8}, "L": {"f": 0.5, "b": 1}}})");
  const auto cmp = with({"--microbatches", "8", "--compare", "--cost", xcost});
  EXPECT_EQ(cmp.exit_code, 0) << cmp.err;
  EXPECT_NE(cmp.out.find("1F1B"), std::string::npos);
  const auto bal = with({"--microbatches", "8", "--schedule", "1F1B", "--balance", "--cost", xcost,
                         "--emit", "layout-string"});
  EXPECT_EQ(bal.exit_code, 0) << bal.err;
  EXPECT_EQ(bal.out, "Exx|xt*5,L\n");
  const auto tune =
      with({"--microbatches", "8", "--autotune", "--cost", xcost, "--emit", "layout-string"});
  EXPECT_EQ(tune.exit_code, 0) << tune.err;
  EXPECT_NE(tune.out.find('x'), std::string::npos);
  const auto aut = with({"--microbatches", "4", "--schedule", "Auto", "--cost", xcost});
  EXPECT_EQ(aut.exit_code, 0) << aut.err;
}

}  // namespace
}  // namespace ppc
