// The dependency graph: the real `dot` binary accepts every emitted graph; one node per compute
// action, one dashed edge per SEND/RECV pair; PNG and SVG through ppcompile; a missing `dot` is a
// clear user error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <sstream>

#include "compiler/diagnostic.h"
#include "compiler/render_dot.h"
#include "compiler/visualization.h"
#include "compiler/viz_common.h"
#include "tests/compiler/test_util.h"
#include "tests/compiler/viz_test_util.h"

namespace {

using pptest::simulated;

std::string dot_of(const ppc::Plan& plan) {
  std::ostringstream os;
  ppc::emit_dot(plan, os);
  return os.str();
}

size_t count(const std::string& text, const std::regex& re) {
  return static_cast<size_t>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

TEST(VizDot, RealDotAcceptsEveryGraph) {
  pptest::TempDir dir;
  for (const auto& c : pptest::plan_cases()) {
    SCOPED_TRACE(pptest::case_name(c));
    const auto s = simulated(c.schedule, c.stages, c.pp, c.microbatches);
    const std::string graph = dot_of(s.plan);
    const std::string in = dir.write("g.dot", graph);
    const auto r = pptest::run_binary("/usr/bin/env", {"dot", "-Tsvg", in});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("<svg"), std::string::npos);
    EXPECT_TRUE(r.err.empty()) << r.err;  // no warnings either
    const auto doc = pptest::parse_xml(r.out);
    EXPECT_TRUE(doc.ok) << doc.error;

    // One node per compute action, each rank a cluster, one dashed edge per transfer.
    EXPECT_EQ(count(graph, std::regex(R"(\n    a\d+_\d+ \[label=)")), s.report.compute_actions);
    EXPECT_EQ(count(graph, std::regex(R"(subgraph cluster_rank\d+ )")),
              static_cast<size_t>(s.plan.pp()));
    EXPECT_EQ(count(graph, std::regex(R"(\[style=dashed)")), ppc::viz::transfers(s.plan).size());
  }
}

TEST(VizDot, EdgesFollowTheDependencies) {
  const auto s = simulated("1F1B", 2, 2, 2);
  const std::string g = dot_of(s.plan);
  // rank 0: 0F0 0F1 0B0 0B1; rank 1: 1F0 1B0 1F1 1B1 (nodes a<rank>_<index>).
  EXPECT_NE(g.find("  a0_0 -> a1_0 [style=dashed"), std::string::npos);  // 0F0 -> 1F0 (activation)
  EXPECT_NE(g.find("  a1_1 -> a0_2 [style=dashed"), std::string::npos);  // 1B0 -> 0B0 (gradient)
  EXPECT_NE(g.find("  a1_0 -> a1_1 [color=\"#9db4d0\""),
            std::string::npos);  // 1F0 -> 1B0 (saved activations)
  EXPECT_NE(g.find("tooltip=\"0SEND_F0 -> 1RECV_F0\""), std::string::npos);
}

TEST(VizDot, MissingDotIsAUserError) {
  try {
    ppc::render_dot("digraph{}", "svg", 0, "/nonexistent/dot");
    FAIL() << "no error";
  } catch (const ppc::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("Graphviz is not installed"), std::string::npos)
        << e.what();
  }
  try {
    ppc::render_dot("digraph{}", "svg", ppc::kMaxDotNodes + 1);
    FAIL() << "no error";
  } catch (const ppc::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("too many for dot"), std::string::npos) << e.what();
  }
  try {
    ppc::render_dot("digraph{ this is not dot", "svg", 1);
    FAIL() << "no error";
  } catch (const ppc::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'dot' failed"), std::string::npos) << e.what();
  }
}

TEST(VizDot, CliRendersPngAndSvgThroughDot) {
  pptest::TempDir dir;
  const std::vector<std::string> plan{"--stages",   "8",         "--pp",           "4",
                                      "--schedule", "DualPipeV", "--microbatches", "4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = plan;
    args.insert(args.end(), extra.begin(), extra.end());
    return pptest::run_ppcompile(args);
  };
  auto r = with({"--emit", "png", "-o", dir.file("g.png")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(pptest::slurp(dir.file("g.png")).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  r = with({"--emit", "svg", "--engine", "dot"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(pptest::parse_xml(r.out).ok);
  EXPECT_NE(r.out.find("cluster_rank3"), std::string::npos);  // dot's SVG keeps the cluster ids

  // Without dot in PATH: exit 2 and a message naming the package.
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", dir.path().c_str(), 1);
  r = with({"--emit", "png", "-o", dir.file("h.png")});
  setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("Graphviz is not installed (apt-get install graphviz)"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("h.png")));
}

}  // namespace
