// PyTorch's CSV schedule format, both ways: what `ppcompile --emit csv` writes and what
// `--from-csv` reads. The emitter writes to a std::ostream and never fails on a valid plan; the
// reader throws UserError naming the file, line and column.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/layout.h"
#include "compiler/plan.h"

namespace ppc {

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
// cells are checked (a stage of the row's rank) and dropped. With comms, the plan is lowered
// (compute = its compute actions); without, compute only.
Plan read_csv(std::string_view text, const CsvImportOptions& opts);

}  // namespace ppc
