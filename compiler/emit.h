// Emitters (plan -> text) and importers (text -> plan). Emitters write to a std::ostream and never
// fail on a valid plan; importers throw UserError naming the file, line/field and column.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/plan.h"
#include "compiler/verify.h"

namespace ppc {

// --- terminal table ------------------------------------------------------------------------
struct TableOptions {
  bool color = false;    // ANSI colors by action kind
  bool compact = false;  // one character per action ("F", "B", ...), for wide plans
};
// Time steps as rows (the unit-time replay of lowering: a blank cell is idle time), ranks as
// columns, like PyTorch's _format_pipeline_order; then a one-line summary.
void emit_table(const Plan& plan, const VerifyReport& report, std::ostream& os, const TableOptions& opts);

// --- PyTorch CSV -------------------------------------------------------------------------------
// One row per rank, one action per cell in PyTorch notation: the lowered order, or the compute
// order with compute_only. Readable by torch's _PipelineScheduleRuntime._load_csv.
void emit_csv(const Plan& plan, std::ostream& os, bool compute_only);

struct CsvImportOptions {
  std::string input_name;           // for messages
  std::optional<Layout> layout;     // the model, if known; else generic stages
  bool has_model = false;
  std::string schedule = "imported";
};
// Reads PyTorch's CSV (compute-only, or with SEND/RECV). Ranks are rows; the stage -> rank
// mapping is inferred from where each stage's actions are (it must be loop or V placement); the
// microbatch count is the largest microbatch + 1. UNSHARD/RESHARD/REDUCE_GRAD (FSDP) cells are
// skipped. With comms, the plan is lowered (compute = its compute actions); without, compute only.
Plan read_csv(std::string_view text, const CsvImportOptions& opts);

// --- JSON plan (docs/plan-format.md) ---------------------------------------------------------
void emit_json(const Plan& plan, const VerifyReport& report, std::ostream& os);
Plan read_plan_json(std::string_view text, const std::string& input_name);

// --- stats and layout ---------------------------------------------------------------------------
struct Simulation;
void emit_stats(const Plan& plan, const VerifyReport& report, const Simulation& sim, std::ostream& os);
// One line per stage: "stage S rank R chunk C: <symbols separated by spaces, or (empty)>".
void emit_layout(const Plan& plan, std::ostream& os);

// Reads a whole file; UserError naming the file if it cannot.
std::string read_file(const std::string& path);

}  // namespace ppc
