#include <fmt/format.h>

#include <array>
#include <cmath>
#include <ostream>
#include <string>

#include "compiler/emit_text.h"
#include "compiler/simulate.h"

namespace ppc {

void emit_stats(const Plan& plan, const VerifyReport& report, const Simulation& sim,
                std::ostream& os) {
  std::array<size_t, kNumActionKinds> counts{};
  for (const auto& r : plan.order())
    for (const Action& a : r) ++counts[static_cast<size_t>(a.kind)];
  os << fmt::format("schedule      {}\n", plan.schedule);
  os << fmt::format("pp            {}\n", plan.pp());
  os << fmt::format("vpp           {}\n", plan.vpp());
  os << fmt::format("microbatches  {}\n", plan.microbatches);
  os << fmt::format("stages        {} ({} placement{})\n", plan.num_stages(),
                    placement_name(plan.placement.style),
                    plan.copies > 1 ? fmt::format(", {} model copies of {} stages", plan.copies,
                                                  plan.stages_per_copy())
                                    : "");
  os << fmt::format(
      "costs         {}\n",
      sim.unit ? "unit (per stage F=1, B=2, I=1, W=1; no communication cost)" : "cost model");
  if (!sim.lengths.empty()) os << fmt::format("lengths       {}\n", sim.lengths);
  os << fmt::format("makespan      {:g}\n", sim.makespan);
  if (!sim.start.empty()) {
    std::string starts;
    for (size_t r = 0; r < sim.start.size(); ++r)
      starts += fmt::format("{}{}: {:g}", r ? ", " : "", r, sim.start[r]);
    os << fmt::format("rank starts   {} (the previous step's optimizer, from the all-reduce)\n",
                      starts);
  }
  os << fmt::format("bubble        {:.2f} %\n", 100.0 * sim.bubble);
  os << fmt::format("steady bubble {:.2f} % (steps back to back: one every {:g})\n",
                    100.0 * sim.steady_bubble, sim.steady_period);
  os << fmt::format("verified      {}\n",
                    report.ok() ? (report.checked_lowered ? "yes, deadlock-free" : "yes")
                                : "NO: " + report.errors.front());
  os << "\nrank  busy        bubble %  peak in-flight  peak activation\n";
  for (int r = 0; r < plan.pp(); ++r) {
    const size_t ru = static_cast<size_t>(r);
    os << fmt::format("{:<5} {:<11g} {:<9.2f} {:<15} {:g}\n", r, sim.busy[ru],
                      100.0 * sim.rank_bubble[ru], report.peak_inflight[ru], sim.peak_memory[ru]);
  }
  bool differ = false;  // only under memory modes with transients
  for (size_t r = 0; r < sim.peak_held.size(); ++r)
    differ |= std::abs(sim.peak_held[r] - sim.peak_memory[r]) > 1e-9 * (1 + sim.peak_memory[r]);
  if (differ) {
    std::string held;
    for (double h : sim.peak_held) held += fmt::format("{}{:g}", held.empty() ? "" : " ", h);
    os << fmt::format(
        "peak held     {} per rank (between F and B/I and between I and W; the modes' transients "
        "left out: pprun's peak activation bytes)\n",
        held);
  }
  os << "\nactions      ";
  bool first = true;
  for (int k = 0; k < kNumActionKinds; ++k) {
    os << fmt::format("{}{} {}", first ? "" : ", ", kind_name(static_cast<ActionKind>(k)),
                      counts[static_cast<size_t>(k)]);
    first = false;
  }
  os << fmt::format("\nbatches      {}\n", report.batches);
  if (!sim.unit)
    os << fmt::format("comm volume  {:g} bytes in {} messages\n", sim.comm_bytes, sim.messages);
}

}  // namespace ppc
