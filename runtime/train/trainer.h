// Training: one rank of a pipelined job, or the unpipelined reference. One step loop (trainer.cpp:
// train) for both, which differ only in how a step's gradients are made: the executor replaying
// the rank's actions, then data parallelism's average and the shared weights' sum (grad_reducer.h),
// or the whole model in one process accumulating the same microbatches. Both: AdamW, linear
// warm-up then cosine decay, clipping by the global gradient norm (over all ranks), the same data,
// checkpoints (checkpoint/save_load.h). The loss rank prints progress and writes the metrics, the
// trace and the summary (output/). The interface has no LibTorch type.
#pragma once

#include <string>

#include "runtime/job.h"
#include "runtime/launch/failure.h"
#include "runtime/launch/process_setup.h"
#include "runtime/transport/transport.h"

namespace pprt {

class AllToAllLog;  // timed_transport.h

// The process groups of a rank (job.h: Topology).
struct RankGroups {
  Transport* world = nullptr;     // every rank (null: a job of one rank)
  Transport* pipeline = nullptr;  // this replica's pipeline, ranked by pipeline rank (null: pp 1)
  Transport* replicas = nullptr;  // this pipeline rank in every replica (null: dp 1)
  // Expert parallelism (--ep E; null: ep 1): this pipeline rank in the E neighbouring replicas
  // that share the experts (replica / E the same), twice: one communicator per direction
  // (pprt::ExpertGroup); and in the replicas that hold the same experts (replica % E the same:
  // dp / E of them; null when that is this rank alone), over which experts' gradients are reduced.
  Transport* experts_forward = nullptr;
  Transport* experts_backward = nullptr;
  Transport* expert_replicas = nullptr;
  // Where the experts' communicators record their all-to-alls (timed_transport.h; null: none).
  AllToAllLog* all_to_all_log = nullptr;
};

// Runs global rank `rank` of `job` over `groups`; `store` is the rendezvous store (gathering
// reports, diagnosing a lost rank). Throws RunFailure (launch/failure.h) when the run
// fails, ppc::UserError for bad input found late (an output file that cannot be written).
// `hosts_store`: this process serves the store (it lingers after a failure, see launch/failure.h).
// `where`: the store's address and this rank's (the others' are gathered: they name the ranks a
// network failure cut off).
void train_rank(const Job& job, int rank, int local_rank, const RankGroups& groups, Store& store,
                bool hosts_store, const RankHosts& where);

// The unpipelined reference of `job` (its plan gives the layout and the microbatches).
void train_reference(const Job& job);

}  // namespace pprt
