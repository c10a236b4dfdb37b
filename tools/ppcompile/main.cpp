// ppcompile: compiles a layout and a schedule into a verified per-rank plan and emits it.
// Thin: parses flags, runs the library's passes in order, writes the output.
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
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
#include "compiler/plan_json.h"
#include "compiler/read_file.h"
#include "compiler/render_dot.h"
#include "compiler/simulate.h"
#include "compiler/synthesize.h"
#include "compiler/verify_and_lower.h"
#include "compiler/visualization.h"
#include "tools/ppcompile/output.h"
#include "tools/ppcompile/progress.h"

namespace {

struct Options {
  std::string layout, layout_file, from_csv, from_json;
  // -1 = not given.
  int stages = -1;
  int pp = -1;
  int vpp = -1;
  int num_layers = -1;
  std::string schedule;
  int microbatches = -1;
  std::string emit = "table";
  bool compute_only = false;
  std::string output;
  std::string color = "auto";
  bool compact = false;
  bool list_schedules = false;
  bool compare = false;
  std::string cost_file;      // --cost FILE
  ppc::CostFlags cost_flags;  // --cost-f, --cost-b, ...
  std::string memory_limit;   // --memory-limit BYTES
  std::string engine = "timeline";
  std::string arrows = "auto";
  double width = 1800;
  std::string microbatches_text;  // --microbatches as given: a list or range with --autotune
  bool balance = false;           // --balance
  bool autotune = false;          // --autotune
  long long balance_budget = 0;   // --balance-budget (0 = automatic)
  size_t top = 15;                // --top
};

void list_schedules(std::ostream& os) {
  size_t width = 17;
  std::vector<const ppc::ScheduleInfo*> listed;  // the named schedules, then Auto
  for (const auto& s : ppc::all_schedules()) listed.push_back(&s);
  listed.push_back(&ppc::auto_schedule());
  for (const auto* s : listed) width = std::max(width, s->name.size());
  os << fmt::format("{:<{}} {:<9} {:<10} {}\n", "schedule", width, "vpp", "placement",
                    "description");
  for (const auto* sp : listed) {
    const ppc::ScheduleInfo& s = *sp;
    const char* vpp = s.vpp_rule == ppc::VppRule::One   ? "1"
                      : s.vpp_rule == ppc::VppRule::Two ? "2"
                                                        : "any";
    std::string aliases;
    for (const auto& a : s.aliases) aliases += (aliases.empty() ? "" : ", ") + a;
    os << fmt::format("{:<{}} {:<9} {:<10} {}{}\n", s.name, width, vpp,
                      ppc::is_auto(s) ? "loop, v" : ppc::placement_name(s.placement), s.summary,
                      aliases.empty() ? "" : " (also: " + aliases + ")");
  }
}

bool use_color(const Options& o) {
  if (o.color == "always") return true;
  if (o.color == "never" || !o.output.empty()) return false;
  const char* term = std::getenv("TERM");
  return isatty(fileno(stdout)) && !std::getenv("NO_COLOR") &&
         !(term && std::string(term) == "dumb");
}

// The terminal's width when the table goes to one (the table turns compact if wider), else 0.
int terminal_columns(const Options& o) {
  if (!o.output.empty() || !isatty(fileno(stdout))) return 0;
  winsize ws{};
  return ioctl(fileno(stdout), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 0;
}

// The flags every compile needs: --pp, --microbatches and, unless `schedule` is false, --schedule.
void require_sizes(const Options& o, bool schedule) {
  if (o.pp == -1) throw ppc::UserError("--pp is required");
  if (schedule && o.schedule.empty())
    throw ppc::UserError("--schedule is required (see --list-schedules)");
  if (o.microbatches_text.empty()) throw ppc::UserError("--microbatches is required");
}

// The model from --layout, --layout-file or --stages, and whether it is a model (not generic).
std::pair<ppc::Layout, bool> load_model(const Options& o, const char* also) {
  if (!o.layout.empty()) return {ppc::parse_layout(o.layout), true};
  if (!o.layout_file.empty()) return {ppc::parse_layout_file(o.layout_file), true};
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

// The compute order of `model` under --schedule (verify_and_lower lowers it). `cost` and `limit`:
// what --schedule Auto synthesizes its order for.
ppc::Plan compile_model(const Options& o, std::pair<ppc::Layout, bool> model,
                        std::optional<int> vpp, const ppc::CostModel& cost,
                        std::optional<double> limit) {
  ppc::CompileOptions co;
  std::tie(co.layout, co.has_model) = std::move(model);
  require_sizes(o, true);
  if (o.num_layers >= 0) co.num_layers = o.num_layers;
  co.pp = o.pp;
  co.vpp = vpp;
  co.schedule = o.schedule;
  co.microbatches = o.microbatches;
  co.lower = false;
  co.cost = &cost;
  co.memory_limit = limit;
  return ppc::compile(co);
}

// The plan of --from-csv or --from-json, or the model compiled (for `cost` and `limit`: Auto).
ppc::Plan build_plan(const Options& o, const ppc::CostModel& cost, std::optional<double> limit) {
  if (!o.from_csv.empty()) {
    ppc::CsvImportOptions io;
    io.input_name = o.from_csv;
    if (!o.layout.empty()) io.layout = ppc::parse_layout(o.layout);
    if (!o.layout_file.empty()) io.layout = ppc::parse_layout_file(o.layout_file);
    io.has_model = io.layout.has_value();
    if (!o.schedule.empty()) io.schedule = o.schedule;
    ppc::Plan plan = ppc::read_csv(ppc::read_file(o.from_csv), io);
    if (o.pp >= 0 && o.pp != plan.pp())
      throw ppc::UserError(fmt::format("--pp {} disagrees with the CSV, which has {} rows (ranks)",
                                       o.pp, plan.pp()));
    if (o.vpp >= 0 && o.vpp != plan.vpp())
      throw ppc::UserError(fmt::format(
          "--vpp {} disagrees with the CSV, which has {} stages per rank", o.vpp, plan.vpp()));
    if (o.microbatches >= 0 && o.microbatches != plan.microbatches)
      throw ppc::UserError(fmt::format("--microbatches {} disagrees with the CSV, which uses {}",
                                       o.microbatches, plan.microbatches));
    return plan;
  }
  if (!o.from_json.empty()) return ppc::read_plan_json(ppc::read_file(o.from_json), o.from_json);
  return compile_model(o, load_model(o, " (or --from-csv FILE)"),
                       o.vpp != -1 ? std::optional<int>(o.vpp) : std::nullopt, cost, limit);
}

ppc::TimelineOptions timeline_options(const Options& o, const ppc::CostModel& cost) {
  ppc::TimelineOptions t;
  t.arrows = o.arrows == "on"    ? ppc::Arrows::On
             : o.arrows == "off" ? ppc::Arrows::Off
                                 : ppc::Arrows::Auto;
  t.max_width = o.width;
  t.memory_in_bytes = cost.memory_in_bytes;
  return t;
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

// --- Emitters ----------------------------------------------------------------------------------

// What an emitter's parts share while one plan is written.
struct Emit {
  const Options& o;
  const ppc::CostModel& cost;
  std::optional<double> limit;
  const ppc::BalanceResult* balanced = nullptr;  // --balance's search (--emit stats shows it)
  ppc::TableOptions table = {};
  HeldText early = {};  // written beside verification; reaches the output once the plan is valid
  int table_steps = 0;
  std::vector<std::string> json_compute = {};
};

// One --emit: the simulation it needs, the work it starts beside verification (into
// Emit::early, written first), and what it writes once the plan is valid (either may be null).
struct Emitter {
  const char* name;
  ppc::SimulationNeed need;
  void (*beside)(Emit&, ppc::Alongside&);
  void (*write)(Emit&, ppc::VerifiedPlan&, std::ostream&);
};

using ppc::SimulationNeed;
using ppc::VerifiedPlan;

// An emitter that needs only the plan.
template <void (*emit)(const ppc::Plan&, std::ostream&)>
void of_plan(Emit&, VerifiedPlan& v, std::ostream& os) {
  emit(v.plan, os);
}

// Graphviz's rendering of the dependency graph (--emit png, --emit svg --engine dot).
void render_graph(Emit& e, VerifiedPlan& v, std::ostream& os) {
  const std::string format = e.o.emit;  // svg or png
  if (format == "png" && e.o.output.empty() && isatty(fileno(stdout)))
    throw ppc::UserError("refusing to write PNG to a terminal: use -o FILE.png",
                         ppc::input_location("--emit"));
  std::ostringstream dot;
  ppc::emit_dot(v.plan, dot);
  os << ppc::render_dot(dot.str(), format, v.report.compute_actions);
}

const Emitter kEmitters[] = {
    {"table", SimulationNeed::None,
     [](Emit& e, ppc::Alongside& a) {
       a.compute_order = [&e](const ppc::Plan& p) {
         e.table_steps = ppc::emit_table_rows(p, e.early.stream(), e.table);
       };
     },
     [](Emit& e, VerifiedPlan& v, std::ostream& os) {
       ppc::emit_table_summary(v.plan, v.report, e.table_steps, os);
     }},
    {"csv", SimulationNeed::None,
     [](Emit& e, ppc::Alongside& a) {
       (e.o.compute_only ? a.compute_order : a.whole_plan) = [&e](const ppc::Plan& p) {
         ppc::emit_csv(p, e.early.stream(), e.o.compute_only);
       };
     },
     nullptr},
    {"json", SimulationNeed::None,
     [](Emit& e, ppc::Alongside& a) {
       a.compute_order = [&e](const ppc::Plan& p) { e.json_compute = ppc::json_compute_arrays(p); };
       a.whole_plan = [&e](const ppc::Plan& p) {
         ppc::emit_json_plan(p, e.early.stream(), &e.json_compute);
       };
     },
     [](Emit&, VerifiedPlan& v, std::ostream& os) { ppc::emit_json_verification(v.report, os); }},
    {"stats", SimulationNeed::Summary, nullptr,
     [](Emit& e, VerifiedPlan& v, std::ostream& os) {
       ppc::emit_stats(v.plan, v.report, *v.sim, os);
       if (e.limit) os << ppc::memory_check(*v.sim, *e.limit, e.cost.memory_in_bytes) << "\n";
       if (e.balanced) os << ppc::describe_balance(*e.balanced);
       if (v.plan.schedule == ppc::auto_schedule().name)
         os << ppc::describe_bound(v.plan, e.cost, v.sim->makespan) << "\n";
     }},
    {"layout", SimulationNeed::None, nullptr, of_plan<ppc::emit_layout>},
    {"layout-string", SimulationNeed::None, nullptr, of_plan<ppc::emit_layout_string>},
    {"svg", SimulationNeed::Timeline, nullptr,
     [](Emit& e, VerifiedPlan& v, std::ostream& os) {
       ppc::emit_svg(v.plan, *v.sim, os, timeline_options(e.o, e.cost));
     }},
    {"svg --engine dot", SimulationNeed::None, nullptr, render_graph},
    {"dot", SimulationNeed::None, nullptr, of_plan<ppc::emit_dot>},
    {"png", SimulationNeed::None, nullptr, render_graph},
    {"trace", SimulationNeed::Timeline, nullptr,
     [](Emit& e, VerifiedPlan& v, std::ostream& os) {
       ppc::emit_trace(v.plan, *v.sim, os, ppc::TraceOptions{1000, e.cost.memory_in_bytes});
     }},
    {"html", SimulationNeed::Timeline, nullptr,
     [](Emit& e, VerifiedPlan& v, std::ostream& os) {
       ppc::emit_plan_html(std::move(v), e.cost, os, timeline_options(e.o, e.cost));
     }},
};

// The values of --emit (a name with a space is another flag's variant of one).
std::vector<std::string> emit_names() {
  std::vector<std::string> names;
  for (const Emitter& e : kEmitters)
    if (std::string_view(e.name).find(' ') == std::string_view::npos) names.push_back(e.name);
  return names;
}

// Emits the plan that `verified` makes valid (it runs `alongside` on it, maybe beside its
// verification), as --emit asks.
using Verifier = std::function<VerifiedPlan(SimulationNeed, const ppc::Alongside&)>;
int emit(Emit& e, const Verifier& verified) {
  const std::string name = e.o.emit == "svg" && e.o.engine == "dot" ? "svg --engine dot" : e.o.emit;
  const auto* em = std::find_if(std::begin(kEmitters), std::end(kEmitters),
                                [&](const Emitter& x) { return x.name == name; });
  PPC_INTERNAL_ASSERT(em != std::end(kEmitters), "no emitter for --emit " + name);
  e.table = ppc::TableOptions{use_color(e.o), e.o.compact, terminal_columns(e.o)};
  ppc::Alongside alongside;
  if (em->beside) em->beside(e, alongside);
  VerifiedPlan v = verified(em->need, alongside);
  Output output(e.o.output);  // the plan is valid: write it as it is emitted
  e.early.write_to(output.stream());
  if (em->write) em->write(e, v, output.stream());
  output.commit();
  return 0;
}

// --- Commands --------------------------------------------------------------------------------

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
  if (o.list_schedules) {
    Output output(o.output);
    list_schedules(output.stream());
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "ppcompile: error: " << e.what() << "\n(run ppcompile --help for usage)\n";
    return 2;
  }
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
