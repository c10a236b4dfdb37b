// ppcompile's emitters (emitters.h): the table of --emit values and the one run that writes a
// verified plan through the chosen one.
#include "tools/ppcompile/emitters.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <sstream>
#include <string_view>
#include <utility>

#include "compiler/all_to_all_costs.h"
#include "compiler/csv.h"
#include "compiler/diagnostic.h"
#include "compiler/emit_text.h"
#include "compiler/memory_costs.h"
#include "compiler/plan_json.h"
#include "compiler/render_dot.h"
#include "compiler/synthesize.h"

namespace ppcompile {

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

ppc::TimelineOptions timeline_options(const Options& o, const ppc::CostModel& cost) {
  ppc::TimelineOptions t;
  t.arrows = o.arrows == "on"    ? ppc::Arrows::On
             : o.arrows == "off" ? ppc::Arrows::Off
                                 : ppc::Arrows::Auto;
  t.max_width = o.width;
  t.memory_in_bytes = cost.memory_in_bytes;
  return t;
}

namespace {

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
       os << ppc::describe_memory_modes(v.plan, e.cost);
       os << ppc::describe_all_to_alls(v.plan, e.cost);
       if (e.balanced) os << ppc::describe_balance(*e.balanced);
       // A synthesized plan: how far it is from the lower bound (which knows no lengths).
       if (const auto* s = ppc::find_schedule(v.plan.schedule);
           s && s->synthesize && s->name == v.plan.schedule && e.cost.microbatch_lengths.empty())
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

}  // namespace

std::vector<std::string> emit_names() {
  std::vector<std::string> names;
  for (const Emitter& e : kEmitters)
    if (std::string_view(e.name).find(' ') == std::string_view::npos) names.push_back(e.name);
  return names;
}

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

}  // namespace ppcompile
