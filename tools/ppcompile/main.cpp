// ppcompile: compiles a layout and a schedule into a verified per-rank plan and emits it.
// Thin: parses flags, runs the library's passes in order, writes the output.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/autotune.h"
#include "compiler/balance.h"
#include "compiler/compare.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/csv.h"
#include "compiler/diagnostic.h"
#include "compiler/emit_text.h"
#include "compiler/layout.h"
#include "compiler/parse_flags.h"
#include "compiler/plan_json.h"
#include "compiler/read_file.h"
#include "compiler/simulate.h"
#include "compiler/synthesize.h"
#include "compiler/verify_and_lower.h"
#include "compiler/visualization.h"
#include "tools/ppcompile/emitters.h"
#include "tools/ppcompile/options.h"
#include "tools/ppcompile/output.h"
#include "tools/ppcompile/progress.h"

namespace {

using namespace ppcompile;  // NOLINT(google-build-using-namespace): the CLI's own helpers
using ppc::SimulationNeed;
using ppc::VerifiedPlan;

// The flags every compile needs: --pp, --microbatches and, unless `schedule` is false, --schedule.
void require_sizes(const Options& o, bool schedule) {
  if (o.pp == -1) throw ppc::UserError("--pp is required");
  if (schedule && o.schedule.empty())
    throw ppc::UserError("--schedule is required (see --list-schedules)");
  if (o.microbatches_text.empty()) throw ppc::UserError("--microbatches is required");
}

// The model from --layout, --layout-file or --stages, and whether it is a model (not generic).
std::pair<ppc::Layout, bool> load_model(const Options& o, const char* also) {
  if (!o.layout.empty()) return {ppc::parse_layout(o.layout, "layout", o.symbols), true};
  if (!o.layout_file.empty()) return {ppc::parse_layout_file(o.layout_file, o.symbols), true};
  if (o.stages != -1) {
    if (o.stages < 1 || o.stages > ppc::kMaxLayoutItems)
      throw ppc::UserError(
          fmt::format("--stages must be between 1 and {}, got {}", ppc::kMaxLayoutItems, o.stages));
    return {ppc::generic_layout(o.stages), false};
  }
  throw ppc::UserError(
      fmt::format("give the model as --layout STR, --layout-file FILE or --stages N{}", also));
}

// --balance and --autotune (`flag`, which `does` something to the layers) need a model's layout.
void require_layout(const Options& o, const char* flag, const char* does) {
  if (!o.from_csv.empty() || !o.from_json.empty() || o.stages != -1)
    throw ppc::UserError(fmt::format("{} {} a model's layers: give --layout or --layout-file (not "
                                     "--stages, --from-csv or --from-json)",
                                     flag, does),
                         ppc::input_location(flag));
}

// The model whose layers --balance and --autotune split again, checked against --num-layers
// before the search (a split keeps the layers).
ppc::Layout model_to_split(const Options& o) {
  ppc::Layout layout = load_model(o, "").first;
  if (o.num_layers >= 0) ppc::check_model(layout, o.num_layers);
  return layout;
}

// Once per run: the model's own symbols that the cost model gives no per-layer cost, which cost
// what a decoder layer 't' costs (docs/cost-model.md).
void note_uncosted(const ppc::CostModel& cost, const ppc::Layout& layout) {
  const std::string missing = ppc::uncosted_own_symbols(cost, layout);
  if (missing.empty()) return;
  std::string list;
  for (char c : missing) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", c);
  std::cerr << fmt::format(
      "ppcompile: note: the cost model has no entry for {}: {} as much as a decoder layer 't'\n",
      list, missing.size() == 1 ? "it costs" : "they cost");
}

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

// The cost model of --cost FILE or the --cost-* flags; unit costs when neither is given (per
// layer when balancing: per stage, every split would cost the same).
ppc::CostModel cost_model(const Options& o) {
  if (!o.cost_file.empty()) return ppc::read_cost_model(o.cost_file);
  if (o.cost_flags.any()) return ppc::cost_model_from_flags(o.cost_flags);
  if (o.balance || o.autotune) return ppc::unit_layer_costs();
  return ppc::CostModel{};
}

std::optional<double> memory_limit(const Options& o) {
  if (o.memory_limit.empty()) return std::nullopt;
  return ppc::parse_memory_size(o.memory_limit, "--memory-limit");
}

// --compare: every schedule that can run the model, as one table (CLI11 rejects --from-csv and
// --from-json with it).
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

// --balance: the model's layers split again for the schedule (balance.h).
ppc::BalanceResult run_balance(const Options& o, const ppc::CostModel& cost,
                               std::optional<double> limit) {
  require_layout(o, "--balance", "re-splits");
  if (o.compare)
    throw ppc::UserError("--compare takes the layout as given; --autotune balances every schedule",
                         ppc::input_location("--balance"));
  ppc::BalanceOptions bo;
  bo.layout = model_to_split(o);
  require_sizes(o, true);
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

// --autotune: the table of the best configurations, or the winner emitted like any plan.
int run_autotune(const Options& o) {
  require_layout(o, "--autotune", "balances");
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

int run(Options o) {
  ppc::check_own_symbols(o.symbols, "--symbols");
  if (o.list_schedules) {
    Output output(o.output);
    ppc::emit_schedule_list(output.stream());
    output.commit();
    return 0;
  }
  if (o.autotune) return run_autotune(o);
  if (!o.microbatches_text.empty())
    o.microbatches = ppc::parse_microbatch_count(o.microbatches_text);
  if (o.compare && !o.balance) return run_compare(o);
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

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "ppcompile: compiles a pipeline-parallel schedule into verified per-rank action tables.\n"
      "Example: ppcompile --layout-file layouts/deepseek-v3.layout --pp 16 --schedule "
      "Interleaved1F1B "
      "--microbatches 32",
      "ppcompile"};
  app.get_formatter()->column_width(34);
  auto* model = app.add_option_group("model", "The model (exactly one)");
  auto* layout = model->add_option("--layout", o.layout, "Layout string, e.g. 'Et*3|(tt|)*29,m|L'");
  auto* layout_file =
      model->add_option("--layout-file", o.layout_file, "File holding a layout (see layouts/)");
  auto* stages =
      model->add_option("--stages", o.stages, "N generic stages (N = pp x vpp), no model");
  auto* csv =
      model->add_option("--from-csv", o.from_csv, "Import a schedule in PyTorch's CSV format");
  auto* js = model->add_option("--from-json", o.from_json, "Import a plan written by --emit json");
  stages->excludes(layout)->excludes(layout_file)->excludes(js);
  layout->excludes(layout_file)->excludes(js);
  csv->excludes(js)->excludes(stages);
  layout_file->excludes(js);
  app.add_option("--pp", o.pp, "Pipeline size (ranks)");
  app.add_option("--vpp", o.vpp, "Stages per rank (inferred from the layout; must agree if given)");
  app.add_option("--schedule", o.schedule,
                 "Schedule name, case-insensitive (see --list-schedules); Auto synthesizes one "
                 "from the costs and --memory-limit");
  app.add_option("--microbatches", o.microbatches_text,
                 "Microbatches per step (--autotune: also a list 8,16,32 or a range 8-64)");
  app.add_option("--symbols", o.symbols,
                 "The model's own layer symbols besides E, t, m and L, as letters: 'xv' lets the "
                 "layout hold x and v (docs/layout-language.md)");
  app.add_option("--num-layers", o.num_layers,
                 "Check that the layout has this many decoder layers (t)");
  app.add_option("--emit", o.emit,
                 "Output: table, csv, json, stats, layout, layout-string, svg, dot, png, trace or "
                 "html")
      ->check(CLI::IsMember(emit_names()))
      ->capture_default_str();
  app.add_option("--engine", o.engine,
                 "SVG: timeline (simulated lanes) or dot (dependency graph via Graphviz)")
      ->check(CLI::IsMember({"timeline", "dot"}))
      ->capture_default_str();
  app.add_option("--arrows", o.arrows, "Timeline send->recv arrows: auto (up to 1000), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--width", o.width, "Timeline: widest time axis in pixels")
      ->check(CLI::Range(100.0, 100000.0))
      ->capture_default_str();
  app.add_flag("--compute-only", o.compute_only, "CSV: the compute order, without SEND/RECV");
  app.add_option("-o,--output", o.output, "Write to FILE (atomically) instead of stdout");
  app.add_option("--color", o.color, "Table colors: auto, always or never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  app.add_flag("--compact", o.compact, "Table: one letter per action, for wide plans");
  app.add_flag("--list-schedules", o.list_schedules, "List the schedules and exit");
  auto* compare = app.add_flag(
      "--compare", o.compare,
      "Compile, verify and simulate every schedule for the model; one table, best first");
  auto* cost = app.add_option("--cost", o.cost_file, "Cost model JSON file (docs/cost-model.md)");
  auto* cost_group = app.add_option_group(
      "cost", "Simple cost model: the costs of one layer (docs/cost-model.md)");
  auto& cf = o.cost_flags;
  auto add_cost = [&](const char* name, std::optional<double>& v, const char* help) {
    cost_group
        ->add_option_function<double>(
            name, [&v](double x) { v = x; }, help)
        ->excludes(cost);
  };
  add_cost("--cost-f", cf.f, "Forward time of a layer (default 1)");
  add_cost("--cost-b", cf.b, "Full backward time (default I + W, or 2 F)");
  add_cost("--cost-i", cf.i, "Input-gradient backward time (default F, or B - W)");
  add_cost("--cost-w", cf.w, "Weight-gradient backward time (default F, or B - I)");
  add_cost("--cost-activation", cf.activation,
           "Activation memory a microbatch keeps per layer (default 1)");
  add_cost("--cost-params", cf.params, "Parameter memory per layer (default 0)");
  add_cost("--cost-latency", cf.latency, "Time per message (default 0)");
  add_cost("--cost-bandwidth", cf.bandwidth, "Bytes per time unit (default 0 = infinite)");
  add_cost("--cost-message", cf.message_bytes,
           "Bytes per activation or gradient message (default 0)");
  add_cost("--cost-overlap", cf.overlap,
           "OVERLAP_F_B hides this fraction of the shorter part (0..1)");
  app.add_flag("--balance", o.balance,
               "Re-split the layout's layers into pp x vpp stages for the shortest simulated "
               "makespan (docs/balance.md)");
  app.add_flag("--autotune", o.autotune,
               "Search schedule x vpp x placement x balanced layout (x microbatches): a table of "
               "the best, or the winner with --emit");
  app.add_option("--balance-budget", o.balance_budget,
                 "Most splits --balance simulates per configuration (default: automatic)")
      ->check(CLI::Range(1LL, 1000000000LL));
  app.add_option("--top", o.top, "--autotune: how many configurations the table shows")
      ->check(CLI::Range(static_cast<size_t>(1), static_cast<size_t>(1000000)))
      ->capture_default_str();
  app.add_option("--memory-limit", o.memory_limit,
                 "Memory per rank (bytes, or 80GiB, 80GB...; activation units under unit costs)");
  compare->excludes(csv)->excludes(js);
  if (auto stop = parse_flags(app, argc, argv, "ppcompile")) return *stop;
  try {
    return run(o);
  } catch (const ppc::UserError& e) {
    std::cerr << "ppcompile: error: " << e.format() << '\n';
    return 2;
  } catch (const ppc::InternalError& e) {
    std::cerr << "ppcompile: " << e.what() << "\n(this is a bug in ppcompile; please report it)\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "ppcompile: error: out of memory\n";
    return 1;
  }
}
