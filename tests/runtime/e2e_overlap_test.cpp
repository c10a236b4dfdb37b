// An OVERLAP_F_B that overlaps (issue 40, section 3; runtime/train/overlap.h), end to end in real
// processes: a MoE layout (a dense first layer, MoE layers with shared experts and the
// load-balancing loss, MTP) trained under DualPipe, DualPipeV and Combined1F1B with the overlap
// on gives, bit for bit, each step's losses and every parameter of the same run with
// --overlap off (the two parts in sequence); and Combined1F1B equals --reference.
#include "e2e_dumps.h"
#include "e2e_util.h"
#include "runtime/output/param_dump.h"

namespace {

using namespace pprun_e2e;

const std::string kMoeConfig = std::string(PP_SOURCE_DIR) + "/examples/tiny-moe.json";

struct OverlapCase {
  std::string name, layout, schedule;
  int pp, microbatches;
};

void PrintTo(const OverlapCase& c, std::ostream* os) {
  *os << c.layout << " " << c.schedule << " pp " << c.pp;
}

class OverlapParity : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(OverlapParity, BitIdenticalToTheSequence) {
  const OverlapCase& c = GetParam();
  const int steps = 3;
  TempDir d;
  const std::string plan = compile(d, c.layout, c.pp, c.schedule, c.microbatches);
  const std::vector<std::string> common = {
      "--config", kMoeConfig, "--global-batch",      "16",        "--progress", "none", "--plan",
      plan,       "--steps",  std::to_string(steps), "--threads", "1"};
  const Proc on = pprun(concat(
      common, {"--metrics", d.file("on.jsonl"), "--dump-params", d.file("on"), "--overlap", "on"}));
  ASSERT_EQ(on.exit_code(), 0) << on.out;
  const Proc off = pprun(concat(common, {"--metrics", d.file("off.jsonl"), "--dump-params",
                                         d.file("off"), "--overlap", "off"}));
  ASSERT_EQ(off.exit_code(), 0) << off.out;
  EXPECT_NE(on.out.find("4 experts (top 2"), std::string::npos) << on.out;
  for (const std::string key : {"loss", "mtp_loss", "load_balancing_loss", "grad_norm"}) {
    const auto a = field(d.file("on.jsonl"), key), b = field(d.file("off.jsonl"), key);
    EXPECT_EQ(b.size(), static_cast<size_t>(steps)) << key;
    EXPECT_EQ(a, b) << key;
  }
  const auto dumps = expect_dumps_within(d.file("on"), d.file("off"), 0.0);
  EXPECT_TRUE(dumps.want.count("layers.1.mlp.experts.3.w2.weight"));
  expect_peak_inflight_as_predicted(on.out);
}

INSTANTIATE_TEST_SUITE_P(
    Moe, OverlapParity,
    ::testing::Values(OverlapCase{"DualPipe_pp2", "Ett|tmL", "DualPipe", 2, 4},
                      OverlapCase{"DualPipeV_pp2", "Et|tt|t,m|L", "DualPipeV", 2, 4},
                      OverlapCase{"Combined1F1B_pp2", "Ett|tmL", "Combined1F1B", 2, 4},
                      OverlapCase{"Combined1F1B_pp4", "Et|t|tm|L", "Combined1F1B", 4, 8}),
    [](const ::testing::TestParamInfo<OverlapCase>& info) { return info.param.name; });

// Combined1F1B on the MoE layout equals the unpipelined model within 1e-5 (the losses) and 1e-4
// (every parameter), as every schedule does.
TEST(OverlapParity, Combined1F1BEqualsTheReference) {
  const int steps = 3;
  TempDir d;
  const std::string plan = compile(d, "Ett|tmL", 2, "Combined1F1B", 4);
  const std::vector<std::string> common = {
      "--config", kMoeConfig, "--global-batch",      "16",        "--progress", "none", "--plan",
      plan,       "--steps",  std::to_string(steps), "--threads", "1"};
  const Proc pipe =
      pprun(concat(common, {"--metrics", d.file("p.jsonl"), "--dump-params", d.file("pd")}));
  ASSERT_EQ(pipe.exit_code(), 0) << pipe.out;
  const Proc ref = pprun(concat(
      common, {"--reference", "--metrics", d.file("r.jsonl"), "--dump-params", d.file("rd")}));
  ASSERT_EQ(ref.exit_code(), 0) << ref.out;
  expect_metrics_of(d.file("p.jsonl"), d.file("r.jsonl"), steps, true, 1e-5);
  const auto l = field(d.file("p.jsonl"), "load_balancing_loss"),
             r = field(d.file("r.jsonl"), "load_balancing_loss");
  ASSERT_EQ(r.size(), static_cast<size_t>(steps));
  ASSERT_EQ(l.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(l[i], r[i], 1e-5 * std::fabs(r[i])) << i;
  expect_dumps_within(d.file("pd"), d.file("rd"), 1e-4);
  expect_peak_inflight_as_predicted(pipe.out);
}

}  // namespace
