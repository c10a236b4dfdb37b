// Expert parallelism's all-to-alls measured (issue 40, section 4), as real processes: pp 2 x dp 2
// x ep 2 (4 processes) on the tiny MoE model under DualPipeV. --trace shows each all-to-all as a
// slice of its own (tid 2: the forward communicator's, tid 3: the backward one's, with its bytes
// and direction), and with the overlap on at least one lies inside the other part's computation
// of the same OVERLAP_F_B; the summary prints the all-to-all time per step; --profile writes the
// measured all-to-all (layers.t.all_to_all, top_k) and ppcompile --cost --ep reads it.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "e2e_util.h"

namespace {

using namespace pprun_e2e;

const std::string kMoeConfig = std::string(PP_SOURCE_DIR) + "/examples/tiny-moe.json";
const char* const kLayout = "Et|tt|t,m|L";

std::vector<std::string> moe_run(const std::string& plan) {
  return {"--config", kMoeConfig, "--global-batch", "16", "--progress", "none", "--plan",
          plan,       "--threads", "1",              "--dp", "2",         "--ep",       "2"};
}

struct Slice {
  double ts = 0, end = 0;
};

bool inside(const Slice& a, const Slice& b) {
  return a.ts >= b.ts && a.end <= b.end;
}

TEST(AllToAllTrace, SlicesUnderTheOtherPartsComputation) {
  TempDir d;
  const std::string plan = compile(d, kLayout, 2, "DualPipeV", 8);
  const Proc run = pprun(
      concat(moe_run(plan), {"--steps", "2", "--trace", d.file("t.json"), "--overlap", "on"}));
  ASSERT_EQ(run.exit_code(), 0) << run.out;
  EXPECT_NE(run.out.find("all-to-alls (expert parallelism"), std::string::npos) << run.out;
  std::ifstream in(d.file("t.json"));
  const auto j = nlohmann::json::parse(in);
  // Per rank: its OVERLAP_F_Bs, its parts' slices and its all-to-alls, by thread.
  struct Rank {
    std::vector<Slice> overlaps, parts[2], a2a[2];
  };
  std::map<int, Rank> ranks;
  int named = 0;
  for (const auto& e : j.at("traceEvents")) {
    const int pid = e.at("pid").get<int>(), tid = e.at("tid").get<int>();
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && tid >= 2) ++named;
    if (e.at("ph") != "X") continue;
    const Slice s{e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>()};
    const std::string cat = e.at("cat").get<std::string>();
    if (cat == "OVERLAP_F_B") ranks[pid].overlaps.push_back(s);
    if (cat == "overlap_part") ranks[pid].parts[tid - 2].push_back(s);
    if (cat == "all_to_all") {
      ASSERT_TRUE(tid == 2 || tid == 3) << e.dump();
      const auto& args = e.at("args");
      EXPECT_EQ(args.at("direction"), tid == 2 ? "forward" : "backward") << e.dump();
      EXPECT_GE(args.at("sent_bytes").get<int64_t>(), 0) << e.dump();
      ranks[pid].a2a[tid - 2].push_back(s);
    }
  }
  int a2a = 0, hidden = 0, with = 0;
  for (const auto& [pid, r] : ranks) {
    a2a += static_cast<int>(r.a2a[0].size() + r.a2a[1].size());
    if (r.a2a[0].empty() && r.a2a[1].empty()) continue;  // (rank 0: E, a dense t and L)
    ++with;
    EXPECT_FALSE(r.overlaps.empty()) << pid;
    EXPECT_FALSE(r.parts[0].empty()) << pid;  // an OVERLAP_F_B ran its parts concurrently
    EXPECT_EQ(r.parts[0].size(), r.parts[1].size()) << pid;
    // An all-to-all of one part inside the other part's span, at no time within the other part's
    // own all-to-alls: the other part computed all along.
    for (int dir = 0; dir < 2; ++dir)
      for (const Slice& a : r.a2a[dir])
        for (const Slice& other : r.parts[1 - dir]) {
          if (!inside(a, other)) continue;
          bool clear = true;
          for (const Slice& b : r.a2a[1 - dir]) clear = clear && (b.end <= a.ts || b.ts >= a.end);
          hidden += clear;
        }
  }
  EXPECT_EQ(named, 2 * with);  // two threads per rank with all-to-alls
  EXPECT_GT(a2a, 0);
  EXPECT_GE(hidden, 1);
}

TEST(AllToAllProfile, PpcompileReadsTheMeasuredAllToAll) {
  TempDir d;
  const std::string plan = compile(d, kLayout, 2, "DualPipeV", 4);
  const Proc run = pprun(concat(moe_run(plan), {"--steps", "3", "--profile", d.file("p.json")}));
  ASSERT_EQ(run.exit_code(), 0) << run.out;
  std::ifstream in(d.file("p.json"));
  const auto j = nlohmann::json::parse(in);
  const double one = j.at("layers").at("t").at("all_to_all").get<double>();
  EXPECT_GT(one, 0) << j.dump();
  EXPECT_EQ(j.at("top_k").get<double>(), 2) << j.dump();  // tiny-moe.json's
  const Proc stats = ppcompile({"--layout", kLayout, "--pp", "2", "--schedule", "DualPipeV",
                                "--microbatches", "4", "--ep", "2", "--first-dense", "1", "--cost",
                                d.file("p.json"), "--emit", "stats"});
  ASSERT_EQ(stats.exit_code(), 0) << stats.out;
  std::smatch m;
  const std::regex line(R"(all-to-alls +ep 2.*: ([0-9.e+-]+) each; ([0-9.e+-]+) per step)");
  ASSERT_TRUE(std::regex_search(stats.out, m, line)) << stats.out;
  EXPECT_NEAR(std::stod(m[1].str()), one, 1e-9 + one * 1e-6) << stats.out;
  EXPECT_GT(std::stod(m[2].str()), 0) << stats.out;
}

}  // namespace
