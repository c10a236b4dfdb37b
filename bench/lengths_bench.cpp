// Microbatches of different lengths (issue 41): Auto's length-aware order against the same plan in
// data order, and how long the ordering takes at pp 16 with 64 microbatches.
//
// First prints, as Markdown (bench/README.md holds the output), for DeepSeek-V3's layout
// (layouts/deepseek-v3.layout, 32 stages, pp 16) under bench/lengths-deepseek-v3.json (the costs of
// examples/cost-deepseek-v3.json at 4096 tokens, attention 10 % of them there), 64 microbatches
// whose lengths are drawn from a log-normal distribution (median 1024 tokens, sigma 1, clipped to
// 64 .. 4096: long-tailed, as documents are; bench/README.md says why), five seeds: the simulated
// step in data order and in the order plan_for_lengths() chooses, per schedule, and the time the
// choice took. Simulated steps are deterministic (libstdc++'s generators); the times need a quiet
// machine. Then runs the benchmark of plan_for_lengths() (BM_PlanForLengths/<schedule>).
//
//   build/bench/lengths_bench [--no-table] [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/lengths.h"
#include "compiler/order_microbatches.h"
#include "compiler/simulate.h"
#include "compiler/verify_and_lower.h"

namespace {

constexpr int kPp = 16, kMicrobatches = 64;
const char* const kSchedules[] = {"Interleaved1F1B", "ZBVZeroBubble", "DualPipeV", "Auto"};

std::string path(const char* rel) {
  return std::string(PP_SOURCE_DIR) + "/" + rel;
}

const ppc::CostModel& cost() {
  static const ppc::CostModel c = ppc::read_cost_model(path("bench/lengths-deepseek-v3.json"));
  return c;
}

// DeepSeek-V3's plan for `schedule` at pp 16, 64 microbatches, lowered and verified.
ppc::Plan plan_of(const char* schedule) {
  ppc::CompileOptions o;
  o.layout = ppc::parse_layout_file(path("layouts/deepseek-v3.layout"));
  o.has_model = true;
  o.pp = kPp;
  o.schedule = schedule;
  o.microbatches = kMicrobatches;
  o.cost = &cost();
  return ppc::verify_and_lower_or_throw(ppc::compile(o), cost(), "").plan;
}

std::vector<long long> lengths(unsigned seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> d(std::log(1024.0), 1.0);
  std::vector<long long> out;
  for (int k = 0; k < kMicrobatches; ++k)
    out.push_back(std::clamp(static_cast<long long>(std::llround(d(rng))), 64LL, 4096LL));
  return out;
}

// CPU time of this thread, in milliseconds (the machine the figures were taken on was shared).
double cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

void print_table() {
  fmt::print(
      "| schedule | step in data order | first orders only | ordered (search) | shorter by | "
      "busiest rank's work | ordering took (CPU ms) | of the ordered step |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  constexpr unsigned kSeeds = 5;
  for (const char* schedule : kSchedules) {
    const ppc::Plan plan = plan_of(schedule);
    double data = 0, firsts = 0, ordered = 0, work = 0, took = 0;
    for (unsigned seed = 1; seed <= kSeeds; ++seed) {
      ppc::CostModel with = cost();
      with.microbatch_lengths = lengths(seed);
      const double t0 = cpu_ms();
      const ppc::Plan best = ppc::plan_for_lengths(plan, cost(), with.microbatch_lengths);
      took += cpu_ms() - t0;
      const ppc::Plan first = ppc::plan_for_lengths(plan, cost(), with.microbatch_lengths,
                                                    ppc::OrderOptions{.simulations = 0});
      const ppc::Simulation in_data = ppc::simulate(plan, with);
      data += in_data.makespan;
      work += *std::max_element(in_data.busy.begin(), in_data.busy.end());
      firsts += ppc::simulate(first, with).makespan;
      ordered += ppc::simulate(best, with).makespan;
    }
    fmt::print("| {} | {:.0f} | {:.0f} | {:.0f} | {:.1f} % | {:.0f} | {:.1f} | {:.1f} % |\n",
               schedule, data / kSeeds, firsts / kSeeds, ordered / kSeeds,
               100 * (1 - ordered / data), work / kSeeds, took / kSeeds, 100 * took / ordered);
  }
  fmt::print(
      "\n(simulated steps in ms, means over seeds 1-{}; \"first orders only\": the search without "
      "its swaps)\n\n",
      kSeeds);
}

void BM_PlanForLengths(benchmark::State& state, const char* schedule) {
  const ppc::Plan plan = plan_of(schedule);
  const std::vector<long long> l = lengths(1);
  for (auto _ : state) benchmark::DoNotOptimize(ppc::plan_for_lengths(plan, cost(), l));
}

}  // namespace

int main(int argc, char** argv) {
  bool table = true;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-table") == 0)
      table = false;
    else
      args.push_back(argv[i]);
  }
  if (table) print_table();
  for (const char* s : kSchedules)
    benchmark::RegisterBenchmark((std::string("BM_PlanForLengths/") + s).c_str(), BM_PlanForLengths,
                                 s)
        ->Unit(benchmark::kMillisecond);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
