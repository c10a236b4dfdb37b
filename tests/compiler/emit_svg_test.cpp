// The timeline SVG: well-formed XML (expat), every action exactly once, boxes where the simulator
// put them, arrows pointing from the sender to the receiver and forward in time, big plans
// aggregated with a note.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include "compiler/visualization.h"
#include "compiler/viz_common.h"
#include "tests/compiler/test_util.h"
#include "tests/compiler/viz_test_util.h"

namespace {

using pptest::parse_xml;
using pptest::simulated;

std::string svg_of(const pptest::Simulated& s, ppc::Arrows arrows = ppc::Arrows::On,
                   double width = 1800) {
  std::ostringstream os;
  ppc::TimelineOptions t;
  t.arrows = arrows;
  t.max_width = width;
  ppc::emit_svg(s.plan, s.sim, os, t);
  return os.str();
}

// "M x0 y0L x1 y1" -> {x0, y0, x1, y1}
std::vector<double> line_of(const std::string& d) {
  std::vector<double> v(4);
  EXPECT_EQ(std::sscanf(d.c_str(), "M%lf %lfL%lf %lf", &v[0], &v[1], &v[2], &v[3]), 4) << d;
  return v;
}

TEST(VizSvg, EveryActionExactlyOnceForEveryKindAndPlacement) {
  for (const auto& c : pptest::plan_cases()) {
    SCOPED_TRACE(pptest::case_name(c));
    const auto s = simulated(c.schedule, c.stages, c.pp, c.microbatches);
    const auto doc = parse_xml(svg_of(s));
    ASSERT_TRUE(doc.ok) << doc.error;
    EXPECT_EQ(doc.elements.front().name, "svg");
    std::multiset<std::pair<std::string, std::string>> seen;  // (rank, action)
    for (const auto& e : doc.elements) {
      if (e.has("data-action")) seen.insert({e.at("data-rank"), e.at("data-action")});
      if (e.has("data-to")) seen.insert({e.at("data-to-rank"), e.at("data-to")});
    }
    std::multiset<std::pair<std::string, std::string>> expected;
    for (int r = 0; r < s.plan.pp(); ++r)
      for (const auto& a : s.plan.lowered[static_cast<size_t>(r)])
        expected.insert({std::to_string(r), ppc::to_string(a)});
    EXPECT_EQ(seen, expected);
  }
}

TEST(VizSvg, WithoutArrowsEveryComputeActionOnceAndNoComm) {
  const auto s = simulated("InterleavedZeroBubble", 8, 4, 8);
  const auto doc = parse_xml(svg_of(s, ppc::Arrows::Off));
  ASSERT_TRUE(doc.ok) << doc.error;
  std::multiset<std::pair<std::string, std::string>> seen, expected;
  for (const auto& e : doc.elements)
    if (e.has("data-action")) seen.insert({e.at("data-rank"), e.at("data-action")});
  for (int r = 0; r < s.plan.pp(); ++r)
    for (const auto& a : s.plan.compute[static_cast<size_t>(r)])
      expected.insert({std::to_string(r), ppc::to_string(a)});
  EXPECT_EQ(seen, expected);
}

TEST(VizSvg, BoxesSitAtTheirSimulatedTimesWithoutOverlapping) {
  const auto s = simulated("DualPipeV", 8, 4, 8);
  const auto doc = parse_xml(svg_of(s));
  ASSERT_TRUE(doc.ok) << doc.error;
  std::map<std::string, std::vector<std::pair<double, double>>> lanes;  // rank -> (x, width)
  std::map<std::pair<std::string, std::string>, double> x_of;
  for (const auto& e : doc.elements) {
    if (e.name != "rect" || !e.has("data-action")) continue;
    const double x = std::stod(e.at("x")), w = std::stod(e.at("width"));
    lanes[e.at("data-rank")].push_back({x, w});
    x_of[{e.at("data-rank"), e.at("data-action")}] = x;
  }
  for (auto& [rank, boxes] : lanes) {
    std::sort(boxes.begin(), boxes.end());
    for (size_t i = 1; i < boxes.size(); ++i)
      EXPECT_LE(boxes[i - 1].first + boxes[i - 1].second, boxes[i].first + 0.02) << "rank " << rank;
  }
  // x is affine in the simulated start: check it against two actions.
  const auto& r0 = s.plan.lowered[0];
  const auto& t0 = s.sim.times[0];
  std::vector<std::pair<double, double>> pts;  // (start, x)
  for (size_t i = 0; i < r0.size(); ++i)
    if (ppc::is_compute(r0[i].kind))
      pts.push_back({t0[i].start, x_of.at({"0", ppc::to_string(r0[i])})});
  ASSERT_GE(pts.size(), 3u);
  const double scale =
      (pts.back().second - pts.front().second) / (pts.back().first - pts.front().first);
  for (const auto& [t, x] : pts)
    EXPECT_NEAR(x, pts.front().second + (t - pts.front().first) * scale, 0.02);
}

TEST(VizSvg, ArrowsPointFromSenderToReceiverAndForwardInTime) {
  for (const char* schedule : {"Interleaved1F1B", "ZBVZeroBubble", "DualPipe"}) {
    SCOPED_TRACE(schedule);
    const int stages = std::string(schedule) == "DualPipe" ? 4 : 8;
    const auto s = simulated(schedule, stages, 4, 8);
    const auto doc = parse_xml(svg_of(s));
    ASSERT_TRUE(doc.ok) << doc.error;
    // The lanes' vertical position: the idle background rect of each rank, in rank order.
    std::vector<double> lane_top;
    for (const auto& e : doc.elements)
      if (e.name == "rect" && e.has("class") && e.at("class") == "idle" && e.has("x"))
        lane_top.push_back(std::stod(e.at("y")));
    ASSERT_EQ(lane_top.size(), 4u);
    EXPECT_TRUE(std::is_sorted(lane_top.begin(), lane_top.end()));
    size_t arrows = 0;
    for (size_t i = 0; i < doc.elements.size(); ++i) {
      const auto& e = doc.elements[i];
      if (!e.has("data-to")) continue;
      ++arrows;
      const int from = std::stoi(e.at("data-rank")), to = std::stoi(e.at("data-to-rank"));
      if (e.name ==
          "path") {  // neighbouring ranks: one line from the sender's lane to the receiver's
        const auto v = line_of(e.at("d"));
        EXPECT_GE(v[2], v[0] - 1e-9) << e.at("data-action");  // forward in time
        if (to > from) {
          EXPECT_GT(v[3], v[1]);
          EXPECT_NEAR(v[3], lane_top[static_cast<size_t>(to)], 0.1);
        } else {
          EXPECT_LT(v[3], v[1]);
          EXPECT_NEAR(v[1], lane_top[static_cast<size_t>(from)], 0.1);
        }
      } else {  // around the ring: two stubs, leaving the sender's lane, entering the receiver's
        ASSERT_EQ(e.name, "g");
        EXPECT_GT(std::abs(to - from), 1);
      }
    }
    EXPECT_EQ(arrows, ppc::viz::transfers(s.plan).size());
  }
}

TEST(VizSvg, AutoArrowsTurnOffAboveTheLimitWithANote) {
  const auto s = simulated("Interleaved1F1B", 32, 16, 64);
  std::ostringstream os;
  ppc::emit_svg(s.plan, s.sim, os, ppc::TimelineOptions{});
  const auto doc = parse_xml(os.str());
  ASSERT_TRUE(doc.ok) << doc.error;
  bool note = false;
  for (const auto& e : doc.elements) {
    EXPECT_FALSE(e.has("data-to"));
    if (e.has("class") && e.at("class") == "note" &&
        e.text.find("arrows not drawn") != std::string::npos)
      note = true;
  }
  EXPECT_TRUE(note);
}

TEST(VizSvg, BigPlansAreAggregatedAndSaySo) {
  const auto s = simulated("Interleaved1F1B", 32, 8, 512);
  std::ostringstream os;
  ppc::emit_svg(s.plan, s.sim, os, ppc::TimelineOptions{});
  const auto doc = parse_xml(os.str());
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.front().at("data-aggregated"), "true");
  size_t actions = 0, lanes = 0;
  bool note = false;
  for (const auto& e : doc.elements) {
    if (e.has("data-actions")) {
      actions += std::stoul(e.at("data-actions"));
      ++lanes;
    }
    if (e.has("class") && e.at("class") == "note" && e.text.find("aggregated") != std::string::npos)
      note = true;
  }
  EXPECT_EQ(lanes, 8u);
  EXPECT_EQ(actions, s.report.compute_actions);
  EXPECT_TRUE(note);
}

TEST(VizSvg, TitleLegendAndMemoryPeaks) {
  const auto s = simulated("Interleaved1F1B", 8, 4, 8);
  const auto doc = parse_xml(svg_of(s));
  ASSERT_TRUE(doc.ok) << doc.error;
  std::string all_text;
  size_t peaks = 0, labels = 0;
  for (const auto& e : doc.elements) {
    all_text += e.text + "\n";
    if (e.name == "title" && e.text.find(": peak ") != std::string::npos)
      ++peaks;  // the peak markers' tooltips
    if (e.name == "text" && e.has("class") && e.at("class").rfind("l ", 0) == 0) ++labels;
  }
  for (const char* want :
       {"Interleaved1F1B · pp 4 · vpp 2 · 8 microbatches", "makespan 57", "bubble 15.8 %",
        "F forward", "B backward", "chunk 0..1", "idle", "peak 11", "peak 5"})
    EXPECT_NE(all_text.find(want), std::string::npos) << want;
  EXPECT_EQ(peaks, 4u);
  EXPECT_EQ(labels, s.report.compute_actions);  // every box of this small plan is labelled
}

TEST(VizSvg, EscapesNamesAndKeepsIdsUniquePerPrefix) {
  auto s = simulated("1F1B", 2, 2, 2);
  s.plan.schedule = "a<b & \"c\"";
  std::ostringstream os;
  ppc::TimelineOptions t;
  t.id_prefix = "p7";
  t.xml_declaration = false;
  ppc::emit_svg(s.plan, s.sim, os, t);
  const auto doc = parse_xml(os.str());
  ASSERT_TRUE(doc.ok) << doc.error;
  EXPECT_EQ(doc.elements.front().at("id"), "p7");
  EXPECT_EQ(doc.elements.front().at("data-schedule"), "a<b & \"c\"");
  EXPECT_EQ(os.str().rfind("<?xml", 0), std::string::npos);
  std::set<std::string> ids;
  for (const auto& e : doc.elements)
    if (e.has("id")) {
      EXPECT_TRUE(ids.insert(e.at("id")).second) << e.at("id");
    }
  EXPECT_TRUE(ids.count("p7-af") && ids.count("p7-ab"));
}

TEST(VizSvg, CliWritesTheTimeline) {
  pptest::TempDir dir;
  const std::string out = dir.file("t.svg");
  auto r =
      pptest::run_ppcompile({"--stages", "8", "--pp", "4", "--schedule", "ZBV", "--microbatches",
                             "4", "--emit", "svg", "--arrows", "off", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = parse_xml(pptest::slurp(out));
  ASSERT_TRUE(doc.ok) << doc.error;
  for (const auto& e : doc.elements) EXPECT_FALSE(e.has("data-to"));
  r = pptest::run_ppcompile({"--stages", "8", "--pp", "4", "--schedule", "ZBV", "--microbatches",
                             "4", "--emit", "svg", "--arrows", "sideways"});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
