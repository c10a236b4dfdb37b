// What each rank measured, gathered on the loss rank at the end of a run: the peak of in-flight
// activations, per-step timings and the span of every action. From them: the runtime's own
// overhead per action, the measured step time against the makespan the compiler's simulator
// gives for the per-action times of the same step, and the Chrome trace (trace.h). No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "runtime/job.h"
#include "runtime/transport/transport.h"

namespace pprt {

// Times of one lowered action in a step, in nanoseconds since the step began.
struct ActionSpan {
  int64_t wait = 0;   // compute: when it began (waiting for a received input first); comm: posted
  int64_t start = 0;  // compute: when it began computing; comm: posted
  int64_t end = 0;    // compute: done; comm: its Work waited for
};

// One all-to-all of expert parallelism (--ep: the token exchange of a mixture of experts, on the
// layers' forward or backward communicator; train/timed_transport.h records them), in
// nanoseconds since the step began.
struct AllToAllSpan {
  int64_t start = 0, end = 0;
  int64_t sent_bytes = 0, received_bytes = 0;  // to and from the other ranks of the group
  int64_t sent_rows = 0;                       // rows sent (to every rank, this one included)
  bool backward = false;  // on the backward communicator (a backward's, or a recomputed forward)
  bool counts = false;    // the split sizes exchanged before a dispatch (equal splits)
};

// An OVERLAP_F_B whose two parts ran concurrently (overlap.h), in nanoseconds since the step
// began: both start at `begin`; the forward part (second thread) ends at `forward_end`, the
// backward part (the replay's thread) at `backward_end`.
struct OverlapSpan {
  int64_t begin = 0, forward_end = 0, backward_end = 0;
};

struct StepTiming {
  int step = 0;               // 0-based
  int64_t begin_unix_us = 0;  // wall clock at the start of the step (aligns ranks in the trace)
  int64_t wall_ns = 0;        // action replay, sends waited for
  int64_t compute_ns = 0;     // inside compute actions, waits excluded
  int64_t wait_ns = 0;        // waiting for receives and sends
  int64_t post_ns = 0;        // posting batches to the transport
  int64_t optimizer_ns = 0;   // after the replay: gradient clipping (all-reduce) and AdamW
  // The rank's own work between replays, the all-reduce's wait left out: the squared gradient
  // norm, clipping, AdamW, zeroing the gradients and making the batch tensor (this step's).
  int64_t own_ns = 0;
  // The whole step on this rank: from zeroing its gradients to the end of its AdamW step (the
  // all-reduce keeps the ranks in step: in the steady state every rank's equals the period).
  int64_t step_ns = 0;
  size_t actions = 0;
  int64_t sent_bytes = 0;  // the tensors this rank sent to other ranks (activations, gradients)
  int sends = 0;           // in that many messages
  std::vector<ActionSpan> spans;  // per lowered action (empty if not kept)
  std::vector<AllToAllSpan> all_to_all;  // --ep: the step's all-to-alls, in the order they began
  std::vector<OverlapSpan> overlaps;     // the OVERLAP_F_Bs that ran their parts concurrently
};

// One step's data-parallel gradient reduction on one rank (grad_reducer.h).
struct ReduceStats {
  uint64_t bytes = 0;  // gradient bytes this rank all-reduced
  int buckets = 0;
  int64_t span_ns = 0;     // from the first bucket's start to the last one seen finished
  int64_t exposed_ns = 0;  // the step's wait at its end for reductions still running
};

// A rank's reductions over the steps it measured.
struct DpReport {
  int steps = 0;
  uint64_t bytes = 0;  // per step
  int buckets = 0;
  int64_t span_ns = 0, exposed_ns = 0;  // summed over the steps
  void add(const ReduceStats& r) {
    ++steps;
    bytes = r.bytes;
    buckets = r.buckets;
    span_ns += r.span_ns;
    exposed_ns += r.exposed_ns;
  }
};

struct RankReport {
  int rank = 0;
  int peak_inflight = 0;
  int64_t peak_activation_bytes = 0;  // over the steps (StepReport::peak_activation_bytes)
  int64_t offloaded_bytes = 0;        // --offload: the most one step offloaded
  // Not on the CPU: the device allocator's peak of allocated bytes over the steps after the
  // first (allocator_peak.h; parameters, gradients, optimizer state, workspace); -1: the CPU.
  int64_t allocator_peak_bytes = -1;
  std::vector<StepTiming> steps;      // the steps kept for analysis and the trace
  // Checkpoints saved: per save, the seconds this rank spent in it (training paused) and the
  // tensor bytes it wrote.
  std::vector<double> save_seconds;
  std::vector<uint64_t> save_bytes;
  // --save-async: per save, the seconds its background write took to the commit, and the seconds
  // of its pause spent waiting for the previous save's write; and the steps that ended while a
  // save was being written, and the others (the run's first step left out): how many and their
  // summed seconds.
  std::vector<double> save_write_seconds;
  std::vector<double> save_wait_seconds;
  int write_steps = 0, other_steps = 0;
  double write_steps_s = 0, other_steps_s = 0;
  double load_seconds = 0;  // --resume: reading its parameters and AdamW state
  uint64_t load_bytes = 0;
  DpReport dp;  // data parallelism (steps 0 without)
};

std::string to_json(const RankReport& r);
RankReport rank_report_from_json(const std::string& text);

// At the end of a run every rank puts its report in the rendezvous store; the loss rank gathers
// replica 0's, by pipeline rank.
void publish_report(Store& store, int rank, const RankReport& report);
std::vector<RankReport> gather_reports(Store& store, const Topology& topology);

// A rank is a straggler when its compute time per step is at least this many times the median
// over the ranks (Megatron-LM's --log-straggler names such ranks).
inline constexpr double kStragglerRatio = 1.2;

// Compute time per step by rank (every rank of the job, data-parallel replicas included: time
// inside compute actions, waits excluded), and the slowest rank against the median.
struct ComputeBalance {
  int steps = 0;           // steps measured
  std::vector<double> ms;  // per global rank: the median over the steps
  int slowest = -1;        // the rank with the largest time
  double ratio = 0;        // its time / the median over the ranks
  bool straggler() const { return slowest >= 0 && ratio >= kStragglerRatio; }
};

// From `steps` (per step, every rank's compute seconds).
ComputeBalance compute_balance(const std::vector<std::vector<double>>& steps);

// The summary's line: each rank's time (or, past 16 ranks, the fastest, the median and the
// slowest) and the straggler, if any.
std::string balance_text(const ComputeBalance& b);

struct TimingSummary {
  std::vector<int> peak_inflight;              // measured, per rank
  std::vector<int> predicted_inflight;         // ppc::peak_inflight(plan)
  std::vector<int64_t> peak_activation_bytes;  // measured, per rank (RankReport's)
  std::vector<int64_t> offloaded_bytes;        // per step, per rank (RankReport's; --offload)
  std::vector<int64_t> allocator_peak_bytes;   // per rank (RankReport's; -1: the CPU)
  double overhead_us_per_action = 0;  // wall - compute - wait - post, per action, all ranks
  double post_us_per_action = 0;      // posting to the transport, per communication batch action
  double step_ms = 0;                 // median over the analysed steps of max over ranks of wall
  double simulated_ms = 0;            // median simulated makespan from the same steps' action times
  double ratio = 0;                   // median of step / simulated
  // Median over the same steps of the slowest rank's whole step (StepTiming::step_ns): the
  // replay and what lies between replays, the optimizer and the all-reduce included.
  double whole_step_ms = 0;
  int analysed_steps = 0;
  std::vector<std::pair<std::string, double>>
      mean_ms;  // per compute kind ("F", "B", "I", ...): mean duration
  // Per step, the bytes a pipeline's ranks sent each other between stages (activations forward,
  // their gradients backward: halved by --dtype bf16), in that many messages (the last step's).
  int64_t sent_bytes = 0;
  int sends = 0;
  // Checkpoints: how many were saved, the bytes of one (all ranks), and over the saves the median
  // of the slowest rank's pause and the write rate that gives.
  int saves = 0;
  uint64_t save_bytes = 0;
  double save_pause_s = 0;
  double save_mb_per_s = 0;
  // --save-async: the median over the saves of the slowest rank's background write, the rate
  // that gives, the part of the median pause spent waiting for the previous save's write (that
  // save's, slowest rank), and the mean step time (slowest rank) of the steps that ended while a
  // save was being written against the others.
  bool save_async = false;
  double save_write_s = 0, save_write_mb_per_s = 0, save_wait_s = 0;
  int write_steps = 0, other_steps = 0;
  double write_step_ms = 0, other_step_ms = 0;
  ComputeBalance balance;  // set by the caller (the step log measures it)
  double load_s = 0;       // --resume: the slowest rank's load, and the read rate over all ranks
  uint64_t load_bytes = 0;
  double load_mb_per_s = 0;
  // Data parallelism (replicas > 1): per step, the gradient bytes all-reduced by a pipeline's
  // ranks together, the buckets, the mean over ranks of the reduction's span and of the part of
  // it the step waited for at its end, and the fraction hidden behind the pipeline.
  int replicas = 1;
  uint64_t dp_bytes = 0;
  int dp_buckets = 0;
  double dp_span_ms = 0, dp_exposed_ms = 0, dp_hidden = 0;
};

// The data-parallel part of a summary from the ranks' reports (one replica's ranks).
void summarise_dp(const std::vector<RankReport>& ranks, int replicas, TimingSummary& s);

// The checkpoint part of a summary from the ranks' save records.
void summarise_saves(const std::vector<RankReport>& ranks, TimingSummary& s);

// Analyses the steps with spans (skipping the first step of the run when others exist); the
// simulated makespan times messages under `messages`, the model of the transport that ran them
// (ppc::message_model_of_transport).
TimingSummary analyse(const ppc::Plan& plan, const std::vector<RankReport>& ranks,
                      ppc::MessageModel messages = ppc::MessageModel::Rendezvous);

// All of it: analyse, then the checkpoints' and data parallelism's parts.
TimingSummary summarise(const ppc::Plan& plan, const std::vector<RankReport>& ranks, int replicas,
                        ppc::MessageModel messages = ppc::MessageModel::Rendezvous);

// The summary lines the loss rank prints at the end (ending with saves_text).
std::string summary_text(const TimingSummary& s);
// The checkpoint line, if any checkpoint was saved.
std::string saves_text(const TimingSummary& s);

}  // namespace pprt
