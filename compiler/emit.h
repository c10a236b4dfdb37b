// Emitters (plan -> text) and importers (text -> plan). Emitters write to a std::ostream and never
// fail on a valid plan; importers throw UserError naming the file, line/field and column.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/plan.h"
#include "compiler/verify.h"

namespace ppc {

// --- terminal table ------------------------------------------------------------------------
struct TableOptions {
  bool color = false;    // ANSI colors by action kind
  bool compact = false;  // one character per action ("F", "B", ...), for wide plans
  int max_width = 0;     // > 0: switch to compact when the full table would be wider (a terminal)
};
// Time steps as rows (the unit-time replay of lowering: a blank cell is idle time), ranks as
// columns, like PyTorch's _format_pipeline_order; then a one-line summary.
void emit_table(const Plan& plan, const VerifyReport& report, std::ostream& os,
                const TableOptions& opts);
// emit_table in two parts, for a caller that writes the table before the report is known: the
// header, the rows and the legend (returns the number of time steps), then the summary line.
int emit_table_rows(const Plan& plan, std::ostream& os, const TableOptions& opts);
void emit_table_summary(const Plan& plan, const VerifyReport& report, int num_steps,
                        std::ostream& os);

// --- PyTorch CSV -------------------------------------------------------------------------------
// One row per rank, one action per cell in PyTorch notation: the lowered order, or the compute
// order with compute_only. Readable by torch's _PipelineScheduleRuntime._load_csv.
void emit_csv(const Plan& plan, std::ostream& os, bool compute_only);

struct CsvImportOptions {
  std::string input_name;        // for messages
  std::optional<Layout> layout;  // the model, if known; else generic stages
  bool has_model = false;
  std::string schedule = "imported";
};
// Reads PyTorch's CSV (compute-only, or with SEND/RECV). Ranks are rows; the stage -> rank
// mapping is inferred from where each stage's actions are (it must be loop or V placement); the
// microbatch count is the largest microbatch + 1. torch's UNSHARD/RESHARD (FSDP) and REDUCE_GRAD
// cells are checked (a stage of the row's rank) and dropped. With comms, the plan is lowered (compute = its compute actions); without, compute only.
Plan read_csv(std::string_view text, const CsvImportOptions& opts);

// --- JSON plan (docs/plan-format.md) ---------------------------------------------------------
void emit_json(const Plan& plan, const VerifyReport& report, std::ostream& os);
// emit_json in two parts: everything up to the "verification" object, then that object.
// `compute_arrays`, if given, holds json_compute_arrays(plan), made beforehand (ppcompile makes
// them beside lowering).
void emit_json_plan(const Plan& plan, std::ostream& os,
                    const std::vector<std::string>* compute_arrays = nullptr);
// Each rank's "compute" array as emit_json_plan writes it.
std::vector<std::string> json_compute_arrays(const Plan& plan);
void emit_json_verification(const VerifyReport& report, std::ostream& os);
Plan read_plan_json(std::string_view text, const std::string& input_name);

// --- stats and layout ---------------------------------------------------------------------------
struct Simulation;
void emit_stats(const Plan& plan, const VerifyReport& report, const Simulation& sim,
                std::ostream& os);
// One line per stage: "stage S rank R chunk C: <symbols separated by spaces, or (empty)>".
void emit_layout(const Plan& plan, std::ostream& os);
// The layout on one line in Megatron-LM's layout syntax, compressed with "X*N" and groups
// "(...)*N" (never nested): parse_layout() reads it back to exactly the same stages
// (emit_layout_string.cpp). emit_layout_string adds a newline; UserError for generic stages.
std::string layout_string(const Layout& layout);
void emit_layout_string(const Plan& plan, std::ostream& os);

// --- pictures (docs/visualization.md) -----------------------------------------------------------
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

// Reads a whole file; UserError naming the file if it cannot.
std::string read_file(const std::string& path);

}  // namespace ppc
