// What a run trains (runtime/job.h): the learning-rate schedule.

#include <gtest/gtest.h>

#include "runtime/job.h"
#include "runtime/launch/expert_groups.h"

namespace {

TEST(LearningRate, WarmsUpLinearlyThenDecaysToTheMinimum) {
  pprt::TrainOptions o;
  o.steps = 101;
  o.lr = 1.0;
  o.warmup = 10;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 0), 0.1);
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 9), 1.0);
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 10), 1.0);
  EXPECT_NEAR(pprt::learning_rate(o, 55), 0.55,
              1e-12);  // half way through the decay (steps 10..100)
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 100), 0.1);
  for (int s = 11; s < 101; ++s)
    EXPECT_LT(pprt::learning_rate(o, s), pprt::learning_rate(o, s - 1));
}

// The rank layout by named dimensions, Megatron-LM's order (innermost first: ep, dp, pp).
TEST(Topology, NamedDimensionsInMegatronsOrder) {
  const pprt::Topology t(4, 2);  // pp 4 x dp 2, as pprun --dp 2 runs a plan of 4 ranks
  EXPECT_EQ(t.world(), 8);
  EXPECT_EQ(t.pp(), 4);
  EXPECT_EQ(t.dp(), 2);
  EXPECT_EQ(t.size("ep"), 1);
  EXPECT_EQ(t.size("tp"), 1);  // a dimension it lacks
  // Global rank 5: pipeline rank 2 of replica 1; the ranks of one pipeline stage are neighbours.
  EXPECT_EQ(t.pipeline_rank(5), 2);
  EXPECT_EQ(t.replica(5), 1);
  EXPECT_EQ(t.global(2, 1), 5);
  EXPECT_EQ(t.group(5, "dp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(t.group(5, "pp"), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(t.group(5, "ep"), (std::vector<int>{5}));
  EXPECT_EQ(t.pipeline(1), t.group(1, "pp"));
  EXPECT_EQ(t.replicas(3), (std::vector<int>{6, 7}));
  // With expert parallelism (room for it): ep innermost, inside the data-parallel ranks, as
  // Megatron-Core's expert groups are; pp still outermost.
  const pprt::Topology e(2, 2, 2);
  EXPECT_EQ(e.world(), 8);
  EXPECT_EQ(e.group(0, "ep"), (std::vector<int>{0, 1}));
  EXPECT_EQ(e.group(0, "dp"), (std::vector<int>{0, 2}));
  EXPECT_EQ(e.group(0, "pp"), (std::vector<int>{0, 4}));
  EXPECT_EQ(e.coordinate(7, "ep"), 1);
  EXPECT_EQ(e.coordinate(7, "dp"), 1);
  EXPECT_EQ(e.coordinate(7, "pp"), 1);
  EXPECT_EQ(e.along(7, "dp", 0), 5);
}

// --ep inside --dp (Megatron-Core's expert groups): dp 4 x ep 2 is two blocks of two neighbouring
// replicas, each holding every expert once; replicas 0 and 2 hold the same shard.
TEST(Topology, ExpertReplicasAreBlocksOfNeighbours) {
  const pprt::ExpertReplicas r0 = pprt::expert_replicas(0, 4, 2);
  EXPECT_EQ(r0.shard_group, (std::vector<int>{0, 1}));
  EXPECT_EQ(r0.same_experts, (std::vector<int>{0, 2}));
  EXPECT_EQ(r0.shard, 0);
  const pprt::ExpertReplicas r3 = pprt::expert_replicas(3, 4, 2);
  EXPECT_EQ(r3.shard_group, (std::vector<int>{2, 3}));
  EXPECT_EQ(r3.same_experts, (std::vector<int>{1, 3}));
  EXPECT_EQ(r3.shard, 1);
  const pprt::ExpertReplicas all = pprt::expert_replicas(1, 2, 2);  // ep = dp: one block
  EXPECT_EQ(all.shard_group, (std::vector<int>{0, 1}));
  EXPECT_EQ(all.same_experts, (std::vector<int>{1}));
}

}  // namespace
