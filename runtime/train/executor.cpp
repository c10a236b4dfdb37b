#include "runtime/train/executor.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <optional>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"
#include "runtime/model/autograd_split.h"
#include "runtime/model/aux_loss.h"
#include "runtime/model/layer_probe.h"
#include "runtime/model/model_facts.h"
#include "runtime/train/activation_bytes.h"
#include "runtime/train/messages.h"
#include "runtime/train/overlap.h"
#include "runtime/train/replay_times.h"
#include "runtime/train/replay_watch.h"
#include "runtime/train/slot_offload.h"

namespace pprt {

using ppc::Action;
using ppc::ActionKind;

namespace {

// What a (stage, microbatch) holds between its actions within a step.
struct Slot {
  Tensors input;      // F's input leaves (its boundary's tensors); their .grad() are its gradients
  Tensors output;     // F's output (the stage's out boundary, or the scaled loss)
  LossReport losses;  // what the stage's layers reported for the microbatch
  std::vector<at::Tensor> grad_input;  // from B/I, one per input tensor, until sent or used
  at::Tensor recv_act, recv_grad;      // received messages (messages.h)
  std::unique_ptr<Work> recv_act_work, recv_grad_work;
  size_t recv_act_index = 0, recv_grad_index = 0;
  WeightWork work;      // the weight gradients an I leaves for the W (layers that split their own)
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

}  // namespace

struct Executor::Impl {
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
       const at::Device& d, ExecutorOptions o)
      : plan(p),
        rank(r),
        stages(std::move(st)),
        ctx(c),
        reported(c.model->reported(layout_info(p.layout))),
        specs(ctx, p.layout),
        transport(t),
        device(d),
        opts(o),
        actions(p.order()[static_cast<size_t>(r)]),
        mbs(p.microbatches),
        inv_mbs(1.0 / p.microbatches),
        pools(stages.size() * 2, d),
        times(d, o.on_part),
        watch(opts, actions, batch_end),
        offload(c.memory.uses(ppc::MemoryMode::Offload), d,
                stages.size() * static_cast<size_t>(p.microbatches), c.offload_host_copy, actions,
                [this](int stage, int mb) { return slot_index(stage, mb); }) {
    local.assign(static_cast<size_t>(plan.num_stages()), -1);
    const auto& held = plan.placement.rank_stages[static_cast<size_t>(rank)];
    PPC_INTERNAL_ASSERT(held.size() == stages.size(), "one Stage per stage the rank holds");
    for (size_t i = 0; i < held.size(); ++i)
      local[static_cast<size_t>(held[i])] = static_cast<int>(i);
    batch_end.assign(actions.size(), 0);
    for (size_t i = actions.size(); i-- > 0;)
      if (ppc::is_comm(actions[i].kind))
        batch_end[i] = (i + 1 < actions.size() && ppc::is_comm(actions[i + 1].kind))
                           ? batch_end[i + 1]
                           : i + 1;
    slots.resize(stages.size() * static_cast<size_t>(mbs));
    if (times.profiled() && device.is_cpu())
      probe = std::make_unique<LayerProbe>([this] { return allocated.live(); });
  }

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

  [[noreturn]] void comm_failed(size_t index, const std::exception& e, int peer) {
    throw CommFailure(watch.failure(index, e), peer);
  }

  // Waits for a pending receive or send; returns how long it waited.
  int64_t wait(std::unique_ptr<Work>& w, size_t index) {
    PPC_INTERNAL_ASSERT(w != nullptr,
                        fmt::format("rank {}: nothing pending for action {}", rank, index));
    const int64_t t0 = now_ns();
    try {
      w->wait(opts.timeout);
    } catch (const TransportError& e) {
      comm_failed(index, e, actions[index].peer);
    }
    watch.device_done(index);
    w.reset();
    const int64_t t1 = now_ns();
    rep->spans[index].end = t1 - rep->begin_ns;
    return t1 - t0;
  }

  // Waits for a pending receive before its consumer's computation: on the device where the
  // transport can (the host waits at the end of the step), else on the host. Returns how long the
  // host waited.
  int64_t wait_received(std::unique_ptr<Work>& w, size_t index) {
    if (times.on_device() && w) {
      const size_t before = times.queue().mark();
      if (w->wait_on_current_stream()) {  // `before` ... `after`: the compute stream's wait
        times.waited(before, times.queue().mark(), index);
        device_waited.emplace_back(std::move(w), index);
        watch.device_waits(index);
        return 0;
      }
    }
    watch.wait_host(index);
    const int64_t waited_ns = wait(w, index);
    watch.back_to_compute();
    return waited_ns;
  }

  // Microbatch `mb`'s token rows and what crosses layout boundary `i` (entering layout stage i)
  // for it.
  at::Tensor rows(int mb) const { return tokens.narrow(0, static_cast<int64_t>(mb) * b, b); }
  const BoundarySpec& bound(int i, int mb) const {
    return shapes.bounds(mb)[static_cast<size_t>(i)];
  }
  // The receive buffer of local stage `s`'s RECV_F (its input boundary) or RECV_B (its output
  // boundary) for microbatch `mb`, sized from that microbatch's shape.
  at::Tensor receive_buffer(int s, int mb, bool backward) {
    const int boundary = plan.layout_stage(s) + (backward ? 1 : 0);
    return pools.take(static_cast<size_t>(local[static_cast<size_t>(s)]) * 2 + (backward ? 1 : 0),
                      bound(boundary, mb), times.profiled());
  }

  // What a stage sends must be what the next stage's rank receives (a layer whose output's shape
  // depends on more than the microbatch's shape breaks the boundary's).
  void check_sent(int s, int mb, const Tensors& out) {
    const BoundarySpec& want = bound(plan.layout_stage(s) + 1, mb);
    bool same = out.size() == want.tensors.size();  // (compared in place: no copy per SEND_F)
    for (size_t k = 0; same && k < out.size(); ++k)
      same = out[k].tensor.sizes() == at::IntArrayRef(want.tensors[k].shape) &&
             out[k].name == want.tensors[k].name;
    if (!same)
      fail(stage_of(s).describe(),
           fmt::format(
               "its output is {}, but the next stage receives {} (the boundary's shape, "
               "{} for every microbatch)",
               to_string(spec_of(out)), to_string(want),
               specs.declared() ? "from its layers' declared shapes" : "learned from one forward"));
  }

  // Posts the SEND/RECV actions [begin, end) as one batch; `forward_only`: only SEND_F and RECV_F
  // (evaluation), nothing if the batch holds none.
  void post_batch(size_t begin, size_t end, bool forward_only = false) {
    auto posted = [&](const Action& a) {
      return !forward_only || a.kind == ActionKind::SendF || a.kind == ActionKind::RecvF;
    };
    std::vector<P2POp> ops;
    ops.reserve(end - begin);
    const size_t first_send = sends.size();
    for (size_t j = begin; j < end; ++j) {
      const Action& a = actions[j];
      if (!posted(a)) continue;
      Slot& sl = slot(a.stage, a.microbatch);
      switch (a.kind) {
        case ActionKind::SendF:
          check_sent(a.stage, a.microbatch, sl.output);
          // One message in the boundary's dtype, which the receiver's buffer has (a no-op for
          // pprun's model, whose activations are of that dtype already).
          sends.push_back(PendingSend{
              pack(sl.output,
                   bound(plan.layout_stage(a.stage) + 1, a.microbatch).tensors.front().dtype),
              nullptr, j});
          if (forward_only) sl.output.clear();  // nothing else reads it
          ops.push_back(P2POp{P2POp::Kind::Send, a.peer, tag(a.stage, a.microbatch, false),
                              &sends.back().tensor});
          break;
        case ActionKind::SendB:
          sends.push_back(
              PendingSend{pack(sl.grad_input, sl.grad_input.front().scalar_type()), nullptr, j});
          sl.grad_input.clear();
          ops.push_back(P2POp{P2POp::Kind::Send, a.peer, tag(a.stage, a.microbatch, true),
                              &sends.back().tensor});
          break;
        case ActionKind::RecvF:
          sl.recv_act = receive_buffer(a.stage, a.microbatch, false);
          sl.recv_act_index = j;
          ops.push_back(P2POp{P2POp::Kind::Recv, a.peer,
                              tag(plan.prev_stage(a.stage), a.microbatch, false), &sl.recv_act});
          break;
        case ActionKind::RecvB:
          sl.recv_grad = receive_buffer(a.stage, a.microbatch, true);
          sl.recv_grad_index = j;
          ops.push_back(P2POp{P2POp::Kind::Recv, a.peer,
                              tag(plan.next_stage(a.stage), a.microbatch, true), &sl.recv_grad});
          break;
        default:
          PPC_INTERNAL_ASSERT(false, "a batch holds only SEND/RECV");
      }
    }
    for (size_t k = first_send; k < sends.size(); ++k) {
      rep->sent_bytes += static_cast<int64_t>(sends[k].tensor.nbytes());
      ++rep->sends;
    }
    if (ops.empty()) return;
    // `sends` must not reallocate while ops point into it: reserved for the whole step.
    std::vector<std::unique_ptr<Work>> works;
    watch.posting(begin);
    try {
      works = transport->post(ops, opts.timeout);
    } catch (const TransportError& e) {
      comm_failed(begin, e, actions[begin].peer);
    }
    watch.posted();
    size_t next_send = first_send;
    for (size_t j = begin, k = 0; j < end; ++j) {
      const Action& a = actions[j];
      if (!posted(a)) continue;
      ++k;
      if (ppc::is_send(a.kind))
        sends[next_send++].work = std::move(works[k - 1]);
      else if (a.kind == ActionKind::RecvF)
        slot(a.stage, a.microbatch).recv_act_work = std::move(works[k - 1]);
      else
        slot(a.stage, a.microbatch).recv_grad_work = std::move(works[k - 1]);
    }
  }

  // What stage `s` gets for microbatch `mb`: nothing for the first stage of a model copy (it
  // starts from the tokens), the previous local stage's output, or the tensors of the message
  // received (views of its buffer). `leaves`: each a leaf requiring grad (the training forward).
  Tensors input_of(int s, int mb, bool leaves) {
    Slot& sl = slot(s, mb);
    const int p = plan.prev_stage(s);
    Tensors in;
    if (p < 0) return in;
    if (is_local(p)) {
      Tensors& out = slot(p, mb).output;
      for (NamedTensor& t : out)
        in.push_back(NamedTensor{
            t.name, leaves ? t.tensor.detach().requires_grad_(true) : std::move(t.tensor)});
      if (!leaves) out.clear();
      return in;
    }
    waited += wait_received(sl.recv_act_work, sl.recv_act_index);
    const BoundarySpec& spec = bound(plan.layout_stage(s), mb);
    if (spec.tensors.size() == 1) {  // the message is the tensor (its buffer has its shape)
      at::Tensor t = std::move(sl.recv_act);
      if (leaves) t.requires_grad_(true);
      in.push_back(NamedTensor{spec.tensors.front().name, std::move(t)});
      return in;
    }
    const std::vector<at::Tensor> parts = unpack(std::move(sl.recv_act), spec);
    for (size_t k = 0; k < parts.size(); ++k)
      in.push_back(NamedTensor{spec.tensors[k].name,
                               leaves ? parts[k].detach().requires_grad_(true) : parts[k]});
    return in;
  }

  // `alone`: another part runs meanwhile (an overlapped pair): its bytes counted on its own.
  // `given`: its input, taken already (input_of).
  Held forward(int s, int mb, bool alone = false, Tensors* given = nullptr) {
    Slot& sl = slot(s, mb);
    Stage& st = stage_of(s);
    Tensors input = given ? std::move(*given) : input_of(s, mb, true);
    std::optional<PartBytes> part;
    if (alone) part.emplace();
    const int64_t live = allocated.live();
    ReplayTimes::Part meter(times, true);
    std::optional<Offloader::Target> offloading;
    offload.aim(offloading, slot_index(s, mb));
    const LayerProbe::Active probing(probe.get());
    Tensors out = st.forward(input, rows(mb), shapes.shape(mb), mb,
                             st.splits_backward() ? &sl.work : nullptr, &sl.losses);
    offloading.reset();
    at::Tensor& first = out.front().tensor;
    const double scale = inv_mbs * shapes.weight(mb);  // (rows of documents: by targets)
    if (st.has_loss())
      first = first * scale;
    else  // the auxiliary losses its layers added join its backward, scaled as the loss is
      first = attach_aux_losses(first, sl.losses.terms, scale);
    sl.losses.terms.clear();
    if (plan.prev_stage(s) >= 0) sl.input = std::move(input);
    sl.output = std::move(out);
    rep->offloaded_bytes += offload.offload(slot_index(s, mb));
    meter.done(s, ActionKind::F, shapes.shape(mb).length, taken());
    return Held{slot_index(s, mb), part ? part->left() : allocated.live() - live, false, 1};
  }

  std::vector<LayerSample> taken() { return probe ? probe->take() : std::vector<LayerSample>{}; }

  void account(const Held& h) {
    if (h.release)
      release(h.slot);
    else
      held.add(h.slot, h.bytes);
    inflight += h.inflight;
    if (h.inflight > 0) rep->peak_inflight = std::max(rep->peak_inflight, inflight);
  }

  // Evaluation's F: the stage's forward without autograd (no graph, no weight work); the input
  // is consumed, the output kept only for the SEND_F or the local next stage that reads it.
  void forward_only(int s, int mb) {
    Slot& sl = slot(s, mb);
    Stage& st = stage_of(s);
    Tensors out =
        st.forward(input_of(s, mb, false), rows(mb), shapes.shape(mb), mb, nullptr, &sl.losses);
    sl.losses.terms.clear();  // no backward
    // The loss (or, after it, what an empty last stage passes on) ends the forward.
    if (!st.has_loss() && plan.next_stage(s) >= 0) sl.output = std::move(out);
  }

  Held backward(int s, int mb, bool input_only, bool alone = false) {
    Slot& sl = slot(s, mb);
    const int n = plan.next_stage(s);
    std::vector<at::Tensor> grad_out;  // one per output tensor; none for the loss
    if (n >= 0 && is_local(n)) {
      grad_out = std::move(slot(n, mb).grad_input);
    } else if (n >= 0) {
      waited += wait_received(sl.recv_grad_work, sl.recv_grad_index);
      grad_out = unpack(std::move(sl.recv_grad), bound(plan.layout_stage(s) + 1, mb));
    }
    Stage& st = stage_of(s);
    std::optional<PartBytes> part;
    if (alone) part.emplace();
    const int64_t live = allocated.live();
    ReplayTimes::Part meter(times, input_only);
    const std::vector<at::Tensor> outs = tensors_of(sl.output), ins = tensors_of(sl.input);
    std::vector<at::Tensor> grad_in(ins.size());
    if (input_only && !st.splits_backward()) {
      // Layers that do not split their own backward: the split through the autograd graph.
      grad_in = split_part(st.describe(), "I",
                           [&] { return sl.split.backward_input(outs, grad_out, ins); });
    } else {
      sl.work.set_deferring(input_only);
      if (grad_out.empty()) {
        torch::autograd::backward({outs.front()});
      } else {
        std::vector<at::Tensor> roots, grads;  // the outputs that require grad
        for (size_t k = 0; k < outs.size(); ++k)
          if (outs[k].requires_grad()) {
            roots.push_back(outs[k]);
            grads.push_back(grad_out[k]);
          }
        if (!roots.empty()) torch::autograd::backward(roots, grads);
      }
      for (size_t k = 0; k < ins.size(); ++k) grad_in[k] = ins[k].grad();
    }
    // A stage that starts with E ignores its input: a zero gradient.
    sl.grad_input.clear();
    for (size_t k = 0; k < ins.size(); ++k)
      sl.grad_input.push_back(grad_in[k].defined() ? std::move(grad_in[k])
                                                   : at::zeros_like(ins[k]));
    sl.input.clear();
    sl.output.clear();
    meter.done(s, input_only ? ActionKind::I : ActionKind::B, shapes.shape(mb).length, taken());
    // An I: what it leaves for the W (and the input's gradient, until sent); a B: nothing.
    const int64_t left = part ? part->left() : allocated.live() - live;
    return Held{slot_index(s, mb), input_only ? left : 0, !input_only, -1};
  }

  void weight(int s, int mb) {
    Slot& sl = slot(s, mb);
    ReplayTimes::Part meter(times, true);
    if (sl.split.pending()) {
      split_part(stage_of(s).describe(), "W", [&] {
        sl.split.backward_weight();
        return 0;
      });
    } else {
      // Outside the autograd engine: without this guard the products would record a graph
      // (their inputs are the saved activations, which require grad), which the parameters'
      // .grad would then hold, and with it every activation of the step, received ones included.
      at::NoGradGuard no_grad;
      sl.work.run();
    }
    meter.done(s, ActionKind::W, shapes.shape(mb).length);
    account(Held{slot_index(s, mb), 0, true, 0});
  }

  // An OVERLAP_F_B: its forward part on the second thread while this one runs its backward part
  // (overlap.h; on a GPU on a stream of its own, its input taken before on the compute stream),
  // or one after the other: with --overlap off, under --profile (each part measured alone), on a
  // device without the replay's stream, while offloading (one offload or prefetch at a time), and
  // where the backward is the forward's own microbatch on its stage (a pair a plan may fuse by
  // hand, whose backward needs its forward). The bookkeeping in the sequence's order either way.
  void overlap_fb(const Action& a) {
    const Action bp = a.backward_part();
    const bool input_only = bp.kind == ActionKind::I;
    const bool dependent = bp.stage == a.stage && bp.microbatch == a.microbatch;
    if (!opts.overlap || times.profiled() || (!device.is_cpu() && !times.on_device()) ||
        dependent || offload.on()) {
      account(forward(a.stage, a.microbatch));
      account(backward(bp.stage, bp.microbatch, input_only));
      return;
    }
    if (!part_thread) part_thread = std::make_unique<PartThread>();
    if (!device.is_cpu() && !side_stream) side_stream = std::make_unique<SideStream>(device);
    std::optional<Tensors> given;  // a GPU's: kept (`kept`) until after the join
    if (side_stream) given = input_of(a.stage, a.microbatch, true);
    const Tensors kept = given ? *given : Tensors{};
    if (side_stream) side_stream->fence_in();
    Held f, b;
    const PartThread::Times t = part_thread->run(
        [&] {
          AllocationMeter::Scope counting(allocated);  // (the CPU's allocator, as run()'s)
          f = forward(a.stage, a.microbatch, true, given ? &*given : nullptr);
        },
        [&] { b = backward(bp.stage, bp.microbatch, input_only, true); }, side_stream.get());
    if (side_stream) side_stream->fence_out(tensors_of(slot(a.stage, a.microbatch).output));
    rep->overlaps.push_back(
        {t.begin - rep->begin_ns, t.side_end - rep->begin_ns, t.main_end - rep->begin_ns});
    account(f);
    account(b);
  }

  void release(size_t slot) {
    held.release(slot);
    offload.release(slot);
  }

  void compute(const Action& a, size_t index) {
    const int64_t t0 = now_ns();
    waited = 0;
    const size_t begin_mark = times.on_device() ? times.queue().mark() : 0;
    watch.compute(index, device_waited);
    offload.prefetch_after(index, allocated, held);  // (slot_offload.h)
    switch (a.kind) {
      case ActionKind::F:
        account(forward(a.stage, a.microbatch));
        break;
      case ActionKind::B:
        account(backward(a.stage, a.microbatch, false));
        break;
      case ActionKind::I:
        account(backward(a.stage, a.microbatch, true));
        break;
      case ActionKind::W:
        weight(a.stage, a.microbatch);
        break;
      case ActionKind::OverlapFB:
        overlap_fb(a);
        break;
      default:
        PPC_INTERNAL_ASSERT(false, "not a compute action");
    }
    // (An overlapped pair's parts may both wait: at most its whole time.)
    const int64_t w = std::min<int64_t>(waited, now_ns() - t0);
    watch.slow_down(now_ns() - t0 - w);
    times.computed(*rep, rep->begin_ns, index, t0, w, begin_mark);
  }

  // The losses of every local stage's microbatches into `r`, each slot emptied (checked: nothing
  // left pending). On a device the values are read in one copy to the host (one synchronisation
  // per step, not one per microbatch), each exactly as item<double>() reads it; on the CPU, where
  // reading costs no synchronisation, one by one.
  void collect_losses(StepReport& r) {
    r.losses.assign(static_cast<size_t>(mbs), 0.0);
    r.reported = no_reports(reported.size(), mbs);
    HostSums sums;
    const AddValue add = [&](const at::Tensor& v, double* to) { sums.add(v, to); };
    for (int s = 0; s < plan.num_stages(); ++s) {
      if (!is_local(s)) continue;
      for (int mb = 0; mb < mbs; ++mb) {
        Slot& sl = slot(s, mb);
        if (sl.losses.main.defined()) {
          if (shapes.weight(mb) != 1.0) sl.losses.main = sl.losses.main * shapes.weight(mb);
          add(sl.losses.main, &r.losses[static_cast<size_t>(mb)]);
          r.has_losses = true;
        }
        add_reported(sl.losses, mb, reported, r.reported, add);
        PPC_INTERNAL_ASSERT(
            sl.work.empty() && !sl.split.pending() && sl.output.empty() && !sl.recv_act_work &&
                !sl.recv_grad_work,
            fmt::format("rank {}: stage {} microbatch {} has work left at the end of the step",
                        rank, s, mb));
        sl = Slot{};
      }
    }
    sums.read();
  }

  // The end of a step or of an evaluation: waits for the sends still in flight (time spent
  // waiting), gathers the losses and closes the report.
  void finish(StepReport& r) {
    for (PendingSend& s : sends) {
      watch.wait_host(s.index);
      r.wait_ns += wait(s.work, s.index);
      s.tensor = at::Tensor();
    }
    sends.clear();
    for (auto& [w, index] : device_waited) {  // done on the device: a failure or timeout shows
      watch.at(index, Where::Call::WaitDevice);
      wait(w, index);  // (the span's end: device_times)
    }
    device_waited.clear();
    watch.step_done();
    if (times.on_device()) {
      watch.at(actions.size() - 1, Where::Call::Drain);
      times.queue().end();
      times.device_times(r);
    }
    collect_losses(r);
    r.wall_ns = now_ns() - r.begin_ns;
    rep = nullptr;
  }

  // How a step and an evaluation start: the report, the microbatch size and the boundaries' shapes
  // from the batch, no sends yet, and on a GPU the replay's own stream, current while `on_stream`
  // lives (to the end of the replay).
  void begin(StepReport& r, const at::Tensor& tokens, std::optional<c10::StreamGuard>& on_stream) {
    rep = &r;
    r.begin_ns = now_ns();
    r.spans.assign(actions.size(), ActionSpan{});
    PPC_INTERNAL_ASSERT(tokens.size(0) % mbs == 0, "the batch divisible by microbatches");
    b = static_cast<int>(tokens.size(0) / mbs);
    this->tokens = tokens;
    shapes.update(*ctx.model, transport ? &specs : nullptr, tokens, mbs, b, opts.granule,
                  targets_share);  // (messages.h)
    sends.clear();
    sends.reserve(actions.size());
    times.begin();
    if (times.on_device()) on_stream.emplace(*times.queue().compute);
  }
  // Evaluation: the plan's F actions (an OVERLAP_F_B's forward part) and their SEND_F/RECV_F, in
  // the rank's order, each batch of the plan posted without its SEND_B/RECV_B; no autograd.
  StepReport run_forward(const at::Tensor& tokens) {
    c10::NoGradGuard no_grad;
    StepReport r;
    std::optional<c10::StreamGuard> on_stream;
    begin(r, tokens, on_stream);
    for (size_t i = 0; i < actions.size();) {
      const Action& a = actions[i];
      if (ppc::is_comm(a.kind)) {
        post_batch(i, batch_end[i], true);
        i = batch_end[i];
        continue;
      }
      if (a.kind == ActionKind::F || a.kind == ActionKind::OverlapFB)
        forward_only(a.stage, a.microbatch);
      ++i;
    }
    finish(r);
    return r;
  }

  StepReport run(const at::Tensor& tokens, int64_t step) {
    StepReport r;
    std::optional<c10::StreamGuard> on_stream;
    begin(r, tokens, on_stream);
    r.begin_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    r.actions = actions.size();
    inflight = 0;
    std::optional<AllocationMeter::Scope> counting;  // the CPU's allocator only
    if (device.is_cpu()) counting.emplace(allocated);
    held.start(slots.size());
    for (size_t i = 0; i < actions.size();) {
      if (watch.fault_due(step, i)) watch.fault(i);
      const Action& a = actions[i];
      if (ppc::is_comm(a.kind)) {
        const size_t end = batch_end[i];
        const int64_t t0 = now_ns() - r.begin_ns;
        post_batch(i, end);
        const int64_t t1 = now_ns() - r.begin_ns;
        for (size_t j = i; j < end; ++j) r.spans[j] = ActionSpan{t0, t0, t1};
        r.post_ns += t1 - t0;
        i = end;
        continue;
      }
      compute(a, i);
      if (opts.after_compute) opts.after_compute(i);
      ++i;
    }
    r.peak_activation_bytes = held.peak();
    finish(r);
    return r;
  }
};

Executor::Executor(const ppc::Plan& plan, int rank, std::vector<Stage*> stages,
                   const ModelContext& context, Transport* transport, const at::Device& device,
                   ExecutorOptions options)
    : impl_(std::make_unique<Impl>(plan, rank, std::move(stages), context, transport, device,
                                   options)) {}

Executor::~Executor() = default;

StepReport Executor::run_step(const at::Tensor& tokens, int64_t step, double targets_share) {
  impl_->targets_share = targets_share;
  return impl_->run(tokens, step);
}

void Executor::set_timeout(std::chrono::milliseconds timeout) {
  impl_->opts.timeout = timeout;
}

StepReport Executor::run_forward(const at::Tensor& tokens) {
  impl_->targets_share = 0;  // (each batch's own)
  return impl_->run_forward(tokens);
}

std::vector<const void*> Executor::receive_buffers() const {
  return impl_->pools.buffers();
}

const std::vector<BoundarySpec>& Executor::boundaries() {
  PPC_INTERNAL_ASSERT(!impl_->shapes.empty(), "the boundaries of a step that ran");
  return impl_->specs.of(impl_->shapes.shape(0), impl_->rows(0));
}

int64_t Executor::boundaries_length() const {
  return impl_->shapes.shape(0).length;
}

}  // namespace pprt
