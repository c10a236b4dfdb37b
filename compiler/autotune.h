// ppcompile --autotune: the schedule, stages per rank, placement, balanced layout (and microbatch
// count) with the shortest simulated step, searched under a cost model (docs/balance.md).
//
// For every microbatch count asked:
//  - every configuration --compare shows (compare_schedules: each schedule on the layout as given,
//    merged to the stages it needs), as it is;
//  - every schedule at every stages-per-rank it can run (1 or 2 where the schedule fixes it, else
//    1 to min(8, layers / pp)), with its own placement, on the layout balance_layout finds.
// Rows are ranked by makespan (by makespan per microbatch when several counts are searched),
// splits that fit the memory limit first. The winner is therefore never worse than any
// configuration --compare shows (among those that fit the limit).
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "compiler/compare.h"
#include "compiler/layout.h"
#include "compiler/simulate.h"

namespace ppc {

// --microbatches without --autotune: one count ("64"); UserError naming --microbatches otherwise
// (lists and ranges say they are for --autotune). The range is checked where it is used.
int parse_microbatch_count(const std::string& text);

// --microbatches for --autotune: "64", a list "8,16,32", or a range "8-64" (the multiples of
// `pp` in it; "8-64:8" for every 8th from 8). UserError naming --microbatches otherwise.
std::vector<int> parse_microbatch_counts(const std::string& text, int pp);

struct AutotuneOptions {
  Layout layout;  // a model (parse_layout)
  int pp = 1;
  std::vector<int> microbatches;  // one or more counts
  CostModel cost;                 // unit costs (cost.unit) are taken per layer
  std::optional<double> memory_limit;
  std::vector<std::string> schedules;  // empty = every schedule
  long long budget = 0;                // splits simulated per balanced configuration (0 = auto)
  int threads = 0;  // configurations searched at once (0: one per core, at most 4)
  // Called after each configuration: done, total, what was just searched. Optional.
  std::function<void(int, int, const std::string&)> progress;
};

struct AutotuneRow {
  // Schedule, vpp, placement, simulation; the winner's plan too (lowered and verified, its layout
  // named by `layout`, its simulation with times and memory), the other rows' left empty.
  CompareRow row;
  int microbatches = 0;
  bool balanced = false;  // the layout came from balance_layout (else: as --compare runs it)
  bool proven_optimal = false;
  long long simulations = 0;
  std::string layout;  // the layout string (layout_string)
  double per_microbatch() const { return row.sim.makespan / microbatches; }
};

struct Autotune {
  std::vector<AutotuneRow> rows;  // best first
  std::vector<Skipped> skipped;   // configurations that cannot run, with the reason
  bool several_counts = false;    // ranked by makespan per microbatch
  int configurations = 0;         // configurations searched
  long long simulations = 0;      // splits simulated in all
};

Autotune autotune(const AutotuneOptions& opts);

// The best `top` rows as a table, then the winner's peak memory per rank and the skipped ones.
void emit_autotune_table(const Autotune& at, const AutotuneOptions& opts, size_t top,
                         std::ostream& os);

}  // namespace ppc
