// How long a rank waits for its peers within a step (docs/pprun.md, "Timeouts").
//
// The first step of a run, and a step after a checkpoint save or an evaluation, get the generous
// limit (--timeout, 300 s by default): they include what only they do (connecting to peers, the
// first launch of each kernel, a peer still writing its shard). From then on a hang should cost
// seconds, not minutes: the limit is --step-timeout when given, else ten times the slowest step
// so far, at least 10 s, and never more than the generous limit.
// No LibTorch.
#pragma once

#include <algorithm>
#include <chrono>

namespace pprt {

class StepTimeout {
 public:
  using ms = std::chrono::milliseconds;
  static constexpr ms kFloor{10'000};
  static constexpr int kFactor = 10;

  // `fixed`: --step-timeout (0: proportional to the step).
  StepTimeout(ms generous, ms fixed) : generous_(generous), fixed_(fixed) {}

  // The limit of the next step's waits.
  ms current() const {
    if (generous_next_) return generous_;
    if (fixed_.count() > 0) return std::min(fixed_, generous_);
    return std::min(generous_, std::max(kFloor, kFactor * slowest_));
  }
  // A step took `step` (all of it: the replay, the reductions, the optimizer).
  void step_done(std::chrono::nanoseconds step) {
    slowest_ = std::max(slowest_, std::chrono::ceil<ms>(step));
    generous_next_ = false;
  }
  // The next step comes after a save or an evaluation: the generous limit again.
  void generous_next() { generous_next_ = true; }

 private:
  ms generous_, fixed_;
  ms slowest_{0};
  bool generous_next_ = true;
};

}  // namespace pprt
