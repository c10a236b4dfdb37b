// pprun's run (run.h): a worker rank's run under a launcher, the ranks spawned on this machine,
// the reference, and --export; the options are checked first (make_job.cpp).
#include "runtime/launch/run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "runtime/checkpoint/format.h"
#include "runtime/checkpoint/hf.h"
#include "runtime/fail.h"
#include "runtime/launch/expert_groups.h"
#include "runtime/launch/failure.h"
#include "runtime/launch/spawn.h"
#include "runtime/model/model_facts.h"
#include "runtime/train/trainer.h"
#include "runtime/transport/transport.h"

namespace pprt {

namespace {

int run_worker(const Job& job, const LaunchEnv& env) {
  const Topology topo = job.topology();
  if (env.world != topo.world())
    fail("environment",
         fmt::format("the plan is for {} ranks (pp {}{}), but {} is {} (from {}){}", topo.world(),
                     topo.pp(), topo.dp() > 1 ? fmt::format(" x dp {}", topo.dp()) : "",
                     env.launcher == "SLURM" ? "SLURM_NTASKS" : "WORLD_SIZE", env.world,
                     env.launcher,
                     env.world % topo.pp() == 0 && env.world / topo.pp() != topo.dp()
                         ? fmt::format("; for {} data-parallel replicas give --dp {}",
                                       env.world / topo.pp(), env.world / topo.pp())
                         : ""));
  set_threads(job.threads);
  keep_freed_memory();
  report_broken_pipes();
  const bool local = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
  if (job.device == "cuda") prepare_gpu(env.rank, env.local_rank, env.local_world, local);
  std::unique_ptr<Store> store;
  std::unique_ptr<Transport> transport, pipeline, replicas;
  std::unique_ptr<Transport> experts_fwd, experts_bwd, expert_reps;  // --ep
  const bool hosts_store = env.rank == 0 && !env.external_store;
  // Says why the run failed and exits 1, without running the destructors (the transport may be
  // wedged); the store's host first waits for the other ranks' reports.
  auto fail_run = [&](const std::string& message) {
    std::fprintf(stderr, "%s: %s\n", program_name().c_str(), message.c_str());
    if (hosts_store)
      linger_for_reports(store.get(), env.world,
                         std::min(job.timeout, std::chrono::milliseconds(3000)));
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  };
  // Where this rank and the store are, for naming what a network failure cuts off.
  RankHosts where;
  where.store = fmt::format("{}:{}", env.master_addr, env.master_port);
  where.store_host = ipv4_address_of(env.master_addr);
  where.hosts.assign(static_cast<size_t>(env.world), "");
  where.hosts[static_cast<size_t>(env.rank)] = local_address_towards(env.master_addr);
  try {
    StoreOptions so;
    so.host = env.master_addr;
    so.port = env.master_port;
    so.is_server = hosts_store;
    so.world_size = env.world;
    so.timeout = job.timeout;
    so.prefix = env.store_prefix;
    store = make_tcp_store(so);
    if (job.device == "cuda") {
      transport = make_nccl_transport(*store, env.rank, env.world, env.local_rank, job.timeout);
    } else {
      GlooOptions go;
      go.interface = env.gloo_interface;
      go.hostname = local ? "127.0.0.1" : "";
      go.timeout = job.timeout;
      transport = make_gloo_transport(*store, env.rank, env.world, go);
    }
    RankGroups groups{transport.get(), transport.get(), nullptr};
    if (topo.dp() > 1) {  // every rank makes its pipeline's group, then its replicas' group
      const int d = topo.replica(env.rank), p = topo.pipeline_rank(env.rank);
      groups.pipeline = nullptr;
      if (topo.pp() > 1)
        groups.pipeline = (pipeline = transport->new_group(topo.group(env.rank, "pp"),
                                                           fmt::format("pipeline:{}", d)))
                              .get();
      replicas = transport->new_group(topo.group(env.rank, "dp"), fmt::format("replicas:{}", p));
      groups.replicas = replicas.get();
      if (job.ep > 1) {  // then its experts' two communicators and their replicas' group
        const ExpertReplicas er = expert_replicas(d, topo.dp(), job.ep);
        auto ranks_of = [&](const std::vector<int>& reps) {
          std::vector<int> out;
          for (int r : reps) out.push_back(topo.global(p, r));
          return out;
        };
        const int block = d / job.ep;
        experts_fwd = transport->new_group(ranks_of(er.shard_group),
                                           fmt::format("experts.forward:{}:{}", p, block));
        experts_bwd = transport->new_group(ranks_of(er.shard_group),
                                           fmt::format("experts.backward:{}:{}", p, block));
        groups.experts_forward = experts_fwd.get();
        groups.experts_backward = experts_bwd.get();
        if (er.same_experts.size() > 1) {
          expert_reps = transport->new_group(ranks_of(er.same_experts),
                                             fmt::format("expert_replicas:{}:{}", p, er.shard));
          groups.expert_replicas = expert_reps.get();
        }
      }
    } else if (topo.pp() == 1) {
      groups.pipeline = nullptr;
    }
    train_rank(job, env.rank, env.local_rank, groups, *store, hosts_store, where);
  } catch (const RunFailure& e) {
    fail_run(e.what());
  } catch (const TransportError& e) {
    report_failure(store.get(), env.rank, e.what());
    fail_run(fmt::format("rank {}: {}", env.rank, e.what()));
  }
  return 0;
}

int spawn(const Job& job, const RunOptions& o) {
  StoreOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  so.is_server = true;
  so.world_size = job.topology().world();
  so.timeout = job.timeout;
  so.prefix = "pprun/0/";
  std::unique_ptr<Store> store = make_tcp_store(so);
  SpawnOptions sp;
  sp.exe = o.exe;
  sp.args = o.args;
  sp.world = job.topology().world();
  sp.port = store_port(*store);
  if (o.progress == "auto")
    sp.env.emplace_back("PPRUN_PROGRESS", isatty(STDOUT_FILENO) ? "bar" : "lines");
  sp.grace = job.timeout + std::chrono::seconds(5);
  sp.store = store.get();
  std::printf("%s: starting %d ranks on this machine (rendezvous 127.0.0.1:%d)\n",
              program_name().c_str(), sp.world, sp.port);
  std::fflush(stdout);
  return spawn_ranks(sp);
}

// --export CKPT OUT: the checkpoint's model (its configuration, as the family reads it).
struct Exported {
  ModelFacts facts;
  ModelSetup setup;
};
Exported exported_model(const RunOptions& o, const Checkpoint& ckpt) {
  const Config config = o.family.configured(&ckpt.state().model, OptionValues{});
  return Exported{model_facts(o.family, config), setup_of(config, o.family.name())};
}

int export_command(const RunOptions& o) {
  if (o.export_format == "hf") {
    if (o.dtype != "fp32" && o.dtype != "bf16")
      fail("--dtype", fmt::format("'{}': expected fp32 or bf16", o.dtype));
    const uint64_t shard = parse_byte_size(o.max_shard_size, "--max-shard-size");
    const Checkpoint ckpt(o.export_args.at(0));
    const Exported m = exported_model(o, ckpt);
    if (!m.facts.hugging_face)
      fail("--format", fmt::format("hf: model '{}' has no Hugging Face form "
                                   "(Model::hugging_face)",
                                   m.facts.family));
    const ppc::Layout layout = ppc::parse_layout(ckpt.state().layout, "layout", ppc::kAnySymbols);
    const HfFormat format = run_hook([&] {
      return m.facts.hugging_face(layout_info(layout), m.setup,
                                  o.dtype == "bf16" ? "bfloat16" : "float32");
    });
    const HfExport e = export_hf(o.export_args.at(0), format, o.export_args.at(1),
                                 o.dtype == "bf16" ? TensorDtype::BF16 : TensorDtype::F32, shard);
    std::printf("%s: wrote the %zu tensors of %s as a Hugging Face %s (%s, %zu file%s) to %s\n",
                program_name().c_str(), e.tensors, ckpt.dir().c_str(), e.architecture.c_str(),
                o.dtype.c_str(), e.shards, e.shards == 1 ? "" : "s", o.export_args.at(1).c_str());
    return 0;
  }
  const Checkpoint ckpt(o.export_args.at(0));
  const Exported m = exported_model(o, ckpt);
  std::optional<std::vector<ParamShape>> params;  // the model's, where it lists them
  if (m.facts.parameters) {
    const ppc::Layout layout = ppc::parse_layout(ckpt.state().layout, "layout", ppc::kAnySymbols);
    params = run_hook([&] { return m.facts.parameters(layout_info(layout), m.setup); });
  }
  const size_t n =
      export_checkpoint(o.export_args.at(0), o.export_args.at(1), params ? &*params : nullptr);
  std::printf("%s: wrote the %zu model tensors of %s to %s\n", program_name().c_str(), n,
              ckpt.dir().c_str(), o.export_args.at(1).c_str());
  return 0;
}

}  // namespace

int run(const RunOptions& o, const GetEnv& getenv) {
  if (!o.export_args.empty()) return export_command(o);
  const std::optional<LaunchEnv> env = o.reference ? std::nullopt : launch_env(getenv);
  const Job job = make_job(o, env);
  if (!job.init_from.empty() && !env) {
    HfDirectory hf(job.init_from);
    hf.open_weights();
    std::printf("%s: initialising from %s\n", program_name().c_str(),
                hf.describe(job.hf_format).c_str());
  }
  if (job.start_step >= job.last_step() && !job.eval.only) {
    if (!env || env->rank == 0)
      std::printf("%s: the checkpoint %s has completed %lld steps%s: nothing to train\n",
                  program_name().c_str(), job.resume_path.c_str(),
                  static_cast<long long>(job.start_step),
                  job.stop_after > 0 ? " (--stop-after)" : " (--steps)");
    return 0;
  }
  if (o.reference) {
    set_threads(job.threads);
    keep_freed_memory();
    train_reference(job);
    return 0;
  }
  if (env) return run_worker(job, *env);
  return spawn(job, o);
}

}  // namespace pprt
