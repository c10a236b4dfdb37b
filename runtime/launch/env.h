// What the environment tells a pprun process: the rank it is and where to meet the others (set by
// torchrun, by SLURM, or by the pprun that spawned it), and the few settings read from it. The
// one place pprun reads its environment. No LibTorch.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace pprt {

struct LaunchEnv {
  std::string launcher;  // "torchrun", "SLURM", "pprun" (a rank pprun spawned), or
                         // "RANK/WORLD_SIZE" (by hand)
  int rank = 0, world = 1, local_rank = 0;
  int local_world =
      0;  // ranks on this machine (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE); 0: unknown
  std::string master_addr;
  int master_port = 0;
  bool external_store = false;  // the store is served by the launcher: rank 0 is a client too
  std::string store_prefix;     // keys of this run in the store
  std::string gloo_interface;   // GLOO_SOCKET_IFNAME: the network interface Gloo binds to
  std::string progress;         // PPRUN_PROGRESS: the spawning pprun's --progress auto, resolved
};

using GetEnv = std::function<const char*(const char*)>;

// The rank environment if there is one: RANK and WORLD_SIZE (torchrun, or a rank spawned by
// pprun; MASTER_ADDR and MASTER_PORT required), else SLURM_PROCID and SLURM_NTASKS (with
// MASTER_ADDR and MASTER_PORT), else nothing: pprun spawns the ranks itself. Throws
// ppc::UserError naming the variable when one is malformed or missing.
std::optional<LaunchEnv> launch_env(const GetEnv& getenv);

}  // namespace pprt
