// ppcompile's searches: --compare (every schedule on the model), --balance (the layers split
// again for one schedule) and --autotune (schedule x stages per rank x placement x split x
// microbatches).
#pragma once

#include <optional>

#include "compiler/balance.h"
#include "compiler/cost_model.h"
#include "tools/ppcompile/options.h"

namespace ppcompile {

// --compare: every schedule that can run the model, as one table (CLI11 rejects --from-csv and
// --from-json with it). Returns the exit code.
int run_compare(const Options& o);

// --balance: the layers of `layout` (the model, parsed and checked: the driver's parse) split
// again for the schedule (balance.h).
ppc::BalanceResult run_balance(const Options& o, ppc::Layout layout, const ppc::CostModel& cost,
                               std::optional<double> limit);

// --autotune: the table of the best configurations, or the winner emitted like any plan.
// Returns the exit code.
int run_autotune(const Options& o);

}  // namespace ppcompile
