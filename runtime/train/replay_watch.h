// What the executor's replay says of itself, and the faults tests make in it (executor.h):
//  - where the rank is in its plan (where.h: the action, the host call, the receives its device
//    waits for), for the lines a failure prints, and the partners a failed exchange waited for;
//  - fault injection: --fault-kill R:S (the rank dies in the middle of step S) and R:S:hang (it
//    stops there in a host call that never returns), --fault-slow R:F (its compute actions take F
//    times as long: a straggler).
// Used by executor.cpp only. Included only by LibTorch translation units.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/action.h"
#include "runtime/train/executor.h"
#include "runtime/train/where.h"

namespace pprt {

// Receives the compute stream waits for on a device, in the order queued: each with its action.
using DeviceWaited = std::vector<std::pair<std::unique_ptr<Work>, size_t>>;

class ReplayWatch {
 public:
  // `actions`: the rank's order; `batch_end`: per comm action, one past its batch's last action.
  ReplayWatch(const ExecutorOptions& opts, const std::vector<ppc::Action>& actions,
              const std::vector<size_t>& batch_end);

  // The replay enters `call` at action `index`.
  void at(size_t index, Where::Call call) {
    if (where_) where_->at(index, call);
  }
  // Compute action `index` begins (the device's waits of `waited` the host now sees done told
  // first, without a blocking call).
  void compute(size_t index, const DeviceWaited& waited);
  // The host waits for action `index`'s transfer, then goes back to the compute action that
  // needed it.
  void wait_host(size_t index) { at(index, Where::Call::WaitHost); }
  void back_to_compute() { at(computing_, Where::Call::Compute); }
  // Posting the batch that starts at action `begin`, then done.
  void posting(size_t begin);
  void posted() { posting_ = false; }
  // The device was told to wait for receive `index` / the host saw transfer `index` done.
  void device_waits(size_t index) {
    if (where_) where_->device_waits(index);
  }
  void device_done(size_t index) {
    if (where_) where_->device_done(index);
  }
  // The end of a step: the device's waits are all waited for (DeviceWaited emptied).
  void step_done() { seen_ = 0; }

  // "action 3 (0SEND_F1): WHAT; it waited for rank 1's action 2 (1RECV_F1)": a failed exchange at
  // action `index` (during a post, the batch's partners; else the action's).
  std::string failure(size_t index, const std::exception& e) const;

  // --fault-kill: whether the replay of `step` fails before action `index`, and how.
  bool fault_due(int64_t step, size_t index) const {
    return step == kill_step_ && index >= kill_action_;
  }
  [[noreturn]] void fault(size_t index);
  // --fault-slow: a compute action that kept the host busy `busy_ns` takes that many times longer.
  void slow_down(int64_t busy_ns) const;

 private:
  const std::vector<ppc::Action>& actions_;
  const std::vector<size_t>& batch_end_;
  Where* where_;
  int64_t kill_step_;
  size_t kill_action_;
  bool hang_;
  double slow_factor_;
  bool posting_ = false;
  size_t computing_ = 0;  // the compute action being run
  size_t seen_ = 0;       // DeviceWaited[0, seen_) seen done
};

}  // namespace pprt
