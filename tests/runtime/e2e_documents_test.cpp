// Documents end to end (issue 41; docs/pprun.md, "Documents"): a uint16 token file whose documents
// end with --eod, trained with --pack, --pad and --varlen by pipelines of several schedules, gives
// the losses and parameters of `pprun --reference` on the same rows; bad document flags stop before
// anything runs with one line and exit code 2.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>

#include "e2e_dumps.h"
#include "e2e_util.h"

namespace {

using namespace pprun_e2e;
namespace fs = std::filesystem;

// `docs` documents of ids 1..255, each ended by id 0, of lengths from a long tail (a Pareto
// distribution of index 1.2 above 2 tokens, capped at 60: most are shorter than a sequence of 16,
// some longer, which --pack splits).
std::string write_documents(const TempDir& d, int docs) {
  std::vector<uint16_t> ids;
  uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(x >> 11) * 0x1.0p-53;
  };
  for (int i = 0; i < docs; ++i) {
    const int n = std::min(60, static_cast<int>(2.0 / std::pow(1.0 - next(), 1.0 / 1.2)));
    for (int k = 0; k < n; ++k) ids.push_back(static_cast<uint16_t>(1 + (x >> 20) % 255)), next();
    ids.push_back(0);
  }
  std::ofstream(d.file("docs.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()),
             static_cast<std::streamsize>(2 * ids.size()));
  return d.file("docs.bin");
}

struct Case {
  std::string schedule;
  std::string layout;
  int pp;
  std::vector<std::string> flags;
};

// 5 steps of the pipeline and of the reference: the same losses (1e-5) and parameters (1e-4).
void expect_reference(const Case& c) {
  TempDir d;
  const std::string data = write_documents(d, 400);
  const std::string plan = compile(d, c.layout, c.pp, c.schedule, 4);
  const auto common =
      concat(concat(kModel, {"--steps", "5", "--data", data, "--eod", "0"}), c.flags);
  const Proc pipe = pprun(concat(
      common, {"--plan", plan, "--metrics", d.file("m.jsonl"), "--dump-params", d.file("dump")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  const bool pack = c.flags.front() == "--pack";
  EXPECT_NE(pipe.out.find(fmt::format("its documents {}", pack ? "packed" : "one per sequence")),
            std::string::npos)
      << pipe.out;
  // The reference takes the whole batch as one microbatch: its loss is the mean over the step's
  // targets as cross-entropy takes it, which the pipeline's 4 microbatches of unequal target
  // counts must give by their weights.
  const Proc ref =
      pprun(concat(common, {"--reference", "--layout", c.layout, "--microbatches", "1", "--metrics",
                            d.file("r.jsonl"), "--dump-params", d.file("rdump")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const auto got = losses(d.file("m.jsonl")), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), 5u);
  expect_losses_of(got, want);
  expect_dumps_within(d.file("dump"), d.file("rdump"), 1e-4);
  // The documents change what is trained: windows of the same file give other losses.
  const Proc windows =
      pprun(concat(concat(kModel, {"--steps", "1", "--data", data}),
                   {"--plan", plan, "--reference", "--metrics", d.file("w.jsonl")}));
  ASSERT_EQ(windows.exit_code(), 0) << windows.out;
  EXPECT_GT(std::fabs(losses(d.file("w.jsonl")).at(0) - want.at(0)), 1e-4);
}

TEST(Documents, PackedEqualsTheReferenceUnder1F1B) {
  expect_reference({"1F1B", "Ett|ttL", 2, {"--pack"}});
}
TEST(Documents, PackedEqualsTheReferenceUnderZBH2) {
  expect_reference({"ZB-H2", "Ett|ttL", 2, {"--pack"}});
}
TEST(Documents, PackedEqualsTheReferenceUnderDualPipeV) {
  expect_reference({"DualPipeV", "Et|t|t|tL", 2, {"--pack"}});
}
TEST(Documents, PaddedEqualsTheReferenceUnder1F1B) {
  expect_reference({"1F1B", "Ett|ttL", 2, {"--pad"}});
}
TEST(Documents, VarlenEqualsTheReferenceUnder1F1B) {
  expect_reference({"1F1B", "Ett|ttL", 2, {"--varlen", "--granule", "4"}});
}
TEST(Documents, PackedVarlenEqualsTheReferenceUnderZBH2) {
  expect_reference({"ZB-H2", "Ett|ttL", 2, {"--pack", "--varlen", "--granule", "8"}});
}

// The microbatch orders of a --metrics file's steps (data order: empty).
std::vector<std::vector<int>> orders(const std::string& metrics) {
  std::vector<std::vector<int>> out;
  for (const nlohmann::json& j : metrics_lines(metrics))
    out.push_back(j.contains("microbatch_order") ? j.at("microbatch_order").get<std::vector<int>>()
                                                 : std::vector<int>{});
  return out;
}

// The plan's microbatch_order (ppcompile --lengths orders a 1F1B plan's microbatches for lengths
// that differ), and --replan-lengths's order planned per step for --varlen's lengths under ZB-H2
// and DualPipe (which also pairs the microbatches of its two directions): the data's
// microbatches run in that order, and the losses and parameters are the reference's on the same
// rows, whose loss is the mean over the step's targets however the microbatches are ordered.
TEST(Documents, MicrobatchOrderOfThePlanAndReplannedEqualsTheReference) {
  TempDir d;
  const std::string data = write_documents(d, 400);
  std::ofstream(d.file("lengths.txt")) << "16\n2\n16\n4\n";
  const std::string plan =
      compile(d, "Ett|ttL", 2, "1F1B", 4, "plan.json",
              {"--lengths", d.file("lengths.txt"), "--microbatch-order", "lengths"});
  const nlohmann::json planned = nlohmann::json::parse(std::ifstream(plan));
  ASSERT_TRUE(planned.contains("microbatch_order")) << planned.dump();
  const auto plan_order = planned.at("microbatch_order").get<std::vector<int>>();
  ASSERT_NE(plan_order, (std::vector<int>{0, 1, 2, 3}));
  // In data order (--no-length-buckets): the rows grouped by length are often in an order the
  // planner keeps (shortest first), and this test is about orders that differ from the data's.
  const auto common = concat(kModel, {"--steps", "5", "--data", data, "--eod", "0", "--varlen",
                                      "--granule", "4", "--no-length-buckets"});
  const Proc ref =
      pprun(concat(common, {"--reference", "--layout", "Ett|ttL", "--microbatches", "1",
                            "--metrics", d.file("r.jsonl"), "--dump-params", d.file("rdump")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const auto want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), 5u);

  const Proc ordered = pprun(concat(
      common, {"--plan", plan, "--metrics", d.file("o.jsonl"), "--dump-params", d.file("odump")}));
  ASSERT_EQ(ordered.exit_code(), 0) << ordered.out;
  for (const auto& o : orders(d.file("o.jsonl"))) EXPECT_EQ(o, plan_order);
  expect_losses_of(losses(d.file("o.jsonl")), want);
  expect_dumps_within(d.file("odump"), d.file("rdump"), 1e-4);

  for (const auto& [schedule, layout] :
       {std::pair<std::string, std::string>{"ZB-H2", "Ett|ttL"}, {"DualPipe", "Ett|ttL"}}) {
    SCOPED_TRACE(schedule);
    const std::string p = compile(d, layout, 2, schedule, 4, schedule + ".json");
    const std::string m = d.file(schedule + ".jsonl"), dump = d.file(schedule + "-dump");
    const Proc replanned = pprun(
        concat(common, {"--plan", p, "--replan-lengths", "--metrics", m, "--dump-params", dump}));
    ASSERT_EQ(replanned.exit_code(), 0) << replanned.out;
    EXPECT_NE(replanned.out.find("microbatch order replanned for the lengths of 5 steps"),
              std::string::npos)
        << replanned.out;
    int reordered = 0;
    for (std::vector<int> o : orders(m)) {
      reordered += !o.empty();
      if (o.empty()) continue;
      std::sort(o.begin(), o.end());
      EXPECT_EQ(o, (std::vector<int>{0, 1, 2, 3}));
    }
    EXPECT_GT(reordered, 0) << replanned.out;  // the documents' lengths differ
    expect_losses_of(losses(m), want);
    expect_dumps_within(dump, d.file("rdump"), 1e-4);
  }
}

// --varlen's length buckets (the default) and the data order (--no-length-buckets) cut the same
// step's rows into other microbatches: the same losses and parameters, the reference's.
TEST(Documents, VarlenWithAndWithoutLengthBucketsEqualsTheReference) {
  expect_reference({"1F1B", "Ett|ttL", 2, {"--varlen", "--granule", "4", "--no-length-buckets"}});
}

// Data parallelism over rows of documents: each replica's rows predict their own count of targets
// (400 documents of a long tail: the two replicas' counts differ), and the step's loss is the mean
// over the step's targets, every replica's: each microbatch weighs against the global count (which
// every rank computes from the rows it can draw itself), so --dp 2 gives the reference's losses
// (1e-5) and parameters (1e-4) on the same global batch.
TEST(Documents, DataParallelReplicasOfUnequalTargetsEqualTheReference) {
  TempDir d;
  const std::string data = write_documents(d, 400);
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 2);
  for (const auto& flags : {std::vector<std::string>{"--varlen", "--granule", "4"},
                            std::vector<std::string>{"--pack"}}) {
    SCOPED_TRACE(flags.front());
    const auto common =
        concat(concat(kModel, {"--steps", "3", "--data", data, "--eod", "0"}), flags);
    const std::string m = d.file(flags.front() + ".jsonl"), dump = d.file(flags.front() + "-d");
    const Proc pipe =
        pprun(concat(common, {"--plan", plan, "--dp", "2", "--metrics", m, "--dump-params", dump}));
    ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
    EXPECT_NE(pipe.out.find("x 2 data-parallel replicas = 4 ranks"), std::string::npos) << pipe.out;
    const std::string rm = d.file(flags.front() + "-r.jsonl"),
                      rdump = d.file(flags.front() + "-rd");
    const Proc ref = pprun(concat(common, {"--reference", "--layout", "Ett|ttL", "--microbatches",
                                           "1", "--metrics", rm, "--dump-params", rdump}));
    ASSERT_EQ(ref.exit_code(), 0) << ref.out;
    const auto want = losses(rm);
    ASSERT_EQ(want.size(), 3u);
    expect_losses_of(losses(m), want);
    expect_dumps_within(dump, rdump, 1e-4);
  }
}

// pprun --profile under --varlen: the microbatches' parts grouped by their lengths, the file's own
// entries at the length most ran at and one `lengths.measured` entry per other length, which
// ppcompile --cost reads and interpolates for the lengths of --lengths.
TEST(Documents, MeasuredCostsPerLengthUnderVarlen) {
  TempDir d;
  const std::string data = write_documents(d, 400);
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const Proc p =
      pprun(concat(kModel, {"--steps", "4", "--data", data, "--eod", "0", "--varlen", "--granule",
                            "4", "--plan", plan, "--profile", d.file("p.json")}));
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(d.file("p.json")));
  ASSERT_TRUE(j.contains("lengths")) << j.dump();
  const auto& l = j.at("lengths");
  const int own = l.at("seq_len").get<int>();
  std::set<int> seen = {own};
  ASSERT_GE(l.at("measured").size(), 1u) << j.dump();
  for (const nlohmann::json& e : l.at("measured")) {
    const int n = e.at("seq_len").get<int>();
    EXPECT_TRUE(seen.insert(n).second) << n;
    EXPECT_EQ(n % 4, 0) << n;
    ASSERT_EQ(e.at("stages").size(), 2u) << e.dump();
    for (const nlohmann::json& s : e.at("stages"))
      EXPECT_GT(s.at("f").get<double>(), 0) << e.dump();
  }
  for (const int n : seen) EXPECT_TRUE(n >= 4 && n <= 16) << n;
  std::ofstream(d.file("lengths.txt")) << "4\n16\n8\n12\n";
  const Proc stats = ppcompile({"--layout", "Ett|ttL", "--pp", "2", "--schedule", "1F1B",
                                "--microbatches", "4", "--cost", d.file("p.json"), "--lengths",
                                d.file("lengths.txt"), "--emit", "stats"});
  EXPECT_EQ(stats.exit_code(), 0) << stats.out;
  EXPECT_NE(stats.out.find("makespan"), std::string::npos) << stats.out;
}

void expect_user_error(const Proc& p, const std::string& message, const TempDir& d) {
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find(message), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("step 1"), std::string::npos) << p.out;
  EXPECT_FALSE(fs::exists(d.file("m.jsonl")));
}

TEST(Documents, BadFlagsStopBeforeAnythingRuns) {
  TempDir d;
  const std::string data = write_documents(d, 50);
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const auto run = concat(kModel, {"--plan", plan, "--metrics", d.file("m.jsonl")});
  expect_user_error(pprun(concat(run, {"--data", data, "--eod", "256", "--pack"})),
                    "pprun: error: --eod: 256 is not a token id of the model (vocab 256)", d);
  expect_user_error(
      pprun(concat(run, {"--data", data, "--pack"})),
      "pprun: error: --pack: '" + data + "' has no documents: give --eod ID, or a Megatron dataset",
      d);
  expect_user_error(pprun(concat(run, {"--pack", "--eod", "0"})),
                    "pprun: error: --eod: needs --data FILE", d);
  expect_user_error(pprun(concat(run, {"--pack"})),
                    "pprun: error: --pack: needs --data FILE: documents come from a data file", d);
  expect_user_error(
      pprun(concat(run, {"--data", data, "--eod", "0", "--varlen", "--granule", "5"})),
      "pprun: error: --granule: 5 does not divide --seq-len 16", d);
  expect_user_error(pprun(concat(run, {"--data", data, "--eod", "0", "--granule", "4"})),
                    "pprun: error: --granule: needs --varlen", d);
  expect_user_error(pprun(concat(run, {"--data", data, "--eod", "0", "--no-length-buckets"})),
                    "pprun: error: --no-length-buckets: needs --varlen", d);
  expect_user_error(pprun(concat(run, {"--data", data, "--eod", "0", "--replan-lengths"})),
                    "pprun: error: --replan-lengths: needs --varlen: the microbatches' lengths "
                    "are --varlen's",
                    d);
  expect_user_error(
      pprun(concat(kModel, {"--reference", "--layout", "Ett|ttL", "--microbatches", "1",
                            "--metrics", d.file("m.jsonl"), "--data", data, "--eod", "0",
                            "--varlen", "--replan-lengths"})),
      "pprun: error: --replan-lengths: orders a pipeline's microbatches, and --reference runs none",
      d);
  expect_user_error(
      pprun(concat(run,
                   {"--config", std::string(PP_SOURCE_DIR) + "/examples/tiny-moe.json", "--dp", "2",
                    "--ep", "2", "--data", data, "--eod", "0", "--varlen", "--replan-lengths"})),
      "pprun: error: --replan-lengths: each replica orders its own microbatches, and --ep 2's "
      "all-to-alls need one order across an expert group",
      d);
  std::ofstream(d.file("bad-cost.json")) << "{\"layers\": {\"t\": {\"f\": -1}}}";
  expect_user_error(
      pprun(concat(run, {"--data", data, "--eod", "0", "--varlen", "--replan-lengths",
                         "--replan-costs", d.file("bad-cost.json")})),
      "pprun: error: --replan-costs: " + d.file("bad-cost.json") + ": layers.t.f: ", d);
}

}  // namespace
