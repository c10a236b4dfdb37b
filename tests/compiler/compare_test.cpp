// ppcompile --compare: which schedules run, on which stages, in which order, and what is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "compiler/compare.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/schedule.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

CompareOptions generic(int stages, int pp, int m) {
  CompareOptions o;
  o.layout = generic_layout(stages);
  o.pp = pp;
  o.microbatches = m;
  return o;
}

const CompareRow* row(const Comparison& c, const std::string& name) {
  for (const auto& r : c.rows)
    if (r.schedule == name) return &r;
  return nullptr;
}

TEST(Compare, EveryScheduleAtTheStagesItNeedsSortedByMakespan) {
  const Comparison c = compare_schedules(generic(8, 4, 16));
  EXPECT_EQ(c.rows.size(), all_schedules().size());  // Auto among them
  EXPECT_TRUE(c.skipped.empty());
  for (size_t i = 1; i < c.rows.size(); ++i)
    EXPECT_LE(c.rows[i - 1].sim.makespan, c.rows[i].sim.makespan);
  for (const auto& r : c.rows) {
    EXPECT_TRUE(r.report.ok()) << r.schedule;
    EXPECT_TRUE(r.plan.is_lowered()) << r.schedule;
    EXPECT_TRUE(r.fits);
  }
  EXPECT_EQ(row(c, "1F1B")->vpp, 1);
  EXPECT_EQ(row(c, "Interleaved1F1B")->vpp, 2);  // the given 8 stages on 4 ranks
  EXPECT_EQ(row(c, "ZBVZeroBubble")->placement, PlacementStyle::V);
  EXPECT_EQ(row(c, "DualPipe")->plan.copies, 2);
  EXPECT_EQ(row(c, "1F1B")->layout_note, "8 generic stages re-split into 4 (1 per rank)");
  // Re-split generic stages cost in proportion: every row computes the same model.
  const double work = row(c, "1F1B")->sim.busy[0];
  for (const auto& r : c.rows) EXPECT_NEAR(r.sim.busy[0], work, 1e-9) << r.schedule;
  // Unit costs per layer: ZB-H1's idle time is a third of 1F1B's.
  EXPECT_NEAR(row(c, "ZB-H1")->sim.makespan - work, (row(c, "1F1B")->sim.makespan - work) / 3,
              1e-9);
}

TEST(Compare, SkipsWhatCannotRunAndSaysWhy) {
  const Comparison c = compare_schedules(generic(6, 3, 12));
  std::vector<std::string> skipped;
  for (const auto& s : c.skipped) skipped.push_back(s.schedule + ": " + s.reason);
  EXPECT_EQ(skipped,
            (std::vector<std::string>{
                "DualPipe: needs an even number of ranks (they pair up from both ends), got 3"}));
  // A model layout is merged, never split: 4 stages cannot make the 2 per rank of V schedules at
  // pp 4.
  CompareOptions o;
  o.layout = parse_layout("Et|tt|tt|tL");
  o.has_model = true;
  o.pp = 4;
  o.microbatches = 8;
  const Comparison m = compare_schedules(o);
  skipped.clear();
  for (const auto& s : m.skipped) skipped.push_back(s.schedule + ": " + s.reason);
  EXPECT_EQ(skipped, (std::vector<std::string>{"ZBVZeroBubble: needs two stages per rank (8 stages "
                                               "at --pp 4); the layout's 4 stages cannot be "
                                               "merged into 8",
                                               "DualPipeV: needs two stages per rank (8 stages at "
                                               "--pp 4); the layout's 4 stages cannot be merged "
                                               "into 8"}));
  o.pp = 3;
  const Comparison none = compare_schedules(o);
  EXPECT_TRUE(none.rows.empty());
  EXPECT_EQ(none.skipped.size(), all_schedules().size());
  EXPECT_EQ(none.skipped.front().reason,
            "needs one stage per rank (3 stages at --pp 3); the layout's 4 stages cannot be merged "
            "into 3");
  EXPECT_EQ(none.skipped[2].reason, "4 stages are not a multiple of --pp 3");
}

TEST(Compare, MergesConsecutiveModelStages) {
  CompareOptions o;
  o.layout = parse_layout_file(pptest::source_path("layouts/deepseek-v3.layout"));
  o.has_model = true;
  o.pp = 16;
  o.microbatches = 32;
  const Comparison c = compare_schedules(o);
  EXPECT_TRUE(c.skipped.empty());
  const CompareRow* ofob = row(c, "1F1B");
  ASSERT_NE(ofob, nullptr);
  EXPECT_EQ(ofob->layout_note, "32 stages merged in groups of 2 into 16 (one stage per rank)");
  EXPECT_EQ(ofob->plan.layout.num_stages(), 16);
  EXPECT_EQ(stage_symbols(ofob->plan.layout.stages[0]), "E t t t t t");
  EXPECT_EQ(stage_symbols(ofob->plan.layout.stages[15]), "m L");
  EXPECT_EQ(row(c, "ZBVZeroBubble")->plan.layout.num_stages(), 32);  // as given
  EXPECT_EQ(row(c, "DualPipe")->layout_note,
            "32 stages merged in groups of 2 into 16 (one stage per rank); two model copies (2x "
            "parameters)");
}

TEST(Compare, MemoryLimitCountsParameters) {
  CompareOptions o = generic(4, 4, 16);
  CostFlags fl;
  fl.activation = 1;
  fl.params = 10;
  o.cost = cost_model_from_flags(fl);
  o.memory_limit = 16;
  const Comparison c = compare_schedules(o);
  // 1F1B: 4 in flight on rank 0 + 10 of parameters fits; DualPipe holds two stages: 20 does not.
  EXPECT_TRUE(row(c, "1F1B")->fits);
  EXPECT_EQ(row(c, "1F1B")->peak_total, 14);
  EXPECT_FALSE(row(c, "DualPipe")->fits);
  EXPECT_FALSE(row(c, "GPipe")->fits);
  std::ostringstream os;
  emit_compare_table(c, o, os);
  EXPECT_NE(os.str().find("fits (peak with parameters)"), std::string::npos);
  EXPECT_NE(os.str().find("  yes (14 B on rank 0)"), std::string::npos) << os.str();
}

// The real binary, as a user runs it.
TEST(Compare, CommandLine) {
  const auto r = pptest::run_ppcompile(
      {"--layout-file", pptest::source_path("layouts/deepseek-v3.layout"), "--pp", "16",
       "--microbatches", "64", "--compare", "--cost",
       pptest::source_path("examples/cost-deepseek-v3.json"), "--memory-limit", "80GiB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::istringstream lines(r.out);
  std::string header, columns, line;
  std::getline(lines, header);
  std::getline(lines, columns);
  EXPECT_NE(header.find("pp 16 | 64 microbatches | cost model (t: F=12 B=24 I=12 W=12"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("memory limit 80.0 GiB"), std::string::npos);
  EXPECT_EQ(columns.substr(0, 8), "schedule");
  double previous = 0;
  std::vector<std::string> seen;
  while (std::getline(lines, line) && !line.empty()) {
    std::istringstream fields(line);
    std::string name, vpp, placement;
    double makespan = 0;
    fields >> name >> vpp >> placement >> makespan;
    EXPECT_GE(makespan, previous) << line;
    previous = makespan;
    seen.push_back(name);
  }
  EXPECT_EQ(seen.size(), all_schedules().size()) << r.out;
  EXPECT_NE(r.out.find("\nconfigurations:\n  "), std::string::npos);
  // Its errors: tests/compiler/errors/ppcompile.txt.
}

}  // namespace
}  // namespace ppc
