// Where a rank is in its plan (runtime/train/where.h), the step's timeout
// (runtime/train/step_timeout.h) and the connection of every peer before the first step
// (runtime/train/peers.h): the pieces of the lines a hang prints (docs/gpu.md, "When a run
// hangs"). The end-to-end check is e2e_test.cpp's Faults.AHangingRankIsNamedWithItsPlaceInSeconds.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "rank_threads.h"
#include "runtime/train/peers.h"
#include "runtime/train/step_timeout.h"
#include "runtime/train/where.h"
#include "test_plans.h"

namespace {

using namespace std::chrono_literals;
using pprt::Where;

// 1F1B on two ranks, 4 microbatches (the plan of issue 38's hang, shorter):
//   rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 ...
//   rank 1: 1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 ...
ppc::Plan one_f_one_b() {
  return rttest::compile("Ett|ttL", 2, "1F1B", 4);
}

TEST(Where, NamesTheActionTheHostCallAndThePartners) {
  const ppc::Plan plan = one_f_one_b();
  ASSERT_EQ(ppc::to_string(plan.order()[0][3]), "0SEND_F1");
  ASSERT_EQ(ppc::to_string(plan.order()[0][4]), "0RECV_B0");
  Where w0(plan, 0, {}, true);
  EXPECT_EQ(w0.describe(), "before the first step");
  w0.start_step(0, 300s);
  w0.at(3, Where::Call::Post);
  // The batch is both actions; each waits for its own partner on rank 1.
  const std::string post = w0.describe();
  EXPECT_EQ(post.rfind("step 1, action 3 (0SEND_F1, 0RECV_B0): in a host call, posting the batch, "
                       "for 0.0 s; it waits for rank 1's action 2 (1RECV_F1), rank 1's action 4 "
                       "(1SEND_B0)",
                       0),
            0u)
      << post;
  EXPECT_EQ(w0.partners(3, 5), "rank 1's action 2 (1RECV_F1), rank 1's action 4 (1SEND_B0)");
  EXPECT_EQ(w0.partners(0, 1), "");  // a compute action has none

  // Rank 1 queuing B0's kernels while its device waits for the second receive: issue 38's rank 1.
  Where w1(plan, 1, {}, true);
  w1.start_step(0, 300s);
  w1.device_waits(0);
  w1.at(1, Where::Call::Compute);
  w1.device_done(0);
  w1.device_waits(2);
  w1.at(3, Where::Call::Compute);
  EXPECT_EQ(w1.describe(),
            "step 1, action 3 (1B0): in a host call, queuing its kernels, for 0.0 s; its device "
            "waits for action 2 (1RECV_F1): rank 0's action 3 (0SEND_F1)");
  // On the CPU the same action is computed, and a receive is waited for on the host.
  Where cpu(plan, 1, {}, false);
  cpu.start_step(4, 10s);
  cpu.at(3, Where::Call::Compute);
  EXPECT_EQ(cpu.describe(), "step 5, action 3 (1B0): computing it, for 0.0 s");
  cpu.at(2, Where::Call::WaitHost);
  EXPECT_EQ(cpu.describe(),
            "step 5, action 2 (1RECV_F1): waiting on the host for its transfer, "
            "for 0.0 s; it waits for rank 0's action 3 (0SEND_F1)");
  cpu.outside("the optimizer", true);
  EXPECT_EQ(cpu.describe(),
            "step 5, outside the replay: in a host call (the optimizer), for 0.0 s");
}

TEST(Where, NamesPeersByTheirRankInTheJob) {
  // Replica 1 of two: pipeline ranks 0 and 1 are the job's ranks 1 and 3.
  Where w(one_f_one_b(), 1, {1, 3}, false);
  EXPECT_EQ(w.partners(0, 1), "rank 1's action 1 (0SEND_F0)");
}

TEST(Where, OverdueOnlyWhenAHostCallOfTheStepOutlastsItsTimeout) {
  Where w(one_f_one_b(), 0, {}, false);
  w.start_step(2, 1ms);
  EXPECT_EQ(w.overdue(0ms), "");  // not in a host call of the step
  w.outside("saving the checkpoint", false);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(w.overdue(0ms), "");  // saves have no step timeout
  w.at(0, Where::Call::Hang);
  EXPECT_EQ(w.overdue(1h), "");
  std::this_thread::sleep_for(20ms);
  const std::string late = w.overdue(0ms);
  EXPECT_EQ(late.rfind("step 3, action 0 (0F0): in a host call that does not return (fault "
                       "injection: --fault-kill R:S:hang), for 0.0",
                       0),
            0u)
      << late;
  w.outside("the all-reduce of the step's statistics", true);
  std::this_thread::sleep_for(20ms);
  EXPECT_NE(w.overdue(0ms), "");
}

TEST(StepTimeout, GenerousFirstThenProportionalToTheSlowestStep) {
  using ms = std::chrono::milliseconds;
  pprt::StepTimeout t(ms(300'000), ms(0));
  EXPECT_EQ(t.current(), ms(300'000));  // the first step
  t.step_done(ms(50));
  EXPECT_EQ(t.current(), ms(10'000));  // at least 10 s
  t.step_done(ms(4'000));
  EXPECT_EQ(t.current(), ms(40'000));  // ten times the slowest step
  t.step_done(ms(100));
  EXPECT_EQ(t.current(), ms(40'000));
  t.generous_next();  // after a save or an evaluation
  EXPECT_EQ(t.current(), ms(300'000));
  t.step_done(ms(100'000));
  EXPECT_EQ(t.current(), ms(300'000));  // never above --timeout
  pprt::StepTimeout fixed(ms(300'000), ms(2'000));
  fixed.step_done(ms(50));
  EXPECT_EQ(fixed.current(), ms(2'000));  // --step-timeout
  pprt::StepTimeout small(ms(5'000), ms(0));
  small.step_done(ms(50));
  EXPECT_EQ(small.current(), ms(5'000));  // a --timeout below the floor wins
}

// Every rank of a DualPipeV plan on four ranks exchanges a number with each rank its plan sends
// to or receives from, over real Gloo: afterwards the plan's own transfers need no new peer.
TEST(Where, ConnectPeersExchangesWithEveryPeerOfThePlan) {
  const ppc::Plan plan = rttest::compile("Et|t|t|t|t|t|t|tL", 4, "DualPipeV", 8);
  std::atomic<int> done{0};
  pprt_test::run_ranks(4, [&](int rank, pprt::Transport& t, pprt::Store&) {
    pprt::connect_peers(t, plan, rank, at::Device(at::kCPU), 10s);
    ++done;
  });
  EXPECT_EQ(done.load(), 4);
  // A plan without transfers exchanges nothing (no transport is touched).
  const ppc::Plan alone = rttest::compile("EttL", 1, "1F1B", 2);
  pprt_test::run_ranks(1, [&](int rank, pprt::Transport& t, pprt::Store&) {
    pprt::connect_peers(t, alone, rank, at::Device(at::kCPU), 10s);
  });
}

}  // namespace
