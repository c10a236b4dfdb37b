// The IR as text (dump.h).
#include "compiler/dump.h"

#include <fmt/format.h>

#include <ostream>
#include <string>

#include "compiler/layout.h"
#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace ppc {

void dump_layout(const Layout& layout, std::ostream& os) {
  os << fmt::format("layout {}: {} stages\n", layout.source.empty() ? "(generic)" : layout.source,
                    layout.num_stages());
  for (int s = 0; s < layout.num_stages(); ++s)
    os << fmt::format("  stage {}: {}\n", s, stage_symbols(layout.stages[static_cast<size_t>(s)]));
}

void dump_plan(const Plan& plan, std::ostream& os) {
  const char* holds = plan.is_lowered()       ? "lowered order"
                      : !plan.compute.empty() ? "compute order"
                                              : "placed, no order yet";
  os << fmt::format("plan {}: pp {}, vpp {}, {} microbatches, {} model cop{}, {} placement; {}\n",
                    plan.schedule, plan.pp(), plan.vpp(), plan.microbatches, plan.copies,
                    plan.copies == 1 ? "y" : "ies", placement_name(plan.placement.style), holds);
  for (int s = 0; s < plan.num_stages(); ++s)
    os << fmt::format("  stage {}: rank {} chunk {}\n", s, plan.rank_of(s),
                      plan.placement.stage_chunk[static_cast<size_t>(s)]);
  const auto& orders = plan.order();
  std::string line;
  for (size_t r = 0; r < orders.size(); ++r) {
    line = fmt::format("  rank {}:", r);
    for (const Action& a : orders[r]) {
      line += ' ';
      append_to(line, a);
    }
    line += '\n';
    os << line;
  }
}

void dump_report(const VerifyReport& report, std::ostream& os) {
  os << fmt::format("{}: {} compute actions, {} SEND/RECV in {} batches{}\n",
                    report.ok() ? "valid" : "not valid", report.compute_actions,
                    report.comm_actions, report.batches,
                    report.checked_lowered ? "; the deadlock model ran the lowered order" : "");
  std::string peaks;
  for (int p : report.peak_inflight) peaks += fmt::format(" {}", p);
  os << fmt::format("  peak in-flight microbatches per rank:{}\n", peaks);
  for (const std::string& e : report.errors) os << "  error: " << e << '\n';
  if (report.truncated) os << "  (more errors not shown)\n";
}

void dump_simulation(const Simulation& sim, std::ostream& os) {
  os << fmt::format(
      "makespan {:g}, bubble {:.2f} %, steady period {:g} (bubble {:.2f} %), {} messages, {:g} "
      "bytes\n",
      sim.makespan, 100 * sim.bubble, sim.steady_period, 100 * sim.steady_bubble, sim.messages,
      sim.comm_bytes);
  for (size_t r = 0; r < sim.busy.size(); ++r)
    os << fmt::format(
        "  rank {}: busy {:g}, bubble {:.2f} %, computes from {:g} to {:g}, peak activations {:g}, "
        "parameters {:g}\n",
        r, sim.busy[r], 100 * sim.rank_bubble[r], sim.first_start[r], sim.last_end[r],
        sim.peak_memory[r], r < sim.param_memory.size() ? sim.param_memory[r] : 0.0);
}

}  // namespace ppc
