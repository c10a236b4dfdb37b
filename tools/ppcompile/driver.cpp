// ppcompile's compile pipeline for one plan (driver.h).
#include "tools/ppcompile/driver.h"

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "compiler/balance.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/csv.h"
#include "compiler/plan_json.h"
#include "compiler/read_file.h"
#include "compiler/verify_and_lower.h"
#include "tools/ppcompile/emitters.h"
#include "tools/ppcompile/inputs.h"
#include "tools/ppcompile/searches.h"

namespace ppcompile {

namespace {

using ppc::SimulationNeed;

// The compute order of `model` under --schedule (verify_and_lower lowers it). `cost` and `limit`:
// what --schedule Auto synthesizes its order for.
ppc::Plan compile_model(const Options& o, std::pair<ppc::Layout, bool> model,
                        std::optional<int> vpp, const ppc::CostModel& cost,
                        std::optional<double> limit) {
  ppc::CompileOptions co;
  std::tie(co.layout, co.has_model) = std::move(model);
  note_uncosted(cost, co.layout);
  require_sizes(o, true);
  if (o.num_layers >= 0) co.num_layers = o.num_layers;
  co.pp = o.pp;
  co.vpp = vpp;
  co.schedule = o.schedule;
  co.microbatches = o.microbatches;
  co.cost = &cost;
  co.memory_limit = limit;
  return ppc::compile(co);
}

// The plan of --from-csv or --from-json, or the model compiled (for `cost` and `limit`: Auto).
ppc::Plan build_plan(const Options& o, const ppc::CostModel& cost, std::optional<double> limit) {
  if (!o.from_csv.empty()) {
    ppc::CsvImportOptions io;
    io.input_name = o.from_csv;
    if (!o.layout.empty()) io.layout = ppc::parse_layout(o.layout, "layout", o.symbols);
    if (!o.layout_file.empty()) io.layout = ppc::parse_layout_file(o.layout_file, o.symbols);
    io.has_model = io.layout.has_value();
    if (!o.schedule.empty()) io.schedule = o.schedule;
    auto given = [](int v) { return v >= 0 ? std::optional<int>(v) : std::nullopt; };
    std::tie(io.pp, io.vpp, io.microbatches) =
        std::tuple(given(o.pp), given(o.vpp), given(o.microbatches));
    return ppc::read_csv(ppc::read_file(o.from_csv), io);
  }
  if (!o.from_json.empty()) return ppc::read_plan_json(ppc::read_file(o.from_json), o.from_json);
  return compile_model(o, load_model(o, " (or --from-csv FILE)"),
                       o.vpp != -1 ? std::optional<int>(o.vpp) : std::nullopt, cost, limit);
}

}  // namespace

int compile_and_emit(const Options& o) {
  const ppc::CostModel cost = cost_model(o);
  Emit e{.o = o, .cost = cost, .limit = memory_limit(o)};
  std::optional<ppc::BalanceResult> balanced;
  ppc::Plan plan;
  if (o.balance) {
    balanced = run_balance(o, cost, e.limit);
    e.balanced = &*balanced;
    plan = compile_model(o, {balanced->layout, true}, balanced->vpp, cost, e.limit);
  } else {
    plan = build_plan(o, cost, e.limit);
  }
  const std::string imported_from = !o.from_csv.empty() ? o.from_csv : o.from_json;
  // Verify the compute order (lowering assumes a well-formed one), lower, verify the lowered plan
  // (verify_and_lower.h), with the emitter's work beside it.
  return emit(e, [&](SimulationNeed need, const ppc::Alongside& alongside) {
    return ppc::verify_and_lower_or_throw(std::move(plan), cost, imported_from, need, alongside);
  });
}

}  // namespace ppcompile
