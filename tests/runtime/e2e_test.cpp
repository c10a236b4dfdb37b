// pprun end to end, as a user runs it: the real ppcompile, pprun and torchrun binaries,
// real processes, real c10d Gloo.
//  - Loss parity: for every schedule ppcompile has at pp 2 and 4 (vpp 2 where the schedule has
//    virtual stages), 5 AdamW steps give the losses of `pprun --reference` within 1e-5 relative
//    and the same parameters within 1e-4, and each rank's measured peak of in-flight activations
//    is the plan's. (Models with MTP, tied embeddings and DualPipe at more sizes:
//    e2e_models_test.cpp.)
//  - Launchers: pprun alone, torchrun, SLURM's environment.
//  - Faults: bad input stops before any compute with exit code 2; a rank killed mid-step stops
//    every other rank, each naming the lost rank, and pprun exits non-zero.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "e2e_dumps.h"
#include "e2e_util.h"

namespace {

using namespace pprun_e2e;

// 8 decoder layers over `stages` stages: "Etttt|ttttL", "Ett|tt|tt|ttL", "Et|t|t|t|t|t|t|tL".
std::string layout_of(int stages) {
  std::string s = "E";
  for (int i = 0; i < stages; ++i) {
    if (i) s += "|";
    s += std::string(static_cast<size_t>(8 / stages), 't');
  }
  return s + "L";
}

// --- loss parity, every schedule --------------------------------------------------------------

struct Case {
  std::string schedule;
  int pp;
  int vpp;  // stages per rank
};

// Every schedule ppcompile has or is expected to have. A schedule missing from this build's
// ppcompile is skipped, and EveryScheduleOfPpcompileIsCovered fails if ppcompile has one this
// list lacks. (DualPipe runs two model copies of pp layout stages: vpp 1 here.)
const std::vector<std::pair<std::string, int>> kSchedules = {
    {"GPipe", 1},     {"1F1B", 1},     {"Interleaved1F1B", 2},       {"LoopedBFS", 2},
    {"ZB-H1", 1},     {"ZB-H2", 1},    {"InterleavedZeroBubble", 2}, {"ZBVZeroBubble", 2},
    {"DualPipeV", 2}, {"DualPipe", 1}, {"Combined1F1B", 1}};

std::vector<Case> parity_cases() {
  std::vector<Case> out;
  for (const auto& [s, vpp] : kSchedules)
    for (int pp : {2, 4}) out.push_back({s, pp, vpp});
  return out;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule << " pp " << c.pp << " vpp " << c.vpp;
}

class LossParity : public ::testing::TestWithParam<Case> {};

TEST_P(LossParity, StepsAndParametersEqualTheUnpipelinedReference) {
  const Case c = GetParam();
  if (!schedules_of_ppcompile().count(c.schedule))
    GTEST_SKIP() << c.schedule << " is not in this ppcompile";
  TempDir d;
  const int mbs = 2 * c.pp;
  const std::string plan = compile(d, layout_of(c.pp * c.vpp), c.pp, c.schedule, mbs);
  const auto common = concat(kModel, {"--plan", plan, "--steps", "5"});
  const Proc pipe =
      pprun(concat(common, {"--metrics", d.file("m.jsonl"), "--dump-params", d.file("dump")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  const Proc ref = pprun(concat(
      common, {"--reference", "--metrics", d.file("r.jsonl"), "--dump-params", d.file("rdump")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;

  const auto got = losses(d.file("m.jsonl")), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), 5u);
  expect_losses_of(got, want);

  const auto dumps = expect_dumps_within(d.file("dump"), d.file("rdump"), 1e-4);
  EXPECT_EQ(dumps.cmp.compared,
            1u + 9u * 8u + 2u);  // embedding, 8 decoder layers of 9, final norm and head

  // The runtime's count of in-flight activations peaks where the compiler said it would.
  expect_peak_inflight_as_predicted(pipe.out);
}

INSTANTIATE_TEST_SUITE_P(EverySchedule, LossParity, ::testing::ValuesIn(parity_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name =
                               info.param.schedule + "_pp" + std::to_string(info.param.pp);
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(LossParity, EveryScheduleOfPpcompileIsCovered) {
  std::set<std::string> covered;
  for (const auto& [s, vpp] : kSchedules) covered.insert(s);
  covered.insert("Auto");  // synthesized plans: e2e_synth_test.cpp
  for (const std::string& s : schedules_of_ppcompile())
    EXPECT_TRUE(covered.count(s)) << s << " has no loss-parity test";
}

// pprun's default threads per rank: the cores of this machine over its ranks.
int default_threads(int ranks) {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
}

// The banner names each thread pool of the rank and its size: every one must be `threads`. The
// BLAS library's own pool must be among them: MKL in PyTorch's x86 builds (at::set_num_threads
// sets it per thread), OpenBLAS in others (whose pool ignores at::set_num_threads, issue 11).
void expect_thread_pools(const std::string& out, int threads) {
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"((\d+) threads? per rank \(([^)]*)\))")))
      << out;
  EXPECT_EQ(m[1], std::to_string(threads)) << m[0];
  const std::string pools = m[2];
  EXPECT_EQ(pools.find("OpenMP " + std::to_string(threads)), 0u) << m[0];
  const std::regex pool(R"(([A-Za-z]+) (\d+))");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(pools.begin(), pools.end(), pool);
       it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1]);
    EXPECT_EQ((*it)[2], std::to_string(threads)) << m[0];
  }
  EXPECT_TRUE(names.count("MKL") || names.count("OpenBLAS")) << "no BLAS pool in " << m[0];
}

// --- launchers
// ------------------------------------------------------------------------------------

TEST(Launch, PprunAloneSpawnsOneProcessPerRankWithPrefixedOutput) {
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const Proc p =
      pprun(concat(kSize, {"--plan", plan, "--steps", "3", "--metrics", d.file("m.jsonl")}));
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  EXPECT_NE(p.out.find("pprun: starting 4 ranks on this machine"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("[rank 0] step"), std::string::npos)
      << "only the loss rank reports progress";
  EXPECT_NE(p.out.find("[rank 3] step 3/3 loss"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("[rank 3] pprun: peak in-flight activations per rank: 4 3 2 1 (the plan "
                       "predicts 4 3 2 1)"),
            std::string::npos);
  EXPECT_EQ(losses(d.file("m.jsonl")).size(), 3u);
  expect_thread_pools(p.out, default_threads(4));
}

TEST(Launch, EveryThreadPoolFollowsTheThreadsFlag) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  for (const int threads : {1, 3}) {
    const auto flags = concat(kSize, {"--steps", "1", "--threads", std::to_string(threads)});
    const Proc p = pprun(concat(flags, {"--plan", plan}));
    ASSERT_EQ(p.exit_code(), 0) << p.out;
    expect_thread_pools(p.out, threads);
    const Proc r = pprun(concat(flags, {"--plan", plan, "--reference"}));
    ASSERT_EQ(r.exit_code(), 0) << r.out;
    expect_thread_pools(r.out, threads);
  }
}

TEST(Launch, TorchrunGivesTheSameRun) {
  if (std::string(TORCHRUN_BIN).empty() || !fs::exists(TORCHRUN_BIN))
    GTEST_SKIP() << "no torchrun (PP_TORCHRUN: the torch environment's)";
  TempDir d;
  const std::string plan = compile(d, "Et|tt|tt|ttL", 2, "Interleaved1F1B", 4);
  const auto args = concat(kModel, {"--plan", plan, "--steps", "3"});
  const Proc alone = pprun(concat(args, {"--metrics", d.file("alone.jsonl")}));
  ASSERT_EQ(alone.exit_code(), 0) << alone.out;
  // torchrun of the project's torch environment (PP_TORCHRUN); its static rendezvous serves the
  // store itself, so rank 0 connects as a client. 127.0.0.1 and a free port
  // rather than --standalone (localhost:29400): no name lookup, no clash with a parallel test.
  const Proc tr =
      run(concat({TORCHRUN_BIN, "--nnodes", "1", "--nproc_per_node", "2", "--master_addr",
                  "127.0.0.1", "--master_port", std::to_string(free_port()), "--monitor_interval",
                  "1", "--no_python", PPRUN_BIN},
                 concat(args, {"--metrics", d.file("torchrun.jsonl")})));
  ASSERT_EQ(tr.exit_code(), 0) << tr.out;
  EXPECT_NE(tr.out.find("Interleaved1F1B on 2 ranks"), std::string::npos) << tr.out;
  // torchrun exports OMP_NUM_THREADS=1; pprun's default (cores / ranks) still decides.
  expect_thread_pools(tr.out, default_threads(2));
  expect_thread_pools(alone.out, default_threads(2));
  const auto a = losses(d.file("alone.jsonl")), b = losses(d.file("torchrun.jsonl"));
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(a[i], b[i]);
}

// --- faults
// ---------------------------------------------------------------------------------------

TEST(Faults, ARankKilledMidStepStopsEveryRank) {
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const Proc p = pprun(concat(kModel, {"--plan", plan, "--steps", "200", "--fault-kill", "2:3",
                                       "--timeout", "10", "--metrics", d.file("m.jsonl")}));
  EXPECT_NE(p.exit_code(), 0);
  EXPECT_LT(p.seconds, 40) << p.out;
  EXPECT_NE(p.out.find("pprun: rank 2 was killed by signal 9"), std::string::npos) << p.out;
  for (int r : {0, 1, 3})
    EXPECT_NE(p.out.find("[rank " + std::to_string(r) + "] pprun: rank " + std::to_string(r) +
                         ": lost rank 2 (killed by signal 9)"),
              std::string::npos)
        << p.out;
  // The metrics hold exactly the steps that finished (1 and 2), appended as each ended; no
  // temporary file is left.
  std::vector<int> steps;
  for (const nlohmann::json& j : metrics_lines(d.file("m.jsonl"))) steps.push_back(j.at("step"));
  EXPECT_EQ(steps, (std::vector<int>{1, 2}));
  for (const auto& e : fs::directory_iterator(d.file("")))
    EXPECT_EQ(e.path().filename().string().find("m.jsonl."), std::string::npos)
        << "left behind: " << e.path();
}

// Under SLURM (no launcher process watching the ranks; rank 0 serves the store), each surviving
// rank finds out by itself which rank is gone.
TEST(Faults, ARankKilledUnderSlurmIsNamedByEveryOtherRank) {
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const std::string port = std::to_string(free_port());
  const auto t0 = Clock::now();
  std::vector<Proc> procs;
  for (int r = 0; r < 4; ++r)
    procs.push_back(start(
        concat({PPRUN_BIN}, concat(kModel, {"--plan", plan, "--steps", "200", "--fault-kill", "2:3",
                                            "--timeout", "10"})),
        {"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=4",
         "SLURM_LOCALID=" + std::to_string(r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}));
  for (auto& p : procs) finish(p, std::chrono::seconds(60), t0);
  EXPECT_EQ(procs[2].exit_code(), 128 + SIGKILL);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(procs[static_cast<size_t>(r)].exit_code(), 1) << procs[static_cast<size_t>(r)].out;
    EXPECT_LT(procs[static_cast<size_t>(r)].seconds, 10 + 15) << "rank " << r;
    EXPECT_NE(procs[static_cast<size_t>(r)].out.find("pprun: rank " + std::to_string(r) +
                                                     ": lost rank 2 ("),
              std::string::npos)
        << procs[static_cast<size_t>(r)].out;
  }
}

// A rank stuck in a host call that never returns (--fault-kill R:S:hang: its process and its
// connections stay alive, as in issue 38's hang on a GPU) costs seconds, not --timeout's 300:
// from the second step the ranks wait ten times the slowest step (at least 10 s). Every rank says
// where it was in its plan: the action, the host call, and the partner action it waited for.
TEST(Faults, AHangingRankIsNamedWithItsPlaceInSeconds) {
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const Proc p =
      pprun(concat(kModel, {"--plan", plan, "--steps", "200", "--fault-kill", "1:3:hang"}));
  EXPECT_NE(p.exit_code(), 0) << p.out;
  EXPECT_LT(p.seconds, 60) << p.out;
  std::cout << "a hang at step 3 stopped the run after " << p.seconds << " s\n";
  auto line_of = [&](int r) {
    const std::string head = fmt::format("[rank {}] pprun: rank {}: ", r, r);
    const size_t at = p.out.find(head);
    return at == std::string::npos ? std::string() : p.out.substr(at, p.out.find('\n', at) - at);
  };
  // The hanging rank: its action and the host call it is stuck in.
  const std::string hung = line_of(1);
  EXPECT_NE(hung.find("it was stopped at step 3, action "), std::string::npos) << p.out;
  EXPECT_NE(hung.find(": in a host call that does not return (fault injection"), std::string::npos)
      << p.out;
  // The others: each at an action of step 3, the first to give up naming the partner it waited for
  // on rank 1 (a neighbour of rank 1 waits for it first).
  bool timed_out = false;
  for (int r : {0, 2, 3}) {
    const std::string l = line_of(r);
    EXPECT_TRUE(l.find("it was stopped at step 3, action ") != std::string::npos ||
                l.find("it stopped at action ") != std::string::npos)
        << "rank " << r << ": " << p.out;
    if (l.find("imed out") != std::string::npos &&  // Gloo's "Timed out waiting 10000ms ..."
        l.find("it waited for rank 1's action ") != std::string::npos)
      timed_out = true;
  }
  EXPECT_TRUE(timed_out) << p.out;
}

// Bad input: one line naming where, exit code 2, nothing computed, nothing written.
void expect_user_error(const Proc& p, const std::string& message, const TempDir& d) {
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find(message), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("step 1"), std::string::npos) << p.out;
  EXPECT_FALSE(fs::exists(d.file("m.jsonl")));
}

TEST(Faults, PlanForAnotherWorldSize) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  expect_user_error(
      pprun({"--plan", plan, "--metrics", d.file("m.jsonl")},
            {"RANK=0", "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
             "MASTER_PORT=" + std::to_string(free_port())}),
      "pprun: rank 0: error: environment: the plan is for 2 ranks (pp 2), but WORLD_SIZE is 3", d);
}

// Issue 42: --recompute's and --offload's bad text, a stage or layer kind the plan lacks, and
// offloading on the CPU.
TEST(Faults, BadRecomputeAndOffload) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  auto run = [&](const std::string& flag, const std::string& value) {
    return pprun({"--plan", plan, "--metrics", d.file("m.jsonl"), flag, value});
  };
  expect_user_error(run("--recompute", "fast"),
                    "--recompute: 'fast': unknown mode \"fast\" (expected none, selective, full "
                    "or offload)",
                    d);
  expect_user_error(run("--recompute", "full,stage2:none"),
                    "--recompute: 'all:full,stage2:none': stage2 does not exist (the plan has 2 "
                    "stages: stage0 to stage1)",
                    d);
  expect_user_error(run("--recompute", "m:full"),
                    "--recompute: 'm:full': no stage holds a layer 'm'", d);
  expect_user_error(run("--offload", "stage0"),
                    "--offload: 'stage0:offload' offloads activations to host memory, which needs "
                    "a GPU (--device cuda)",
                    d);
}

// Issue 42: --offload on the CPU with the tests' host copy runs, the plan's stages offloaded (the
// summary's bytes offloaded per rank: none where each F's I comes right after it), and gives the
// losses of keeping everything, bit for bit.
TEST(Training, OffloadWithTheTestHostCopyGivesTheSameLosses) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "ZB-H1", 4);
  const auto common =
      std::vector<std::string>{"--plan", plan, "--steps", "3", "--progress", "none"};
  const Proc kept = pprun(concat(common, {"--metrics", d.file("k.jsonl")}));
  ASSERT_EQ(kept.exit_code(), 0) << kept.out;
  const Proc off = pprun(concat(common, {"--offload", "stage0,stage1", "--offload-test-host-copy",
                                         "--metrics", d.file("o.jsonl")}));
  ASSERT_EQ(off.exit_code(), 0) << off.out;
  // The summary says how much each rank's step offloaded; keeping everything, nothing.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      off.out, m, std::regex(R"(offloaded bytes per step per rank: ([0-9]+) ([0-9]+) )")))
      << off.out;
  EXPECT_GT(std::stoll(m[1].str()), 0) << off.out;
  // ZB-H1's last rank runs each F's I right after it: those stay on the device (slot_offload.h).
  EXPECT_EQ(std::stoll(m[2].str()), 0) << off.out;
  EXPECT_EQ(kept.out.find("offloaded bytes"), std::string::npos) << kept.out;
  const auto got = losses(d.file("o.jsonl")), want = losses(d.file("k.jsonl"));
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(got, want);
}

TEST(Faults, PlanOfAnUnknownVersion) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  std::string text;
  {
    std::ifstream in(plan);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  text.replace(text.find("\"version\": 1"), 12, "\"version\": 9");
  std::ofstream(d.file("v9.json")) << text;
  expect_user_error(pprun({"--plan", d.file("v9.json"), "--metrics", d.file("m.jsonl")}),
                    "pprun: error: " + d.file("v9.json") +
                        ": version: unsupported plan version 9 (this build reads version 1)",
                    d);
  std::ofstream(d.file("cut.json")) << text.substr(0, text.size() / 2);
  expect_user_error(pprun({"--plan", d.file("cut.json"), "--metrics", d.file("m.jsonl")}),
                    "pprun: error: " + d.file("cut.json") + ": not valid JSON", d);
}

TEST(Faults, CorruptedPlanThatWouldDeadlock) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  std::ifstream in(plan);
  nlohmann::json j = nlohmann::json::parse(in);
  // Rank 0 receives microbatch 0's gradient only after its backward needs it.
  auto& acts = j["ranks"][0]["actions"];
  auto recv = std::find(acts.begin(), acts.end(), "0RECV_B0");
  auto back = std::find(acts.begin(), acts.end(), "0B0");
  ASSERT_TRUE(recv != acts.end() && back != acts.end() && recv < back);
  std::iter_swap(recv, back);
  std::ofstream(d.file("bad.json")) << j.dump();
  expect_user_error(
      pprun({"--plan", d.file("bad.json"), "--metrics", d.file("m.jsonl")}),
      "pprun: error: " + d.file("bad.json") + ": the plan is not valid: rank 0, action", d);
}

TEST(Faults, MissingDataFileAndCudaWithoutCuda) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  expect_user_error(
      pprun({"--plan", plan, "--data", d.file("missing.txt"), "--metrics", d.file("m.jsonl")}),
      "pprun: error: --data: cannot open data file '" + d.file("missing.txt") + "'", d);
  expect_user_error(pprun({"--plan", plan, "--device", "cuda", "--metrics", d.file("m.jsonl")}),
                    "pprun: error: --device: cuda: this LibTorch", d);
  expect_user_error(pprun({"--plan", plan, "--microbatches", "3", "--metrics", d.file("m.jsonl")}),
                    "pprun: error: --microbatches: is 3, but the plan " + plan +
                        " was compiled for 4 microbatches",
                    d);
  // A window per decoder layer, for another count of layers than the layout's.
  std::ofstream(d.file("window.json"))
      << R"({"sliding_window": 8, "layer_types": ["full_attention", "sliding_attention"]})";
  expect_user_error(
      pprun({"--plan", plan, "--config", d.file("window.json"), "--metrics", d.file("m.jsonl")}),
      "pprun: error: " + d.file("window.json") +
          ": layer_types has 2 entries, but the layout has 4 decoder layers (t)",
      d);
  // An existing metrics file is left as it was by a run that stops before its first step.
  std::ofstream(d.file("m.jsonl")) << "{\"step\":1}\n";
  const Proc p =
      pprun({"--plan", plan, "--data", d.file("missing.txt"), "--metrics", d.file("m.jsonl")});
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  std::ifstream kept(d.file("m.jsonl"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "{\"step\":1}\n");
}

// --- training and outputs ----------------------------------------------------------------------

TEST(Training, TheReadmeCommandTrainsOnFourRanksAndTheLossGoesDown) {
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const Proc p = pprun(
      {"--plan", plan, "--steps", "40", "--metrics", d.file("m.jsonl"), "--progress", "none"});
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  const auto l = losses(d.file("m.jsonl"));
  ASSERT_EQ(l.size(), 40u);
  EXPECT_NEAR(l.front(), std::log(256.0), 0.1);
  EXPECT_LT(l.back(), l.front() - 1.5) << p.out;
}

TEST(Training, ReferenceFromALayoutAndByteLevelData) {
  TempDir d;
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  std::ofstream(d.file("text.txt")) << text;
  const Proc p =
      pprun(concat(kModel, {"--reference", "--layout", "EttL", "--microbatches", "2", "--steps",
                            "3", "--data", d.file("text.txt"), "--metrics", d.file("m.jsonl")}));
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  EXPECT_NE(p.out.find("reference (unpipelined, 1 process)"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("data: bytes of " + d.file("text.txt")), std::string::npos) << p.out;
  EXPECT_EQ(losses(d.file("m.jsonl")).size(), 3u);
}

// nanoGPT's train.bin: uint16 token ids with no header, written by the test.
std::string write_uint16_tokens(const TempDir& d, const std::string& name, size_t n,
                                uint16_t bad_at_end = 0) {
  std::vector<uint16_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<uint16_t>((i * 37 + i / 11) % 256);
  if (bad_at_end) ids.back() = bad_at_end;
  std::ofstream(d.file(name), std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(2 * n));
  return d.file(name);
}

TEST(Training, Uint16TokenFileOnTwoRanksAndTheReference) {
  TempDir d;
  const std::string data = write_uint16_tokens(d, "train.bin", 5000);
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const auto common = concat(kModel, {"--steps", "3", "--data", data});
  const Proc pipe = pprun(concat(common, {"--plan", plan, "--metrics", d.file("m.jsonl")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  EXPECT_NE(pipe.out.find("data: uint16 tokens of " + data + " (5000 tokens)"), std::string::npos)
      << pipe.out;
  // Both ranks drew the same rows (ids on the first, targets on the last): the reference agrees.
  const Proc ref = pprun(concat(common, {"--reference", "--layout", "Ett|ttL", "--microbatches",
                                         "4", "--metrics", d.file("r.jsonl")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  const auto got = losses(d.file("m.jsonl")), want = losses(d.file("r.jsonl"));
  ASSERT_EQ(want.size(), 3u);
  expect_losses_of(got, want);
  // The same file read as bytes is other data: the flag is honoured.
  const Proc text = pprun(concat(
      common, {"--data-format", "text", "--reference", "--layout", "EttL", "--microbatches", "2"}));
  ASSERT_EQ(text.exit_code(), 0) << text.out;
  EXPECT_NE(text.out.find("data: bytes of " + data + " (10000 bytes)"), std::string::npos)
      << text.out;
}

TEST(Faults, TokenIdBeyondTheVocabAndBadDataFormats) {
  TempDir d;
  const std::string plan = compile(d, "Ett|ttL", 2, "1F1B", 4);
  const std::string data = write_uint16_tokens(d, "train.bin", 5000, 256);
  expect_user_error(
      pprun(concat(kModel, {"--plan", plan, "--data", data, "--metrics", d.file("m.jsonl")})),
      "pprun: error: " + data +
          ": token 256 at index 4999 (byte 9998) is not below the model's "
          "vocab 256",
      d);
  expect_user_error(pprun(concat(kModel, {"--plan", plan, "--data", data, "--data-format", "uint32",
                                          "--metrics", d.file("m.jsonl")})),
                    "pprun: error: " + data + ": token ", d);
  expect_user_error(pprun(concat(kModel, {"--plan", plan, "--data-format", "megatron", "--metrics",
                                          d.file("m.jsonl")})),
                    "pprun: error: --data-format: megatron needs --data FILE", d);
  expect_user_error(pprun(concat(kModel, {"--plan", plan, "--data", data, "--data-format", "int16",
                                          "--metrics", d.file("m.jsonl")})),
                    "--data-format", d);
  expect_user_error(pprun(concat(kModel, {"--plan", plan, "--data", d.file("none"), "--data-format",
                                          "megatron", "--metrics", d.file("m.jsonl")})),
                    "pprun: error: --data: cannot open data file '" + d.file("none.idx") + "'", d);
}

TEST(Training, TraceOfTheRealExecution) {
  TempDir d;
  const std::string plan = compile(d, "Et|tt|tt|ttL", 2, "InterleavedZeroBubble", 4);
  const Proc p =
      pprun(concat(kModel, {"--plan", plan, "--steps", "2", "--trace", d.file("t.json")}));
  ASSERT_EQ(p.exit_code(), 0) << p.out;
  std::ifstream in(d.file("t.json"));
  const nlohmann::json t = nlohmann::json::parse(in);
  std::ifstream pin(plan);
  const nlohmann::json pj = nlohmann::json::parse(pin);
  EXPECT_EQ(t["otherData"]["generator"], "pprun");
  EXPECT_EQ(t["otherData"]["schedule"], "InterleavedZeroBubble");
  std::map<int, std::multiset<std::string>> names;
  int starts = 0, finishes = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") names[e["pid"].get<int>()].insert(e["name"].get<std::string>());
    starts += e["ph"] == "s";
    finishes += e["ph"] == "f";
  }
  for (int r = 0; r < 2; ++r) {
    std::multiset<std::string> want;
    for (const auto& a : pj["ranks"][r]["actions"]) want.insert(a.get<std::string>());
    EXPECT_EQ(names[r], want) << "rank " << r;
  }
  EXPECT_GT(starts, 0);
  EXPECT_EQ(starts, finishes);
}

}  // namespace
