// The second thread of an OVERLAP_F_B (runtime/train/overlap.h): its two parts really run at once
// (each waits for the other to have started: in sequence they would never end), the part on the
// second thread sees the caller's thread-local state (grad mode), an exception of either part
// comes back to the caller after both ended, and the thread serves one overlap after another.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "runtime/train/overlap.h"

namespace {

using pprt::PartThread;

TEST(Executor, OverlapRunsBothPartsAtOnce) {
  PartThread t;
  for (int round = 0; round < 3; ++round) {
    std::promise<void> side_started, main_started;
    auto side_seen = side_started.get_future();
    auto main_seen = main_started.get_future();
    bool side_saw_main = false, main_saw_side = false;
    std::thread::id side_thread;
    t.run(
        [&] {
          side_thread = std::this_thread::get_id();
          side_started.set_value();
          side_saw_main = main_seen.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
        },
        [&] {
          main_started.set_value();
          main_saw_side = side_seen.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
        });
    EXPECT_TRUE(side_saw_main) << round;
    EXPECT_TRUE(main_saw_side) << round;
    EXPECT_NE(side_thread, std::this_thread::get_id());
  }
}

TEST(Executor, OverlapSidePartHasTheCallersGradMode) {
  PartThread t;
  for (const bool enabled : {false, true, false}) {
    c10::AutoGradMode mode(enabled);
    bool seen = !enabled;
    t.run([&] { seen = c10::GradMode::is_enabled(); }, [] {});
    EXPECT_EQ(seen, enabled);
    // What the side part computes carries a graph exactly when the caller's mode says so.
    const at::Tensor x = at::ones({2}).requires_grad_(true);
    at::Tensor y;
    t.run([&] { y = x * 2; }, [] {});
    EXPECT_EQ(y.requires_grad(), enabled);
  }
}

TEST(Executor, OverlapRethrowsEitherPartsErrorAfterBoth) {
  PartThread t;
  bool main_ran = false;
  EXPECT_THROW(t.run([] { throw std::runtime_error("side"); }, [&] { main_ran = true; }),
               std::runtime_error);
  EXPECT_TRUE(main_ran);
  bool side_ran = false;
  try {
    t.run([&] { side_ran = true; }, [] { throw std::runtime_error("main"); });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "main");
  }
  EXPECT_TRUE(side_ran);
  std::atomic<int> after{0};
  t.run([&] { ++after; }, [&] { ++after; });  // still serves
  EXPECT_EQ(after, 2);
}

}  // namespace
