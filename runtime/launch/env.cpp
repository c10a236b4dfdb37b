#include "runtime/launch/env.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "runtime/fail.h"

namespace pprt {

namespace {

int env_int(const GetEnv& getenv, const char* name, int lo, int hi) {
  const char* v = getenv(name);
  if (!v || !*v) fail("environment", fmt::format("{} is not set", name));
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno || *end || x < lo || x > hi)
    fail("environment", fmt::format("{}='{}' is not an integer in {}..{}", name, v, lo, hi));
  return static_cast<int>(x);
}

std::string env_str(const GetEnv& getenv, const char* name, const char* hint) {
  const char* v = getenv(name);
  if (!v || !*v) fail("environment", fmt::format("{} is not set{}", name, hint));
  return v;
}

// SLURM's tasks on node `node` from a per-node count such as SLURM_STEP_TASKS_PER_NODE: "4",
// "2(x3)" (2 on each of 3 nodes), "3(x2),1"; 0 if it does not say.
int slurm_tasks_on_node(const char* spec, int node) {
  if (!spec || node < 0) return 0;
  const char* p = spec;
  for (int first = 0; *p;) {
    char* end = nullptr;
    const long tasks = std::strtol(p, &end, 10);
    if (end == p || tasks < 1) return 0;
    long nodes = 1;
    p = end;
    if (*p == '(') {
      if (p[1] != 'x') return 0;
      nodes = std::strtol(p + 2, &end, 10);
      if (end == p + 2 || *end != ')' || nodes < 1) return 0;
      p = end + 1;
    }
    if (node < first + nodes) return static_cast<int>(tasks);
    first += static_cast<int>(nodes);
    if (*p == ',')
      ++p;
    else if (*p)
      return 0;
  }
  return 0;
}

// What a rank reads beside its place in the job.
void read_settings(const GetEnv& getenv, LaunchEnv& e) {
  const char* local = getenv("LOCAL_WORLD_SIZE");
  if (!local && e.launcher == "SLURM") local = getenv("SLURM_NTASKS_PER_NODE");
  if (local) e.local_world = std::max(1, std::atoi(local));
  if (!local && e.launcher == "SLURM") {  // srun says it per node when not asked for it
    const char* node = getenv("SLURM_NODEID");
    const char* spec = getenv("SLURM_STEP_TASKS_PER_NODE");
    if (!spec) spec = getenv("SLURM_TASKS_PER_NODE");
    e.local_world = slurm_tasks_on_node(spec, node ? std::atoi(node) : 0);
  }
  if (const char* ifname = getenv("GLOO_SOCKET_IFNAME")) e.gloo_interface = ifname;
  if (const char* progress = getenv("PPRUN_PROGRESS")) e.progress = progress;
}

}  // namespace

std::optional<LaunchEnv> launch_env(const GetEnv& getenv) {
  LaunchEnv e;
  if (getenv("RANK") && getenv("WORLD_SIZE")) {
    const bool spawned = getenv("PPRUN_SPAWNED") != nullptr;
    e.launcher = spawned ? "pprun" : getenv("TORCHELASTIC_RUN_ID") ? "torchrun" : "RANK/WORLD_SIZE";
    e.world = env_int(getenv, "WORLD_SIZE", 1, 1 << 20);
    e.rank = env_int(getenv, "RANK", 0, e.world - 1);
    e.local_rank = getenv("LOCAL_RANK") ? env_int(getenv, "LOCAL_RANK", 0, 1 << 20) : e.rank;
    e.master_addr =
        env_str(getenv, "MASTER_ADDR", " (torchrun sets it; set it when launching by hand)");
    e.master_port = env_int(getenv, "MASTER_PORT", 1, 65535);
    const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    e.external_store = spawned || (agent && std::string(agent) == "True");
    const char* restart = getenv("TORCHELASTIC_RESTART_COUNT");
    e.store_prefix = fmt::format("pprun/{}/", restart ? restart : "0");
    read_settings(getenv, e);
    return e;
  }
  if (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS")) {
    e.launcher = "SLURM";
    e.world = env_int(getenv, "SLURM_NTASKS", 1, 1 << 20);
    e.rank = env_int(getenv, "SLURM_PROCID", 0, e.world - 1);
    e.local_rank = getenv("SLURM_LOCALID") ? env_int(getenv, "SLURM_LOCALID", 0, 1 << 20) : 0;
    const char* hint =
        " (under SLURM, export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
        "head -n1) "
        "and MASTER_PORT=29500)";
    e.master_addr = env_str(getenv, "MASTER_ADDR", hint);
    e.master_port = env_int(getenv, "MASTER_PORT", 1, 65535);
    e.external_store = false;
    const char* job = getenv("SLURM_JOB_ID");
    const char* step = getenv("SLURM_STEP_ID");
    e.store_prefix = fmt::format("pprun/{}.{}/", job ? job : "0", step ? step : "0");
    read_settings(getenv, e);
    return e;
  }
  return std::nullopt;
}

}  // namespace pprt
