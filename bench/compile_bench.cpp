// Issue targets: generate + lower + verify Interleaved1F1B
//   pp=32, vpp=4, m=256  (65,536 compute actions)          : under 9 ms  (PyTorch: 0.9 s, no
//   verify) pp=64, vpp=4, m=1024 (524,288 compute, 1.57 M lowered)  : under 120 ms (PyTorch: 11.8
//   s)
// and time linear in the number of actions (the m sweep at pp=32).
// Run: build/bench/compile_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include "compiler/compile.h"
#include "compiler/lower_send_recv.h"
#include "compiler/verify.h"

namespace {

ppc::CompileOptions options(int pp, int vpp, int m, const char* schedule = "Interleaved1F1B") {
  ppc::CompileOptions o;
  o.layout = ppc::generic_layout(pp * vpp);
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  return o;
}

// The whole pipeline a user pays for: generate, lower, verify.
void BM_GenerateLowerVerify(benchmark::State& state) {
  const auto o = options(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                         static_cast<int>(state.range(2)));
  size_t lowered = 0;
  for (auto _ : state) {
    ppc::Plan plan = ppc::lower_send_recv(ppc::compile(o));
    ppc::VerifyReport r = ppc::verify(plan);
    if (!r.ok()) state.SkipWithError(r.errors.front().c_str());
    lowered = r.compute_actions + r.comm_actions;
    benchmark::DoNotOptimize(plan);
  }
  const double compute = 2.0 * state.range(0) * state.range(1) * state.range(2);
  state.counters["compute_actions"] = compute;
  state.counters["lowered_actions"] = static_cast<double>(lowered);
  state.counters["ns_per_compute_action"] = benchmark::Counter(
      compute, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_GenerateLowerVerify)
    ->Args({32, 4, 256})
    ->Args({64, 4, 1024})
    ->Args({32, 4, 64})
    ->Args({32, 4, 128})
    ->Args({32, 4, 512})
    ->Args({32, 4, 1024})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

// The passes separately at the large size.
void BM_Generate(benchmark::State& state) {
  const auto o = options(64, 4, 1024);
  for (auto _ : state) benchmark::DoNotOptimize(ppc::compile(o));
}
BENCHMARK(BM_Generate)->Unit(benchmark::kMillisecond);

void BM_Lower(benchmark::State& state) {
  const ppc::Plan plan = ppc::compile(options(64, 4, 1024));
  for (auto _ : state) benchmark::DoNotOptimize(ppc::lower_send_recv(plan));
}
BENCHMARK(BM_Lower)->Unit(benchmark::kMillisecond);

void BM_Verify(benchmark::State& state) {
  const ppc::Plan plan = ppc::lower_send_recv(ppc::compile(options(64, 4, 1024)));
  for (auto _ : state) benchmark::DoNotOptimize(ppc::verify(plan));
}
BENCHMARK(BM_Verify)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
