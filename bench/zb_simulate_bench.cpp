// Issue target: the pp=64, vpp=4, 1024-microbatch case compiles (generate + lower), verifies and
// simulates in under 250 ms; simulation costs no more than a few times the lowering itself.
// Schedules: InterleavedZeroBubble (3 compute actions per stage and microbatch: 786,432) and
// Interleaved1F1B; ZBVZeroBubble and DualPipeV at pp=128 (2 stages per rank, same stage count).
// Run: build/bench/zb_simulate_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <string>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace {

ppc::CompileOptions options(const char* schedule, int pp, int vpp, int m) {
  ppc::CompileOptions o;
  o.layout = ppc::generic_layout(pp * vpp);
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  return o;
}

const char* kSchedules[] = {"InterleavedZeroBubble", "Interleaved1F1B", "ZBVZeroBubble",
                            "DualPipeV"};

ppc::CompileOptions case_options(int64_t which) {
  const char* s = kSchedules[which];
  // V schedules hold exactly 2 stages per rank: the same 256 stages need pp = 128.
  return which >= 2 ? options(s, 128, 2, 1024) : options(s, 64, 4, 1024);
}

ppc::CostModel bench_costs(bool unit) {
  if (unit) return ppc::CostModel{};
  ppc::CostFlags flags;
  flags.f = 1;
  flags.b = 2.2;
  flags.w = 1;
  flags.latency = 0.05;
  return ppc::cost_model_from_flags(flags);
}

// What a user pays for: compile (generate + lower), verify, simulate. range(1) = 1: unit costs
// (the default; lowering on integral times), 0: a cost model with non-integral times and
// communication latency (lowering and simulation both follow it).
void BM_CompileVerifySimulate(benchmark::State& state) {
  const auto o = case_options(state.range(0));
  const ppc::CostModel cost = bench_costs(state.range(1) == 1);
  size_t actions = 0;
  for (auto _ : state) {
    ppc::Plan plan = ppc::compile(o);
    plan = ppc::lower_send_recv(plan, ppc::lowering_costs(plan, cost));
    const ppc::VerifyReport r = ppc::verify(plan);
    if (!r.ok()) state.SkipWithError(r.errors.front().c_str());
    const ppc::Simulation sim = ppc::simulate(plan, cost);
    benchmark::DoNotOptimize(sim.makespan);
    actions = r.compute_actions + r.comm_actions;
  }
  state.SetLabel(std::string(kSchedules[state.range(0)]) +
                 (state.range(1) == 1 ? ", unit costs" : ", cost model"));
  state.counters["lowered_actions"] = static_cast<double>(actions);
}
BENCHMARK(BM_CompileVerifySimulate)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

// The passes separately (InterleavedZeroBubble, unit costs): simulation against lowering.
void BM_Generate(benchmark::State& state) {
  const auto o = case_options(0);
  for (auto _ : state) benchmark::DoNotOptimize(ppc::compile(o));
}
BENCHMARK(BM_Generate)->Unit(benchmark::kMillisecond);

void BM_Lower(benchmark::State& state) {
  const ppc::Plan plan = ppc::compile(case_options(0));
  for (auto _ : state) benchmark::DoNotOptimize(ppc::lower_send_recv(plan));
}
BENCHMARK(BM_Lower)->Unit(benchmark::kMillisecond);

void BM_Verify(benchmark::State& state) {
  const ppc::Plan plan = ppc::lower_send_recv(ppc::compile(case_options(0)));
  for (auto _ : state) benchmark::DoNotOptimize(ppc::verify(plan));
}
BENCHMARK(BM_Verify)->Unit(benchmark::kMillisecond);

void BM_Simulate(benchmark::State& state) {
  const ppc::Plan plan = ppc::lower_send_recv(ppc::compile(case_options(0)));
  for (auto _ : state) benchmark::DoNotOptimize(ppc::simulate(plan, ppc::CostModel{}));
}
BENCHMARK(BM_Simulate)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
