// Runs one thread per rank over a real c10d TCPStore and ProcessGroupGloo in this process (the
// c10d way of testing several ranks at once), so that runtime tests pay LibTorch's start-up once.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/transport/transport.h"

namespace pprt_test {

using RankFn = std::function<void(int rank, pprt::Transport& transport, pprt::Store& store)>;

inline std::unique_ptr<pprt::Store> serve_store(
    int world, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  pprt::StoreOptions so;
  so.port = 0;
  so.is_server = true;
  so.world_size = world;
  so.timeout = timeout;
  return pprt::make_tcp_store(so);
}

inline std::unique_ptr<pprt::Store> connect_store(
    int port, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  pprt::StoreOptions so;
  so.port = port;
  so.timeout = timeout;
  return pprt::make_tcp_store(so);
}

// Calls fn on `world` threads, each with its own store client and Gloo transport; rethrows the
// first exception a rank threw.
inline void run_ranks(int world, const RankFn& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto server = serve_store(world, timeout);
  const int port = pprt::store_port(*server);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<pprt::Store> store;
      std::unique_ptr<pprt::Transport> transport;
      try {
        store = connect_store(port, timeout);
        pprt::GlooOptions go;
        go.hostname = "127.0.0.1";
        go.timeout = timeout;
        transport = pprt::make_gloo_transport(*store, r, world, go);
        fn(r, *transport, *store);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
      // Every rank keeps its transport until all are done (a store barrier: it works even when
      // a rank failed and its transport is broken).
      try {
        if (store) {
          store->set("finished/" + std::to_string(r), "1");
          for (int q = 0; q < world; ++q) store->get("finished/" + std::to_string(q));
        }
      } catch (...) {
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace pprt_test
