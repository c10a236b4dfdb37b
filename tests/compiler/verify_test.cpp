#include <gtest/gtest.h>

#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/verify.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

using pptest::text_plan;

// A correct hand-written 2-rank 1F1B plan with 2 microbatches.
const std::vector<std::string> kGood = {
    "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
    "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
};

TEST(Verify, AcceptsACorrectLoweredPlan) {
  VerifyReport r = verify(text_plan(2, 2, 2, kGood, true));
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_TRUE(r.checked_lowered);
  EXPECT_EQ(r.compute_actions, 8u);
  EXPECT_EQ(r.comm_actions, 8u);
  EXPECT_EQ(r.peak_inflight, (std::vector<int>{2, 1}));
}

TEST(Verify, FindsTheCycleOfCrossedSends) {
  // Rank 1 wants microbatch 1 first; rank 0 sends microbatch 0 first: each waits for the other.
  Plan p = text_plan(2, 2, 2,
                     {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                      "1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F0 1F0 1B0 1SEND_B0"},
                     true);
  VerifyReport r = verify(p);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0],
            "deadlock: rank 0 waits at its action 1 (0SEND_F0) for rank 1 to post 1RECV_F0 (its "
            "action 4), but "
            "rank 1 is at its action 0; rank 1 waits at its action 0 (1RECV_F1) for rank 0 to post "
            "0SEND_F1 (its "
            "action 3), but rank 0 is at its action 1; cycle: rank 0 -> rank 1 -> rank 0");
}

TEST(Verify, GroupedBatchMatchesInAnyOrder) {
  // Inside one batch the order of the ops does not matter (one grouped exchange).
  Plan p = text_plan(2, 2, 2,
                     {"0F0 0F1 0SEND_F1 0SEND_F0 0RECV_B0 0RECV_B1 0B0 0B1",
                      "1RECV_F0 1RECV_F1 1F0 1F1 1B0 1B1 1SEND_B1 1SEND_B0"},
                     true);
  VerifyReport r = verify(p);
  EXPECT_TRUE(r.ok()) << r.errors.front();
  EXPECT_EQ(r.batches, 3u);  // rank 0: one batch of four ops; rank 1: two
}

TEST(Verify, ComputeBeforeItsReceive) {
  Plan p = text_plan(2, 2, 1, {"0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1RECV_F0 1B0 1SEND_B0"}, true);
  VerifyReport r = verify(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0],
            "rank 1, action 0 (1F0): needs the activation of stage 0 microbatch 0 from rank 0, but "
            "rank 1 receives "
            "it only later, at its action 1");
}

TEST(Verify, SendBeforeItsCompute) {
  Plan p = text_plan(2, 2, 1, {"0SEND_F0 0F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"}, true);
  VerifyReport r = verify(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0],
            "rank 0, action 0 (0SEND_F0): needs the forward of stage 0 microbatch 0 on this rank, "
            "which has not run "
            "before it");
}

TEST(Verify, CountsEveryForwardAndBackward) {
  Plan p = text_plan(2, 2, 2, {"0F0 0F0 0B0 0B1", "1F0 1B0 1F1 1I1"}, false);
  VerifyReport r = verify(p);
  ASSERT_GE(r.errors.size(), 3u);
  // Each names the actions involved (or, when they are missing, the actions that need them).
  EXPECT_EQ(r.errors[0],
            "rank 0: stage 0 microbatch 0 has 2 forwards (F), expected exactly 1; see rank 0, "
            "action 0 (0F0), rank 0, action 1 (0F0)");
  EXPECT_EQ(r.errors[1],
            "rank 0: stage 0 microbatch 1 has 0 forwards (F), expected exactly 1; see rank 0, "
            "action 3 (0B1)");
  EXPECT_EQ(r.errors[2],
            "rank 1: stage 1 microbatch 1 has 0 B, 1 I and 0 W; expected one B, or one I and one "
            "W; see rank 1, action 3 (1I1)");
}

TEST(Verify, MissingReceive) {
  Plan p = text_plan(2, 2, 1, {"0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1B0 1SEND_B0"}, true);
  VerifyReport r = verify(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0],
            "activation of stage 0 microbatch 0 (rank 0 -> rank 1): 1 SEND_F and 0 RECV_F, "
            "expected one of each; see rank 0, action 1 (0SEND_F0)");
}

TEST(Verify, ActionsOnTheWrongRankOrOutOfRange) {
  Plan p = text_plan(2, 2, 1, {"1F0 0F0 0B0 5F0", "1F0 1B0 0F7"}, false);
  VerifyReport r = verify(p);
  ASSERT_GE(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0], "rank 0, action 0 (1F0): stage 1 is held by rank 1, not rank 0");
  EXPECT_EQ(r.errors[1],
            "rank 0, action 3 (5F0): stage 5 does not exist (the plan has stages 0..1)");
  EXPECT_EQ(r.errors[2],
            "rank 1, action 2 (0F7): microbatch 7 does not exist (the plan has microbatches 0..0)");
}

TEST(Verify, NoSendRecvBetweenStagesOnOneRank) {
  // V placement on 1 rank: stages 0 and 1 both on rank 0.
  Plan p = text_plan(1, 2, 1, {"0F0 0SEND_F0 1RECV_F0 1F0 1B0 0B0"}, true, PlacementStyle::V);
  VerifyReport r = verify(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0],
            "rank 0, action 1 (0SEND_F0): stages 0 and 1 are both on rank 0; they pass tensors "
            "locally, without "
            "SEND/RECV");
}

TEST(Verify, LoweredComputeMustMatchComputeOrder) {
  Plan p = text_plan(2, 2, 2, kGood, true);
  std::swap(p.compute[1][0], p.compute[1][1]);
  VerifyReport r = verify(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0],
            "rank 1, action 1 (1F0): the lowered order's compute actions differ from the compute "
            "order (which has "
            "1B0 there)");
}

TEST(Verify, InfeasibleComputeOrderNamesTheCycle) {
  // Rank 1 runs microbatch 1's forward before microbatch 0's backward, which rank 0 waits for
  // before it sends microbatch 1.
  Plan p = text_plan(2, 2, 2, {"0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"}, false);
  VerifyReport r = verify(p);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0],
            "the compute order cannot run: rank 0 waits at its action 1 (0B0) for the gradient of "
            "stage 1 "
            "microbatch 0 from rank 1; rank 1 waits at its action 1 (1F1) for the activation of "
            "stage 0 microbatch 1 "
            "from rank 0; cycle: rank 0 -> rank 1 -> rank 0");
  EXPECT_THROW(lower_send_recv(p), UserError);
}

TEST(Verify, SelfDependencyIsReported) {
  Plan p = text_plan(1, 1, 1, {"0B0 0F0"}, false);
  VerifyReport r = verify(p);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0],
            "the compute order cannot run: rank 0 waits at its action 0 (0B0) for its own forward "
            "of stage 0 "
            "microbatch 0, which comes later in its order; cycle: rank 0 -> rank 0");
}

TEST(Verify, TooFewComputeActionsForTheClaimedSize) {
  // A plan that claims a million microbatches but holds four actions is rejected from its size
  // alone, before any table per stage and microbatch is built. (A CSV cell "1F09999999" made the
  // verifier allocate and scan tens of millions of entries.) Found by fuzzing.
  VerifyReport r = verify(text_plan(2, 2, 1 << 20, {"0F0 0B0", "1F0 1B0"}, false));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0],
            "the plan has 4 compute actions, but its 2 stages and 1048576 microbatches need at "
            "least 2097152 (a forward and a backward for each stage and microbatch)");
}

TEST(Verify, ErrorListIsBounded) {
  std::string many;
  for (int i = 0; i < 100; ++i) many += "0F7 ";
  VerifyReport r = verify(text_plan(1, 1, 1, {many}, false), 5);
  EXPECT_EQ(r.errors.size(), 5u);
  EXPECT_TRUE(r.truncated);
}

}  // namespace
}  // namespace ppc
