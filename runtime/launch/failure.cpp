#include "runtime/launch/failure.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/fail.h"

namespace pprt {

namespace {

using Clock = std::chrono::steady_clock;

// How long a store that answers at all takes, at most, to answer one operation. A store that
// does not answer the diagnosis within its grace period plus this is taken as unreachable.
constexpr std::chrono::milliseconds kStoreAnswer{2000};

double seconds(std::chrono::milliseconds d) {
  return std::chrono::duration<double>(d).count();
}

// What a call of `within` came to: its value, or whether it threw or did not finish in time.
template <class T>
struct Outcome {
  std::optional<T> value;
  bool finished = false;  // returned or threw within the limit
};

// Runs `fn` on a thread of its own and waits at most `limit` for it: a store whose host cannot be
// reached blocks each operation for the store's whole timeout. A call still running after `limit`
// is left to finish or fail on its own (its rank is about to exit): `fn` must hold what it uses.
template <class T>
Outcome<T> within(std::chrono::milliseconds limit, std::function<T()> fn) {
  struct Shared {
    std::mutex m;
    std::condition_variable cv;
    Outcome<T> out;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, fn = std::move(fn)] {
    std::optional<T> value;
    try {
      value = fn();
    } catch (const std::exception&) {
    }
    std::lock_guard<std::mutex> lock(shared->m);
    shared->out.value = std::move(value);
    shared->out.finished = true;
    shared->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->m);
  shared->cv.wait_for(lock, limit, [&] { return shared->out.finished; });
  return shared->out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int q : ranks) out += (out.empty() ? "" : ", ") + std::to_string(q);
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", out);
}

std::string host_of(const RankHosts* hosts, int rank) {
  if (!hosts || rank < 0 || static_cast<size_t>(rank) >= hosts->hosts.size()) return "";
  return hosts->hosts[static_cast<size_t>(rank)];
}

// "lost rank 2 (killed by signal 9)", "lost ranks 2, 3 on 10.0.0.2 (no answer ...)": the ranks
// grouped by why they were lost and by host, the host named where it is not this rank's.
std::string lost_text(const std::map<int, std::string>& lost, int rank, const RankHosts* hosts) {
  std::vector<std::pair<std::pair<std::string, std::string>, std::vector<int>>> groups;
  for (const auto& [q, why] : lost) {
    const std::pair<std::string, std::string> key{why, host_of(hosts, q)};
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end())
      groups.push_back({key, {q}});
    else
      it->second.push_back(q);
  }
  std::string out;
  for (const auto& [key, ranks] : groups) {
    const auto& [why, host] = key;
    const bool elsewhere = !host.empty() && host != host_of(hosts, rank);
    out += fmt::format("{}{}{} ({})", out.empty() ? "lost " : " and ", rank_list(ranks),
                       elsewhere ? " on " + host : "", why);
  }
  return out;
}

std::string diagnose(Store* store, int rank, int world, std::chrono::milliseconds grace,
                     const RankHosts* hosts) {
  const auto deadline = Clock::now() + grace;
  std::map<int, std::string> lost;  // rank -> why
  auto recorded = [&](int q) {
    const std::string key = fmt::format("lost/{}", q);
    if (!store->check({key})) return false;
    lost[q] = store->get(key);
    return true;
  };
  std::vector<int> silent;
  for (;;) {
    silent.clear();
    for (int q = 0; q < world; ++q) {
      if (q == rank || lost.count(q) || recorded(q)) continue;
      if (!store->check({fmt::format("failed/{}", q)}) &&
          !store->check({fmt::format("alive/{}", q)}))
        silent.push_back(q);
    }
    if (!lost.empty()) {
      // A verdict already recorded (by the launcher, or by an earlier diagnosis, which records
      // its lost ranks one by one): once more round, for those recorded meanwhile.
      for (int q = 0; q < world; ++q)
        if (q != rank && !lost.count(q)) recorded(q);
      return lost_text(lost, rank, hosts);
    }
    if (silent.empty() || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int q : silent) {
    const std::string host = host_of(hosts, q);
    const bool elsewhere = !host.empty() && host != host_of(hosts, rank);
    const std::string why =
        fmt::format("no answer within {:.0f} s: the process died or hangs{}", seconds(grace),
                    elsewhere ? ", or its host or the network to it is down" : "");
    // (recorded: later diagnoses need not wait again)
    lost[q] = store->set_if_absent(fmt::format("lost/{}", q), why);
  }
  if (!lost.empty()) return lost_text(lost, rank, hosts);
  return "every rank failed; the first failure: " + store->get("first-failure");
}

// The verdict when the store does not answer (`answered`: it failed at once, the connection
// closed; else it said nothing within `waited`): the ranks on the store's host, if known.
std::string store_lost(bool answered, std::chrono::milliseconds waited, int rank,
                       const RankHosts* hosts) {
  const std::string store = hosts && !hosts->store.empty() ? " at " + hosts->store : "";
  if (answered)
    return fmt::format(
        "lost the rendezvous store{} (the process serving it is gone: the launcher, or rank 0 "
        "under SLURM)",
        store);
  std::vector<int> there;
  if (hosts && !hosts->store_host.empty() && hosts->store_host != host_of(hosts, rank))
    for (size_t q = 0; q < hosts->hosts.size(); ++q)
      if (hosts->hosts[q] == hosts->store_host) there.push_back(static_cast<int>(q));
  if (!there.empty())
    return fmt::format(
        "lost {} on {} with the rendezvous store{}, which does not answer within {:.0f} s: that "
        "host or the network to it is down",
        rank_list(there), hosts->store_host, store, seconds(waited));
  return fmt::format(
      "lost the rendezvous store{} (no answer within {:.0f} s: its host or the network to it is "
      "down, or the process serving it hangs)",
      store, seconds(waited));
}

}  // namespace

std::string ipv4_address_of(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return "";
  char buf[INET_ADDRSTRLEN] = {0};
  const auto* addr = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  const bool ok = inet_ntop(AF_INET, &addr->sin_addr, buf, sizeof buf) != nullptr;
  freeaddrinfo(res);
  return ok ? buf : "";
}

uint64_t ipv4_number(const std::string& address) {
  in_addr a{};
  if (address.empty() || inet_pton(AF_INET, address.c_str(), &a) != 1) return 0;
  return static_cast<uint64_t>(ntohl(a.s_addr)) + 1;
}

std::string ipv4_text(uint64_t number) {
  if (number == 0 || number > (uint64_t{1} << 32)) return "";
  in_addr a{};
  a.s_addr = htonl(static_cast<uint32_t>(number - 1));
  char buf[INET_ADDRSTRLEN] = {0};
  return inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "";
}

std::string local_address_towards(const std::string& host) {
  const std::string addr = ipv4_address_of(host);
  if (addr.empty()) return "";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  std::string out;
  // Connecting a UDP socket only picks the route and the source address.
  if (inet_pton(AF_INET, addr.c_str(), &to.sin_addr) == 1 &&
      connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    char buf[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf))
      out = buf;
  }
  close(fd);
  return out;
}

void report_failure(Store* store, int rank, const std::string& message) {
  if (!store) return;
  try {
    store->set(fmt::format("failed/{}", rank), message);
    store->set_if_absent("first-failure", fmt::format("rank {}: {}", rank, message));
  } catch (const TransportError&) {
  }
}

std::string diagnose_lost_rank(Store* store, int rank, int world, const std::string& message,
                               std::chrono::milliseconds grace, const RankHosts* hosts) {
  if (!store) return "lost a peer rank";
  // (a copy: the call may outlive this frame)
  std::shared_ptr<const RankHosts> where = hosts ? std::make_shared<RankHosts>(*hosts) : nullptr;
  const std::chrono::milliseconds limit = grace + kStoreAnswer;
  const Outcome<std::string> out = within<std::string>(limit, [=]() -> std::string {
    report_failure(store, rank, message);
    std::string verdict = diagnose(store, rank, world, grace, where.get());
    store->set(fmt::format("diagnosed/{}", rank), verdict);  // the store's host may exit now
    return verdict;
  });
  if (out.value) return *out.value;
  return store_lost(out.finished, limit, rank, where.get());
}

void linger_for_reports(Store* store, int world, std::chrono::milliseconds grace) {
  if (!store) return;
  // A rank may first notice the failure up to a grace period plus the watch's delay after this
  // one, then diagnose for up to another grace period.
  const auto deadline = Clock::now() + 2 * grace + std::chrono::seconds(2);
  try {
    for (int q = 0; q < world; ++q)
      while (!store->check({fmt::format("diagnosed/{}", q)}) &&
             !store->check({fmt::format("lost/{}", q)})) {
        if (Clock::now() > deadline) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
  } catch (const TransportError&) {
  }
}

// What the watch and its thread share: the thread may outlive the watch (left blocked in a store
// that does not answer while its rank exits).
struct FailureWatch::State {
  Store* store;
  int rank, world;
  std::chrono::milliseconds grace;
  bool hosts_store;
  std::atomic<bool> main_failing{false};
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::shared_ptr<const RankHosts> hosts;
  std::function<std::string()> where, overdue;  // set_where()
};

FailureWatch::FailureWatch(Store* store, int rank, int world, std::chrono::milliseconds grace,
                           bool hosts_store)
    : state_(std::make_shared<State>()) {
  state_->store = store;
  state_->rank = rank;
  state_->world = world;
  state_->grace = grace;
  state_->hosts_store = hosts_store;
  if (store && world > 1) thread_ = std::thread(loop, state_);
}

FailureWatch::~FailureWatch() {
  stop();
}

void FailureWatch::set_hosts(RankHosts hosts) {
  std::lock_guard<std::mutex> lock(state_->m);
  state_->hosts = std::make_shared<const RankHosts>(std::move(hosts));
}

void FailureWatch::set_where(std::function<std::string()> describe,
                             std::function<std::string()> overdue) {
  {
    std::lock_guard<std::mutex> lock(state_->m);
    state_->where = std::move(describe);
    state_->overdue = std::move(overdue);
  }
  if (state_->store && !thread_.joinable() && !state_->stop) thread_ = std::thread(loop, state_);
}

std::shared_ptr<const RankHosts> FailureWatch::hosts() const {
  std::lock_guard<std::mutex> lock(state_->m);
  return state_->hosts;
}

void FailureWatch::main_failing() {
  state_->main_failing = true;
}

void FailureWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(state_->m);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (!thread_.joinable()) return;
  if (state_->main_failing)
    thread_.detach();  // it may be blocked in the store; the rank exits without it
  else
    thread_.join();
}

void FailureWatch::loop(std::shared_ptr<State> s) {
  constexpr auto kPoll = std::chrono::milliseconds(200);
  // How long the rank's own thread gets to notice a failure by itself (a closed connection
  // reaches it at once if it waits for the lost rank) before the watch stops it.
  constexpr auto kNotice = std::chrono::milliseconds(1000);
  std::unique_lock<std::mutex> lock(s->m);
  std::string cause;
  bool stuck = false;
  for (;;) {
    if (s->cv.wait_for(lock, kPoll, [&] { return s->stop; })) return;
    const auto asked = Clock::now();
    const auto overdue = s->overdue;
    lock.unlock();
    const std::string late = overdue ? overdue() : "";
    if (!late.empty()) {
      cause = "stuck in a host call longer than the step's timeout allows";
      report_failure(s->store, s->rank, fmt::format("{}: {}", cause, late));
      lock.lock();
      stuck = true;
      break;
    }
    bool failure = false, lost_store = false;
    try {
      failure = s->store->check({"first-failure"});
    } catch (const TransportError&) {
      lost_store = true;
    }
    lock.lock();
    if (lost_store) {
      // (a store that stopped answering fails the check after its own timeout)
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - asked);
      cause = store_lost(waited < s->grace, waited, s->rank, s->hosts.get());
      break;
    }
    if (failure) break;
  }
  if (cause.empty()) {
    lock.unlock();
    try {
      s->store->set(fmt::format("alive/{}", s->rank), "waiting");
    } catch (const TransportError&) {
    }
    lock.lock();
    if (s->cv.wait_for(lock, kNotice, [&] { return s->stop; }) || s->main_failing) return;
    const auto hosts = s->hosts;
    const auto where = s->where;
    lock.unlock();
    cause = diagnose_lost_rank(s->store, s->rank, s->world,
                               where ? "stopped at " + where() : "waiting for its peers", s->grace,
                               hosts.get());
    lock.lock();
  }
  if (s->stop || s->main_failing) return;
  const auto where = s->where;
  lock.unlock();
  const std::string at = where ? where() : "";
  if (stuck)
    std::fprintf(stderr, "%s: rank %d: %s: it was stopped at %s\n", program_name().c_str(), s->rank,
                 cause.c_str(), at.c_str());
  else if (!at.empty())
    std::fprintf(stderr, "%s: rank %d: %s; it was stopped at %s\n", program_name().c_str(), s->rank,
                 cause.c_str(), at.c_str());
  else
    std::fprintf(stderr, "%s: rank %d: %s; it was stopped while waiting for its peers\n",
                 program_name().c_str(), s->rank, cause.c_str());
  lock.lock();
  if (s->hosts_store) linger_for_reports(s->store, s->world, s->grace);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);  // the rank's thread is blocked in the transport: nothing else can stop it
}

}  // namespace pprt
