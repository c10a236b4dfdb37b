// An OVERLAP_F_B that overlaps (issue 40, section 3): the executor runs its forward part on a
// second thread of computation while the calling thread runs its backward part, so that one
// part's waits (its receives, a mixture of experts' all-to-alls) pass while the other computes.
//
// The second thread is the executor's for the whole run (one per rank, started at the first
// overlap). Each part it runs gets the caller's thread-local state (at::ThreadLocalState: grad
// mode, autocast, the dispatch keys, the debug info a profiler hangs there); the caller's part and
// its own share nothing the executor does not keep apart (executor.cpp: each part its own slots,
// its own activation bytes (activation_bytes.h: PartBytes), its bookkeeping applied after both,
// in the order of the sequence: the forward's, then the backward's). A part's collectives go to
// the communicator of its direction (the forward's all-to-alls on the forward's, the backward's on
// the backward's: the model's EP seam), so that each communicator sees one thread, in the plan's
// order.
//
// On a GPU (SideStream) the forward part runs on a stream of its own, so that its kernels and
// the backward part's, queued from the two threads, run side by side on the device. UNRUN ON A
// GPU so far (compiled against LibTorch's device-generic stream interface, which the CPU build
// has too; the CPU has no streams and never makes one).
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace pprt {

// The forward part's stream of an overlapped pair on a device with streams (CUDA), from
// LibTorch's pool, made once per rank. Fenced with the calling thread's current stream (the
// replay's compute stream) at both ends of each pair: it waits for everything queued before the
// pair (the forward's inputs, received and unpacked on the compute stream before the pair), and
// at the join the compute stream waits for it. Memory:
//  - What the compute stream allocated and the forward part reads (its inputs) is kept alive by
//    the caller until after the join, so the caching allocator cannot hand it to the concurrent
//    backward part while the side kernels may still read it; after the join the compute stream
//    is behind every side kernel of the pair.
//  - What the forward part allocates (on this stream) and the compute stream reads later (its
//    outputs: sent, or read by the next local stage) is marked used on the compute stream
//    (record_stream), so that its memory goes back to this stream's pool only when the compute
//    stream's uses are done. Its saved activations are read by its backward, whose autograd runs
//    each node on its forward's stream (LibTorch's stream semantics of backward).
class SideStream {
 public:
  // None (on() false) on a device without streams (the CPU).
  explicit SideStream(const c10::Device& device);
  bool on() const { return side_.has_value(); }
  c10::Stream stream() const { return *side_; }
  // Before a pair, on the calling thread: the side stream waits for its current stream.
  void fence_in();
  // After the join, on the calling thread: its current stream waits for the side stream, and
  // `outputs` (the forward part's) are marked used on it.
  void fence_out(const std::vector<at::Tensor>& outputs);

 private:
  std::optional<c10::impl::VirtualGuardImpl> impl_;
  c10::Device device_{c10::kCPU};
  std::optional<c10::Stream> side_;
  std::optional<c10::Event> in_, out_;
};

class PartThread {
 public:
  PartThread();
  ~PartThread();  // joins the thread (after the part it runs, if any)
  PartThread(const PartThread&) = delete;
  PartThread& operator=(const PartThread&) = delete;

  // When a run began and when each of its parts ended, on the steady clock (replay_times.h:
  // now_ns), for the trace and the all-to-all figures (report.h: OverlapSpan).
  struct Times {
    int64_t begin = 0, side_end = 0, main_end = 0;
  };

  // Runs `side` on the second thread, with the caller's thread-local state (and `stream`, when
  // given, current there), while `main` runs on the calling thread; returns once both are done.
  // An exception of either is rethrown after both ended (main's first).
  Times run(const std::function<void()>& side, const std::function<void()>& main,
            const SideStream* stream = nullptr);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pprt
