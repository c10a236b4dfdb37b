// Expert parallelism's groups (expert_groups.h).
#include "runtime/launch/expert_groups.h"

namespace pprt {

ExpertReplicas expert_replicas(int replica, int dp, int ep) {
  ExpertReplicas out;
  const int block = replica / ep;
  out.shard = replica % ep;
  for (int k = 0; k < ep; ++k) out.shard_group.push_back(block * ep + k);
  for (int b = 0; b < dp / ep; ++b) out.same_experts.push_back(b * ep + out.shard);
  return out;
}

}  // namespace pprt
