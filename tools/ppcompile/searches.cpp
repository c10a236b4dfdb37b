// ppcompile's searches (searches.h).
#include "tools/ppcompile/searches.h"

#include <fmt/format.h>

#include <iostream>
#include <string>
#include <tuple>
#include <utility>

#include "compiler/autotune.h"
#include "compiler/compare.h"
#include "compiler/diagnostic.h"
#include "compiler/emit_text.h"
#include "compiler/verify_and_lower.h"
#include "compiler/visualization.h"
#include "tools/ppcompile/emitters.h"
#include "tools/ppcompile/inputs.h"
#include "tools/ppcompile/output.h"
#include "tools/ppcompile/progress.h"

namespace ppcompile {

using ppc::SimulationNeed;
using ppc::VerifiedPlan;

namespace {

// --balance and --autotune do not count expert parallelism's all-to-alls yet (issue 40).
void refuse_ep(const Options& o, const char* search) {
  if (o.ep > 1 || !o.replica_plans.empty())
    throw ppc::UserError(fmt::format("{} does not count all-to-alls yet; drop --ep", search),
                         ppc::input_location(o.ep > 1 ? "--ep" : "--replica-plans"));
}

}  // namespace

int run_compare(const Options& o) {
  if (!o.schedule.empty())
    throw ppc::UserError("--compare runs every schedule; drop --schedule",
                         ppc::input_location("--schedule"));
  if (o.vpp > 0)
    throw ppc::UserError("--compare picks the stages per rank each schedule needs; drop --vpp",
                         ppc::input_location("--vpp"));
  if (o.emit != "table" && o.emit != "html")
    throw ppc::UserError(
        fmt::format("--compare prints a table (or --emit html); --emit {} does not apply", o.emit),
        ppc::input_location("--emit"));
  ppc::CompareOptions co;
  std::tie(co.layout, co.has_model) = load_model(o, "");
  require_sizes(o, false);
  co.pp = o.pp;
  co.microbatches = o.microbatches;
  co.cost = cost_model(o);
  note_uncosted(co.cost, co.layout);
  co.memory_limit = memory_limit(o);
  co.expert_parallel = {o.ep, o.first_dense};
  const ppc::Comparison cmp = ppc::compare_schedules(co);
  if (cmp.rows.empty()) {
    const auto& first = cmp.skipped.front();
    throw ppc::UserError(
        fmt::format("no schedule can run this configuration ({}: {}; and {} more skipped)",
                    first.schedule, first.reason, cmp.skipped.size() - 1));
  }
  Output output(o.output);
  if (o.emit == "html")
    ppc::emit_html(cmp, co, output.stream(), timeline_options(o, co.cost));
  else
    ppc::emit_compare_table(cmp, co, output.stream());
  output.commit();
  return 0;
}

ppc::BalanceResult run_balance(const Options& o, ppc::Layout layout, const ppc::CostModel& cost,
                               std::optional<double> limit) {
  ppc::BalanceOptions bo;
  bo.layout = std::move(layout);
  require_sizes(o, true);
  refuse_ep(o, "--balance");
  bo.pp = o.pp;
  if (o.vpp != -1) bo.vpp = o.vpp;
  bo.schedule = o.schedule;
  bo.microbatches = o.microbatches;
  bo.cost = cost;
  bo.memory_limit = limit;
  bo.budget = o.balance_budget;
  ppcompile::Progress progress("balance");
  bo.progress = [&](double f) { progress(fmt::format("{:.0f}% of the search budget", 100 * f)); };
  ppc::BalanceResult res = ppc::balance_layout(bo);
  if (!res.fits)
    std::cerr << fmt::format(
        "ppcompile: note: no split found fits --memory-limit {}; this one peaks at {}\n",
        o.memory_limit, ppc::format_memory(res.peak_total, cost.memory_in_bytes));
  return res;
}

int run_autotune(const Options& o) {
  require_layout(o, "--autotune", "balances");
  refuse_ep(o, "--autotune");
  if (o.compare || o.balance)
    throw ppc::UserError(fmt::format("--autotune already compares and balances; drop {}",
                                     o.compare ? "--compare" : "--balance"),
                         ppc::input_location("--autotune"));
  if (o.vpp != -1)
    throw ppc::UserError("--autotune searches the stages per rank; drop --vpp",
                         ppc::input_location("--vpp"));
  ppc::AutotuneOptions ao;
  ao.layout = model_to_split(o);
  require_sizes(o, false);
  ao.pp = o.pp;
  ao.microbatches = ppc::parse_microbatch_counts(o.microbatches_text, o.pp);
  const ppc::CostModel cost = cost_model(o);
  note_uncosted(cost, ao.layout);
  // Unit costs stay marked as such (the table says so); autotune takes them per layer.
  ao.cost = o.cost_file.empty() && !o.cost_flags.any() ? ppc::CostModel{} : cost;
  ao.memory_limit = memory_limit(o);
  if (!o.schedule.empty()) ao.schedules = {o.schedule};
  ao.budget = o.balance_budget;
  ppcompile::Progress progress("autotune");
  ao.progress = [&](int done, int total, const std::string& what) {
    progress(fmt::format("{}/{} configurations ({})", done, total, what));
  };
  ppc::Autotune at = ppc::autotune(ao);
  if (at.rows.empty())
    throw ppc::UserError(fmt::format("no configuration can run this model at --pp {} ({}: {})",
                                     o.pp, at.skipped.front().schedule, at.skipped.front().reason));
  if (o.emit == "table") {
    Output output(o.output);
    ppc::emit_autotune_table(at, ao, o.top, output.stream());
    output.commit();
    return 0;
  }
  // Any other output: the winner, lowered, verified and simulated by the search, emitted.
  ppc::CompareRow& best = at.rows.front().row;
  VerifiedPlan winner{std::move(best.plan), std::move(best.report), std::move(best.sim)};
  Emit e{.o = o, .cost = cost, .limit = ao.memory_limit};
  return emit(e, [&](SimulationNeed, const ppc::Alongside& alongside) {
    if (alongside.compute_order) alongside.compute_order(winner.plan);
    if (alongside.whole_plan) alongside.whole_plan(winner.plan);
    return std::move(winner);
  });
}

}  // namespace ppcompile
