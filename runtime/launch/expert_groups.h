// Expert parallelism's groups (pprun --ep, docs/pprun.md "Expert parallelism"): as Megatron-Core's
// expert groups, inside the data-parallel replicas. A pipeline rank's dp replicas are cut into
// dp / ep blocks of ep neighbours (replicas r with the same r / ep): each block shares one copy
// of every routed expert, replica r holding the shard r % ep. The replicas that hold the same
// shard (the same r % ep, one per block) reduce its gradients. Plain C++.
#pragma once

#include <vector>

namespace pprt {

struct ExpertReplicas {
  std::vector<int> shard_group;   // the replicas sharing the experts with `replica`, in order
  std::vector<int> same_experts;  // the replicas holding `replica`'s shard, in order
  int shard = 0;                  // `replica`'s position in shard_group
};

// For replica `replica` of `dp` with expert-parallel size `ep` (a divisor of dp).
ExpertReplicas expert_replicas(int replica, int dp, int ep);

}  // namespace pprt
