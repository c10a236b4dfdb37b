// Where a rank is in its plan, for the lines a failure prints (docs/gpu.md, "When a run hangs").
//
// The rank's own thread says what it does: the step, the action of its plan and the host call it
// is in (running or queuing a compute action, posting a batch, waiting on the host for a
// transfer, waiting at the end of the step for the device, a named call outside the replay), and
// which receives its device was told to wait for. Another thread (the failure watch,
// launch/failure.h) reads it when a peer fails or when a host call outlasts the step's timeout,
// without calling CUDA or the transport, either of which may be what hangs.
// No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "compiler/plan.h"

namespace pprt {

class Where {
 public:
  // What the rank's thread is doing inside the replay of a step.
  enum class Call : uint8_t {
    None,        // not in the replay (between steps, or a named call: outside())
    Compute,     // a compute action: running it (CPU) or queuing its kernels (device)
    Post,        // posting a batch of sends and receives (NCCL: ncclGroupEnd and its completion,
                 // which connects to peers it has not exchanged with yet)
    WaitHost,    // waiting on the host for a transfer of the action (a receive before its consumer
                 // on the CPU; a send at the end of the step)
    WaitDevice,  // the end of the step: waiting on the host for the device to finish a receive
                 // its compute stream waited for
    Drain,       // the end of the step: waiting on the host for the device's last kernels
    Hang,        // fault injection (--fault-kill R:S:hang): a host call that never returns
  };

  // `rank`: the rank's position in the plan; `names`: each pipeline rank's rank in the job (the
  // ranks the lines name; empty: the same); `device`: the replay queues its work on a device.
  Where(const ppc::Plan& plan, int rank, std::vector<int> names, bool device);

  // A step starts (0-based), its waits limited to `timeout`.
  void start_step(int64_t step, std::chrono::milliseconds timeout);
  // The thread enters `call` at `action` (an index into the rank's order).
  void at(size_t action, Call call);
  // A named host call outside the replay ("the all-reduce of the step's statistics"); `watched`:
  // part of the step, so overdue() applies to it.
  void outside(const std::string& what, bool watched);
  // The device was told to wait for receive `action` / the host saw that transfer done.
  void device_waits(size_t action);
  void device_done(size_t action);

  // One line: the step, the action, the host call and for how long, what the device waits for,
  // the partners' actions, e.g. "step 1, action 3 (1B0): in a host call, queuing its kernels,
  // for 300.2 s; its device waits for action 2 (1RECV_F1): rank 0's action 3 (0SEND_F1)".
  std::string describe() const;
  // The actions of the other ranks that comm actions [begin, end) meet, e.g. "rank 1's action 2
  // (1RECV_F1), rank 1's action 4 (1SEND_B0)"; "" when the range holds no comm action.
  std::string partners(size_t begin, size_t end) const;
  // describe() when the current host call in the replay (or a watched one outside it) has lasted
  // longer than the step's timeout plus `grace`, else "".
  std::string overdue(std::chrono::milliseconds grace) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Partner {
    int rank = -1;        // in the job
    int64_t action = -1;  // in its order; -1: not found
    std::string text;     // its action's text
  };
  std::string describe_locked(Clock::time_point now) const;
  std::string partner_text(size_t action) const;
  size_t batch_end(size_t begin) const;

  bool device_;
  std::vector<std::string> texts_;  // per action of the rank
  std::vector<bool> comm_;
  std::vector<Partner> partner_;  // per comm action

  mutable std::mutex m_;
  int64_t step_ = -1;
  std::chrono::milliseconds timeout_{0};
  size_t action_ = 0;
  Call call_ = Call::None;
  std::string outside_;
  bool watched_ = false;
  Clock::time_point since_{};
  std::vector<size_t> device_waits_;  // receives the device waits for, not yet seen done
};

}  // namespace pprt
