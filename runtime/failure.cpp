#include "runtime/failure.h"

#include <fmt/format.h>

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

std::string diagnose_lost_rank(Store* store, int rank, int world, const std::string& message,
                               std::chrono::milliseconds grace) {
  if (!store) return "lost a peer rank";
  try {
    report_failure(store, rank, message);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::vector<int> silent;
    for (;;) {
      silent.clear();
      for (int q = 0; q < world; ++q) {
        if (q == rank) continue;
        const std::string lost = fmt::format("lost/{}", q);
        if (store->check({lost})) return fmt::format("lost rank {} ({})", q, store->get(lost));
        if (!store->check({fmt::format("failed/{}", q)})) silent.push_back(q);
      }
      if (silent.empty() || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!silent.empty()) {
      std::string ranks;
      for (int q : silent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
      return fmt::format("lost rank{} {} (no report within {:.0f} s: the process died or hangs)", silent.size() > 1 ? "s" : "",
                         ranks, std::chrono::duration<double>(grace).count());
    }
    return "every rank failed; the first failure: " + store->get("first-failure");
  } catch (const TransportError&) {
    return "lost the rendezvous store (the process hosting it is gone)";
  }
}

}  // namespace pprt
