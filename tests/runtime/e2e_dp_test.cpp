// Pipeline x data parallelism end to end, as real processes (--dp N: N replicas of the plan's
// pipeline, pp x N ranks):
//  - every step's loss equals `pprun --reference` on the same global batch within 1e-5 relative,
//    for pp 2 x dp 2 under 1F1B, a zero-bubble schedule and an MTP layout with tied embeddings,
//    through the embedded launcher and through torchrun;
//  - after the run every replica holds the same parameters, bit for bit (read_param_dump refuses
//    copies that differ), and they equal the reference's within 1e-4;
//  - DualPipe's copies under data parallelism; the summary's data-parallel line;
//  - a checkpoint of a dp 2 run on a uint16 token file resumes mid-file under dp 1 and continues
//    as the uninterrupted run;
//  - a lost rank of the second replica stops every rank, each naming it.
#include <cmath>
#include <regex>

#include "e2e_dumps.h"
#include "e2e_util.h"
#include "runtime/output/param_dump.h"

namespace {

using namespace pprun_e2e;

const std::vector<std::string> kDp = concat(kModel, {"--threads", "1"});

struct DpCase {
  std::string name, layout, schedule;
  int microbatches;
  std::vector<std::string> flags;
};

void expect_parity_with_reference(const TempDir& d, const std::string& plan,
                                  const std::string& metrics, const std::string& dump,
                                  const std::vector<std::string>& flags) {
  const Proc ref =
      pprun(concat(concat(kDp, flags), {"--plan", plan, "--steps", "3", "--reference", "--metrics",
                                        d.file("r.jsonl"), "--dump-params", d.file("rd")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const auto got = losses(metrics), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), 3u);
  expect_losses_of(got, want);
  // Reading the dump fails if the replicas' copies of a parameter differ.
  expect_dumps_within(dump, d.file("rd"), 1e-4);
  // Every parameter is in the dump of each replica.
  const auto by_rank = pprt::read_param_dump_by_rank(dump);
  std::map<std::string, int> copies;
  for (const auto& [r, params] : by_rank)
    for (const auto& [name, p] : params) ++copies[name];
  for (const auto& [name, n] : copies) EXPECT_GE(n, 2) << name;
}

class DataParallel : public ::testing::TestWithParam<DpCase> {};

TEST_P(DataParallel, TwoReplicasTrainAsTheReferenceOnTheGlobalBatch) {
  const DpCase& c = GetParam();
  TempDir d;
  const std::string plan = compile(d, c.layout, 2, c.schedule, c.microbatches);
  const Proc p =
      pprun(concat(concat(kDp, c.flags), {"--plan", plan, "--dp", "2", "--steps", "3", "--metrics",
                                          d.file("m.jsonl"), "--dump-params", d.file("dump")}));
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  EXPECT_NE(p.out.find("pprun: starting 4 ranks on this machine"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("x 2 data-parallel replicas = 4 ranks"), std::string::npos) << p.out;
  // The reduction's volume, time and the part hidden behind the pipeline.
  EXPECT_TRUE(std::regex_search(
      p.out, std::regex("data parallelism: 2 replicas; per step a pipeline's ranks all-reduce "
                        "[0-9.]+ MB of gradients in [0-9]+ buckets, [0-9.]+ ms per rank from the "
                        "first bucket's start to the last one's end, [0-9.]+ ms of it waited for "
                        "after the pipeline: [0-9]+ % hidden")))
      << p.out;
  expect_parity_with_reference(d, plan, d.file("m.jsonl"), d.file("dump"), c.flags);
}

INSTANTIATE_TEST_SUITE_P(
    PipelineTimesData, DataParallel,
    ::testing::Values(DpCase{"OneFOneB", "Ettt|tttL", "1F1B", 4, {}},
                      DpCase{"ZeroBubble", "Ettt|tttL", "ZB-H1", 4, {}},
                      DpCase{"MtpTied", "Et|tt|tm|L", "Interleaved1F1B", 4, {"--tie-embeddings"}},
                      DpCase{"DualPipe", "Ettt|tttL", "DualPipe", 4, {"--tie-embeddings"}}),
    [](const ::testing::TestParamInfo<DpCase>& info) { return info.param.name; });

TEST(DataParallel, TorchrunGivesTheSameRun) {
  if (std::string(TORCHRUN_BIN).empty() || !fs::exists(TORCHRUN_BIN))
    GTEST_SKIP() << "no torchrun (PP_TORCHRUN: the torch environment's)";
  TempDir d;
  const std::string plan = compile(d, "Ettt|tttL", 2, "1F1B", 4);
  const auto args = concat(kDp, {"--plan", plan, "--dp", "2", "--steps", "3"});
  const Proc tr =
      run(concat({TORCHRUN_BIN, "--nnodes", "1", "--nproc_per_node", "4", "--master_addr",
                  "127.0.0.1", "--master_port", std::to_string(free_port()), "--monitor_interval",
                  "1", "--no_python", PPRUN_BIN},
                 concat(args, {"--metrics", d.file("m.jsonl"), "--dump-params", d.file("dump")})));
  ASSERT_EQ(tr.exit_code(), 0) << tr.out;
  EXPECT_NE(tr.out.find("x 2 data-parallel replicas = 4 ranks"), std::string::npos) << tr.out;
  expect_parity_with_reference(d, plan, d.file("m.jsonl"), d.file("dump"), {});
  // Four processes without --dp: the world does not fit the plan, and the message says how.
  const Proc wrong =
      run(concat({TORCHRUN_BIN, "--nnodes", "1", "--nproc_per_node", "4", "--master_addr",
                  "127.0.0.1", "--master_port", std::to_string(free_port()), "--monitor_interval",
                  "1", "--no_python", PPRUN_BIN},
                 concat(kDp, {"--plan", plan})));
  EXPECT_NE(wrong.exit_code(), 0);
  EXPECT_NE(wrong.out.find("the plan is for 2 ranks (pp 2), but WORLD_SIZE is 4 (from torchrun); "
                           "for 2 data-parallel replicas give --dp 2"),
            std::string::npos)
      << wrong.out;
}

std::string write_tokens(const TempDir& d, size_t n) {
  std::vector<uint16_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<uint16_t>((i * 7 + i / 13) % 256);
  std::ofstream(d.file("train.bin"), std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(2 * n));
  return d.file("train.bin");
}

// A dp 2 run on a token file saves at step 3 (of 6) and resumes mid-file under dp 1 (another
// world size): the same six losses as the uninterrupted run.
TEST(DataParallel, CheckpointOnATokenFileResumesUnderAnotherDp) {
  TempDir d;
  const std::string data = write_tokens(d, 20000);
  const std::string plan = compile(d, "Ettt|tttL", 2, "1F1B", 4);
  const auto args = concat(kDp, {"--plan", plan, "--steps", "6", "--data", data});
  const Proc whole = pprun(concat(args, {"--dp", "2", "--metrics", d.file("w.jsonl")}));
  ASSERT_EQ(whole.exit_code(), 0) << whole.out;
  EXPECT_NE(whole.out.find("data: uint16 tokens of " + data + " (20000 tokens)"), std::string::npos)
      << whole.out;
  const Proc first = pprun(concat(args, {"--dp", "2", "--stop-after", "3", "--save", d.file("ck"),
                                         "--metrics", d.file("a.jsonl")}));
  ASSERT_EQ(first.exit_code(), 0) << first.out;
  // One copy per pipeline rank: replica 1 wrote nothing.
  EXPECT_TRUE(fs::exists(d.file("ck/step-00000003/model-00002-of-00002.safetensors")));
  EXPECT_FALSE(fs::exists(d.file("ck/step-00000003/model-00003-of-00002.safetensors")));
  std::ifstream st(d.file("ck/step-00000003/trainer_state.json"));
  const auto state = nlohmann::json::parse(st);
  EXPECT_EQ(state["dp"], 2);
  EXPECT_EQ(state["data"]["format"], "uint16");
  EXPECT_EQ(state["data"]["position"], 3);
  const Proc second =
      pprun(concat(args, {"--resume", d.file("ck"), "--metrics", d.file("b.jsonl")}));
  ASSERT_EQ(second.exit_code(), 0) << second.out;
  const auto all = losses(d.file("w.jsonl"));
  auto resumed = losses(d.file("a.jsonl"));
  for (double l : losses(d.file("b.jsonl"))) resumed.push_back(l);
  ASSERT_EQ(all.size(), 6u);
  ASSERT_EQ(resumed.size(), 6u);
  for (size_t i = 0; i < 6; ++i)
    EXPECT_LE(std::fabs(resumed[i] - all[i]), 1e-5 * all[i]) << "step " << i + 1;
  // Other data is refused.
  write_tokens(d, 30000);
  const Proc other = pprun(concat(args, {"--resume", d.file("ck")}));
  EXPECT_EQ(other.exit_code(), 2) << other.out;
  EXPECT_NE(other.out.find("pprun: error: --data: the checkpoint"), std::string::npos) << other.out;
}

TEST(DataParallel, ALostRankOfTheSecondReplicaStopsEveryRank) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tttL", 2, "1F1B", 4);
  // Global rank 3 is pipeline rank 1 of replica 1.
  const Proc p = pprun(concat(kDp, {"--plan", plan, "--dp", "2", "--steps", "200", "--fault-kill",
                                    "3:3", "--timeout", "20"}));
  EXPECT_NE(p.exit_code(), 0);
  EXPECT_LT(p.seconds, 60) << p.out;
  EXPECT_NE(p.out.find("pprun: rank 3 was killed by signal 9"), std::string::npos) << p.out;
  for (int r : {0, 1, 2})
    EXPECT_NE(p.out.find("[rank " + std::to_string(r) + "] pprun: rank " + std::to_string(r) +
                         ": lost rank 3 (killed by signal 9)"),
              std::string::npos)
        << "rank " << r << "\n"
        << p.out;
}

}  // namespace
