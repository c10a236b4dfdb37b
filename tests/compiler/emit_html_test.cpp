// The HTML page: one self-contained, well-formed (XHTML) file with the comparison table, one
// timeline per schedule on one time scale, and the stats; nothing fetched from the network.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "compiler/compare.h"
#include "compiler/visualization.h"
#include "compiler/viz_common.h"
#include "tests/compiler/test_util.h"
#include "tests/compiler/viz_test_util.h"

namespace {

using pptest::parse_xml;

// A comparison assembled from real compiled, verified and simulated plans, best first.
ppc::Comparison comparison(ppc::CompareOptions& opts) {
  opts.layout = ppc::generic_layout(8);
  opts.pp = 4;
  opts.microbatches = 8;
  ppc::Comparison cmp;
  for (const char* schedule : {"Interleaved1F1B", "ZBVZeroBubble", "DualPipeV"}) {
    auto s = pptest::simulated(schedule, 8, 4, 8);
    ppc::CompareRow row;
    row.schedule = schedule;
    row.vpp = s.plan.vpp();
    row.placement = s.plan.placement.style;
    row.plan = s.plan;
    row.report = s.report;
    row.sim = s.sim;
    for (int r = 0; r < 4; ++r)
      if (s.sim.peak_memory[static_cast<size_t>(r)] > row.peak_memory) {
        row.peak_memory = s.sim.peak_memory[static_cast<size_t>(r)];
        row.peak_rank = r;
      }
    cmp.rows.push_back(std::move(row));
  }
  std::sort(cmp.rows.begin(), cmp.rows.end(),
            [](const ppc::CompareRow& a, const ppc::CompareRow& b) {
              return a.sim.makespan < b.sim.makespan;
            });
  cmp.skipped.push_back({"1F1B", "needs one stage per rank & <this> has two"});
  return cmp;
}

TEST(VizHtml, SelfContainedPageWithTableTimelinesAndStats) {
  ppc::CompareOptions opts;
  const ppc::Comparison cmp = comparison(opts);
  std::ostringstream os;
  ppc::emit_html(cmp, opts, os, ppc::TimelineOptions{});
  const std::string html = os.str();
  const auto doc = parse_xml(html);
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.front().name, "html");

  size_t rows = 0, pres = 0;
  std::vector<std::string> svg_ids;
  std::set<std::string> ids;
  double time_max = -1;
  bool same_scale = true;
  for (const auto& e : doc.elements) {
    if (e.has("id")) {
      EXPECT_TRUE(ids.insert(e.at("id")).second) << "duplicate id " << e.at("id");
    }
    if (e.name == "tr" && e.has("data-target")) ++rows;
    if (e.name == "pre") ++pres;
    if (e.name == "svg") {
      svg_ids.push_back(e.at("id"));
      // Every timeline spans the same time: the width of the time axis is the same.
      const double w = std::stod(e.at("width"));
      if (time_max < 0) time_max = w;
      same_scale = same_scale && w == time_max;
    }
    // Nothing from the network: no src/href to a URL, no external stylesheet.
    for (const char* a : {"src", "href"})
      if (e.has(a)) {
        EXPECT_EQ(e.at(a).find("//"), std::string::npos) << e.name << " " << a;
      }
    if (e.name == "link") ADD_FAILURE() << "external resource";
    if (e.name == "script") {
      EXPECT_FALSE(e.has("src"));
    }
  }
  EXPECT_EQ(rows, 3u);
  EXPECT_EQ(pres, 3u);
  EXPECT_EQ(svg_ids, (std::vector<std::string>{"plan0", "plan1", "plan2"}));
  EXPECT_TRUE(same_scale);
  for (const auto& r : cmp.rows)
    EXPECT_NE(html.find("makespan      " + ppc::viz::number(r.sim.makespan)), std::string::npos);
  EXPECT_NE(html.find("needs one stage per rank &amp; &lt;this&gt; has two"), std::string::npos);
  // The only URLs are XML namespace names (never fetched).
  for (size_t at = html.find("http"); at != std::string::npos; at = html.find("http", at + 1))
    EXPECT_EQ(html.compare(at, 18, "http://www.w3.org/"), 0) << html.substr(at, 40);
}

TEST(VizHtml, EveryActionOfEveryPlanIsOnThePage) {
  ppc::CompareOptions opts;
  const ppc::Comparison cmp = comparison(opts);
  std::ostringstream os;
  ppc::TimelineOptions t;
  t.arrows = ppc::Arrows::Off;
  ppc::emit_html(cmp, opts, os, t);
  const auto doc = parse_xml(os.str());
  ASSERT_TRUE(doc.ok) << doc.error;
  size_t boxes = 0, expected = 0;
  for (const auto& e : doc.elements) boxes += e.has("data-action");
  for (const auto& r : cmp.rows) expected += r.report.compute_actions;
  EXPECT_EQ(boxes, expected);
}

TEST(VizHtml, CliSinglePlanAndCompare) {
  auto r = pptest::run_ppcompile(
      {"--stages", "8", "--pp", "4", "--schedule", "ZBV", "--microbatches", "8", "--emit", "html"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto doc = parse_xml(r.out);
  ASSERT_TRUE(doc.ok) << doc.error;
  r = pptest::run_ppcompile(
      {"--stages", "8", "--pp", "4", "--microbatches", "8", "--compare", "--emit", "html"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  doc = parse_xml(r.out);
  ASSERT_TRUE(doc.ok) << doc.error;
  size_t svgs = 0;
  for (const auto& e : doc.elements) svgs += e.name == "svg";
  EXPECT_GE(svgs, 4u);
}

}  // namespace
