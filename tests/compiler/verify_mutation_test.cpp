// The verifier against a corpus of mutants of valid lowered plans.
//
// Every schedule at pp 2-4 with 2-4 microbatches is compiled and lowered; each plan is mutated in
// the ways plans go wrong (two actions swapped, a RECV moved after its consumer, a SEND dropped or
// duplicated, a peer or a microbatch changed, a batch reversed) and by splicing in the
// deadlocking patterns of PyTorch #126419 (1F1B's forward send and backward send in separate
// blocking exchanges: each rank sends before it receives, and both wait) and #127332
// (Interleaved1F1B's communication crossing around the ring of ranks, and a step's forward and
// backward exchanges batched together). The ground truth for each mutant is an exhaustive search
// of its state space written from docs/deadlock-model.md alone
// (tests/compiler/deadlock_reference.h); the verifier must agree, and when it rejects, its first
// message must name the rank and the action.
//
// The corpus is deterministic (a fixed seed). PP_MUTANTS=N makes N mutants per operator and base
// plan instead of the default (the larger run: scripts/verify-mutants.sh). PP_MUTANT_EXPORT=DIR
// also writes two mutants of each mutation and outcome as DIR/<name>.json and .csv, which
// fuzz/make-seeds.sh adds to the fuzzers' seeds (plans that get as far as the deadlock model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>

#include "compiler/compile.h"
#include "compiler/csv.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan_json.h"
#include "compiler/schedule.h"
#include "compiler/verify.h"
#include "tests/compiler/deadlock_reference.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/plan_mutants.h"
#include "tests/compiler/plan_text.h"

namespace {

using mutants::Base;
using mutants::Mutant;
using ppc::Plan;

// --- base plans: every schedule at small sizes -------------------------------------------------

struct Scale {
  int per_op = 3;  // mutants per operator and base plan
  int max_pp = 4;
  int max_m = 4;
};

// The default corpus runs in the normal suite; PP_MUTANTS=N asks for the larger run (N mutants
// per operator and plan, pp up to 5 and up to 8 microbatches).
Scale scale() {
  Scale s;
  if (const char* env = std::getenv("PP_MUTANTS")) {
    s.per_op = std::max(1, std::atoi(env));
    s.max_pp = 5;
    s.max_m = 8;
  }
  return s;
}

std::vector<Base> base_plans(const Scale& sc) {
  std::vector<Base> out;
  for (const auto& info : pptest::generated_schedules())
    for (int pp = 2; pp <= sc.max_pp; ++pp)
      for (int vpp : {1, 2})
        for (int m = 2; m <= sc.max_m; ++m) {
          ppc::CompileOptions o;
          const int stages = info.copies > 1 ? pp : pp * vpp;
          if (info.copies > 1 && vpp != 1) continue;
          o.layout = ppc::generic_layout(stages);
          o.pp = pp;
          o.schedule = info.name;
          o.microbatches = m;
          try {
            out.push_back({fmt::format("{} pp{} vpp{} m{}", info.name, pp, vpp, m),
                           lower_send_recv(compile(o))});
          } catch (const ppc::UserError&) {
            // this schedule does not run this configuration
          }
        }
  return out;
}

// Writes `m` as JSON and CSV files named after its mutation and outcome (PP_MUTANT_EXPORT).
void export_mutant(const std::string& dir, const Mutant& m, const ppc::VerifyReport& rep,
                   refmodel::Outcome outcome, int n) {
  std::string name = fmt::format("{}-{}-{}", m.op, refmodel::outcome_name(outcome), n);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
  name.erase(0, name.find_first_not_of('-'));
  std::ofstream json(dir + "/" + name + ".json");
  ppc::emit_json(m.plan, rep, json);
  std::ofstream csv(dir + "/" + name + ".csv");
  ppc::emit_csv(m.plan, csv, /*compute_only=*/false);
}

// "rank 1, action 4 (...)", "rank 0 waits at its action 3", "rank 1 action 2": the message names
// a rank and a position in its order.
bool located(const std::string& msg) {
  static const std::regex rank_and_action(R"(rank \d+.*actions? \d+)");
  return std::regex_search(msg, rank_and_action);
}

TEST(VerifyMutants, ReferenceJudgesKnownPlans) {
  // The judge itself: a correct plan, crossed sends (the cycle of verify_test.cpp), a compute
  // before its receive, a missing receive.
  const Plan good = pptest::text_plan(2, 2, 2,
                                      {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                       "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"},
                                      true);
  EXPECT_EQ(refmodel::judge(good).outcome, refmodel::Outcome::Ok);
  const Plan crossed = pptest::text_plan(2, 2, 2,
                                         {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                          "1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F0 1F0 1B0 1SEND_B0"},
                                         true);
  EXPECT_EQ(refmodel::judge(crossed).outcome, refmodel::Outcome::Deadlock);
  const Plan early =
      pptest::text_plan(2, 2, 1, {"0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1RECV_F0 1B0 1SEND_B0"}, true);
  EXPECT_EQ(refmodel::judge(early).outcome, refmodel::Outcome::Data);
  const Plan missing =
      pptest::text_plan(2, 2, 1, {"0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1B0 1SEND_B0"}, true);
  EXPECT_EQ(refmodel::judge(missing).outcome, refmodel::Outcome::Count);
  // One batch on each side, in any order inside it: no deadlock.
  const Plan grouped = pptest::text_plan(2, 2, 2,
                                         {"0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0RECV_B1 0B0 0B1",
                                          "1RECV_F0 1RECV_F1 1F0 1F1 1B0 1B1 1SEND_B1 1SEND_B0"},
                                         true);
  EXPECT_EQ(refmodel::judge(grouped).outcome, refmodel::Outcome::Ok);
}

TEST(VerifyMutants, AgreeWithAnExhaustiveSearch) {
  const Scale sc = scale();
  const std::vector<Base> bases = base_plans(sc);
  ASSERT_GE(bases.size(), 60u);
  for (const Base& b : bases) {
    ASSERT_TRUE(ppc::verify(b.plan).ok()) << b.name;
    ASSERT_TRUE(refmodel::judge(b.plan, 5'000'000, true).ok()) << b.name;
  }
  const std::vector<Mutant> corpus = mutants::corpus(bases, sc.per_op, 20240613);

  using refmodel::Outcome;
  const std::vector<Outcome> outcomes = {Outcome::Ok, Outcome::Shape, Outcome::Count, Outcome::Data,
                                         Outcome::Deadlock};
  struct Tally {
    int total = 0, agree = 0;
    std::map<Outcome, int> by;
  };
  std::map<std::string, Tally> by_op;
  Tally all;
  std::map<std::pair<std::string, Outcome>, int> exported;
  int disagreements = 0, unlocated = 0, full_searches = 0;
  size_t max_states = 0;
  for (const Mutant& m : corpus) {
    // Every interleaving where that is small enough; else one order of the compute steps.
    refmodel::Verdict truth = refmodel::judge(m.plan, 1'000'000, false);
    if (truth.outcome == Outcome::TooBig)
      truth = refmodel::judge(m.plan, 20'000'000, true);
    else
      ++full_searches;
    ASSERT_NE(truth.outcome, Outcome::TooBig) << m.base << ", " << m.op;
    // The model's outcome does not depend on the order in which ranks move (deadlock-model.md).
    EXPECT_FALSE(truth.completion_reachable && truth.deadlock_reachable) << m.base << ", " << m.op;
    max_states = std::max(max_states, truth.states);
    const ppc::VerifyReport rep = ppc::verify(m.plan);
    if (const char* dir = std::getenv("PP_MUTANT_EXPORT")) {
      const int n = exported[{m.op, truth.outcome}]++;
      if (n < 2) export_mutant(dir, m, rep, truth.outcome, n);
    }
    for (Tally* t : {&by_op[m.op], &all}) {
      ++t->total;
      ++t->by[truth.outcome];
      if (rep.ok() == truth.ok()) ++t->agree;
    }
    if (rep.ok() != truth.ok()) {
      ++disagreements;
      ADD_FAILURE() << m.base << ", " << m.op << ": the search says "
                    << refmodel::outcome_name(truth.outcome) << " (" << truth.why
                    << "), the verifier " << (rep.ok() ? "accepts" : rep.errors.front()) << "\n"
                    << pptest::orders_text(m.plan.lowered);
    }
    if (!rep.ok() && !located(rep.errors.front())) {
      ++unlocated;
      ADD_FAILURE() << m.base << ", " << m.op << ": unlocated message: " << rep.errors.front();
    }
  }
  auto row = [&](const std::string& name, const Tally& t) {
    std::string line = fmt::format("{:<34} {:>7}", name, t.total);
    for (Outcome o : outcomes) line += fmt::format(" {:>8}", t.by.count(o) ? t.by.at(o) : 0);
    return line + fmt::format(" {:>7.1f}%\n", 100.0 * t.agree / std::max(1, t.total));
  };
  std::string table = fmt::format("{:<34} {:>7}", "mutation", "mutants");
  for (Outcome o : outcomes) table += fmt::format(" {:>8}", refmodel::outcome_name(o));
  table += fmt::format(" {:>8}\n", "agree");
  for (const auto& [op, t] : by_op) table += row(op, t);
  table += row("all", all);
  std::printf(
      "%s%zu mutants of %zu plans (ground truth: an exhaustive search, every interleaving "
      "for %d of them, the largest %zu states); %d disagreements, %d unlocated messages\n",
      table.c_str(), corpus.size(), bases.size(), full_searches, max_states, disagreements,
      unlocated);
  // The corpus must exercise both answers and every kind of fault.
  EXPECT_GE(corpus.size(), 1000u);
  for (Outcome o : outcomes) EXPECT_GE(all.by[o], 50) << refmodel::outcome_name(o);
}

}  // namespace
