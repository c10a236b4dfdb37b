// Reading a plan for pprun (runtime/launch/plan_load.h): verified and lowered, what it cannot
// run rejected with the file and the field, the FIFO order NCCL needs.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "compiler/lower_send_recv.h"
#include "file_test_util.h"
#include "runtime/job.h"
#include "runtime/launch/plan_load.h"
#include "test_plans.h"

namespace {

TEST(PlanLoad, ReadsAndVerifiesACompiledPlan) {
  filetest::TempDir d;
  const ppc::Plan plan = rttest::compile("Ett|ttL", 2, "1F1B", 4);
  const ppc::Plan back = pprt::load_plan(d.write("p.json", rttest::plan_json(plan)));
  EXPECT_EQ(back.lowered, plan.lowered);
  EXPECT_EQ(pprt::loss_rank(back), 1);
  EXPECT_FALSE(pprt::check_fifo_order(back).has_value());
}

TEST(PlanLoad, LowersAComputeOnlyPlan) {
  filetest::TempDir d;
  ppc::Plan plan = rttest::compile("Ett|ttL", 2, "GPipe", 2);
  std::string text = rttest::plan_json(plan);
  nlohmann::json j = nlohmann::json::parse(text);
  for (auto& r : j["ranks"]) r.erase("actions");
  EXPECT_EQ(pprt::load_plan(d.write("p.json", j.dump())).lowered, plan.lowered);
}

TEST(PlanLoad, RejectsWhatItCannotRun) {
  filetest::TempDir d;
  const std::string good = rttest::plan_json(rttest::compile("Ett|ttL", 2, "1F1B", 4));
  nlohmann::json j = nlohmann::json::parse(good);
  j["version"] = 2;
  const std::string v2 = d.write("v2.json", j.dump());
  EXPECT_EQ(filetest::user_error([&] { pprt::load_plan(v2); }),
            v2 + ": version: unsupported plan version 2 (this build reads version 1)");
  const std::string cut = d.write("cut.json", good.substr(0, good.size() / 2));
  EXPECT_EQ(filetest::user_error([&] { pprt::load_plan(cut); }).rfind(cut + ": not valid JSON", 0),
            0u);
  // Rank 1 receives its first activation after the forward that needs it.
  j = nlohmann::json::parse(good);
  auto& acts = j["ranks"][1]["actions"];
  ASSERT_EQ(acts[0], "1RECV_F0");
  std::swap(acts[0], acts[1]);
  const std::string swapped = d.write("swapped.json", j.dump());
  EXPECT_EQ(filetest::user_error([&] { pprt::load_plan(swapped); }),
            swapped +
                ": the plan is not valid: rank 1, action 0 (1F0): needs the activation of stage 0 "
                "microbatch 0 from "
                "rank 0, but rank 1 receives it only later, at its action 1");
  // A layout that breaks the model rules (edited by hand: no E).
  j = nlohmann::json::parse(good);
  j["layout"]["stages"][0] = "t t";
  const std::string no_e = d.write("no-e.json", j.dump());
  EXPECT_EQ(filetest::user_error([&] { pprt::load_plan(no_e); }).rfind(no_e + ": layout: ", 0), 0u)
      << filetest::user_error([&] { pprt::load_plan(no_e); });
  ppc::CompileOptions o;
  o.layout = ppc::generic_layout(2);
  o.pp = 2;
  o.schedule = "1F1B";
  o.microbatches = 2;
  const std::string generic =
      d.write("generic.json", rttest::plan_json(ppc::lower_send_recv(ppc::compile(o))));
  EXPECT_EQ(filetest::user_error([&] { pprt::load_plan(generic); }),
            generic +
                ": layout: the plan describes no model (it was compiled with --stages N); compile "
                "it with --layout or "
                "--layout-file");
}

// Every plan ppcompile emits for a model runs: multi-token prediction, DualPipe's two copies.
TEST(PlanLoad, AcceptsMtpAndDualPipePlans) {
  filetest::TempDir d;
  const std::string mtp =
      d.write("mtp.json", rttest::plan_json(rttest::compile("Ett|tmL", 2, "1F1B", 2)));
  EXPECT_EQ(pprt::load_plan(mtp).layout.count(ppc::LayerKind::Mtp), 1);
  const std::string dual =
      d.write("dual.json", rttest::plan_json(rttest::compile("Ett|ttL", 2, "DualPipe", 4)));
  EXPECT_EQ(pprt::load_plan(dual).copies, 2);
}

TEST(PlanLoad, FifoOrderCheckFindsCrossedMessages) {
  ppc::Plan plan = rttest::compile("Ett|ttL", 2, "GPipe", 2);
  EXPECT_FALSE(pprt::check_fifo_order(plan).has_value());
  // Rank 1 receives microbatch 1's activation before microbatch 0's: fine with tags, not with NCCL.
  auto& acts = plan.lowered[1];
  auto r0 = std::find(acts.begin(), acts.end(), ppc::Action::comm(ppc::ActionKind::RecvF, 1, 0, 0));
  auto r1 = std::find(acts.begin(), acts.end(), ppc::Action::comm(ppc::ActionKind::RecvF, 1, 1, 0));
  ASSERT_TRUE(r0 != acts.end() && r1 != acts.end());
  std::iter_swap(r0, r1);
  const auto bad = pprt::check_fifo_order(plan);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(*bad,
            "rank 0 sends the activation of stage 0 microbatch 0 as its message 0 to rank 1, which "
            "receives the "
            "activation of stage 0 microbatch 1 there");
}

}  // namespace
