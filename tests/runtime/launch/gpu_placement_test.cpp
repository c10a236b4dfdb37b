// Where a rank runs on a machine's GPUs (runtime/launch/process_setup.h): the device of a local
// rank, the refusal of several ranks per GPU, and the environment each rank gets in the test mode
// that lets them share one (PPRUN_TEST_SHARE_GPU=1). Pure functions: no GPU needed.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "compiler/diagnostic.h"
#include "runtime/launch/process_setup.h"
#include "tests/compiler/error_cases.h"

namespace {

using pptest::message_of;

using pprt::place_on_gpu;

std::function<const char*(const char*)> env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::map<std::string, std::string> as_map(const pprt::GpuPlacement& p) {
  return {p.env.begin(), p.env.end()};
}

TEST(GpuPlacement, LocalRankModuloDevices) {
  EXPECT_EQ(pprt::gpu_for_local_rank(0, 8), 0);
  EXPECT_EQ(pprt::gpu_for_local_rank(5, 8), 5);
  EXPECT_EQ(pprt::gpu_for_local_rank(7, 8), 7);
  EXPECT_EQ(pprt::gpu_for_local_rank(9, 8), 1);  // two ranks per GPU: 1 and 9
  EXPECT_EQ(pprt::gpu_for_local_rank(3, 1), 0);
  EXPECT_EQ(pprt::gpu_for_local_rank(5, 3), 2);
}

TEST(GpuPlacement, NoDeviceOrNegativeLocalRankIsAnError) {
  EXPECT_NE(message_of([] { pprt::gpu_for_local_rank(0, 0); }).find("no CUDA device is visible"),
            std::string::npos);
  EXPECT_NE(message_of([] { pprt::gpu_for_local_rank(-1, 4); }).find("LOCAL_RANK"),
            std::string::npos);
}

TEST(GpuPlacement, OneRankPerGpuSetsOnlyConnectionsAtCreation) {
  for (int r = 0; r < 4; ++r) {
    const auto p = place_on_gpu(r, r, 4, 4, true, env_of({}));
    EXPECT_EQ(p.device, r);
    EXPECT_FALSE(p.shared);
    EXPECT_EQ(as_map(p), (std::map<std::string, std::string>{{"NCCL_RUNTIME_CONNECT", "0"}}));
    EXPECT_EQ(p.banner, "");
  }
  // The user's own choice stays.
  EXPECT_TRUE(place_on_gpu(0, 0, 1, 1, true, env_of({{"NCCL_RUNTIME_CONNECT", "1"}})).env.empty());
  // Explicitly off, and an unknown count of local ranks (SLURM without SLURM_NTASKS_PER_NODE).
  EXPECT_FALSE(place_on_gpu(1, 1, 2, 2, true, env_of({{"PPRUN_TEST_SHARE_GPU", "0"}})).shared);
  EXPECT_EQ(place_on_gpu(3, 3, 0, 2, false, env_of({})).device, 1);
}

TEST(GpuPlacement, MoreRanksThanGpusIsRefusedOutsideTheTestMode) {
  const std::string m = message_of([] { place_on_gpu(1, 1, 4, 1, true, env_of({})); });
  EXPECT_NE(m.find("--device"), std::string::npos) << m;
  EXPECT_NE(m.find("4 ranks on this machine but 1 visible GPU:"), std::string::npos) << m;
  EXPECT_NE(m.find("PPRUN_TEST_SHARE_GPU=1"), std::string::npos) << m;
  EXPECT_NE(m.find("never for timing"), std::string::npos) << m;
}

TEST(GpuPlacement, TestModeGivesEveryRankItsOwnHostId) {
  std::set<std::string> ids;
  for (int r = 0; r < 4; ++r) {
    const auto p = place_on_gpu(r, r, 4, 1, true, env_of({{"PPRUN_TEST_SHARE_GPU", "1"}}));
    EXPECT_TRUE(p.shared);
    EXPECT_EQ(p.device, 0);
    const auto env = as_map(p);
    ASSERT_EQ(env.count("NCCL_HOSTID"), 1u);
    ids.insert(env.at("NCCL_HOSTID"));
    EXPECT_EQ(env.at("NCCL_SOCKET_IFNAME"), "lo");
    EXPECT_EQ(env.at("NCCL_IB_DISABLE"), "1");
    EXPECT_NE(p.banner.find("TEST MODE"), std::string::npos);
    EXPECT_NE(p.banner.find("never for timing"), std::string::npos);
    EXPECT_NE(p.banner.find("rank " + std::to_string(r) + " on GPU 0"), std::string::npos);
  }
  EXPECT_EQ(ids.size(), 4u);  // distinct: NCCL sees four hosts, no "Duplicate GPU detected"
}

TEST(GpuPlacement, TestModeKeepsTheUsersNetworkChoice) {
  const auto p = place_on_gpu(1, 1, 2, 1, true,
                              env_of({{"PPRUN_TEST_SHARE_GPU", "1"},
                                      {"NCCL_SOCKET_IFNAME", "eth0"},
                                      {"NCCL_IB_DISABLE", "0"}}));
  const auto env = as_map(p);
  EXPECT_EQ(env.count("NCCL_SOCKET_IFNAME"), 0u);
  EXPECT_EQ(env.count("NCCL_IB_DISABLE"), 0u);
  EXPECT_EQ(env.at("NCCL_HOSTID"), "pprun-test-share-gpu-rank1");
}

TEST(GpuPlacement, TestModeIsRefusedAcrossMachinesAndForOtherValues) {
  const std::string remote = message_of([] {
    place_on_gpu(0, 0, 2, 1, false, env_of({{"PPRUN_TEST_SHARE_GPU", "1"}}));
  });
  EXPECT_NE(remote.find("test mode for ranks on one machine"), std::string::npos) << remote;
  const std::string bad = message_of([] {
    place_on_gpu(0, 0, 2, 1, true, env_of({{"PPRUN_TEST_SHARE_GPU", "yes"}}));
  });
  EXPECT_NE(bad.find("PPRUN_TEST_SHARE_GPU must be 0 or 1 (got 'yes')"), std::string::npos) << bad;
}

}  // namespace
