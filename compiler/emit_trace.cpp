// The trace of a simulated plan (docs/trace-format.md), written by trace_writer.h: each action
// shown at its simulated time scaled to microseconds, each rank's activation memory as simulated.
#include <ostream>
#include <vector>

#include "compiler/diagnostic.h"
#include "compiler/simulate.h"
#include "compiler/trace_writer.h"
#include "compiler/visualization.h"

namespace ppc {

void emit_trace(const Plan& plan, const Simulation& sim, std::ostream& os,
                const TraceOptions& opts) {
  PPC_INTERNAL_ASSERT(plan.is_lowered() && sim.times.size() == plan.lowered.size(),
                      "the trace needs a lowered plan and its simulation");
  const double us = opts.us_per_unit;
  std::vector<TraceRank> ranks(plan.lowered.size());
  std::vector<double> start, end;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const auto& times = sim.times[r];
    TraceRank& part = ranks[r];
    start.resize(times.size());
    end.resize(times.size());
    part.slices.resize(times.size());
    for (size_t i = 0; i < times.size(); ++i) {
      start[i] = times[i].start * us;
      end[i] = times[i].end * us;
      part.slices[i].ts = start[i];
      part.slices[i].dur = (times[i].end - times[i].start) * us;
    }
    nest_comm_slices(plan.lowered[r], start, end, CommNesting::AfterPreviousBatch, 0, part.slices);
    for (const MemoryPoint& p : sim.memory[r]) part.memory.push_back({p.time * us, p.value});
  }
  TraceInfo info;
  info.generator = "ppcompile";
  info.costs = sim.unit ? "unit" : "model";
  info.memory_unit = !sim.unit && opts.memory_in_bytes ? "bytes" : "activations";
  info.makespan = sim.makespan;
  info.bubble = sim.bubble;
  info.us_per_unit = us;
  write_trace(plan, ranks, info, os);
}

}  // namespace ppc
