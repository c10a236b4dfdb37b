// --balance and --autotune search time for DeepSeek-V3 at pp 16 under the project's DeepSeek-V3
// cost model (examples/cost-deepseek-v3.json), 64 microbatches.
//   BM_BalanceDeepSeekV3/<schedule>: balance_layout for one schedule (Interleaved1F1B and the
//     others at the stages per rank they take: 2 for Interleaved*, V and DualPipeV, else 1).
//   BM_AutotuneDeepSeekV3/<threads>: the whole --autotune search (20 configurations).
// Counters: makespan reached, splits simulated. Run: build/bench/balance_bench
#include <benchmark/benchmark.h>

#include <string>

#include "compiler/autotune.h"
#include "compiler/balance.h"
#include "compiler/cost_model.h"

namespace {

const char* kSchedules[] = {"Interleaved1F1B", "1F1B",      "ZB-H1",
                            "ZBVZeroBubble",   "DualPipeV", "DualPipe"};

ppc::CostModel deepseek_costs() {
  return ppc::read_cost_model(std::string(PP_SOURCE_DIR) + "/examples/cost-deepseek-v3.json");
}

void BM_BalanceDeepSeekV3(benchmark::State& state) {
  const std::string schedule = kSchedules[state.range(0)];
  ppc::BalanceOptions o;
  o.layout = ppc::parse_layout("Et*61,mL");
  o.pp = 16;
  o.schedule = schedule;
  o.microbatches = 64;
  o.cost = deepseek_costs();
  if (schedule == "Interleaved1F1B") o.vpp = 2;
  ppc::BalanceResult r;
  for (auto _ : state) r = ppc::balance_layout(o);
  state.SetLabel(schedule + " -> " + r.layout.source);
  state.counters["makespan"] = r.makespan;
  state.counters["simulations"] = static_cast<double>(r.simulations);
}
BENCHMARK(BM_BalanceDeepSeekV3)->DenseRange(0, 5)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_AutotuneDeepSeekV3(benchmark::State& state) {
  ppc::AutotuneOptions o;
  o.layout = ppc::parse_layout("Et*61,mL");
  o.pp = 16;
  o.microbatches = {64};
  o.cost = deepseek_costs();
  o.threads = static_cast<int>(state.range(0));
  ppc::Autotune at;
  for (auto _ : state) at = ppc::autotune(o);
  state.SetLabel(at.rows.front().row.schedule + " " + at.rows.front().layout);
  state.counters["makespan"] = at.rows.front().row.sim.makespan;
  state.counters["simulations"] = static_cast<double>(at.simulations);
  state.counters["configurations"] = at.configurations;
}
BENCHMARK(BM_AutotuneDeepSeekV3)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
