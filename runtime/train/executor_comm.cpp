// The executor's sends and receives (executor_impl.h): a batch of the plan's SEND/RECV actions
// posted at once, the waits for them, the receive buffers, and what a stage's input is.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"
#include "runtime/train/executor_impl.h"

namespace pprt {

void Executor::Impl::comm_failed(size_t index, const std::exception& e, int peer) {
  throw CommFailure(watch.failure(index, e), peer);
}

// Waits for a pending receive or send; returns how long it waited.
int64_t Executor::Impl::wait(std::unique_ptr<Work>& w, size_t index) {
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
int64_t Executor::Impl::wait_received(std::unique_ptr<Work>& w, size_t index) {
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

// The receive buffer of local stage `s`'s RECV_F (its input boundary) or RECV_B (its output
// boundary) for microbatch `mb`, sized from that microbatch's shape.
at::Tensor Executor::Impl::receive_buffer(int s, int mb, bool backward) {
  const int boundary = plan.layout_stage(s) + (backward ? 1 : 0);
  return pools.take(static_cast<size_t>(local[static_cast<size_t>(s)]) * 2 + (backward ? 1 : 0),
                    bound(boundary, mb), times.profiled());
}

// What a stage sends must be what the next stage's rank receives (a layer whose output's shape
// depends on more than the microbatch's shape breaks the boundary's).
void Executor::Impl::check_sent(int s, int mb, const Tensors& out) {
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
void Executor::Impl::post_batch(size_t begin, size_t end, bool forward_only) {
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
Tensors Executor::Impl::input_of(int s, int mb, bool leaves) {
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

}  // namespace pprt
