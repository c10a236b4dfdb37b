// Checkpoints end to end, as real processes (docs/checkpoints.md):
//  1. Exact resume: 6 steps straight give the same losses, bit for bit, and the same parameters
//     as 3 steps (--stop-after 3 --save), then --resume to 6, for every schedule family, MTP,
//     tied embeddings and DualPipe, and for --reference.
//  2. Reshard: a checkpoint of pp 4 under 1F1B resumes under other plans of the same model and
//     under --reference, within 1e-5 of the uninterrupted run; a different model is refused.
//  3. Crash safety: a rank killed while writing its shard, or rank 0 killed while committing,
//     leaves the previous checkpoint as `latest`; --resume continues from it exactly. The same
//     when the save is written in the background (--save-async), whose files are those of a
//     synchronous save.
//  4. Bad input: exit 2 before any compute, one line naming the file and the tensor or field.
//  5. --export writes one safetensors file that Python reads (struct, json, torch.frombuffer).
#include <fmt/format.h>

#include <cmath>
#include <map>

#include "e2e_dumps.h"
#include "e2e_util.h"
#include "runtime/output/param_dump.h"

namespace {

using namespace pprun_e2e;

const std::vector<std::string> kCk = concat(kModel, {"--threads", "1"});

std::vector<double> run_losses(const std::string& metrics) {
  return losses(metrics);
}

struct ResumeCase {
  std::string name, layout, schedule;
  int pp, microbatches;
  std::vector<std::string> flags;
};

class ExactResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(ExactResume, ThreeThenThreeEqualsSixBitForBit) {
  const ResumeCase& c = GetParam();
  TempDir d;
  const bool reference = c.schedule == "reference";
  const std::string plan =
      compile(d, c.layout, c.pp, reference ? "1F1B" : c.schedule, c.microbatches);
  auto args = concat(concat(kCk, c.flags), {"--plan", plan, "--steps", "6"});
  if (reference) args.push_back("--reference");
  const Proc straight =
      pprun(concat(args, {"--metrics", d.file("s.jsonl"), "--dump-params", d.file("sd")}));
  ASSERT_EQ(straight.exit_code(), 0) << straight.out;
  const Proc first = pprun(
      concat(args, {"--stop-after", "3", "--save", d.file("ck"), "--metrics", d.file("a.jsonl")}));
  ASSERT_EQ(first.exit_code(), 0) << first.out;
  EXPECT_NE(first.out.find("checkpoints: 1 saved"), std::string::npos) << first.out;
  const Proc second = pprun(concat(args, {"--resume", d.file("ck"), "--metrics", d.file("b.jsonl"),
                                          "--dump-params", d.file("rd")}));
  ASSERT_EQ(second.exit_code(), 0) << second.out;
  EXPECT_NE(second.out.find("(steps 4-6 of 6)"), std::string::npos) << second.out;

  std::vector<double> resumed = run_losses(d.file("a.jsonl"));
  const std::vector<double> rest = run_losses(d.file("b.jsonl"));
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  const std::vector<double> want = run_losses(d.file("s.jsonl"));
  ASSERT_EQ(want.size(), 6u);
  EXPECT_EQ(resumed, want);  // bit for bit
  expect_dumps_within(d.file("rd"), d.file("sd"), 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ExactResume,
    ::testing::Values(
        ResumeCase{"OneFOneB", "Ett|tt|tt|ttL", "1F1B", 4, 8, {}},
        ResumeCase{"Interleaved", "Et|tt|tt|tL", "Interleaved1F1B", 2, 4, {}},
        ResumeCase{"ZeroBubble", "Ettt|tttL", "ZB-H1", 2, 4, {}},
        ResumeCase{"ZBV", "Et|tt|tt|tL", "ZBVZeroBubble", 2, 4, {}},
        ResumeCase{"DualPipeV_Mtp", "Et|tt|tm|mL", "DualPipeV", 2, 4, {}},
        ResumeCase{"DualPipe_Tied", "Et|tt|tt|tL", "DualPipe", 4, 8, {"--tie-embeddings"}},
        ResumeCase{"Reference_Mtp_Tied", "Ett|tmL", "reference", 2, 4, {"--tie-embeddings"}}),
    [](const ::testing::TestParamInfo<ResumeCase>& info) { return info.param.name; });

// The uninterrupted run the reshard and crash tests compare with, and its checkpoint after 3
// steps (pp 4, 1F1B).
struct Saved {
  TempDir d;
  std::string plan;
  std::vector<double> straight;  // 6 steps

  Saved() {
    plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
    const Proc s =
        pprun(concat(kCk, {"--plan", plan, "--steps", "6", "--metrics", d.file("s.jsonl")}));
    EXPECT_EQ(s.exit_code(), 0) << s.out;
    straight = run_losses(d.file("s.jsonl"));
    // The checkpoint after 3 steps, saved by a run that stops there.
    const Proc a = pprun(concat(
        kCk, {"--plan", plan, "--steps", "6", "--stop-after", "3", "--save", d.file("ck3")}));
    EXPECT_EQ(a.exit_code(), 0) << a.out;
  }
};

TEST(Reshard, ResumesUnderOtherPlansAndTheReference) {
  Saved saved;
  TempDir d;
  const std::vector<std::pair<std::string, std::vector<std::string>>> targets = {
      {"pp 2 vpp 2 Interleaved1F1B",
       {"--plan", compile(d, "Ett|tt|tt|ttL", 2, "Interleaved1F1B", 8, "i.json")}},
      {"another split", {"--plan", compile(d, "Ettt|t|ttt|tL", 4, "1F1B", 8, "s.json")}},
      {"ZBV", {"--plan", compile(d, "Ett|tt|tt|ttL", 2, "ZBVZeroBubble", 8, "z.json")}},
      {"reference", {"--reference", "--layout", "EttttttttL", "--microbatches", "8"}},
  };
  for (const auto& [what, plan] : targets) {
    const Proc p = pprun(concat(concat(kCk, plan), {"--steps", "6", "--resume", saved.d.file("ck3"),
                                                    "--metrics", d.file("r.jsonl")}));
    ASSERT_EQ(p.exit_code(), 0) << what << "\n" << p.out;
    const auto got = run_losses(d.file("r.jsonl"));
    ASSERT_EQ(got.size(), 3u) << what;
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LE(std::fabs(got[i] - saved.straight[3 + i]), 1e-5 * saved.straight[3 + i])
          << what << ", step " << 4 + i;
  }
  // A different model: one layer fewer, another width.
  const Proc fewer =
      pprun(concat(kCk, {"--plan", compile(d, "Ett|tt|ttL", 3, "1F1B", 8, "f.json"), "--steps", "6",
                         "--resume", saved.d.file("ck3"), "--metrics", d.file("m.jsonl")}));
  EXPECT_EQ(fewer.exit_code(), 2) << fewer.out;
  EXPECT_NE(fewer.out.find("pprun: error: " + saved.d.file("ck3/step-00000003") +
                           ": the checkpoint's model has 8 decoder layers (Ett|tt|tt|ttL), this "
                           "plan's 6 (Ett|tt|ttL)"),
            std::string::npos)
      << fewer.out;
  const Proc wider = pprun({"--plan", saved.plan, "--hidden", "64", "--steps", "6", "--resume",
                            saved.d.file("ck3"), "--metrics", d.file("m.jsonl")});
  EXPECT_EQ(wider.exit_code(), 2) << wider.out;
  EXPECT_NE(wider.out.find("the checkpoint's model has hidden 32, this run's 64"),
            std::string::npos)
      << wider.out;
  EXPECT_FALSE(fs::exists(d.file("m.jsonl")));
}

// --save-every 3 over 9 steps; the save after step 6 is interrupted. `flags`: the run's own.
void expect_previous_checkpoint_survives(const std::string& fault,
                                         const std::vector<std::string>& flags = {}) {
  Saved saved;
  TempDir d;
  const std::string ck = d.file("ck");
  const Proc crash = pprun(
      concat(kCk, concat(flags, {"--plan", saved.plan, "--steps", "9", "--save", ck, "--save-every",
                                 "3", "--fault-kill", fault, "--timeout", "20"})));
  EXPECT_NE(crash.exit_code(), 0) << crash.out;
  EXPECT_NE(crash.out.find("was killed by signal 9"), std::string::npos) << crash.out;
  std::ifstream latest(ck + "/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000003");
  EXPECT_FALSE(fs::exists(ck + "/step-00000006"));
  EXPECT_TRUE(fs::exists(ck + "/.tmp-step-00000006")) << "the interrupted save's leftovers";
  // Resuming loads step 3 and continues exactly as a run that was never interrupted.
  const Proc resumed = pprun(concat(
      kCk, {"--plan", saved.plan, "--steps", "9", "--resume", ck, "--metrics", d.file("r.jsonl")}));
  ASSERT_EQ(resumed.exit_code(), 0) << resumed.out;
  EXPECT_NE(resumed.out.find("(steps 4-9 of 9)"), std::string::npos) << resumed.out;
  const Proc whole =
      pprun(concat(kCk, {"--plan", saved.plan, "--steps", "9", "--metrics", d.file("w.jsonl")}));
  ASSERT_EQ(whole.exit_code(), 0) << whole.out;
  const auto all = run_losses(d.file("w.jsonl"));
  const auto got = run_losses(d.file("r.jsonl"));
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got, std::vector<double>(all.begin() + 3, all.end()));
}

TEST(CrashSafety, ARankKilledWhileWritingItsShard) {
  expect_previous_checkpoint_survives("2:6:save");
}

TEST(CrashSafety, RankZeroKilledWhileCommitting) {
  expect_previous_checkpoint_survives("0:6:commit");
}

// The kill comes in the background thread writing the save while training goes on.
TEST(CrashSafety, ARankKilledWhileWritingItsShardInTheBackground) {
  expect_previous_checkpoint_survives("2:6:save", {"--save-async"});
}

TEST(CrashSafety, RankZeroKilledWhileCommittingInTheBackground) {
  expect_previous_checkpoint_survives("0:6:commit", {"--save-async"});
}

// Every file of every checkpoint, by its path under `dir`.
std::map<std::string, std::string> files_under(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) {
      std::ifstream in(e.path(), std::ios::binary);
      out[fs::relative(e.path(), dir).string()] =
          std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
  return out;
}

// --save-async writes what a synchronous save writes: the same files, byte for byte, but for
// trainer_state.json's rng_state (LibTorch seeds its default generator anew in each process, so
// two synchronous runs differ there too; nothing in training draws from it).
TEST(AsyncSave, WritesTheFilesOfASynchronousSave) {
  TempDir d;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const auto args = concat(kCk, {"--plan", plan, "--steps", "6", "--save-every", "2"});
  const Proc sync = pprun(concat(args, {"--save", d.file("sync")}));
  ASSERT_EQ(sync.exit_code(), 0) << sync.out;
  const Proc async = pprun(concat(args, {"--save", d.file("async"), "--save-async"}));
  ASSERT_EQ(async.exit_code(), 0) << async.out;
  EXPECT_NE(async.out.find("checkpoints: 3 saved in the background"), std::string::npos)
      << async.out;
  EXPECT_NE(async.out.find("steps during a background write"), std::string::npos) << async.out;
  const auto a = files_under(d.file("sync")), b = files_under(d.file("async"));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.size(), 3u * (8 + 2 + 1) + 1) << "3 checkpoints of 4 + 4 shards, 2 indexes and "
                                               "the state, and latest";
  for (const auto& [path, bytes] : a) {
    ASSERT_TRUE(b.count(path)) << path;
    if (fs::path(path).filename() == "trainer_state.json") {
      auto x = nlohmann::json::parse(bytes), y = nlohmann::json::parse(b.at(path));
      x.erase("rng_state");
      y.erase("rng_state");
      EXPECT_EQ(x, y) << path;
    } else {
      EXPECT_TRUE(bytes == b.at(path)) << path << " differs";
    }
  }
}

// Bad checkpoints: exit 2 before any step, one line naming the file and the tensor or field.
TEST(CheckpointErrors, DamagedCheckpointsStopBeforeAnyCompute) {
  Saved saved;
  const std::string step = saved.d.file("ck3/step-00000003");
  auto resume_fails = [&](const std::string& message) {
    const Proc p =
        pprun(concat(kCk, {"--plan", saved.plan, "--steps", "6", "--resume", saved.d.file("ck3")}));
    EXPECT_EQ(p.exit_code(), 2) << p.out;
    EXPECT_NE(p.out.find(message), std::string::npos) << p.out;
    EXPECT_EQ(p.out.find("step 4"), std::string::npos) << p.out;
    EXPECT_EQ(p.out.find("starting"), std::string::npos) << "no rank started: " << p.out;
  };
  const std::string shard = step + "/model-00002-of-00004.safetensors";
  const std::string keep = saved.d.file("shard.bak");
  fs::copy_file(shard, keep);
  // Truncated.
  fs::resize_file(shard, fs::file_size(shard) / 2);
  resume_fails("pprun: error: " + shard + ": ");
  // Corrupt: a header that is not JSON.
  fs::copy_file(keep, shard, fs::copy_options::overwrite_existing);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("\x01\x02\x03", 3);
  }
  resume_fails("pprun: error: " + shard + ": ");
  fs::copy_file(keep, shard, fs::copy_options::overwrite_existing);
  // A missing tensor: the index no longer lists it.
  const std::string index = step + "/model.safetensors.index.json";
  const std::string index_text = [&] {
    std::ifstream in(index);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  nlohmann::json j = nlohmann::json::parse(index_text);
  j["weight_map"].erase("layers.3.attn.wq.weight");
  std::ofstream(index) << j.dump();
  resume_fails("pprun: error: " + shard + ": tensor 'layers.3.attn.wq.weight' is in no index");
  std::ofstream(index) << index_text;
  // An unknown version.
  const std::string state = step + "/trainer_state.json";
  std::ifstream sin(state);
  nlohmann::json st = nlohmann::json::parse(sin);
  st["version"] = 99;
  std::ofstream(state) << st.dump();
  resume_fails("pprun: error: " + state +
               ": version: unsupported checkpoint version 99 (this build reads version 1)");
  // An empty directory.
  TempDir e;
  const Proc empty = pprun(concat(kCk, {"--plan", saved.plan, "--resume", e.file("")}));
  EXPECT_EQ(empty.exit_code(), 2) << empty.out;
  EXPECT_NE(empty.out.find("holds no checkpoint (no 'latest' and no step-* directory)"),
            std::string::npos)
      << empty.out;
}

// --export: one file of model weights; Python reads it with the standard library and torch.
TEST(Export, OneSafetensorsFileThatPythonReads) {
  Saved saved;
  TempDir d;
  const Proc dump = pprun(concat(kCk, {"--plan", saved.plan, "--steps", "6", "--stop-after", "3",
                                       "--dump-params", d.file("dump")}));
  ASSERT_EQ(dump.exit_code(), 0) << dump.out;
  const Proc ex = pprun({"--export", saved.d.file("ck3"), d.file("model.safetensors")});
  ASSERT_EQ(ex.exit_code(), 0) << ex.out;
  EXPECT_NE(ex.out.find("wrote the 75 model tensors"), std::string::npos) << ex.out;
  const auto params = pprt::read_param_dump(d.file("dump"));
  std::string expect = "{";
  for (const std::string name : {"embed.weight", "layers.5.mlp.w2.weight", "head.out.weight"}) {
    double sum = 0;
    for (float x : params.at(name).data) sum += x;
    expect += fmt::format("'{}': {:.6f}, ", name, sum);
  }
  expect += "}";
  const std::string script =
      "import json, struct, sys, torch\n"
      "b = open(sys.argv[1], 'rb').read()\n"
      "n = struct.unpack('<Q', b[:8])[0]\n"
      "h = json.loads(b[8:8 + n])\n"
      "t = {k: torch.frombuffer(bytearray(b[8 + n + v['data_offsets'][0]:8 + n + "
      "v['data_offsets'][1]]), dtype=torch.float32).reshape(v['shape']) for k, v in h.items() "
      "if k != '__metadata__'}\n"
      "print(len(t), h['__metadata__']['format'])\n"
      "print('{' + ''.join(\"'%s': %.6f, \" % (k, float(t[k].double().sum())) for k in "
      "['embed.weight', 'layers.5.mlp.w2.weight', 'head.out.weight']) + '}')\n";
  std::ofstream(d.file("read.py")) << script;
  const Proc py = run({PP_PYTHON, d.file("read.py"), d.file("model.safetensors")});
  ASSERT_EQ(py.exit_code(), 0) << py.out;
  EXPECT_NE(py.out.find("75 pt"), std::string::npos) << py.out;
  EXPECT_NE(py.out.find(expect), std::string::npos) << py.out << "\nexpected " << expect;
}

}  // namespace
