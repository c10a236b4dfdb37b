// The executor's state and its parts (executor.h's Executor::Impl), shared by the translation
// units that implement it: executor.cpp (the step: the compute actions, the bookkeeping, the
// report) and executor_comm.cpp (the plan's sends and receives: posting a batch, waiting for it,
// the receive buffers, what a stage's input is).
//
// Private to runtime/train; included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/StreamGuard.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/model/autograd_split.h"
#include "runtime/model/layer_probe.h"
#include "runtime/train/activation_bytes.h"
#include "runtime/train/executor.h"
#include "runtime/train/messages.h"
#include "runtime/train/overlap.h"
#include "runtime/train/replay_times.h"
#include "runtime/train/replay_watch.h"
#include "runtime/train/slot_offload.h"

namespace pprt {

using ppc::Action;
using ppc::ActionKind;

struct Executor::Impl {
  // What a (stage, microbatch) holds between its actions within a step.
  struct Slot {
    Tensors input;   // F's input leaves (its boundary's tensors); their .grad() are its gradients
    Tensors output;  // F's output (the stage's out boundary, or the scaled loss)
    LossReport losses;                   // what the stage's layers reported for the microbatch
    std::vector<at::Tensor> grad_input;  // from B/I, one per input tensor, until sent or used
    at::Tensor recv_act, recv_grad;      // received messages (messages.h)
    std::unique_ptr<Work> recv_act_work, recv_grad_work;
    size_t recv_act_index = 0, recv_grad_index = 0;
    WeightWork work;  // the weight gradients an I leaves for the W (layers that split their own)
    AutogradSplit split;  // the same through the autograd graph (layers that do not)
  };

  // What a compute part changes in the step's bookkeeping (the activation bytes its slot holds, the
  // microbatches in flight), applied in the order of the sequence once an overlapped pair is done.
  struct Held {
    size_t slot = 0;
    int64_t bytes = 0;     // what the part left alive (F, I)
    bool release = false;  // B, W: the slot holds nothing
    int inflight = 0;      // +1 (F), -1 (B, I)
  };

  struct PendingSend {
    at::Tensor tensor;
    std::unique_ptr<Work> work;
    size_t index;
  };

  const ppc::Plan& plan;
  const int rank;
  std::vector<Stage*> stages;
  std::vector<int> local;  // plan stage -> index in `stages`, -1 if not on this rank
  ModelContext ctx;
  std::vector<Reported> reported;  // the auxiliary losses and metrics the model reports
  BoundarySpecs specs;             // what crosses each boundary, per microbatch shape
  Transport* transport;
  at::Device device;
  ExecutorOptions opts;
  const std::vector<Action>& actions;
  std::vector<size_t> batch_end;  // per comm action: one past its batch's last action
  int mbs, b = 0;
  double inv_mbs;

  // Receive buffers, kept across steps: per local stage and direction ([local stage * 2 +
  // backward]).
  ReceivePools pools;
  ReplayTimes times;  // the actions' times (on a GPU, from events) and --profile's parts
  ReplayWatch watch;  // where the replay is (for a failure's lines), and the faults tests inject
  AllocationMeter allocated;  // this rank's CPU bytes allocated during its steps, still alive
  ActivationBytes held;       // what each slot keeps between its F and its B/I/W (issue 42)
  SlotOffload offload;        // the slots' offloaded activations (--offload)
  // --profile on the CPU: what each layer of a forward took and kept, and the reruns of
  // recomputed ones (model/layer_probe.h).
  std::unique_ptr<LayerProbe> probe;

  // Per step.
  BatchShapes shapes;        // per microbatch, from its rows
  double targets_share = 0;  // run_step's: what the microbatches' losses weigh against
  std::vector<Slot> slots;   // [local stage][microbatch]
  std::vector<PendingSend> sends;
  // Receives their consumers wait for on the device (a GPU): the host waits for them at the end.
  DeviceWaited device_waited;
  at::Tensor tokens;
  StepReport* rep = nullptr;
  int inflight = 0;
  std::atomic<int64_t> waited{0};  // within the current compute action (both parts of an overlap)
  std::unique_ptr<PartThread> part_thread;  // an OVERLAP_F_B's forward (overlap.h), once needed
  std::unique_ptr<SideStream> side_stream;  // its stream on a GPU (overlap.h), once needed

  Impl(const ppc::Plan& p, int r, std::vector<Stage*> st, const ModelContext& c, Transport* t,
       const at::Device& d, ExecutorOptions o);

  size_t slot_index(int stage, int mb) const {
    return static_cast<size_t>(local[static_cast<size_t>(stage)]) * static_cast<size_t>(mbs) +
           static_cast<size_t>(mb);
  }
  Slot& slot(int stage, int mb) { return slots[slot_index(stage, mb)]; }
  Stage& stage_of(int stage) {
    return *stages[static_cast<size_t>(local[static_cast<size_t>(stage)])];
  }
  bool is_local(int stage) const { return stage >= 0 && local[static_cast<size_t>(stage)] >= 0; }

  uint32_t tag(int sender_stage, int mb, bool backward) const {
    return static_cast<uint32_t>((static_cast<int64_t>(sender_stage) * mbs + mb) * 2 +
                                 (backward ? 1 : 0));
  }

  [[noreturn]] void comm_failed(size_t index, const std::exception& e, int peer);

  // Waits for a pending receive or send; returns how long it waited.
  int64_t wait(std::unique_ptr<Work>& w, size_t index);

  // Waits for a pending receive before its consumer's computation: on the device where the
  // transport can (the host waits at the end of the step), else on the host. Returns how long the
  // host waited.
  int64_t wait_received(std::unique_ptr<Work>& w, size_t index);

  // Microbatch `mb`'s token rows and what crosses layout boundary `i` (entering layout stage i)
  // for it.
  at::Tensor rows(int mb) const { return tokens.narrow(0, static_cast<int64_t>(mb) * b, b); }
  const BoundarySpec& bound(int i, int mb) const {
    return shapes.bounds(mb)[static_cast<size_t>(i)];
  }
  // The receive buffer of local stage `s`'s RECV_F (its input boundary) or RECV_B (its output
  // boundary) for microbatch `mb`, sized from that microbatch's shape.
  at::Tensor receive_buffer(int s, int mb, bool backward);

  // What a stage sends must be what the next stage's rank receives (a layer whose output's shape
  // depends on more than the microbatch's shape breaks the boundary's).
  void check_sent(int s, int mb, const Tensors& out);

  // Posts the SEND/RECV actions [begin, end) as one batch; `forward_only`: only SEND_F and RECV_F
  // (evaluation), nothing if the batch holds none.
  void post_batch(size_t begin, size_t end, bool forward_only = false);

  // What stage `s` gets for microbatch `mb`: nothing for the first stage of a model copy (it
  // starts from the tokens), the previous local stage's output, or the tensors of the message
  // received (views of its buffer). `leaves`: each a leaf requiring grad (the training forward).
  Tensors input_of(int s, int mb, bool leaves);

  // `alone`: another part runs meanwhile (an overlapped pair): its bytes counted on its own.
  // `given`: its input, taken already (input_of).
  Held forward(int s, int mb, bool alone = false, Tensors* given = nullptr);

  std::vector<LayerSample> taken() { return probe ? probe->take() : std::vector<LayerSample>{}; }

  void account(const Held& h);

  // Evaluation's F: the stage's forward without autograd (no graph, no weight work); the input
  // is consumed, the output kept only for the SEND_F or the local next stage that reads it.
  void forward_only(int s, int mb);

  Held backward(int s, int mb, bool input_only, bool alone = false);

  void weight(int s, int mb);

  // An OVERLAP_F_B: its forward part on the second thread while this one runs its backward part
  // (overlap.h; on a GPU on a stream of its own, its input taken before on the compute stream),
  // or one after the other: with --overlap off, under --profile (each part measured alone), on a
  // device without the replay's stream, while offloading (one offload or prefetch at a time), and
  // where the backward is the forward's own microbatch on its stage (a pair a plan may fuse by
  // hand, whose backward needs its forward). The bookkeeping in the sequence's order either way.
  void overlap_fb(const Action& a);

  void release(size_t slot) {
    held.release(slot);
    offload.release(slot);
  }

  void compute(const Action& a, size_t index);

  // The losses of every local stage's microbatches into `r`, each slot emptied (checked: nothing
  // left pending). On a device the values are read in one copy to the host (one synchronisation
  // per step, not one per microbatch), each exactly as item<double>() reads it; on the CPU, where
  // reading costs no synchronisation, one by one.
  void collect_losses(StepReport& r);

  // The end of a step or of an evaluation: waits for the sends still in flight (time spent
  // waiting), gathers the losses and closes the report.
  void finish(StepReport& r);

  // How a step and an evaluation start: the report, the microbatch size and the boundaries' shapes
  // from the batch, no sends yet, and on a GPU the replay's own stream, current while `on_stream`
  // lives (to the end of the replay).
  void begin(StepReport& r, const at::Tensor& tokens, std::optional<c10::StreamGuard>& on_stream);
  // Evaluation: the plan's F actions (an OVERLAP_F_B's forward part) and their SEND_F/RECV_F, in
  // the rank's order, each batch of the plan posted without its SEND_B/RECV_B; no autograd.
  StepReport run_forward(const at::Tensor& tokens);

  StepReport run(const at::Tensor& tokens, int64_t step);
};

}  // namespace pprt
