// The all-to-alls of a plan under expert parallelism (issue 40, section 3): each rank's sequence
// derived from its actions, the proof that an EP group issues them in one order on each
// communicator, and mutants it must catch: two ranks of a group with the F of two microbatches
// swapped, and a pair whose orders differ only in how the two communicators interleave.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "compiler/all_to_all.h"
#include "compiler/compile.h"
#include "compiler/diagnostic.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"
#include "tests/compiler/test_util.h"

namespace ppc {
namespace {

// "Ett|ttL" (DeepSeek-style: decoder layer 0 dense, 1-3 MoE) or its two-copy form, under ep.
Plan moe_plan(const std::string& schedule, int pp, int m, const std::string& layout, int ep = 2,
              int first_dense = 1) {
  CompileOptions o;
  o.layout = parse_layout(layout);
  o.has_model = true;
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  o.expert_parallel = {ep, first_dense};
  return compile(o);
}

// Swaps rank r's compute actions i and j.
Plan swapped(Plan p, int r, size_t i, size_t j) {
  auto& order = p.compute[static_cast<size_t>(r)];
  std::swap(order[i], order[j]);
  return p;
}

size_t position(const Plan& p, int r, const std::string& text) {
  const auto& order = p.compute[static_cast<size_t>(r)];
  for (size_t i = 0; i < order.size(); ++i)
    if (to_string(order[i]) == text) return i;
  ADD_FAILURE() << text << " is not in rank " << r << "'s order";
  return 0;
}

TEST(AllToAll, SequenceFromActions) {
  const Plan p = moe_plan("1F1B", 2, 2, "Ett|ttL");
  EXPECT_EQ(moe_layers(p), (std::vector<std::vector<int>>{{1}, {2, 3}}));
  // Rank 1 (stage 1, MoE layers 2 and 3): F0 B0 F1 B1.
  const auto seq = all_to_all_sequence(p, 1, moe_layers(p));
  std::vector<std::string> text;
  for (const AllToAll& a : seq) text.push_back(describe(a));
  EXPECT_EQ(text.size(), 16u);
  EXPECT_EQ(text[0], "dispatch of layer 2 (stage 1, F of microbatch 0)");
  EXPECT_EQ(text[1], "combine of layer 2 (stage 1, F of microbatch 0)");
  EXPECT_EQ(text[3], "combine of layer 3 (stage 1, F of microbatch 0)");
  // The backward in reverse layer order, combine's transpose first.
  EXPECT_EQ(text[4], "combine backward of layer 3 (stage 1, B of microbatch 0)");
  EXPECT_EQ(text[5], "dispatch backward of layer 3 (stage 1, B of microbatch 0)");
  EXPECT_EQ(text[7], "dispatch backward of layer 2 (stage 1, B of microbatch 0)");
  EXPECT_EQ(seq[0].comm, Communicator::Forward);
  EXPECT_EQ(seq[4].comm, Communicator::Backward);
  EXPECT_EQ(all_to_all_count(p, moe_layers(p), 1, ActionKind::F), 4);
  EXPECT_EQ(all_to_all_count(p, moe_layers(p), 1, ActionKind::W), 0);
  // Full recomputation reruns each layer's forward (its two all-to-alls) inside the backward.
  Plan full = p;
  full.memory = parse_memory_policy("full", "--recompute");
  EXPECT_EQ(all_to_all_count(full, moe_layers(full), 1, ActionKind::I), 8);
  const auto rerun = all_to_all_sequence(full, 1, moe_layers(full));
  EXPECT_EQ(describe(rerun[4]), "dispatch recomputed of layer 3 (stage 1, B of microbatch 0)");
  // Dense first layer only on stage 0: one MoE layer; without --ep, none at all.
  EXPECT_EQ(all_to_all_count(p, moe_layers(p), 0, ActionKind::B), 2);
  const Plan dense = moe_plan("1F1B", 2, 2, "Ett|ttL", 1);
  EXPECT_TRUE(all_to_all_sequence(dense, 1, moe_layers(dense)).empty());
}

TEST(AllToAll, OverlapPartsIssueOnBothCommunicators) {
  const Plan p = moe_plan("DualPipeV", 2, 8, "Et|t|t|tL", 2, 0);
  ASSERT_TRUE(verify(p).ok());
  bool overlapped = false;
  for (int r = 0; r < p.pp(); ++r) {
    const auto seq = all_to_all_sequence(p, r, moe_layers(p));
    for (size_t i = 1; i < seq.size(); ++i)
      overlapped |= seq[i].action == seq[i - 1].action && seq[i].comm != seq[i - 1].comm;
  }
  EXPECT_TRUE(overlapped) << "an OVERLAP_F_B issues its forward's and its backward's";
}

TEST(AllToAll, ReplicasOfOnePlanAgree) {
  for (const auto& [schedule, layout] :
       std::vector<std::pair<std::string, std::string>>{{"1F1B", "Ett|ttL"},
                                                        {"ZB-H2", "Ett|ttL"},
                                                        {"DualPipeV", "Et|t|t|tL"},
                                                        {"DualPipe", "Ett|ttL"},
                                                        {"Interleaved1F1B", "Et|t|t|tL"}}) {
    const Plan p = moe_plan(schedule, 2, 8, layout);
    ASSERT_TRUE(verify(p).ok()) << schedule;
    EXPECT_EQ(check_all_to_all_orders({&p, &p}), std::vector<std::string>{}) << schedule;
    EXPECT_EQ(check_all_to_all_orders({&p, &p, &p, &p}), std::vector<std::string>{}) << schedule;
  }
}

// The mutation the proof exists for: rank 0 of replica 1 runs the F of microbatches 0 and 1 the
// other way round (a valid pipeline on its own), so its first dispatch meets replica 0's
// microbatch 0 with its microbatch 1.
TEST(AllToAll, CatchesTwoForwardsSwapped) {
  const Plan p = moe_plan("1F1B", 2, 4, "Ett|ttL");
  const Plan q = swapped(p, 0, position(p, 0, "0F0"), position(p, 0, "0F1"));
  ASSERT_TRUE(verify(q).ok()) << "the mutant is a valid plan on its own";
  const auto errors = check_all_to_all_orders({&p, &q});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            "all-to-all order: ranks 0 and 1 (EP group of pipeline rank 0: ranks 0, 1) issue "
            "different forward all-to-alls #0: rank 0 dispatch of layer 1 (stage 0, F of "
            "microbatch 0), rank 1 dispatch of layer 1 (stage 0, F of microbatch 1)");
  // Under dp 4 and ep 2 only the group of replicas 0 and 1 differs; with ep 4 the whole group.
  EXPECT_EQ(check_all_to_all_orders({&p, &p, &p, &q}).size(), 1u);
  EXPECT_NE(check_all_to_all_orders({&p, &p, &p, &q})[0].find("ranks 2 and 3"), std::string::npos);
  EXPECT_EQ(check_all_to_all_orders({&p, &p, &p}).size(), 1u) << "ep 2 does not divide dp 3";
}

// Both replicas issue the same forward and the same backward all-to-alls, but one runs rank 1's
// F1 before its B0: it waits in the forward all-to-all that the other reaches only after the
// backward one it waits in. Per communicator the orders agree; together they deadlock.
TEST(AllToAll, CatchesCommunicatorsInterleavedDifferently) {
  const Plan p = moe_plan("1F1B", 2, 4, "Ett|ttL");
  const Plan q = swapped(p, 1, position(p, 1, "1B0"), position(p, 1, "1F1"));
  ASSERT_TRUE(verify(q).ok());
  const auto errors = check_all_to_all_orders({&p, &q});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0],
            "all-to-all deadlock: EP group of pipeline rank 1 (ranks 2, 3): rank 3 waits in the "
            "forward all-to-all #4 (dispatch of layer 2 (stage 1, F of microbatch 1)), which rank "
            "2 has not reached: it waits in the backward all-to-all #0 (combine backward of layer "
            "3 (stage 1, B of microbatch 0)) first");
}

TEST(AllToAll, ExpertParallelNeedsMoeLayers) {
  try {
    moe_plan("1F1B", 2, 4, "Ett|ttL", 2, 4);
    FAIL() << "no MoE layer left";
  } catch (const UserError& e) {
    EXPECT_EQ(e.message(),
              std::string("ep 2 needs MoE layers, and the plan has none (4 decoder layers, "
                          "the first 4 dense)"));
  }
  Plan p = moe_plan("1F1B", 2, 4, "Ett|ttL");
  p.expert_parallel.first_dense = 9;
  const VerifyReport rep = verify(p);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.errors.back(),
            "expert_parallel: ep 2 needs MoE layers, and the plan has none (4 decoder layers, the "
            "first 9 dense)");
}

TEST(AllToAll, PlanJsonKeepsExpertParallelism) {
  const Plan p = moe_plan("1F1B", 2, 4, "Ett|ttL", 2, 1);
  std::ostringstream os;
  emit_json(p, verify(p), os);
  EXPECT_NE(os.str().find("\"expert_parallel\": {\"ep\": 2, \"first_dense\": 1},"),
            std::string::npos);
  EXPECT_EQ(read_plan_json(os.str(), "p.json").expert_parallel, p.expert_parallel);
  std::ostringstream dense;
  const Plan d = moe_plan("1F1B", 2, 4, "Ett|ttL", 1, 0);
  emit_json(d, verify(d), dense);
  EXPECT_EQ(dense.str().find("expert_parallel"), std::string::npos) << "older plans read the same";
}

// ppcompile: --replica-plans names the replicas' plans; a reordered pair is one line, exit 2.
TEST(AllToAll, PpcompileRejectsReplicasOutOfOrder) {
  pptest::TempDir dir;
  const Plan p = moe_plan("1F1B", 2, 4, "Ett|ttL");
  std::ostringstream same, mutant;
  emit_json(p, verify(p), same);
  const Plan q = swapped(p, 0, position(p, 0, "0F0"), position(p, 0, "0F1"));
  emit_json(q, verify(q), mutant);
  const std::string ok_file = dir.write("same.json", same.str());
  const std::string bad_file = dir.write("mutant.json", mutant.str());
  const std::vector<std::string> base{
      "--layout", "Ett|ttL", "--pp",          "2", "--schedule", "1F1B",  "--microbatches", "4",
      "--ep",     "2",       "--first-dense", "1", "--emit",     "stats", "--replica-plans"};
  auto with = [&](const std::string& f) {
    std::vector<std::string> a = base;
    a.push_back(f);
    return a;
  };
  const pptest::CliResult good = pptest::run_ppcompile(with(ok_file));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  const pptest::CliResult bad = pptest::run_ppcompile(with(bad_file));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.out, "");
  EXPECT_EQ(bad.err,
            "ppcompile: error: --replica-plans: all-to-all order: ranks 0 and 1 (EP group of "
            "pipeline rank 0: ranks 0, 1) issue different forward all-to-alls #0: rank 0 dispatch "
            "of layer 1 (stage 0, F of microbatch 0), rank 1 dispatch of layer 1 (stage 0, F of "
            "microbatch 1)\n");
  const pptest::CliResult no_moe =
      pptest::run_ppcompile({"--layout", "Ett|ttL", "--pp", "2", "--schedule", "1F1B",
                             "--microbatches", "4", "--ep", "2", "--first-dense", "4"});
  EXPECT_EQ(no_moe.exit_code, 2);
  EXPECT_EQ(no_moe.err,
            "ppcompile: error: --ep: ep 2 needs MoE layers, and the plan has none (4 decoder "
            "layers, the first 4 dense)\n");
}

}  // namespace
}  // namespace ppc
