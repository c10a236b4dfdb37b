// Expert parallelism's all-to-alls, timed (pprun --trace, --profile and the summary: issue 40):
// the layers' two communicators (pprt::ExpertGroup) wrapped so that each all_to_all() is recorded
// with its start, end, bytes and direction. Everything else goes straight to the wrapped
// transport. The log is shared by both directions, whose all-to-alls may run at once (an
// OVERLAP_F_B's two threads), and so locked. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/output/report.h"
#include "runtime/transport/transport.h"

namespace pprt {

class AllToAllLog {
 public:
  // `span`'s times on the steady clock (replay_times.h: now_ns).
  void add(const AllToAllSpan& span);
  // Moves the all-to-alls that began at or after `begin_ns` (the step's start on the steady
  // clock) into `out`, made relative to it and in the order they began; forgets the rest.
  void take(int64_t begin_ns, std::vector<AllToAllSpan>& out);

 private:
  std::mutex m_;
  std::vector<AllToAllSpan> spans_;
};

// A pprt::ExpertGroup's two communicators, each wrapped to record into one log.
class TimedExperts {
 public:
  TimedExperts(Transport* forward, Transport* backward);
  ~TimedExperts();
  Transport* forward() const { return forward_.get(); }
  Transport* backward() const { return backward_.get(); }
  AllToAllLog& log() { return log_; }

 private:
  AllToAllLog log_;
  std::unique_ptr<Transport> forward_, backward_;
};

}  // namespace pprt
