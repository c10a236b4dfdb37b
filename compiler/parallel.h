// Running independent per-rank work on the machine's cores.
#pragma once

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

namespace ppc {

// Calls fn(i) for every i in [0, n), each exactly once, splitting the range into contiguous
// blocks over up to `max_threads` threads (the calling thread takes the first block) when
// `parallel` is set and the machine has more than one core. fn must only write state owned by i.
// The first exception thrown by any call is rethrown here after all threads have finished.
template <class Fn>
void parallel_for(int n, bool parallel, Fn&& fn, unsigned max_threads = 4) {
  unsigned threads =
      parallel ? std::min(max_threads, std::max(1u, std::thread::hardware_concurrency())) : 1u;
  threads = std::min<unsigned>(threads, static_cast<unsigned>(std::max(n, 1)));
  if (threads <= 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> errors(threads);
  auto block = [&](unsigned t) {
    const int begin = static_cast<int>(static_cast<long long>(n) * t / threads);
    const int end = static_cast<int>(static_cast<long long>(n) * (t + 1) / threads);
    try {
      for (int i = begin; i < end; ++i) fn(i);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(block, t);
  block(0);
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Large enough that a second thread pays for itself (starting one costs tens of microseconds).
inline bool worth_threads(size_t actions) {
  return actions >= 100000;
}

}  // namespace ppc
