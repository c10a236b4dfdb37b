// Documents end to end (issue 41; docs/pprun.md, "Documents"): a uint16 token file whose documents
// end with --eod, trained with --pack, --pad and --varlen by pipelines of several schedules, gives
// the losses and parameters of `pprun --reference` on the same rows; bad document flags stop before
// anything runs with one line and exit code 2.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>

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
}

}  // namespace
