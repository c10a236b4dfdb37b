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
// On the CPU only: on a device the executor runs the two parts in sequence on its compute stream
// (docs/pprun.md, "--overlap").
//
// Included only by LibTorch translation units.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace pprt {

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

  // Runs `side` on the second thread, with the caller's thread-local state, while `main` runs on
  // the calling thread; returns once both are done. An exception of either is rethrown after
  // both ended (main's first).
  Times run(const std::function<void()>& side, const std::function<void()>& main);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pprt
