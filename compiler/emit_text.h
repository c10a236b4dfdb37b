// Emitters of text for a terminal: the table of time steps, the stats, the stages one per line
// and the layout string. They write to a std::ostream and never fail on a valid plan.
#pragma once

#include <iosfwd>

#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace ppc {

// --- table (emit_table.cpp) -----------------------------------------------------------------
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

// --- stats (emit_stats.cpp) -----------------------------------------------------------------
void emit_stats(const Plan& plan, const VerifyReport& report, const Simulation& sim,
                std::ostream& os);

// --- layout (emit_layout.cpp, emit_layout_string.cpp) ------------------------------------------
// One line per stage: "stage S rank R chunk C: <symbols separated by spaces, or (empty)>".
void emit_layout(const Plan& plan, std::ostream& os);
// layout_string(plan.layout) (layout.h) and a newline; UserError for generic stages.
void emit_layout_string(const Plan& plan, std::ostream& os);

}  // namespace ppc
