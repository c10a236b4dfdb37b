// The arena behind ppcompile's large allocations (tools/ppcompile/huge_page_arena.h).
#include "tools/ppcompile/huge_page_arena.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace ppc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HugePageArena, BlocksAreAlignedDisjointAndWritable) {
  HugePageArena arena(64 * kMiB);
  std::vector<std::pair<char*, size_t>> blocks;
  for (size_t n : {size_t{1}, size_t{100}, size_t{65536}, size_t{490000}, 3 * kMiB, size_t{17}}) {
    char* p = static_cast<char*>(arena.allocate(n));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(arena.owns(p));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    std::memset(p, static_cast<int>(blocks.size()), n);
    blocks.push_back({p, n});
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    for (size_t k = 0; k < blocks[i].second; k += 4093)
      ASSERT_EQ(blocks[i].first[k], static_cast<char>(i));  // nothing overlapped it
  }
  int local = 0;
  EXPECT_FALSE(arena.owns(&local));
  EXPECT_FALSE(arena.owns(nullptr));
  for (auto& b : blocks) arena.release(b.first);
  EXPECT_EQ(arena.top(), 0u);  // everything merged back down to the bottom
  EXPECT_EQ(arena.free_ranges(), 0u);
}

TEST(HugePageArena, FreedBlocksAreReusedAndMerged) {
  HugePageArena arena(64 * kMiB);
  void* a = arena.allocate(kMiB);
  void* b = arena.allocate(kMiB);
  void* c = arena.allocate(kMiB);
  const size_t top = arena.top();
  arena.release(a);
  EXPECT_EQ(arena.free_ranges(), 1u);
  EXPECT_EQ(arena.allocate(kMiB / 2), a);  // first fit: a's place
  arena.release(a);
  arena.release(b);  // merges with a's range
  EXPECT_EQ(arena.free_ranges(), 1u);
  void* big = arena.allocate(2 * kMiB);  // fits in a + b
  EXPECT_EQ(big, a);
  EXPECT_EQ(arena.top(), top);
  arena.release(c);  // at the top: lowers it
  EXPECT_LT(arena.top(), top);
  arena.release(big);
  EXPECT_EQ(arena.top(), 0u);
  EXPECT_EQ(arena.free_ranges(), 0u);
}

TEST(HugePageArena, RefusesWhatDoesNotFit) {
  HugePageArena arena(4 * kMiB);
  EXPECT_EQ(arena.allocate(8 * kMiB), nullptr);
  void* a = arena.allocate(3 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(arena.allocate(2 * kMiB), nullptr);  // full: the caller falls back to malloc
  arena.release(a);
  EXPECT_NE(arena.allocate(2 * kMiB), nullptr);
}

TEST(HugePageArena, MoreHolesThanItKeeps) {
  HugePageArena arena(1024 * kMiB);
  // Every other block of 1500 freed: 750 holes, of which it keeps kMaxFree (the others' space
  // stays unused), and what is kept is reused.
  std::vector<void*> blocks;
  for (int i = 0; i < 1500; ++i) blocks.push_back(arena.allocate(64 << 10));
  const size_t top = arena.top();
  for (size_t i = 0; i < blocks.size(); i += 2) arena.release(blocks[i]);
  EXPECT_EQ(arena.free_ranges(), HugePageArena::kMaxFree);
  for (size_t i = 0; i < HugePageArena::kMaxFree; ++i) ASSERT_NE(arena.allocate(64 << 10), nullptr);
  EXPECT_EQ(arena.free_ranges(), 0u);
  EXPECT_EQ(arena.top(), top);
}

TEST(HugePageArena, Threads) {
  HugePageArena arena(1024 * kMiB);
  // Random sizes from several threads; each checks its blocks' contents before freeing.
  auto work = [&arena](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<std::pair<unsigned char*, size_t>> live;
    for (int i = 0; i < 2000; ++i) {
      if (!live.empty() && rng() % 2) {
        const size_t k = rng() % live.size();
        auto [p, n] = live[k];
        for (size_t j = 0; j < n; j += 1021) ASSERT_EQ(p[j], static_cast<unsigned char>(seed));
        arena.release(p);
        live.erase(live.begin() + static_cast<long>(k));
      } else {
        const size_t n = 64 + rng() % (600 << 10);
        auto* p = static_cast<unsigned char*>(arena.allocate(n));
        ASSERT_NE(p, nullptr);
        std::memset(p, static_cast<int>(seed), n);
        live.push_back({p, n});
      }
    }
    for (auto& [p, n] : live) arena.release(p);
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t <= 4; ++t) threads.emplace_back(work, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(arena.top(), 0u);  // every byte came back and merged
}

}  // namespace
}  // namespace ppc
