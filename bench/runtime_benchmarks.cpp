// Runtime benchmarks (Google Benchmark), built as runtime_bench when PP_BUILD_RUNTIME is on.
//
//  BM_SplitBackward: one microbatch through a stage of decoder layers; times the full backward
//    (B) against the input-gradient backward (I) plus the deferred weight gradients (W), on the
//    same inputs. Counters: B_ms, I_ms, W_ms, IW_over_B.
//  BM_ExecutorOverhead/<pp>: the executor replaying 1F1B on a tiny model (pp 1: one rank, no
//    transport; pp 2: two ranks as threads over real c10d Gloo). Counter overhead_us: per action,
//    the time not spent in LibTorch compute, waiting on communication or posting to the
//    transport; post_us: posting per communication action.
// The pipeline's step time against the simulated makespan needs real processes: see
// bench/runtime_pipeline.sh.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "bench/builtin_stage.h"
#include "compiler/compile.h"
#include "compiler/lower_send_recv.h"
#include "runtime/data/token_source.h"
#include "runtime/model/stage.h"
#include "runtime/models/llama/builtin.h"
#include "runtime/train/executor.h"
#include "runtime/train/trainer.h"
#include "runtime/transport/transport.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void BM_SplitBackward(benchmark::State& state) {
  pprt::set_threads(1);  // LibTorch's and OpenBLAS's pools, and the heap, as pprun sets them
  pprt::keep_freed_memory();
  bench::BuiltinStage s(static_cast<int>(state.range(0)));
  pprt::Stage& stage = s.stage;
  const at::Tensor &x = s.x, &g = s.g;
  double tf = 0, tb = 0, ti = 0, tw = 0;
  int64_t n = 0;
  for (auto _ : state) {
    for (bool split : {false, true}) {
      pprt::WeightWork work;
      const at::Tensor in = x.detach().requires_grad_(true);
      auto t0 = Clock::now();
      const at::Tensor out = stage.forward(in, at::Tensor(), 0, &work, nullptr);
      if (!split) tf += ms_since(t0);
      work.set_deferring(split);
      t0 = Clock::now();
      torch::autograd::backward({out}, {g});
      const double first = ms_since(t0);
      if (split) {
        ti += first;
        t0 = Clock::now();
        work.run();
        tw += ms_since(t0);
      } else {
        tb += first;
      }
      benchmark::DoNotOptimize(in.grad().data_ptr());
    }
    ++n;
  }
  state.counters["F_ms"] = tf / n;
  state.counters["B_ms"] = tb / n;
  state.counters["B_over_F"] = tb / tf;
  state.counters["I_ms"] = ti / n;
  state.counters["W_ms"] = tw / n;
  state.counters["IW_over_B"] = (ti + tw) / tb;
}
BENCHMARK(BM_SplitBackward)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// Ranks as threads over a real store and Gloo, replaying `plan` for `steps` steps each.
std::vector<pprt::StepReport> replay(const ppc::Plan& plan, const pprt::ModelConfig& c, int steps) {
  std::vector<int64_t> rows;
  pprt::TokenSource::synthetic(c.vocab, 1).batch(0, 16, c.seq_len + 1, rows);
  const at::Tensor tokens = at::from_blob(rows.data(), {16, c.seq_len + 1}, at::kLong).clone();
  const pprt::Model builtin = pprt::builtin_model(c);
  std::unique_ptr<pprt::Store> server;
  int port = 0;
  if (plan.pp() > 1) {
    pprt::StoreOptions so;
    so.is_server = true;
    so.world_size = plan.pp();
    server = pprt::make_tcp_store(so);
    port = pprt::store_port(*server);
  }
  std::vector<pprt::StepReport> reports;
  std::mutex m;
  auto rank_main = [&](int rank) {
    std::unique_ptr<pprt::Store> store;
    std::unique_ptr<pprt::Transport> transport;
    if (plan.pp() > 1) {
      pprt::StoreOptions so;
      so.port = port;
      store = pprt::make_tcp_store(so);
      pprt::GlooOptions go;
      go.hostname = "127.0.0.1";
      transport = pprt::make_gloo_transport(*store, rank, plan.pp(), go);
    }
    pprt::RankModel model(
        pprt::ModelContext{&builtin, {c.vocab, c.seq_len}, 0.1, 1, at::Device(at::kCPU)});
    for (int s : plan.placement.rank_stages[static_cast<size_t>(rank)])
      model.add(plan.layout, plan.layout_stage(s));
    pprt::ParamStore& params = model.store;
    pprt::Executor exec(plan, rank, model.stages, model.ctx, transport.get(), at::Device(at::kCPU),
                        {});
    std::vector<pprt::StepReport> mine;
    for (int s = 0; s < steps; ++s) {
      for (auto& p : params.params()) p.tensor.mutable_grad() = at::Tensor();
      mine.push_back(exec.run_step(tokens, s));
    }
    if (transport) transport->barrier(std::chrono::seconds(60));
    std::lock_guard<std::mutex> lock(m);
    for (auto& r : mine) reports.push_back(std::move(r));
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < plan.pp(); ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  return reports;
}

void BM_ExecutorOverhead(benchmark::State& state) {
  at::set_num_threads(1);
  const int pp = static_cast<int>(state.range(0));
  pprt::ModelConfig c;
  c.hidden = 16;
  c.heads = 2;
  c.kv_heads = 1;
  c.ffn = 32;
  c.vocab = 64;
  c.seq_len = 8;
  ppc::CompileOptions o;
  o.layout = ppc::parse_layout(pp == 1 ? "EtL" : "Et|tL");
  o.has_model = true;
  o.pp = pp;
  o.schedule = "1F1B";
  o.microbatches = 8;
  const ppc::Plan plan = ppc::lower_send_recv(ppc::compile(o));
  double overhead = 0, post = 0, actions = 0, comm = 0, wall = 0;
  for (auto _ : state) {
    const auto reports = replay(plan, c, 20);
    for (const auto& r : reports) {
      overhead += static_cast<double>(r.wall_ns - r.compute_ns - r.wait_ns - r.post_ns);
      post += static_cast<double>(r.post_ns);
      actions += static_cast<double>(r.actions);
      wall += static_cast<double>(r.wall_ns);
    }
    for (const auto& order : plan.order())
      for (const auto& a : order) comm += 20.0 * ppc::is_comm(a.kind);
  }
  state.counters["overhead_us"] = overhead / actions / 1e3;
  state.counters["post_us"] = comm > 0 ? post / comm / 1e3 : 0;
  state.counters["actions"] = actions / static_cast<double>(state.iterations());
  state.counters["step_ms"] = wall / (static_cast<double>(state.iterations()) * 20 * pp) / 1e6;
}
BENCHMARK(BM_ExecutorOverhead)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
