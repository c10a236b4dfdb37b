#include "runtime/launch/failure.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace pprt {

void report_failure(Store* store, int rank, const std::string& message) {
  if (!store) return;
  try {
    store->set(fmt::format("failed/{}", rank), message);
    store->set_if_absent("first-failure", fmt::format("rank {}: {}", rank, message));
  } catch (const TransportError&) {
  }
}

namespace {

std::string diagnose(Store* store, int rank, int world, std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::vector<int> silent;
  for (;;) {
    silent.clear();
    for (int q = 0; q < world; ++q) {
      if (q == rank) continue;
      const std::string lost = fmt::format("lost/{}", q);
      if (store->check({lost})) return fmt::format("lost rank {} ({})", q, store->get(lost));
      if (!store->check({fmt::format("failed/{}", q)}) &&
          !store->check({fmt::format("alive/{}", q)}))
        silent.push_back(q);
    }
    if (silent.empty() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!silent.empty()) {
    std::string ranks;
    const std::string why = fmt::format("no answer within {:.0f} s: the process died or hangs",
                                        std::chrono::duration<double>(grace).count());
    for (int q : silent) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
      store->set_if_absent(fmt::format("lost/{}", q), why);  // later diagnoses need not wait again
    }
    return fmt::format("lost rank{} {} ({})", silent.size() > 1 ? "s" : "", ranks, why);
  }
  return "every rank failed; the first failure: " + store->get("first-failure");
}

}  // namespace

std::string diagnose_lost_rank(Store* store, int rank, int world, const std::string& message,
                               std::chrono::milliseconds grace) {
  if (!store) return "lost a peer rank";
  try {
    report_failure(store, rank, message);
    std::string verdict = diagnose(store, rank, world, grace);
    store->set(fmt::format("diagnosed/{}", rank), verdict);  // the store's host may exit now
    return verdict;
  } catch (const TransportError&) {
    return "lost the rendezvous store (the process hosting it is gone: the launcher, or rank 0 "
           "under SLURM)";
  }
}

void linger_for_reports(Store* store, int world, std::chrono::milliseconds grace) {
  if (!store) return;
  // A rank may first notice the failure up to a grace period plus the watch's delay after this
  // one, then diagnose for up to another grace period.
  const auto deadline = std::chrono::steady_clock::now() + 2 * grace + std::chrono::seconds(2);
  try {
    for (int q = 0; q < world; ++q)
      while (!store->check({fmt::format("diagnosed/{}", q)}) &&
             !store->check({fmt::format("lost/{}", q)})) {
        if (std::chrono::steady_clock::now() > deadline) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
  } catch (const TransportError&) {
  }
}

FailureWatch::FailureWatch(Store* store, int rank, int world, std::chrono::milliseconds grace,
                           bool hosts_store)
    : store_(store), rank_(rank), world_(world), grace_(grace), hosts_store_(hosts_store) {
  if (store_ && world_ > 1) thread_ = std::thread([this] { loop(); });
}

FailureWatch::~FailureWatch() {
  stop();
}

void FailureWatch::remove_on_stop(const std::string& path) {
  std::lock_guard<std::mutex> lock(m_);
  remove_on_stop_.push_back(path);
}

void FailureWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FailureWatch::loop() {
  constexpr auto kPoll = std::chrono::milliseconds(200);
  // How long the rank's own thread gets to notice a failure by itself (a closed connection
  // reaches it at once if it waits for the lost rank) before the watch stops it.
  constexpr auto kNotice = std::chrono::milliseconds(1000);
  std::unique_lock<std::mutex> lock(m_);
  std::string cause;
  for (;;) {
    if (cv_.wait_for(lock, kPoll, [this] { return stop_; })) return;
    try {
      if (store_->check({"first-failure"})) break;
    } catch (const TransportError&) {
      cause =
          "lost the rendezvous store (the process hosting it is gone: the launcher, or rank 0 "
          "under SLURM)";
      break;
    }
  }
  if (cause.empty()) {
    try {
      store_->set(fmt::format("alive/{}", rank_), "waiting");
    } catch (const TransportError&) {
    }
    if (cv_.wait_for(lock, kNotice, [this] { return stop_; }) || main_failing_) return;
    lock.unlock();
    cause = diagnose_lost_rank(store_, rank_, world_, "waiting for its peers", grace_);
    lock.lock();
  }
  if (stop_ || main_failing_) return;
  std::fprintf(stderr, "pprun: rank %d: %s; it was stopped while waiting for its peers\n", rank_,
               cause.c_str());
  for (const std::string& path : remove_on_stop_) std::remove(path.c_str());
  if (hosts_store_) linger_for_reports(store_, world_, grace_);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);  // the rank's thread is blocked in the transport: nothing else can stop it
}

}  // namespace pprt
