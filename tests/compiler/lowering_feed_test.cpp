// LoweringFeed: lowering (the writer) hands its orders to the verifier's scanner (the reader) on
// another thread. The reader sleeps while nothing is new and wakes on each change the writer makes.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "compiler/lower_send_recv.h"

namespace ppc {
namespace {

using namespace std::chrono_literals;
using State = LoweringFeed::State;

// Per rank, an order with room for `n` actions and none written yet.
std::vector<std::vector<Action>> reserved_orders(int ranks, size_t n) {
  std::vector<std::vector<Action>> orders(static_cast<size_t>(ranks));
  for (auto& o : orders) o.reserve(n);
  return orders;
}

Action numbered(int i) {
  Action a;
  a.kind = ActionKind::F;
  a.microbatch = i;
  return a;
}

TEST(LoweringFeed, AReaderWaitingForTheStartWakesWhenLoweringStarts) {
  LoweringFeed feed;
  auto orders = reserved_orders(2, 8);
  State seen = State::Pending;
  std::thread reader([&] { seen = feed.wait_until_started(); });
  std::this_thread::sleep_for(20ms);  // the reader is asleep in the wait by now, most likely
  feed.start(orders);
  reader.join();
  EXPECT_EQ(seen, State::Writing);
  EXPECT_EQ(feed.data(1), orders[1].data());
  EXPECT_EQ(feed.final_size(1), 8u);
  EXPECT_EQ(feed.written(1), 0u);
}

TEST(LoweringFeed, AReaderWaitingForTheStartWakesWhenLoweringFailsFirst) {
  LoweringFeed feed;
  State seen = State::Pending;
  std::thread reader([&] { seen = feed.wait_until_started(); });
  std::this_thread::sleep_for(20ms);
  feed.fail({});
  reader.join();
  EXPECT_EQ(seen, State::Failed);
}

// The reader follows the published sizes as the scanner does: it reads the version, then the
// state, then the sizes, and sleeps in wait_for_change when nothing was new. It must see every
// action the writer published, in full, and the end; and it must sleep between changes rather
// than spin: a round that found nothing new returns only once the version has moved past the one
// it read, so there are at most as many such rounds as versions.
TEST(LoweringFeed, AReaderFollowingThePublishedSizesSeesEveryActionAndSleepsBetweenChanges) {
  constexpr int kRanks = 3, kChunks = 40, kChunk = 25;
  constexpr size_t kTotal = size_t{kChunks} * kChunk;
  LoweringFeed feed;
  auto orders = reserved_orders(kRanks, kTotal);
  std::vector<std::vector<int>> got(kRanks);
  int idle_rounds = 0;
  bool done = false;
  std::thread reader([&] {
    ASSERT_EQ(feed.wait_until_started(), State::Writing);
    std::vector<size_t> done_upto(kRanks, 0);
    while (true) {
      const unsigned version = feed.version();
      const State state = feed.state();
      bool progressed = false;
      for (int r = 0; r < kRanks; ++r) {
        const size_t n = feed.written(r);
        for (size_t i = done_upto[static_cast<size_t>(r)]; i < n; ++i)
          got[static_cast<size_t>(r)].push_back(feed.data(r)[i].microbatch);
        progressed = progressed || n != done_upto[static_cast<size_t>(r)];
        done_upto[static_cast<size_t>(r)] = n;
      }
      if (state == State::Done) {
        done = true;
        break;
      }
      if (progressed) continue;
      ++idle_rounds;
      feed.wait_for_change(version);
    }
  });
  feed.start(orders);
  for (int c = 0; c < kChunks; ++c) {
    for (int r = 0; r < kRanks; ++r)
      for (int i = 0; i < kChunk; ++i)
        orders[static_cast<size_t>(r)].push_back(numbered(c * kChunk + i + r));
    feed.publish(orders);
    if (c % 4 == 0) std::this_thread::sleep_for(1ms);  // let the reader catch up and sleep
  }
  feed.end(true);
  reader.join();
  ASSERT_TRUE(done);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(got[static_cast<size_t>(r)].size(), kTotal) << "rank " << r;
    for (size_t i = 0; i < kTotal; ++i)
      ASSERT_EQ(got[static_cast<size_t>(r)][i], static_cast<int>(i) + r) << "rank " << r;
  }
  // Versions the reader can see: the start's, one per publish, and the end's. A reader that spun
  // instead of sleeping would go round thousands of times during the writer's pauses.
  EXPECT_LE(idle_rounds, kChunks + 2);
}

}  // namespace
}  // namespace ppc
