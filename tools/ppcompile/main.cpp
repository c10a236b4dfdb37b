// ppcompile: compiles a layout and a schedule into a verified per-rank plan and emits it.
// Thin: parses flags, runs the library's passes in order, writes the output.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <new>
#include <string>

#include "compiler/autotune.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/emit_text.h"
#include "compiler/layout.h"
#include "compiler/parse_flags.h"
#include "tools/ppcompile/driver.h"
#include "tools/ppcompile/emitters.h"
#include "tools/ppcompile/options.h"
#include "tools/ppcompile/output.h"
#include "tools/ppcompile/searches.h"

namespace {

using namespace ppcompile;  // NOLINT(google-build-using-namespace): the CLI's own helpers

int run(Options o) {
  ppc::check_own_symbols(o.symbols, "--symbols");
  if (o.list_schedules) {
    Output output(o.output);
    ppc::emit_schedule_list(output.stream());
    output.commit();
    return 0;
  }
  if (!o.dump_after.empty() && (o.autotune || (o.compare && !o.balance)))
    throw ppc::UserError(fmt::format("shows the passes of one plan; {} compiles many",
                                     o.autotune ? "--autotune" : "--compare"),
                         ppc::input_location("--dump-after"));
  if (!o.lengths_file.empty() && (o.autotune || o.compare || o.balance))
    throw ppc::UserError(
        fmt::format("--lengths simulates one plan; not with {} (yet)",
                    o.autotune ? "--autotune" : (o.compare ? "--compare" : "--balance")),
        ppc::input_location("--lengths"));
  if (!o.microbatch_order.empty() && o.lengths_file.empty())
    throw ppc::UserError("orders the microbatches for their lengths: give --lengths FILE",
                         ppc::input_location("--microbatch-order"));
  if (o.autotune) return run_autotune(o);
  if (!o.microbatches_text.empty())
    o.microbatches = ppc::parse_microbatch_count(o.microbatches_text);
  if (o.compare && !o.balance) return run_compare(o);
  return compile_and_emit(o);
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
  app.add_option("--recompute", o.recompute,
                 "Memory modes per layer kind or stage: none, selective, full, offload "
                 "('full', 't:selective,stage3:none'; docs/ppcompile.md); Auto chooses under "
                 "--memory-limit when neither this nor --offload is given");
  app.add_option("--offload", o.offload,
                 "Stages or layer kinds whose activations go to host memory ('stage0,stage1', "
                 "'all'); after --recompute's rules");
  app.add_option("--dump-after", o.dump_after,
                 "Debugging: write the IR after each pass named to stderr (parse, place, "
                 "generate, lower, verify, simulate; a list: generate,lower)")
      ->delimiter(',')
      ->check(CLI::IsMember(kPasses));
  app.add_option("--lengths", o.lengths_file,
                 "Each microbatch's length in tokens, one per line in data order: the simulation "
                 "costs each at its length (docs/cost-model.md)");
  app.add_option("--microbatch-order", o.microbatch_order,
                 "With --lengths: 'lengths' orders the microbatches for them (Auto's default), "
                 "'data' keeps data order (the others' default)")
      ->check(CLI::IsMember({"data", "lengths"}));
  app.add_option("--ep", o.ep,
                 "Expert parallelism: each MoE layer's experts over N ranks of different "
                 "data-parallel replicas; the plan's all-to-alls are verified and costed "
                 "(docs/ppcompile.md)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--first-dense", o.first_dense,
                 "With --ep: the first K decoder layers (t) stay dense; the rest are MoE layers")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--replica-plans", o.replica_plans,
                 "With --ep: JSON plans that data-parallel replicas 1, 2, ... run beside this "
                 "one; verify that every EP group issues its all-to-alls in one order")
      ->delimiter(',');
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
