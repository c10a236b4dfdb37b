// The plan IR: everything ppcompile produces and pprun executes.
//
// A Plan is a plain value. Passes take a Plan and return a new one (lower_send_recv) or an
// output (verify, simulate, emitters). Stages are numbered in model order; a microbatch flows
// forward through stage s, then next_stage(s), ..., and its gradient flows back the same way.
//
// DualPipe runs two copies of the model in opposite directions: with copies == 2 the plan has
// 2 * layout.num_stages() stages; stages [0, S) are copy 0 and [S, 2S) copy 1 (each copy's stage
// k runs layout stage k), and microbatch mb belongs to copy copy_of_microbatch(mb).
#pragma once

#include <string>
#include <vector>

#include "compiler/action.h"
#include "compiler/expert_parallel.h"
#include "compiler/layout.h"
#include "compiler/memory_mode.h"

namespace ppc {

struct Plan {
  static constexpr int kFormatVersion = 1;

  Layout layout;           // the model's stages, or a generic layout for --stages N
  bool has_model = false;  // true when the layout came from a layout string/file
  Placement placement;     // stage -> rank / chunk; holds pp and vpp
  std::string schedule;    // canonical schedule name, e.g. "Interleaved1F1B"
  int microbatches = 0;
  int copies = 1;  // 2 for DualPipe (two model copies), else 1
  // What each stage does with its kept activations (recompute, offload); empty: keep them all.
  // The JSON plan's optional "memory" field (absent when empty, so older plans read the same).
  MemoryPolicy memory;
  // Plan microbatch k processes the step's data microbatch microbatch_order[k] (a permutation);
  // empty: microbatch k (docs/plan-format.md). Set for the microbatches' lengths (lengths.h).
  std::vector<int> microbatch_order;
  // Expert parallelism (issue 40, expert_parallel.h): the JSON plan's optional "expert_parallel"
  // field (absent when ep is 1, so older plans read the same).
  ExpertParallel expert_parallel;

  // Per rank: the compute order (F, B, I, W, OverlapFB) and, once lowered, the full order
  // including SEND/RECV. `lowered` is empty until lower_send_recv has run.
  std::vector<std::vector<Action>> compute;
  std::vector<std::vector<Action>> lowered;

  int pp() const { return placement.pp; }
  int vpp() const { return placement.vpp; }
  int num_stages() const { return placement.num_stages(); }
  int stages_per_copy() const { return copies == 1 ? num_stages() : num_stages() / copies; }
  bool is_lowered() const { return !lowered.empty(); }

  // -1 when s is the first (prev) / last (next) stage of its copy. (These run per action in the
  // passes: the common single-copy case avoids divisions.)
  int prev_stage(int s) const {
    if (copies == 1) return s == 0 ? -1 : s - 1;
    return s % stages_per_copy() == 0 ? -1 : s - 1;
  }
  int next_stage(int s) const {
    if (copies == 1) return s + 1 == num_stages() ? -1 : s + 1;
    return (s + 1) % stages_per_copy() == 0 ? -1 : s + 1;
  }
  int copy_of_stage(int s) const { return copies == 1 ? 0 : s / stages_per_copy(); }
  int copy_of_microbatch(int mb) const {
    return copies == 1 ? 0 : (mb < (microbatches + 1) / 2 ? 0 : 1);
  }
  bool runs(int stage, int mb) const {
    return copies == 1 || copy_of_stage(stage) == copy_of_microbatch(mb);
  }
  // The layout stage a plan stage executes.
  int layout_stage(int s) const { return s % stages_per_copy(); }
  int rank_of(int s) const { return placement.stage_rank[static_cast<size_t>(s)]; }

  // The order a consumer should run: lowered if present, else compute.
  const std::vector<std::vector<Action>>& order() const { return is_lowered() ? lowered : compute; }

  bool operator==(const Plan& o) const = default;
};

}  // namespace ppc
