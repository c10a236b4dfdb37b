#include "runtime/train/executor.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/GradMode.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <optional>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"
#include "runtime/model/aux_loss.h"
#include "runtime/model/model_facts.h"
#include "runtime/train/executor_impl.h"

namespace pprt {

Executor::Impl::Impl(const ppc::Plan& p, int r, std::vector<Stage*> st, const ModelContext& c,
                     Transport* t, const at::Device& d, ExecutorOptions o)
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
      batch_end[i] =
          (i + 1 < actions.size() && ppc::is_comm(actions[i + 1].kind)) ? batch_end[i + 1] : i + 1;
  slots.resize(stages.size() * static_cast<size_t>(mbs));
  if (times.profiled() && device.is_cpu())
    probe = std::make_unique<LayerProbe>([this] { return allocated.live(); });
}

// `alone`: another part runs meanwhile (an overlapped pair): its bytes counted on its own.
// `given`: its input, taken already (input_of).
Executor::Impl::Held Executor::Impl::forward(int s, int mb, bool alone, Tensors* given) {
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

void Executor::Impl::account(const Held& h) {
  if (h.release)
    release(h.slot);
  else
    held.add(h.slot, h.bytes);
  inflight += h.inflight;
  if (h.inflight > 0) rep->peak_inflight = std::max(rep->peak_inflight, inflight);
}

// Evaluation's F: the stage's forward without autograd (no graph, no weight work); the input
// is consumed, the output kept only for the SEND_F or the local next stage that reads it.
void Executor::Impl::forward_only(int s, int mb) {
  Slot& sl = slot(s, mb);
  Stage& st = stage_of(s);
  Tensors out =
      st.forward(input_of(s, mb, false), rows(mb), shapes.shape(mb), mb, nullptr, &sl.losses);
  sl.losses.terms.clear();  // no backward
  // The loss (or, after it, what an empty last stage passes on) ends the forward.
  if (!st.has_loss() && plan.next_stage(s) >= 0) sl.output = std::move(out);
}

Executor::Impl::Held Executor::Impl::backward(int s, int mb, bool input_only, bool alone) {
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
    sl.grad_input.push_back(grad_in[k].defined() ? std::move(grad_in[k]) : at::zeros_like(ins[k]));
  sl.input.clear();
  sl.output.clear();
  meter.done(s, input_only ? ActionKind::I : ActionKind::B, shapes.shape(mb).length, taken());
  // An I: what it leaves for the W (and the input's gradient, until sent); a B: nothing.
  const int64_t left = part ? part->left() : allocated.live() - live;
  return Held{slot_index(s, mb), input_only ? left : 0, !input_only, -1};
}

void Executor::Impl::weight(int s, int mb) {
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
void Executor::Impl::overlap_fb(const Action& a) {
  const Action bp = a.backward_part();
  const bool input_only = bp.kind == ActionKind::I;
  const bool dependent = bp.stage == a.stage && bp.microbatch == a.microbatch;
  if (!opts.overlap || times.profiled() || (!device.is_cpu() && !times.on_device()) || dependent ||
      offload.on()) {
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

void Executor::Impl::compute(const Action& a, size_t index) {
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
void Executor::Impl::collect_losses(StepReport& r) {
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
          fmt::format("rank {}: stage {} microbatch {} has work left at the end of the step", rank,
                      s, mb));
      sl = Slot{};
    }
  }
  sums.read();
}

// The end of a step or of an evaluation: waits for the sends still in flight (time spent
// waiting), gathers the losses and closes the report.
void Executor::Impl::finish(StepReport& r) {
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
void Executor::Impl::begin(StepReport& r, const at::Tensor& tokens,
                           std::optional<c10::StreamGuard>& on_stream) {
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
StepReport Executor::Impl::run_forward(const at::Tensor& tokens) {
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

StepReport Executor::Impl::run(const at::Tensor& tokens, int64_t step) {
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
