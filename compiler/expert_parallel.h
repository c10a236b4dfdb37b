// Expert parallelism in a plan (issue 40): how many ranks each mixture-of-experts layer's experts
// are sharded over, and which decoder layers are MoE layers. Plain data; the all-to-alls it implies
// are all_to_all.h's.
//
// The ranks of one EP group are plan ranks of different data-parallel replicas at the same
// pipeline rank (Megatron's convention, EP inside DP, as pprun's Topology numbers them in
// runtime/job.h): replicas r with the same r / ep. Each MoE layer's F dispatches its tokens to
// their experts and combines the experts' outputs back by two all-to-alls over the group; its
// backward runs the transposed pair.
#pragma once

namespace ppc {

struct ExpertParallel {
  int ep = 1;           // ranks each MoE layer's experts are sharded over; 1: no all-to-all
  int first_dense = 0;  // the first decoder layers (t, in model order) that stay dense
  bool on() const { return ep > 1; }
  bool operator==(const ExpertParallel&) const = default;
};

}  // namespace ppc
