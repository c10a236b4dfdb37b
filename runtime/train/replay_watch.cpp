// What the executor's replay says of itself, and the faults tests make in it (replay_watch.h).
#include "runtime/train/replay_watch.h"

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace pprt {

ReplayWatch::ReplayWatch(const ExecutorOptions& opts, const std::vector<ppc::Action>& actions,
                         const std::vector<size_t>& batch_end)
    : actions_(actions),
      batch_end_(batch_end),
      where_(opts.where),
      kill_step_(opts.kill_step),
      kill_action_(opts.kill_action),
      hang_(opts.hang),
      slow_factor_(opts.slow_factor) {}

void ReplayWatch::compute(size_t index, const DeviceWaited& waited) {
  if (where_)  // in the order they were queued, up to the first one still in flight
    for (; seen_ < waited.size() && waited[seen_].first->done(); ++seen_)
      where_->device_done(waited[seen_].second);
  computing_ = index;
  at(index, Where::Call::Compute);
}

void ReplayWatch::posting(size_t begin) {
  at(begin, Where::Call::Post);
  posting_ = true;
}

std::string ReplayWatch::failure(size_t index, const std::exception& e) const {
  const std::string partners =
      where_ ? where_->partners(index, posting_ ? batch_end_[index] : index + 1) : "";
  return fmt::format("action {} ({}): {}{}", index, ppc::to_string(actions_[index]), e.what(),
                     partners.empty() ? "" : "; it waited for " + partners);
}

void ReplayWatch::fault(size_t index) {
  if (!hang_) std::raise(SIGKILL);
  at(index, Where::Call::Hang);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void ReplayWatch::slow_down(int64_t busy_ns) const {
  if (slow_factor_ > 1)
    std::this_thread::sleep_for(std::chrono::nanoseconds(
        static_cast<int64_t>((slow_factor_ - 1) * static_cast<double>(busy_ns))));
}

}  // namespace pprt
