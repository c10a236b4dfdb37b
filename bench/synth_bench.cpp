// --schedule Auto against its lower bound (issue 30), and its synthesis time.
//
// First prints, as Markdown (bench/README.md holds the output):
//  - the gap to the lower bound on a grid: DeepSeek-V3's layout (layouts/deepseek-v3.layout, 32
//    stages: 8, 4, 2 or 1 per rank) at pp 4-32 and 8-128 microbatches, under the uniform and the
//    DeepSeek-V3 cost models (examples/cost-*.json), no memory limit;
//  - the goals at pp 16 with 64 microbatches, DeepSeek-V3's costs: with the memory limit at once
//    and twice 1F1B's peak, Auto against the best named one-copy schedule that fits (from
//    --compare) and against the bound.
// Simulated makespans are deterministic: these tables may be taken on any machine. Then runs the
// benchmarks (synthesis of DeepSeek-V3 at pp 16, 64 microbatches: generate, lower, verify,
// simulate every candidate), whose times need a quiet machine.
//
//   build/bench/synth_bench [--no-grid] [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <string>

#include "compiler/compare.h"
#include "compiler/cost_model.h"
#include "compiler/synthesize.h"

namespace {

std::string path(const char* rel) {
  return std::string(PP_SOURCE_DIR) + "/" + rel;
}

ppc::SynthesisOptions deepseek(int pp, int m, const char* cost) {
  ppc::SynthesisOptions o;
  o.layout = ppc::parse_layout_file(path("layouts/deepseek-v3.layout"));
  o.has_model = true;
  o.pp = pp;
  o.microbatches = m;
  o.cost = ppc::read_cost_model(path(cost));
  return o;
}

void print_grid() {
  for (const char* model : {"uniform", "deepseek-v3"}) {
    const std::string cost = fmt::format("examples/cost-{}.json", model);
    fmt::print("### {} costs: Auto's makespan / lower bound (gap)\n\n", model);
    const int mbs[] = {8, 16, 32, 64, 128};
    fmt::print("| pp (stages per rank) \\ m |");
    for (int m : mbs) fmt::print(" {} |", m);
    fmt::print("\n| --- |");
    for (size_t i = 0; i < std::size(mbs); ++i) fmt::print(" --- |");
    fmt::print("\n");
    for (int pp : {4, 8, 16, 32}) {
      fmt::print("| {} ({}) |", pp, 32 / pp);
      for (int m : mbs) {
        const ppc::SynthesisResult r = ppc::synthesize(deepseek(pp, m, cost.c_str()));
        fmt::print(" {:.6g} / {:.6g} ({:+.1f} %) |", r.makespan, r.lower_bound,
                   100 * (r.makespan / r.lower_bound - 1));
      }
      fmt::print("\n");
    }
    fmt::print("\n");
  }
  ppc::CompareOptions co;
  co.layout = ppc::parse_layout_file(path("layouts/deepseek-v3.layout"));
  co.has_model = true;
  co.pp = 16;
  co.microbatches = 64;
  co.cost = ppc::read_cost_model(path("examples/cost-deepseek-v3.json"));
  double peak = 0;
  for (const ppc::CompareRow& r : ppc::compare_schedules(co).rows)
    if (r.schedule == "1F1B") peak = r.peak_total;
  fmt::print(
      "### DeepSeek-V3, pp 16, 64 microbatches: Auto against the named one-copy schedules\n\n"
      "1F1B's peak (activations + parameters on its busiest rank): {}\n\n"
      "| memory limit | best named one-copy schedule that fits | Auto (placement) | Auto / named "
      "| lower bound | Auto / bound |\n| --- | --- | --- | --- | --- | --- |\n",
      ppc::format_memory(peak, true));
  for (const double factor : {1.0, 2.0}) {
    co.memory_limit = factor * peak;
    const ppc::Comparison cmp = ppc::compare_schedules(co);
    const ppc::CompareRow *named = nullptr, *synth = nullptr;
    for (const ppc::CompareRow& r : cmp.rows) {
      if (r.schedule == "Auto") synth = &r;
      if (r.schedule != "Auto" && r.plan.copies == 1 && r.fits && !named) named = &r;
    }
    ppc::SynthesisOptions so = deepseek(16, 64, "examples/cost-deepseek-v3.json");
    so.memory_limit = co.memory_limit;
    const ppc::SynthesisResult r = ppc::synthesize(so);
    fmt::print("| {:g} x 1F1B's | {} {:.6g} | {:.6g} ({}) | {:.3f} | {:.6g} | {:.3f} |\n", factor,
               named ? named->schedule : "none", named ? named->sim.makespan : 0.0,
               synth->sim.makespan, ppc::placement_name(synth->placement),
               named ? synth->sim.makespan / named->sim.makespan : 0.0, r.lower_bound,
               synth->sim.makespan / r.lower_bound);
  }
  fmt::print("\n");
}

// The whole synthesis as --schedule Auto runs it (every candidate generated, lowered, verified
// and simulated). range(0): the memory limit in units of 1F1B's peak (0: none).
void BM_SynthesizeDeepSeekV3(benchmark::State& state) {
  ppc::SynthesisOptions o = deepseek(16, 64, "examples/cost-deepseek-v3.json");
  // 1F1B peaks at 4.746e10 bytes here (the grid above prints it).
  if (state.range(0) > 0) o.memory_limit = 4.746e10 * static_cast<double>(state.range(0));
  int candidates = 0;
  for (auto _ : state) {
    const ppc::SynthesisResult r = ppc::synthesize(o);
    benchmark::DoNotOptimize(r.makespan);
    candidates = r.candidates;
  }
  state.counters["candidates"] = candidates;
}
BENCHMARK(BM_SynthesizeDeepSeekV3)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  bool grid = true;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--no-grid") == 0) grid = false;
  if (grid) print_grid();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
