// The rank environment (runtime/launch/env.h): torchrun, SLURM, a rank pprun spawned, none.

#include <gtest/gtest.h>
#include <map>
#include <memory>

#include "file_test_util.h"
#include "runtime/launch/env.h"

namespace {

pprt::GetEnv env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnv, Torchrun) {
  const auto e = pprt::launch_env(env_of({{"RANK", "1"},
                                          {"WORLD_SIZE", "4"},
                                          {"LOCAL_RANK", "1"},
                                          {"MASTER_ADDR", "10.0.0.1"},
                                          {"MASTER_PORT", "29500"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                          {"TORCHELASTIC_RUN_ID", "x"},
                                          {"TORCHELASTIC_RESTART_COUNT", "2"},
                                          {"LOCAL_WORLD_SIZE", "2"},
                                          {"GLOO_SOCKET_IFNAME", "eth1"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->launcher, "torchrun");
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->world, 4);
  EXPECT_TRUE(e->external_store);
  EXPECT_EQ(e->store_prefix, "pprun/2/");
  EXPECT_EQ(e->master_addr, "10.0.0.1");
  EXPECT_EQ(e->local_world, 2);
  EXPECT_EQ(e->gloo_interface, "eth1");
  EXPECT_EQ(e->progress, "");
}

TEST(LaunchEnv, Slurm) {
  const auto e = pprt::launch_env(env_of({{"SLURM_PROCID", "0"},
                                          {"SLURM_NTASKS", "8"},
                                          {"SLURM_LOCALID", "0"},
                                          {"MASTER_ADDR", "node1"},
                                          {"MASTER_PORT", "29500"},
                                          {"SLURM_NTASKS_PER_NODE", "4"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->launcher, "SLURM");
  EXPECT_EQ(e->world, 8);
  EXPECT_FALSE(e->external_store);  // rank 0 serves the store
  EXPECT_EQ(e->local_world, 4);
}

// Without --ntasks-per-node, srun gives the tasks per node as a list of counts.
TEST(LaunchEnv, SlurmTasksOnThisNode) {
  auto local = [](const char* spec, const char* node) {
    return pprt::launch_env(env_of({{"SLURM_PROCID", "0"},
                                    {"SLURM_NTASKS", "8"},
                                    {"MASTER_ADDR", "node1"},
                                    {"MASTER_PORT", "29500"},
                                    {"SLURM_STEP_TASKS_PER_NODE", spec},
                                    {"SLURM_NODEID", node}}))
        ->local_world;
  };
  EXPECT_EQ(local("4", "0"), 4);
  EXPECT_EQ(local("2(x3)", "2"), 2);
  EXPECT_EQ(local("3(x2),2", "1"), 3);
  EXPECT_EQ(local("3(x2),2", "2"), 2);
  EXPECT_EQ(local("3(x2),2", "3"), 0);  // no such node: unknown
  EXPECT_EQ(local("garbage", "0"), 0);
}

TEST(LaunchEnv, ARankPprunSpawned) {
  const auto e = pprt::launch_env(env_of({{"RANK", "0"},
                                          {"WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "127.0.0.1"},
                                          {"MASTER_PORT", "29500"},
                                          {"PPRUN_SPAWNED", "1"},
                                          {"PPRUN_PROGRESS", "bar"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->launcher, "pprun");
  EXPECT_TRUE(e->external_store);  // the spawning pprun serves the store
  EXPECT_EQ(e->progress, "bar");   // its terminal decides the progress display
  EXPECT_EQ(e->local_world, 0);
}

TEST(LaunchEnv, NoneMeansSpawn) {
  EXPECT_FALSE(pprt::launch_env(env_of({})).has_value());
}

TEST(LaunchEnv, Errors) {
  EXPECT_EQ(filetest::user_error([] {
              pprt::launch_env(env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
            }),
            "environment: RANK='4' is not an integer in 0..3");
  EXPECT_EQ(filetest::user_error([] {
              pprt::launch_env(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}));
            }).rfind("environment: MASTER_ADDR is not set (under SLURM, export MASTER_ADDR=", 0),
            0u);
}

}  // namespace
