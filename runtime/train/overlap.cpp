// The second thread of computation of an OVERLAP_F_B (overlap.h).
#include "runtime/train/overlap.h"

#include <ATen/ThreadLocalState.h>
#include <c10/core/StreamGuard.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "runtime/train/replay_times.h"  // now_ns

namespace pprt {

struct PartThread::State {
  std::mutex m;
  std::condition_variable cv;
  const std::function<void()>* job = nullptr;  // the part to run; null: none
  std::optional<at::ThreadLocalState> tls;     // the caller's, for it
  bool done = false, stop = false;
  int64_t ended = 0;  // when the last part ended (now_ns)
  std::exception_ptr error;
  std::thread thread;

  void loop() {
    std::unique_lock<std::mutex> lock(m);
    for (;;) {
      cv.wait(lock, [&] { return stop || job != nullptr; });
      if (job == nullptr) return;  // stopped
      const std::function<void()>& part = *job;
      lock.unlock();
      std::exception_ptr e;
      try {
        at::ThreadLocalStateGuard guard(*tls);
        part();
      } catch (...) {
        e = std::current_exception();
      }
      const int64_t t = now_ns();
      lock.lock();
      ended = t;
      error = e;
      job = nullptr;
      done = true;
      cv.notify_all();
    }
  }
};

PartThread::PartThread() : state_(std::make_unique<State>()) {
  state_->thread = std::thread([s = state_.get()] { s->loop(); });
}

PartThread::~PartThread() {
  {
    std::lock_guard<std::mutex> lock(state_->m);
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

PartThread::Times PartThread::run(const std::function<void()>& side,
                                  const std::function<void()>& main, const SideStream* stream) {
  State& s = *state_;
  const std::function<void()> on_stream = [&side, stream] {
    const c10::StreamGuard current(stream->stream());  // the second thread's, for the part
    side();
  };
  Times times;
  times.begin = now_ns();
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.tls.emplace();  // the caller's thread-local state, now
    s.job = stream && stream->on() ? &on_stream : &side;
    s.done = false;
    s.error = nullptr;
  }
  s.cv.notify_all();
  std::exception_ptr main_error;
  try {
    main();
  } catch (...) {
    main_error = std::current_exception();
  }
  times.main_end = now_ns();
  std::exception_ptr side_error;
  {
    std::unique_lock<std::mutex> lock(s.m);
    s.cv.wait(lock, [&] { return s.done; });
    side_error = s.error;
    times.side_end = s.ended;
    s.tls.reset();
  }
  if (main_error) std::rethrow_exception(main_error);
  if (side_error) std::rethrow_exception(side_error);
  return times;
}

SideStream::SideStream(const c10::Device& device) {
  if (!device.is_cuda()) return;
  impl_.emplace(device.type());
  device_ = device.has_index() ? device : impl_->getDevice();
  side_ = impl_->getStreamFromGlobalPool(device_, /*isHighPriority=*/false);
  in_.emplace(device_.type());
  out_.emplace(device_.type());
}

void SideStream::fence_in() {
  if (!on()) return;
  in_->record(impl_->getStream(device_));
  in_->block(*side_);
}

void SideStream::fence_out(const std::vector<at::Tensor>& outputs) {
  if (!on()) return;
  const c10::Stream current = impl_->getStream(device_);
  out_->record(*side_);
  out_->block(current);
  for (const at::Tensor& t : outputs)
    if (t.defined() && t.device().is_cuda()) t.record_stream(current);
}

}  // namespace pprt
