// The c10d side of the transport: TCPStore and ProcessGroupGloo, hidden behind transport.h.
// The only translation unit that includes c10d headers.
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <ATen/ATen.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>

#include "runtime/transport/transport.h"

namespace pprt {

namespace {

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string text(const std::vector<uint8_t>& b) {
  return {b.begin(), b.end()};
}

// Waits until something accepts a TCP connection at host:port (the store's host may start after
// this rank), for up to `timeout`; false if nothing did.
bool wait_for_listener(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  do {
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      bool connected = false;
      for (addrinfo* a = found; a && !connected; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        timeval limit{1, 0};  // connect() to an unreachable host: retry within the deadline
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
        connected = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        ::close(fd);
      }
      freeaddrinfo(found);
      if (connected) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

struct NoAnswer {};  // connect_client: the server took the connection but did not answer

// How long a store that took a connection has to answer. LibTorch 2.x names every socket it
// connects or accepts by reverse DNS (getnameinfo, in c10d's SocketImpl), so a resolver that drops
// a query (glibc: 5 s, tried twice) can hold a rank's connect for 10 s. Past this, the port is
// taken to be held by something that is not a store.
constexpr std::chrono::milliseconds kStoreAnswerLimit{15000};

// The store server's listening socket: IPv4, all interfaces, as an fd for TCPStore to adopt. c10d
// would listen dual-stack, and then every rank's connection arrives as ::ffff:a.b.c.d, an address
// /etc/hosts never names, so the server's one event loop asks DNS about each before answering
// anyone: with a resolver that drops queries the whole rendezvous stalls for seconds, under load
// past the timeout. IPv4 peers resolve from /etc/hosts at once when local. Returns the fd, or -1
// and why (as the system says it: a taken port is `Address already in use`, not 2.x's libuv dump).
int listen_ipv4(int port, std::string& why) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, SOMAXCONN) != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

// A TCPStore client. LibTorch 2.x's constructor connects (retrying until the timeout), then pings
// the server and waits for its answer with no time limit: a port held by another program that
// accepts connections but never answers would hang the rank for ever. So wait for a listener
// here first, then give the constructor, now only that exchange, `answer_within` on a helper
// thread. If it does not return, the thread stays blocked on its socket; the caller reports the
// error and the process exits.
c10::intrusive_ptr<c10d::TCPStore> connect_client(const std::string& host,
                                                  const c10d::TCPStoreOptions& opts,
                                                  std::chrono::milliseconds answer_within) {
  using Result = std::promise<c10::intrusive_ptr<c10d::TCPStore>>;
  auto result = std::make_shared<Result>();
  auto future = result->get_future();
  std::thread([host, opts, result] {
    try {
      result->set_value(c10::make_intrusive<c10d::TCPStore>(host, opts));
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  if (future.wait_for(answer_within) == std::future_status::timeout) throw NoAnswer{};
  return future.get();
}

class TcpStore final : public Store {
 public:
  explicit TcpStore(const StoreOptions& o) : prefix_(o.prefix), port_(o.port), timeout_(o.timeout) {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(o.port);
    opts.isServer = o.is_server;
    opts.waitWorkers = false;
    opts.timeout = o.timeout;
    const auto answer_within = std::min(o.timeout, kStoreAnswerLimit);
    if (!o.is_server && !wait_for_listener(o.host, o.port, o.timeout))
      throw TransportError(fmt::format(
          "cannot connect to the rendezvous store at {}:{}: nothing accepts connections there "
          "after {:g} s (is the store's host, rank 0 or the launcher, running?)",
          o.host, o.port, o.timeout.count() / 1000.0));
    // An IPv6 store host keeps c10d's own (dual-stack) listening socket.
    if (o.is_server && o.host.find(':') == std::string::npos) {
      std::string why;
      const int fd = listen_ipv4(o.port, why);
      if (fd < 0)
        throw TransportError(
            fmt::format("cannot start the rendezvous store at {}:{}: {}", o.host, o.port, why));
      opts.masterListenFd = fd;
      opts.port = static_cast<std::uint16_t>(bound_port(fd));
    }
    try {
      store_ = o.is_server ? c10::make_intrusive<c10d::TCPStore>(o.host, opts)
                           : connect_client(o.host, opts, answer_within);
    } catch (const NoAnswer&) {
      throw TransportError(fmt::format(
          "the rendezvous store at {}:{} does not answer within {:g} s (connected, but no answer "
          "to the store's ping): another program may hold the port, or the store's host (rank 0 "
          "or the launcher) is not running",
          o.host, o.port, answer_within.count() / 1000.0));
    } catch (const std::exception& e) {
      throw TransportError(fmt::format("cannot {} the rendezvous store at {}:{}: {}",
                                       o.is_server ? "start" : "connect to", o.host, o.port,
                                       first_line(e.what())));
    }
    port_ = store_->getPort();
    if (!o.is_server) probe(o);
  }

  void set(const std::string& key, const std::string& value) override {
    guard("set", key, [&] { store_->set(prefix_ + key, bytes(value)); });
  }
  // Waits in short checks, not in c10d's get: its client holds its one connection for as long as
  // a get waits, and the rank's FailureWatch, which asks this store whether a peer failed, would
  // wait behind it for the whole timeout instead of stopping the rank at once.
  std::string get(const std::string& key) override {
    const auto end = std::chrono::steady_clock::now() + timeout_;
    for (auto pause = std::chrono::milliseconds(1); !check(key);
         pause = std::min(2 * pause, std::chrono::milliseconds(50))) {
      if (std::chrono::steady_clock::now() >= end)
        throw TransportError(
            fmt::format("rendezvous store get '{}' failed: wait timeout after "
                        "{}ms, keys: {}{}",
                        key, timeout_.count(), prefix_, key));
      std::this_thread::sleep_for(pause);
    }
    std::string out;
    guard("get", key, [&] { out = text(store_->get(prefix_ + key)); });
    return out;
  }
  bool check(const std::string& key) override {
    bool out = false;
    guard("check", key, [&] { out = store_->check({prefix_ + key}); });
    return out;
  }
  std::string set_if_absent(const std::string& key, const std::string& value) override {
    std::string out;
    guard("compare-set", key,
          [&] { out = text(store_->compareSet(prefix_ + key, {}, bytes(value))); });
    return out;
  }

  c10::intrusive_ptr<c10d::Store> c10d_store() const { return store_; }
  const std::string& prefix() const { return prefix_; }
  int port() const { return port_; }

  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

 private:
  template <class Fn>
  void guard(const char* op, const std::string& key, Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      throw TransportError(
          fmt::format("rendezvous store {} '{}' failed: {}", op, key, first_line(e.what())));
    }
  }

  // A client checks that what it connected to answers as a store: a port held by another
  // program (the store's host could not bind it) must not hang every rank until the timeout.
  // A store answers a wait for a key just set at once.
  void probe(const StoreOptions& o) {
    const auto wait = std::min(o.timeout, kStoreAnswerLimit);
    const std::string key = fmt::format("{}probe/{}", prefix_, ::getpid());
    try {
      store_->set(key, bytes("1"));
      store_->wait({key}, wait);
    } catch (const std::exception& e) {
      throw TransportError(fmt::format(
          "the rendezvous store at {}:{} does not answer within {:g} s ({}): another program may "
          "hold the port, or the store's host (rank 0 or the launcher) is not running",
          o.host, o.port, wait.count() / 1000.0, first_line(e.what())));
    }
  }

  std::string prefix_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  int port_;
  std::chrono::milliseconds timeout_;
};

class GlooWork final : public Work {
 public:
  GlooWork(c10::intrusive_ptr<c10d::Work> w, std::string what)
      : w_(std::move(w)), what_(std::move(what)) {}
  void wait(std::chrono::milliseconds timeout) override {
    try {
      w_->wait(timeout);
    } catch (const std::exception& e) {
      throw TransportError(fmt::format("{} failed: {}", what_, TcpStore::first_line(e.what())));
    }
  }
  bool done() override { return w_->isCompleted(); }

 private:
  c10::intrusive_ptr<c10d::Work> w_;
  std::string what_;
};

class GlooTransport final : public Transport {
 public:
  // `key`: the group's name under the store's "gloo" prefix (empty for the world).
  GlooTransport(TcpStore& store, int rank, int size, const GlooOptions& o,
                const std::string& key = "")
      : store_(store), options_(o), key_(key), rank_(rank), size_(size) {
    auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
    try {
      if (!o.interface.empty())
        opts->devices = {c10d::ProcessGroupGloo::createDeviceForInterface(o.interface)};
      else if (!o.hostname.empty())
        opts->devices = {c10d::ProcessGroupGloo::createDeviceForHostname(o.hostname)};
      else
        opts->devices = {c10d::ProcessGroupGloo::createDefaultDevice()};
      opts->threads = 1;
      auto prefixed =
          c10::make_intrusive<c10d::PrefixStore>(store.prefix() + "gloo" + key, store.c10d_store());
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, opts);
    } catch (const std::exception& e) {
      throw TransportError(fmt::format("cannot connect the {} ranks{} with Gloo: {}", size,
                                       key.empty() ? "" : " of group " + key,
                                       TcpStore::first_line(e.what())));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "gloo"; }

  std::vector<std::unique_ptr<Work>> post(const std::vector<P2POp>& ops,
                                          std::chrono::milliseconds) override {  // (never waits)
    std::vector<std::unique_ptr<Work>> works;
    works.reserve(ops.size());
    for (const P2POp& op : ops) {
      std::vector<at::Tensor> t{*op.tensor};
      const bool send = op.kind == P2POp::Kind::Send;
      try {
        auto w = send ? pg_->send(t, op.peer, static_cast<int>(op.tag))
                      : pg_->recv(t, op.peer, static_cast<int>(op.tag));
        works.push_back(std::make_unique<GlooWork>(
            std::move(w), fmt::format("{} rank {}", send ? "send to" : "receive from", op.peer)));
      } catch (const std::exception& e) {
        throw TransportError(fmt::format("posting a {} rank {} failed: {}",
                                         send ? "send to" : "receive from", op.peer,
                                         TcpStore::first_line(e.what())));
      }
    }
    return works;
  }

  void allreduce_sum(at::Tensor& tensor, std::chrono::milliseconds timeout) override {
    std::vector<at::Tensor> t{tensor};
    run_collective("all-reduce", timeout, [&] { return pg_->allreduce(t); });
  }
  std::unique_ptr<Work> allreduce_async(at::Tensor& tensor, std::chrono::milliseconds) override {
    std::vector<at::Tensor> t{tensor};
    try {
      return std::make_unique<GlooWork>(pg_->allreduce(t), "all-reduce");
    } catch (const std::exception& e) {
      throw TransportError(
          fmt::format("starting an all-reduce failed: {}", TcpStore::first_line(e.what())));
    }
  }
  void all_to_all(at::Tensor& output, const at::Tensor& input,
                  const std::vector<int64_t>& recv_rows, const std::vector<int64_t>& send_rows,
                  std::chrono::milliseconds timeout) override {
    std::vector<int64_t> recv = all_to_all_counts(recv_rows, output.size(0), size_, "receive");
    std::vector<int64_t> send = all_to_all_counts(send_rows, input.size(0), size_, "send");
    at::Tensor in = input;  // (c10d takes it by non-const reference; it only reads it)
    run_collective("all-to-all", timeout,
                   [&] { return pg_->alltoall_base(output, in, recv, send); });
  }
  std::unique_ptr<Transport> new_group(const std::vector<int>& ranks,
                                       const std::string& key) override {
    const auto it = std::find(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end())
      throw TransportError(fmt::format("rank {} is not in group {}", rank_, key));
    return std::make_unique<GlooTransport>(store_, static_cast<int>(it - ranks.begin()),
                                           static_cast<int>(ranks.size()), options_,
                                           key_ + "/group/" + key);
  }
  void barrier(std::chrono::milliseconds timeout) override {
    run_collective("barrier", timeout, [&] { return pg_->barrier(); });
  }

 private:
  template <class Fn>
  void run_collective(const char* what, std::chrono::milliseconds timeout, Fn&& fn) {
    try {
      fn()->wait(timeout);
    } catch (const std::exception& e) {
      throw TransportError(fmt::format("{} failed: {}", what, TcpStore::first_line(e.what())));
    }
  }

  TcpStore& store_;
  GlooOptions options_;
  std::string key_;  // nested groups' keys extend it: unique wherever the group is made from
  int rank_, size_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const StoreOptions& opts) {
  return std::make_unique<TcpStore>(opts);
}

int store_port(const Store& store) {
  const auto* s = dynamic_cast<const TcpStore*>(&store);
  return s ? s->port() : 0;
}

std::unique_ptr<Transport> make_gloo_transport(Store& store, int rank, int size,
                                               const GlooOptions& opts) {
  auto* s = dynamic_cast<TcpStore*>(&store);
  if (!s) throw TransportError("the Gloo transport needs a TCP rendezvous store");
  return std::make_unique<GlooTransport>(*s, rank, size, opts);
}

}  // namespace pprt
