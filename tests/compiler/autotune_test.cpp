// --autotune and --balance as a user runs them: the winner verifies, is never worse than what
// --compare shows, and is the plan written with --emit json; the flags (their errors are in
// tests/compiler/errors/ppcompile.txt).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "compiler/autotune.h"
#include "compiler/balance.h"
#include "compiler/compare.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

using pptest::run_ppcompile;

TEST(MicrobatchCounts, ListsAndRanges) {
  EXPECT_EQ(parse_microbatch_counts("64", 16), std::vector<int>({64}));
  EXPECT_EQ(parse_microbatch_counts("32,8,16,8", 4), std::vector<int>({8, 16, 32}));
  EXPECT_EQ(parse_microbatch_counts("8-64", 16), std::vector<int>({16, 32, 48, 64}));
  EXPECT_EQ(parse_microbatch_counts("8-40:8", 16), std::vector<int>({8, 16, 24, 32, 40}));
  EXPECT_EQ(parse_microbatch_counts("4,8-16", 8), std::vector<int>({4, 8, 16}));
  for (const char* bad : {"", "x", "8,", ",8", "0", "8-", "-8", "64-8", "9-15", "8-64:0", "8--9",
                          "1-1000000:1", "2000000"}) {
    try {
      parse_microbatch_counts(bad, 16);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UserError& e) {
      EXPECT_EQ(e.where().input, "--microbatches") << bad;
      EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    }
  }
}

AutotuneOptions small_case(const char* cost_file) {
  AutotuneOptions o;
  o.layout = parse_layout("Ett|tt|tt|tt|tt|tt|tt|tmL");  // 8 stages: what --compare can run
  o.pp = 4;
  o.microbatches = {8};
  if (cost_file) o.cost = read_cost_model(pptest::source_path(cost_file));
  return o;
}

CompareOptions compare_options(const AutotuneOptions& a, int m) {
  CompareOptions c;
  c.layout = a.layout;
  c.has_model = true;
  c.pp = a.pp;
  c.microbatches = m;
  c.cost = a.cost;
  c.memory_limit = a.memory_limit;
  return c;
}

// The winner, compiled again from its layout string, verifies and simulates to its row, and is
// the plan the row holds (ppcompile --autotune --emit writes that one); the other rows hold none.
void expect_winner_reproduces(const Autotune& at, const AutotuneOptions& o) {
  ASSERT_FALSE(at.rows.empty());
  const AutotuneRow& w = at.rows.front();
  CompileOptions co;
  co.layout = parse_layout(w.layout);
  co.has_model = true;
  co.pp = o.pp;
  co.schedule = w.row.schedule;
  co.microbatches = w.microbatches;
  const CostModel cost = o.cost.unit ? unit_layer_costs() : o.cost;
  const CompareRow again = measure_plan(compile(co), cost, o.memory_limit);  // verifies
  EXPECT_TRUE(again.report.ok());
  EXPECT_DOUBLE_EQ(again.sim.makespan, w.row.sim.makespan);
  EXPECT_EQ(again.fits, w.row.fits);
  EXPECT_EQ(w.row.plan, again.plan);
  EXPECT_EQ(w.row.plan.layout.source, w.layout);
  EXPECT_TRUE(w.row.report.ok());
  ASSERT_EQ(w.row.sim.times.size(), again.sim.times.size());
  for (size_t r = 0; r < again.sim.times.size(); ++r) {
    ASSERT_EQ(w.row.sim.times[r].size(), again.sim.times[r].size());
    for (size_t i = 0; i < again.sim.times[r].size(); ++i) {
      EXPECT_DOUBLE_EQ(w.row.sim.times[r][i].start, again.sim.times[r][i].start);
      EXPECT_DOUBLE_EQ(w.row.sim.times[r][i].end, again.sim.times[r][i].end);
    }
  }
  EXPECT_EQ(w.row.sim.memory.size(), again.sim.memory.size());
  for (size_t i = 1; i < at.rows.size(); ++i) EXPECT_TRUE(at.rows[i].row.plan.compute.empty()) << i;
}

TEST(Autotune, WinnerIsNeverWorseThanAnythingCompareShows) {
  for (const char* cost : {static_cast<const char*>(nullptr), "examples/cost-deepseek-v3.json",
                           "examples/cost-uniform.json"}) {
    const AutotuneOptions o = small_case(cost);
    const Autotune at = autotune(o);
    const Comparison cmp = compare_schedules(compare_options(o, 8));
    ASSERT_FALSE(cmp.rows.empty());
    for (const CompareRow& r : cmp.rows)
      EXPECT_LE(at.rows.front().row.sim.makespan, r.sim.makespan)
          << (cost ? cost : "unit") << ": " << r.schedule;
    for (size_t i = 1; i < at.rows.size(); ++i)
      EXPECT_LE(at.rows[i - 1].row.sim.makespan, at.rows[i].row.sim.makespan);
    expect_winner_reproduces(at, o);
    // Every schedule got a balanced row (vpp 1 and 2 for those that take any).
    int balanced = 0;
    for (const AutotuneRow& r : at.rows) balanced += r.balanced;
    EXPECT_GE(balanced, 10);
  }
}

TEST(Autotune, MemoryLimitWinnerFitsAndBeatsEveryRowThatFits) {
  AutotuneOptions o = small_case("examples/cost-deepseek-v3.json");
  // The median of --compare's peaks: some configurations fit, some do not.
  const Comparison free_cmp = compare_schedules(compare_options(o, 8));
  std::vector<double> peaks;
  for (const CompareRow& r : free_cmp.rows) peaks.push_back(r.peak_total);
  std::sort(peaks.begin(), peaks.end());
  o.memory_limit = peaks[peaks.size() / 2];
  const Comparison cmp = compare_schedules(compare_options(o, 8));
  const Autotune at = autotune(o);
  ASSERT_FALSE(at.rows.empty());
  EXPECT_TRUE(at.rows.front().row.fits);
  EXPECT_LE(at.rows.front().row.peak_total, *o.memory_limit);
  int fitting = 0;
  for (const CompareRow& r : cmp.rows)
    if (r.fits) {
      ++fitting;
      EXPECT_LE(at.rows.front().row.sim.makespan, r.sim.makespan) << r.schedule;
    }
  EXPECT_GT(fitting, 0);
  EXPECT_LT(fitting, static_cast<int>(cmp.rows.size()));
  // Rows that fit come first.
  bool seen_misfit = false;
  for (const AutotuneRow& r : at.rows) {
    if (!r.row.fits) seen_misfit = true;
    EXPECT_FALSE(seen_misfit && r.row.fits);
  }
  expect_winner_reproduces(at, o);
}

TEST(Autotune, SeveralMicrobatchCountsRankByTimePerMicrobatch) {
  AutotuneOptions o = small_case("examples/cost-deepseek-v3.json");
  o.microbatches = {4, 8, 16};
  o.schedules = {"1F1B", "ZBVZeroBubble"};
  const Autotune at = autotune(o);
  EXPECT_TRUE(at.several_counts);
  for (size_t i = 1; i < at.rows.size(); ++i)
    EXPECT_LE(at.rows[i - 1].per_microbatch(), at.rows[i].per_microbatch());
  std::set<int> counts;
  for (const AutotuneRow& r : at.rows) {
    counts.insert(r.microbatches);
    EXPECT_TRUE(r.row.schedule == "1F1B" || r.row.schedule == "ZBVZeroBubble") << r.row.schedule;
  }
  EXPECT_EQ(counts, std::set<int>({4, 8, 16}));
  // The winner at its own count is never worse than --compare there.
  const AutotuneRow& w = at.rows.front();
  for (const CompareRow& r : compare_schedules(compare_options(o, w.microbatches)).rows)
    if (r.schedule == "1F1B" || r.schedule == "ZBVZeroBubble") {
      EXPECT_LE(w.row.sim.makespan, r.sim.makespan) << r.schedule;
    }
  expect_winner_reproduces(at, o);
}

TEST(Autotune, ThreadsDoNotChangeTheResult) {
  AutotuneOptions o = small_case("examples/cost-deepseek-v3.json");
  o.threads = 1;
  const Autotune one = autotune(o);
  o.threads = 3;
  const Autotune three = autotune(o);
  ASSERT_EQ(one.rows.size(), three.rows.size());
  for (size_t i = 0; i < one.rows.size(); ++i) {
    EXPECT_EQ(one.rows[i].layout, three.rows[i].layout);
    EXPECT_EQ(one.rows[i].row.schedule, three.rows[i].row.schedule);
    EXPECT_EQ(one.rows[i].row.sim.makespan, three.rows[i].row.sim.makespan);
  }
  EXPECT_EQ(one.rows.front().row.plan, three.rows.front().row.plan);  // the winner's, kept
  EXPECT_EQ(one.simulations, three.simulations);
}

// --- the command line ---------------------------------------------------------------------------

double stat(const std::string& stats, const std::string& key) {
  const size_t at = stats.find("\n" + key);
  if (at == std::string::npos) return -1;
  return std::strtod(stats.c_str() + stats.find_first_not_of(' ', at + 1 + key.size()), nullptr);
}

TEST(CliBalance, DeepSeekV3MeetsTheIssuesFigure) {
  const std::vector<std::string> args = {
      "--layout",   "Et*61,mL",        "--pp",
      "16",         "--vpp",           "2",
      "--schedule", "Interleaved1F1B", "--microbatches",
      "64",         "--cost",          pptest::source_path("examples/cost-deepseek-v3.json"),
      "--balance"};
  auto stats_args = args;
  stats_args.insert(stats_args.end(), {"--emit", "stats"});
  const auto r = run_ppcompile(stats_args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double makespan = stat(r.out, "makespan");
  EXPECT_GT(makespan, 0);
  EXPECT_LE(makespan, 11200);
  EXPECT_NE(r.out.find("verified      yes, deadlock-free"), std::string::npos);
  EXPECT_NE(r.out.find("\nbalanced      "), std::string::npos);
  // The layout string compiles, without --balance, to the same makespan.
  auto ls_args = args;
  ls_args.insert(ls_args.end(), {"--emit", "layout-string"});
  const auto ls = run_ppcompile(ls_args);
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  const std::string layout = ls.out.substr(0, ls.out.size() - 1);
  const auto again = run_ppcompile(
      {"--layout", layout, "--pp", "16", "--schedule", "Interleaved1F1B", "--microbatches", "64",
       "--cost", pptest::source_path("examples/cost-deepseek-v3.json"), "--emit", "stats"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(stat(again.out, "makespan"), makespan);
}

TEST(CliAutotune, TableAndTheWinnersPlan) {
  pptest::TempDir dir;
  const std::string cost = pptest::source_path("examples/cost-deepseek-v3.json");
  const std::vector<std::string> base = {"--layout",       "Ett|tt|tt|tt|tt|tt|tt|tmL",
                                         "--pp",           "4",
                                         "--microbatches", "8",
                                         "--cost",         cost,
                                         "--memory-limit", "80GiB",
                                         "--autotune"};
  const auto table = run_ppcompile(base);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.err, "");  // progress only on a terminal
  EXPECT_NE(table.out.find("autotune: layout"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("\nwinner: "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("peak memory per rank"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("  1  "), std::string::npos) << table.out;
  // The winner's makespan is the first row's.
  const size_t row1 = table.out.find("\n  1  ");
  ASSERT_NE(row1, std::string::npos);

  auto json_args = base;
  const std::string plan = dir.file("plan.json");
  json_args.insert(json_args.end(), {"--emit", "json", "-o", plan});
  const auto js = run_ppcompile(json_args);
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const auto back = run_ppcompile({"--from-json", plan, "--cost", cost, "--emit", "stats"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_NE(back.out.find("verified      yes, deadlock-free"), std::string::npos) << back.out;
  const double makespan = stat(back.out, "makespan");
  // The table shows the makespan with 6 significant digits.
  EXPECT_NE(table.out.substr(row1, 120).find(fmt::format("{:.6g}", makespan)), std::string::npos)
      << table.out.substr(row1, 120) << " vs " << makespan;
}

}  // namespace
}  // namespace ppc
