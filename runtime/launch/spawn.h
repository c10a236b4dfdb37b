// pprun alone (no launcher's environment: env.h) spawns the ranks of a run on this machine.
// No LibTorch.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/transport/transport.h"

namespace pprt {

struct SpawnOptions {
  std::string exe;                // the program each rank runs (this pprun)
  std::vector<std::string> args;  // its arguments (argv[1..])
  int world = 1;
  int port = 0;                                          // of the store this process serves
  std::vector<std::pair<std::string, std::string>> env;  // added to each rank's environment
  std::chrono::milliseconds grace{60'000};  // after a rank fails, time the others get to stop
  Store* store = nullptr;  // to record ranks that died from a signal ("lost/<rank>")
};

// Starts one process per rank (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1,
// MASTER_PORT, PPRUN_SPAWNED=1), relays their output prefixed with "[rank R] " (a progress bar
// redrawn with '\r' stays one line), and waits. If a rank fails, the others get `grace` to stop
// by themselves (they notice the lost rank), then are terminated. SIGINT/SIGTERM are passed on.
// Returns 0 if every rank succeeded, else the first failed rank's exit code (1 if it died from a
// signal; 128 + signal if pprun itself was interrupted).
int spawn_ranks(const SpawnOptions& opts);

}  // namespace pprt
