// Issue target: drawing the pp=64, vpp=4, m=1024 Interleaved1F1B plan (524,288 compute actions,
// 1.57 M lowered) finishes in under 2 s, simulation included:
//   BM_DrawTimeline/64/4/1024: compile + lower + verify + simulate + emit_svg, as ppcompile --emit
//   svg.
// The emitters alone at that size, and the timeline at the sizes the README shows, follow.
// Run: build/bench/viz_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <sstream>

#include "compiler/compile.h"
#include "compiler/lower_send_recv.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"
#include "compiler/visualization.h"

namespace {

ppc::Plan lowered(int pp, int vpp, int m) {
  ppc::CompileOptions o;
  o.layout = ppc::generic_layout(pp * vpp);
  o.pp = pp;
  o.schedule = "Interleaved1F1B";
  o.microbatches = m;
  return ppc::lower_send_recv(ppc::compile(o));
}

// Everything `ppcompile --emit svg` does after parsing its flags.
void BM_DrawTimeline(benchmark::State& state) {
  const int pp = static_cast<int>(state.range(0)), vpp = static_cast<int>(state.range(1)),
            m = static_cast<int>(state.range(2));
  size_t bytes = 0;
  for (auto _ : state) {
    ppc::Plan plan = lowered(pp, vpp, m);
    const ppc::VerifyReport report = ppc::verify(plan);
    if (!report.ok()) state.SkipWithError(report.errors.front().c_str());
    const ppc::Simulation sim = ppc::simulate(plan, ppc::CostModel{});
    std::ostringstream os;
    ppc::emit_svg(plan, sim, os, ppc::TimelineOptions{});
    bytes = os.str().size();
  }
  state.counters["svg_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_DrawTimeline)
    ->Args({64, 4, 1024})
    ->Args({16, 2, 64})
    ->Args({4, 2, 8})
    ->Unit(benchmark::kMillisecond);

// The emitters alone on the big plan (simulation done once, outside the loop).
struct Big {
  ppc::Plan plan = lowered(64, 4, 1024);
  ppc::Simulation sim = ppc::simulate(plan, ppc::CostModel{});
};
const Big& big() {
  static const Big b;
  return b;
}

void BM_EmitSvg(benchmark::State& state) {
  for (auto _ : state) {
    std::ostringstream os;
    ppc::emit_svg(big().plan, big().sim, os, ppc::TimelineOptions{});
    benchmark::DoNotOptimize(os);
  }
}
BENCHMARK(BM_EmitSvg)->Unit(benchmark::kMillisecond);

void BM_EmitTrace(benchmark::State& state) {
  for (auto _ : state) {
    std::ostringstream os;
    ppc::emit_trace(big().plan, big().sim, os);
    benchmark::DoNotOptimize(os);
  }
}
BENCHMARK(BM_EmitTrace)->Unit(benchmark::kMillisecond);

void BM_EmitDot(benchmark::State& state) {
  for (auto _ : state) {
    std::ostringstream os;
    ppc::emit_dot(big().plan, os);
    benchmark::DoNotOptimize(os);
  }
}
BENCHMARK(BM_EmitDot)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
