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

// What a rank reads beside its place in the job.
void read_settings(const GetEnv& getenv, LaunchEnv& e) {
  const char* local = getenv("LOCAL_WORLD_SIZE");
  if (!local && e.launcher == "SLURM") local = getenv("SLURM_NTASKS_PER_NODE");
  if (local) e.local_world = std::max(1, std::atoi(local));
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
