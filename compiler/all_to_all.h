// The all-to-alls of a plan under expert parallelism (issue 40, section 3): each rank's sequence
// of them, derived from its compute actions, and the proof that every rank of an EP group issues
// them in the same order on the same communicator (docs/deadlock-model.md, "All-to-alls").
//
// Each part of a compute action on a stage holding MoE layers (expert_parallel.h) issues, per MoE
// layer, a dispatch and a combine all-to-all: an F (or an OVERLAP_F_B's forward part) in layer
// order on the forward communicator; a B or an I (or an OVERLAP_F_B's backward part) in reverse
// layer order on the backward communicator, combine's transpose first, then dispatch's, each
// layer's forward rerun first (its dispatch and combine, on the backward communicator too) when
// the plan's memory mode recomputes it in full. A W issues none. The two parts of an OVERLAP_F_B
// run concurrently (one communicator each); everything else runs one action after another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/plan.h"

namespace ppc {

enum class Communicator : uint8_t { Forward, Backward };
enum class AllToAllOp : uint8_t { Dispatch, Combine };

struct AllToAll {
  Communicator comm = Communicator::Forward;
  AllToAllOp op = AllToAllOp::Dispatch;
  ActionKind part = ActionKind::F;  // F, B or I: the part that issues it
  bool transposed = false;          // the backward of a dispatch or combine
  bool recompute = false;           // a forward rerun inside a B or I
  int stage = 0, microbatch = 0;
  int layer = 0;   // the decoder layer (its index among the model's t layers)
  int action = 0;  // position of the compute action in the rank's compute order
  // Which of the action's parts: 0 the action itself or an OVERLAP_F_B's forward, 1 its backward.
  int part_index = 0;
  bool same_collective(const AllToAll& o) const {
    return comm == o.comm && op == o.op && part == o.part && transposed == o.transposed &&
           recompute == o.recompute && stage == o.stage && microbatch == o.microbatch &&
           layer == o.layer;
  }
};

// "dispatch of layer 3 (stage 1, F of microbatch 2)", "combine backward of layer 3 (...)".
std::string describe(const AllToAll& a);

// Per plan stage: the decoder layers (indices among the model's t layers) that are MoE layers
// under plan.expert_parallel. Empty lists when expert parallelism is off or the plan has no model.
std::vector<std::vector<int>> moe_layers(const Plan& plan);

// Rank `rank`'s all-to-alls in the order its compute order issues them (both communicators).
std::vector<AllToAll> all_to_all_sequence(const Plan& plan, int rank,
                                          const std::vector<std::vector<int>>& moe);

// How many all-to-alls each part of a compute kind issues on plan stage `stage` (F: forward; B, I:
// backward, recomputation included; W: none).
int all_to_all_count(const Plan& plan, const std::vector<std::vector<int>>& moe, int stage,
                     ActionKind kind);

// The proof for data-parallel replicas that may run different orders (a plan per replica, each
// verified alone; replicas[0]'s expert_parallel holds for all): for each pipeline rank and each EP
// group of replicas, every member issues the same all-to-alls in the same order on each
// communicator, and running them (each rank blocking in an all-to-all until every member is in
// it; an OVERLAP_F_B's two communicators concurrently) finishes. Global rank of pipeline rank p
// in replica d: p * replicas.size() + d (pprun's Topology). One line per failure, naming the
// ranks and the collectives; empty when proved. Replicas that run one plan pass by construction.
std::vector<std::string> check_all_to_all_orders(const std::vector<const Plan*>& replicas,
                                                 size_t max_errors = 20);

// The one-line check that plan.expert_parallel fits the plan: ep at least 1, first_dense at least
// 0, and ep > 1 only with a model that has MoE layers. Empty when it fits (the caller says where
// the values came from: the plan's "expert_parallel", --ep).
std::string check_expert_parallel(const Plan& plan);

}  // namespace ppc
