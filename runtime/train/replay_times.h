// How the executor times its replay of a step (executor.h). On the CPU, with the host's clock as
// each compute action runs (the executor fills the spans); on a GPU, with events on the replay's
// compute stream (device_queue.h), read once the step is done: each compute action's begin and end
// and the compute stream's waits for receives inside it. And --profile's parts: each F, B, I or W
// (an OVERLAP_F_B's two parts apart) measured alone, with the bytes it leaves allocated.
// Included only by LibTorch translation units.
#pragma once

#include <c10/util/ThreadLocalDebugInfo.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "compiler/action.h"
#include "runtime/output/profile.h"
#include "runtime/output/report.h"
#include "runtime/train/device_queue.h"
#include "runtime/train/messages.h"

namespace pprt {

int64_t now_ns();  // the steady clock

class ReplayTimes {
 public:
  // `on_part`: --profile's (null: no parts measured).
  ReplayTimes(const at::Device& device, std::function<void(const PartSample&)> on_part);

  DeviceQueue& queue() { return queue_; }
  bool on_device() const { return queue_.on(); }
  bool profiled() const { return on_part_ != nullptr; }

  // A step begins (on a device: its first mark).
  void begin();
  // On a device: the compute stream waited for the receive of action `recv` between marks
  // `before` and `after`; compute action `index` was queued from mark `begin` to now (with the
  // waits recorded since the previous one).
  void waited(size_t before, size_t after, size_t recv);
  void queued(size_t index, size_t begin);
  // Compute action `index` ran from `t0` to now on the host's clock (the step began at `begin_ns`),
  // `waited_ns` of it waiting on the host; on a device it was queued from mark `begin`. Its span in
  // `r` (shown as waiting first, then computing: an OVERLAP_F_B may wait between its parts; on a
  // device replaced by the events' after the step) and, on the CPU, its compute and wait times.
  void computed(StepTiming& r, int64_t begin_ns, size_t index, int64_t t0, int64_t waited_ns,
                size_t begin);
  // After the step on a device (queue().end() waited for its last event): the compute actions'
  // spans and their compute and wait times from the events, and the parts measured sent.
  void device_times(StepTiming& r);

  // --profile: measures one part from its construction (after any wait) to done().
  class Part {
   public:
    Part(ReplayTimes& times, bool memory);
    // `length`: its microbatch's (MicrobatchShape::length); `layers`: what the part's layers told
    // the probe (model/layer_probe.h), if any.
    void done(int stage, ppc::ActionKind kind, int64_t length, std::vector<LayerSample> layers = {});

   private:
    ReplayTimes& times_;
    int64_t t0_ = 0;
    std::optional<c10::DebugInfoGuard> guard_;
    size_t mark_ = 0;
  };

 private:
  struct DeviceWait {
    size_t before, after;  // marks around the compute stream's wait
    size_t recv;           // the RECV action waited for
  };
  struct Timed {
    size_t index, begin, end;
    std::vector<DeviceWait> waits;  // inside it
  };
  struct TimedPart {
    PartSample sample;
    size_t begin, end;
  };
  DeviceQueue queue_;
  std::function<void(const PartSample&)> on_part_;
  std::vector<Timed> timed_;
  std::vector<DeviceWait> waits_;  // of the action being queued
  size_t start_mark_ = 0;
  std::vector<TimedPart> parts_;  // measured on a device: sent after the step
  std::shared_ptr<NetAllocated> allocated_ = std::make_shared<NetAllocated>();
};

}  // namespace pprt
