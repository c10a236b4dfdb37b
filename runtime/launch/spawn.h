// How the ranks of a run come to be: spawned by pprun itself on this machine (the default), or
// started by torchrun or SLURM, which give each process its rank and a rendezvous address.
// No LibTorch.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/transport/transport.h"

namespace pprt {

struct LaunchEnv {
  std::string launcher;  // "torchrun", "SLURM", "pprun" (a rank pprun spawned), or
                         // "RANK/WORLD_SIZE" (by hand)
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool external_store = false;  // the store is served by the launcher: rank 0 is a client too
  std::string store_prefix;     // keys of this run in the store
};

using GetEnv = std::function<const char*(const char*)>;

// The rank environment if there is one: RANK and WORLD_SIZE (torchrun, or a rank spawned by
// pprun; MASTER_ADDR and MASTER_PORT required), else SLURM_PROCID and SLURM_NTASKS (with
// MASTER_ADDR and MASTER_PORT), else nothing: pprun spawns the ranks itself. Throws
// ppc::UserError naming the variable when one is malformed or missing.
std::optional<LaunchEnv> launch_env(const GetEnv& getenv);

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
