// --dtype bf16 end to end (docs/gpu.md: mixed precision), as real processes:
//  - Parity: under 1F1B, ZB-H2 and DualPipeV at pp 2, and with MTP, 10 steps of the pipelined bf16
//    run give the losses (and MTP losses) of the bf16 --reference within 2e-3 relative, and its
//    fp32 master weights within 1e-2; also with Qwen2's q/k/v biases (--config qkv_bias).
//  - The bytes between stages halve: the same plan sends exactly half the bytes of fp32 in as
//    many messages.
//  - Accuracy: 50 bf16 steps end within 2 % of the fp32 run's loss.
//  - Checkpoints hold fp32 weights and record the dtype; a bf16 run resumes its own checkpoint
//    exactly, and runs of the other dtype resume either.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>

#include "e2e_dumps.h"
#include "e2e_util.h"

namespace {

using namespace pprun_e2e;

// One intra-op thread: the ranks share two cores with the other tests.
const std::vector<std::string> kOne = concat(kModel, {"--threads", "1"});
const std::vector<std::string> kBf16 = concat(kOne, {"--dtype", "bf16"});

struct Bf16Case {
  std::string name, layout, schedule;
  int pp, microbatches;
  bool qkv_bias = false;  // the attention's q, k and v projections have biases (Qwen2's)
};

void PrintTo(const Bf16Case& c, std::ostream* os) {
  *os << c.layout << " " << c.schedule << " pp " << c.pp;
}

class Bf16Parity : public ::testing::TestWithParam<Bf16Case> {};

TEST_P(Bf16Parity, TenStepsEqualTheBf16Reference) {
  const Bf16Case& c = GetParam();
  TempDir d;
  const std::string plan = compile(d, c.layout, c.pp, c.schedule, c.microbatches);
  auto common = concat(kBf16, {"--plan", plan, "--steps", "10"});
  if (c.qkv_bias) {
    std::ofstream(d.file("qkv.json")) << R"({"qkv_bias": true})";
    common = concat(common, {"--config", d.file("qkv.json")});
  }
  const Proc pipe =
      pprun(concat(common, {"--metrics", d.file("p.jsonl"), "--dump-params", d.file("pd")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  EXPECT_NE(pipe.out.find("bf16 (fp32 master weights)"), std::string::npos) << pipe.out;
  const Proc ref = pprun(concat(
      common, {"--reference", "--metrics", d.file("r.jsonl"), "--dump-params", d.file("rd")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;

  const bool mtp = c.layout.find('m') != std::string::npos;
  expect_metrics_of(d.file("p.jsonl"), d.file("r.jsonl"), 10, mtp, 2e-3);
  // The master weights (fp32: the dump holds float32 values) after 10 steps.
  const auto dumps = expect_dumps_within(d.file("pd"), d.file("rd"), 1e-2);
  if (c.qkv_bias) {  // the biases are there, fp32, and trained
    const auto& ref = dumps.want;
    ASSERT_EQ(ref.count("layers.1.attn.wq.bias"), 1u);
    float largest = 0;  // they start at zero
    for (float v : ref.at("layers.1.attn.wq.bias").data) largest = std::max(largest, std::fabs(v));
    EXPECT_GT(largest, 0.f);
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, Bf16Parity,
                         ::testing::Values(Bf16Case{"OneFOneB", "Ettt|tL", "1F1B", 2, 4},
                                           Bf16Case{"ZBH2", "Ettt|tL", "ZB-H2", 2, 4},
                                           Bf16Case{"DualPipeV", "Et|tt|t|tL", "DualPipeV", 2, 4},
                                           Bf16Case{"Mtp", "Ettt|tmL", "ZB-H2", 2, 4},
                                           Bf16Case{"QkvBias", "Ettt|tL", "ZB-H2", 2, 4, true}),
                         [](const ::testing::TestParamInfo<Bf16Case>& info) {
                           return info.param.name;
                         });

// "transfers between stages: N bytes per step in M messages"
std::pair<long long, int> transfers(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m,
                         std::regex("transfers between stages: ([0-9]+) bytes per step in "
                                    "([0-9]+) messages")))
    return {-1, -1};
  return {std::stoll(m[1].str()), std::stoi(m[2].str())};
}

TEST(Bf16, TransfersBetweenStagesHalve) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tL", 2, "1F1B", 4);
  const Proc f32 = pprun(concat(kOne, {"--plan", plan, "--steps", "2"}));
  ASSERT_EQ(f32.exit_code(), 0) << f32.out;
  const Proc bf16 = pprun(concat(kBf16, {"--plan", plan, "--steps", "2"}));
  ASSERT_EQ(bf16.exit_code(), 0) << bf16.out;
  const auto [f32_bytes, f32_messages] = transfers(f32.out);
  const auto [bf16_bytes, bf16_messages] = transfers(bf16.out);
  // 4 microbatches of 4 sequences: each sends its hidden state [1, 4, 16, 32] forward and its
  // gradient back, 2048 elements each way.
  EXPECT_EQ(f32_messages, 8) << f32.out;
  EXPECT_EQ(f32_bytes, 8 * 2048 * 4) << f32.out;
  EXPECT_EQ(bf16_messages, f32_messages) << bf16.out;
  EXPECT_EQ(bf16_bytes * 2, f32_bytes) << bf16.out;
}

TEST(Bf16, FiftyStepsEndWithinTwoPercentOfFp32) {
  TempDir d;
  const auto common = concat(kOne, {"--reference", "--layout", "EttL", "--microbatches", "2",
                                    "--steps", "50", "--log-every", "50"});
  const Proc f32 = pprun(concat(common, {"--metrics", d.file("f.jsonl")}));
  ASSERT_EQ(f32.exit_code(), 0) << f32.out;
  const Proc bf16 = pprun(concat(common, {"--dtype", "bf16", "--metrics", d.file("b.jsonl")}));
  ASSERT_EQ(bf16.exit_code(), 0) << bf16.out;
  const auto a = losses(d.file("f.jsonl")), b = losses(d.file("b.jsonl"));
  ASSERT_EQ(a.size(), 50u);
  ASSERT_EQ(b.size(), 50u);
  EXPECT_LT(a.back(), 0.8 * a.front());  // it learned
  EXPECT_LE(std::fabs(b.back() - a.back()), 0.02 * a.back())
      << "fp32 " << a.back() << ", bf16 " << b.back();
  EXPECT_NE(a, b);  // bf16 is not fp32 under another name
}

TEST(Bf16, CheckpointsHoldFp32AndResumeAcrossDtypes) {
  TempDir d;
  const std::string plan = compile(d, "Ettt|tL", 2, "1F1B", 4);
  const auto bf16 = concat(kBf16, {"--plan", plan, "--steps", "4"});
  const Proc straight = pprun(concat(bf16, {"--metrics", d.file("s.jsonl")}));
  ASSERT_EQ(straight.exit_code(), 0) << straight.out;
  const Proc first = pprun(
      concat(bf16, {"--stop-after", "2", "--save", d.file("ck"), "--metrics", d.file("a.jsonl")}));
  ASSERT_EQ(first.exit_code(), 0) << first.out;
  std::ifstream state(d.file("ck/step-00000002/trainer_state.json"));
  const auto j = nlohmann::json::parse(state);
  EXPECT_EQ(j.at("training").at("dtype"), "bf16");
  // (Reading a checkpoint checks that every tensor is F32.)
  const Proc again =
      pprun(concat(bf16, {"--resume", d.file("ck"), "--metrics", d.file("b.jsonl")}));
  ASSERT_EQ(again.exit_code(), 0) << again.out;
  std::vector<double> resumed = losses(d.file("a.jsonl"));
  const auto rest = losses(d.file("b.jsonl"));
  resumed.insert(resumed.end(), rest.begin(), rest.end());
  EXPECT_EQ(resumed, losses(d.file("s.jsonl")));  // bit for bit
  // In fp32 from the bf16 checkpoint, and back in bf16 from an fp32 one.
  const Proc f32 = pprun(concat(
      kOne, {"--plan", plan, "--steps", "4", "--resume", d.file("ck"), "--save", d.file("ck32")}));
  ASSERT_EQ(f32.exit_code(), 0) << f32.out;
  EXPECT_NE(f32.out.find("trained in bf16, going on in fp32"), std::string::npos) << f32.out;
  const Proc back = pprun(concat(kBf16, {"--plan", plan, "--steps", "6", "--resume", d.file("ck32"),
                                         "--metrics", d.file("c.jsonl")}));
  ASSERT_EQ(back.exit_code(), 0) << back.out;
  EXPECT_NE(back.out.find("trained in fp32, going on in bf16"), std::string::npos) << back.out;
  EXPECT_EQ(losses(d.file("c.jsonl")).size(), 2u);
}

TEST(Bf16, AnUnknownDtypeIsRefused) {
  const Proc p = pprun(concat(
      kModel, {"--reference", "--layout", "EttL", "--microbatches", "2", "--dtype", "fp16"}));
  EXPECT_EQ(p.exit_code(), 2) << p.out;
  EXPECT_NE(p.out.find("--dtype"), std::string::npos) << p.out;
}

}  // namespace
