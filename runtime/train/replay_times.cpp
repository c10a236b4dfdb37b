// How the executor times its replay (replay_times.h).
#include "runtime/train/replay_times.h"

#include <chrono>

namespace pprt {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ReplayTimes::ReplayTimes(const at::Device& device, std::function<void(const PartSample&)> on_part)
    : queue_(device), on_part_(std::move(on_part)) {}

void ReplayTimes::begin() {
  if (!queue_.on()) return;
  start_mark_ = queue_.begin();
  waits_.clear();
}

void ReplayTimes::waited(size_t before, size_t after, size_t recv) {
  waits_.push_back(DeviceWait{before, after, recv});
}

void ReplayTimes::queued(size_t index, size_t begin) {
  timed_.push_back(Timed{index, begin, queue_.mark(), waits_});
  waits_.clear();
}

void ReplayTimes::computed(StepTiming& r, int64_t begin_ns, size_t index, int64_t t0,
                           int64_t waited_ns, size_t begin) {
  const int64_t t1 = now_ns();
  r.spans[index] = ActionSpan{t0 - begin_ns, t0 + waited_ns - begin_ns, t1 - begin_ns};
  if (on_device()) {  // the device's times replace these after the step
    queued(index, begin);
    return;
  }
  r.compute_ns += t1 - t0 - waited_ns;
  r.wait_ns += waited_ns;
}

void ReplayTimes::device_times(StepTiming& r) {
  auto dev_ns = [&](size_t m) { return static_cast<int64_t>(queue_.ms(start_mark_, m) * 1e6); };
  for (const Timed& t : timed_) {
    int64_t w = 0;
    for (const DeviceWait& dw : t.waits) {
      w += dev_ns(dw.after) - dev_ns(dw.before);
      r.spans[dw.recv].end = dev_ns(dw.after);  // when its consumer stopped waiting for it
    }
    const int64_t b = dev_ns(t.begin), e = dev_ns(t.end);
    r.spans[t.index] = ActionSpan{b, b + w, e};
    r.compute_ns += e - b - w;
    r.wait_ns += w;
  }
  for (const TimedPart& p : parts_) {
    PartSample s = p.sample;
    s.ns = dev_ns(p.end) - dev_ns(p.begin);
    on_part_(s);
  }
  timed_.clear();
  parts_.clear();
}

ReplayTimes::Part::Part(ReplayTimes& times, bool memory) : times_(times) {
  if (!times_.on_part_) return;
  if (memory) {
    times_.allocated_->net = 0;
    guard_.emplace(c10::DebugInfoKind::PROFILER_STATE, times_.allocated_);
  }
  if (times_.queue_.on()) mark_ = times_.queue_.mark();
  t0_ = now_ns();
}

void ReplayTimes::Part::done(int stage, ppc::ActionKind kind, int64_t length,
                              std::vector<LayerSample> layers) {
  if (!times_.on_part_) return;
  const int64_t t1 = now_ns();
  guard_.reset();
  PartSample sample{stage, kind, t1 - t0_, times_.allocated_->net, length, std::move(layers), 0};
  for (const LayerSample& l : sample.layers)
    if (l.rerun) sample.recompute_ns += l.ns;
  if (times_.queue_.on())  // its time is known after the step
    times_.parts_.push_back(TimedPart{sample, mark_, times_.queue_.mark()});
  else
    times_.on_part_(sample);
}

}  // namespace pprt
