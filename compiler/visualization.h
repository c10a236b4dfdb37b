// Emitters of pictures and traces (docs/visualization.md): SVG timelines, Graphviz dependency
// graphs, Chrome/Perfetto traces and the HTML comparison page. They write to a std::ostream and
// never fail on a valid plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>

#include "compiler/plan.h"
#include "compiler/simulate.h"

namespace ppc {

enum class Arrows : uint8_t { Auto, On, Off };

struct TimelineOptions {
  Arrows arrows = Arrows::Auto;  // send->recv arrows; Auto draws them for up to kAutoArrowLimit
  double max_width = 1800;       // the time axis is at most this many pixels wide
  double time_max = 0;    // time at the right edge (0: the makespan); share it to compare plans
  double memory_max = 0;  // top of the memory plots (0: the highest peak); likewise
  std::string id_prefix = "ppc";     // prefix of the ids in the SVG: unique per page when inlined
  bool xml_declaration = true;       // false when the SVG is inlined in HTML
  std::string costs = "cost model";  // what the title calls non-unit costs ("unit costs per layer")
  bool memory_in_bytes =
      false;  // memory of a cost model in bytes (CostModel::memory_in_bytes), else counts
};
inline constexpr size_t kAutoArrowLimit = 1000;
// The timeline: one lane per rank with every compute action as a box at its simulated time,
// send->recv arrows, each rank's activation memory over time, a title and a legend. Plans too
// big to draw box by box are aggregated per pixel column (the legend says so).
void emit_svg(const Plan& plan, const Simulation& sim, std::ostream& os,
              const TimelineOptions& opts);

// The dependency graph in Graphviz: compute actions clustered by rank, local data dependencies,
// SEND->RECV edges between ranks and each rank's program order.
void emit_dot(const Plan& plan, std::ostream& os);

// Chrome trace / Perfetto JSON (docs/trace-format.md): one process per rank, compute and comm
// threads, flow events from each SEND to its RECV, activation memory as a counter.
struct TraceOptions {
  double us_per_unit = 1000;  // microseconds per simulated time unit
  bool memory_in_bytes =
      false;  // the memory counter in bytes (CostModel::memory_in_bytes), else counts
};
void emit_trace(const Plan& plan, const Simulation& sim, std::ostream& os,
                const TraceOptions& opts = {});

// One self-contained HTML page: the comparison table, each schedule's timeline on a shared time
// scale, and the stats of each.
struct Comparison;
struct CompareOptions;
void emit_html(const Comparison& cmp, const CompareOptions& opts, std::ostream& os,
               const TimelineOptions& timeline);
// The page of one plan (a comparison of one) that verify_and_lower passed, with a timeline
// simulation under `cost`.
struct VerifiedPlan;
void emit_plan_html(VerifiedPlan checked, const CostModel& cost, std::ostream& os,
                    const TimelineOptions& timeline);

}  // namespace ppc
