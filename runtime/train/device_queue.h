// DeviceQueue: the replay's compute stream and its CUDA event timing (executor.cpp uses it).
// Included only by LibTorch translation units.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace pprt {

// A device with streams (CUDA), through LibTorch's device-generic interface (c10::Stream,
// c10::Event, the device's DeviceGuardImpl), so that the same code compiles against a CPU
// LibTorch, where it is never used (the CPU has no streams: everything runs in program order).
//  - The replay runs on a stream of its own (the compute stream, from LibTorch's pool), fenced with
//    the caller's stream at both ends: it starts after what the caller queued (the step's tokens,
//    the optimizer), and the caller's later work (gradient clipping, the optimizer) waits for it.
//  - A receive's consumer waits for the transfer on the device (Work::wait_on_current_stream),
//    not on the host; the host waits for every transfer at the end of the step (finish()), where
//    a failure or the timeout shows.
//  - Each compute action is timed with events on the compute stream (begin, end, and the device
//    waits inside it), read after the step: the spans, compute and wait times and --profile's parts
//    are the device's times, relative to the step's start on the device. The host's clocks
//    would time only the queuing of the kernels.
struct DeviceQueue {
  std::optional<c10::impl::VirtualGuardImpl> impl;
  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> compute, caller;
  std::vector<c10::Event> events;  // kept across steps (re-recorded after the step's sync)
  size_t used = 0;
  std::optional<c10::Event> ready;  // begin()'s fence, kept across steps too

  // On a CUDA device, a compute stream from the pool; on any other, none (on() is false).
  explicit DeviceQueue(const c10::Device& d);
  bool on() const { return compute.has_value(); }

  // A timing event recorded now on the compute stream; its index.
  size_t mark();
  // Milliseconds between two marks (both done).
  double ms(size_t from, size_t to) const;

  // The start of a replay: the compute stream waits for the caller's stream; returns the mark of
  // the start.
  size_t begin();
  // The end of a replay (after its last kernel was queued): the caller's stream waits for the
  // compute stream, and the host for the last mark (the timings need it).
  void end();
};

}  // namespace pprt
