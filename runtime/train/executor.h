// The executor: replays one rank's lowered action list of a plan for one training step.
//
//  - F, B, I, W run on the rank's stages; OVERLAP_F_B runs its forward part on a second thread
//    while its backward part runs (overlap.h; on the CPU), or one after the other. I computes only
//    the input gradient and keeps what W needs (pprt/pprt.h: WeightWork); W computes the weight
//    gradients from it.
//  - A maximal run of consecutive SEND/RECV actions is posted as one batch (Transport::post).
//    A receive is waited for just before the compute that needs it (on a GPU, by the compute
//    stream, not the host); sends are waited for at the end of the step. Stages on the same rank
//    pass tensors locally. What crosses a boundary for a microbatch (its tensors, by name) is one
//    message, sized from that microbatch's shape (pprt::MicrobatchShape, from its rows:
//    messages.h); receives land in buffers kept across steps (receive_buffers()).
//  - On a GPU the replay runs on a compute stream of its own, each action timed with events
//    (device_queue.h: DeviceQueue); on the CPU, in program order, timed with the host's clock.
//  - Every stage gets the microbatch's token rows; the first stage of each model copy starts from
//    them, the others from the tensors of their boundary (model/stage.h: declared_boundaries, a
//    placeholder before the first layer, the loss after the last). The auxiliary losses of a
//    stage before the last join its backward (model/aux_loss.h). The stage holding the loss
//    outputs its microbatch loss divided by the number of microbatches, so the
//    accumulated gradients are those of the mean loss.
//  - It counts in-flight activations (F done, B or I not yet), whose peak must equal the
//    compiler's prediction (ppc::peak_inflight).
//  - run_forward replays only the forward half of the plan, for evaluation.
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "compiler/plan.h"
#include "runtime/model/aux_loss.h"
#include "runtime/model/stage.h"
#include "runtime/output/profile.h"
#include "runtime/output/report.h"
#include "runtime/transport/transport.h"

namespace pprt {

class Where;  // where.h

// A communication failure, located: which rank, which action, which peer.
class CommFailure : public std::runtime_error {
 public:
  CommFailure(const std::string& what, int peer) : std::runtime_error(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

struct ExecutorOptions {
  std::chrono::milliseconds timeout{300'000};
  // Called after each compute action with its index in the rank's order (data parallelism starts
  // its gradient reductions from here: grad_reducer.h).
  std::function<void(size_t)> after_compute;
  // pprun --profile (output/profile.h): called after each compute part (an OVERLAP_F_B's forward
  // and backward parts separately) with its compute time and the bytes it left allocated.
  std::function<void(const PartSample&)> on_part;
  int64_t kill_step = -1;  // fault injection for tests: raise SIGKILL at this step ...
  size_t kill_action = 0;  // ... before this action
  bool hang = false;       // ... or stop there in a host call that never returns
  // Told what the replay does (the action, the host call, the device's waits) for the lines a
  // failure prints; null: nobody asks.
  Where* where = nullptr;
  int granule = 0;         // --varlen: microbatch lengths in multiples of it (0: off; messages.h)
  double slow_factor = 1;  // fault injection for tests: each compute action takes this many
                           // times as long (it sleeps the difference): a straggler
  // An OVERLAP_F_B's two parts concurrently (overlap.h; --overlap on), or one after the other.
  bool overlap = true;
};

// A step as the executor replayed it: its timing (report.h; step and optimizer_ns are the
// trainer's), and
struct StepReport : StepTiming {
  int64_t begin_ns = 0;  // steady clock at the start of the step (begin_unix_us on the wall clock)
  // per microbatch, the loss this rank computed (0 for microbatches whose L is elsewhere);
  std::vector<double> losses;
  // per value the model reports (Model::reported), what this rank's stages added.
  std::vector<ReportedSums> reported;
  bool has_losses = false;  // this rank holds an L stage
  int peak_inflight = 0;
  // The most bytes this rank's microbatches held at once between their F and their B/I/W
  // (activation_bytes.h: what each F and I left alive on the CPU allocator; 0 on a GPU).
  int64_t peak_activation_bytes = 0;
  // Bytes this step's Fs offloaded to host memory (--offload, offload.h).
  int64_t offloaded_bytes = 0;
  // The step's Plan::microbatch_order (gradients.h: the losses and reported values above are in
  // data order); empty: data order.
  std::vector<int> microbatch_order;
};

class Executor {
 public:
  // `stages`: the rank's stages in the order of plan.placement.rank_stages[rank]. `transport`
  // may be null when the plan needs no communication (pp 1).
  Executor(const ppc::Plan& plan, int rank, std::vector<Stage*> stages, const ModelContext& context,
           Transport* transport, const at::Device& device, ExecutorOptions options);
  ~Executor();

  // tokens: [global_batch, seq_len + 1] int64 on the device; microbatch mb is rows
  // [mb * b, (mb + 1) * b). Throws CommFailure on a communication failure.
  // `targets_share` (rows of documents): the step's predicted targets over every replica divided
  // by the replicas, which the microbatches' losses weigh against (0: this batch's own targets).
  StepReport run_step(const at::Tensor& tokens, int64_t step, double targets_share = 0);
  // The limit of each wait from now on (ExecutorOptions::timeout at first).
  void set_timeout(std::chrono::milliseconds timeout);

  // Evaluation (--eval-data): the forward-only projection of the rank's actions on `tokens`
  // (as run_step's): its F actions (the forward part of an OVERLAP_F_B) and their SEND_F/RECV_F,
  // in the plan's order, each batch posted without its SEND_B/RECV_B; no backward, no autograd
  // graph, no gradient touched. Returns the microbatches' losses (the rest of the report is
  // empty). Deadlock-free whenever the plan is (docs/pprun.md, "Validation").
  StepReport run_forward(const at::Tensor& tokens);

  // The receive buffers it keeps across steps (their data), for tests: a plan's steps reuse
  // them, so after the first step of a shape this set no longer changes.
  std::vector<const void*> receive_buffers() const;

  // What crosses the layout's boundaries for the last step's first microbatch (as model/stage.h's
  // declared_boundaries, or learned from one forward).
  const std::vector<BoundarySpec>& boundaries();
  int64_t boundaries_length() const;  // the length of the microbatch boundaries() holds for

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pprt
