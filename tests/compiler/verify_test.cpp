#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/verify.h"
#include "tests/compiler/error_cases.h"
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

// Every case of tests/compiler/errors/verify.txt: the plan's whole list of messages.
TEST(Verify, Messages) {
  for (const pptest::ErrorCase& c : pptest::error_cases("verify")) {
    SCOPED_TRACE(c.where);
    int pp = 0, stages = 0, microbatches = 0;
    char kind[32] = {};
    ASSERT_EQ(std::sscanf(c["plan"].c_str(), "pp %d, stages %d, microbatches %d, %31[a-z ]", &pp,
                          &stages, &microbatches, kind),
              4);
    const bool lowered = std::string(kind) == "lowered";
    const PlacementStyle style = c["plan"].find(", V placement") != std::string::npos
                                     ? PlacementStyle::V
                                     : PlacementStyle::Loop;
    const VerifyReport r =
        verify(text_plan(pp, stages, microbatches, c.all("rank"), lowered, style));
    std::string all;
    for (const std::string& e : r.errors) all += (all.empty() ? "" : "\n") + e;
    pptest::expect_message(c, all);
    EXPECT_EQ(r.errors.size(), c.error.size());
    EXPECT_FALSE(r.truncated);
  }
}

// The compute order of errors/verify.txt that cannot run cannot be lowered either.
TEST(Verify, AnInfeasibleComputeOrderCannotBeLowered) {
  EXPECT_THROW(lower_send_recv(text_plan(2, 2, 2, {"0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"}, false)),
               UserError);
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
