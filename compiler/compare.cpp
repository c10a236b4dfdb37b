// ppcompile --compare: every schedule that can run the model at this pipeline size, compiled,
// lowered under the cost model, verified and simulated; ranked by makespan.
//
// Each schedule gets the stages it needs from the layout:
//   - any stages per rank (Interleaved1F1B, LoopedBFS, InterleavedZeroBubble): the layout as given;
//   - one per rank (GPipe, 1F1B, ZB-H1, ZB-H2, DualPipe): consecutive stages merged into pp;
//   - two per rank (ZBVZeroBubble, DualPipeV): consecutive stages merged into 2pp.
// A model layout is only merged (a stage's layers never move to another stage's rank order);
// where the count does not divide, the schedule is skipped with the reason. A generic layout
// (--stages N) is re-split freely: each of its S' stages costs N/S' of a given stage, so every row
// computes the same model.
#include "compiler/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/synthesize.h"
#include "compiler/verify_and_lower.h"

namespace ppc {

namespace {

// Layout `layout` with each run of `group` consecutive stages joined into one.
Layout merge_stages(const Layout& layout, int group) {
  Layout out;
  out.input = layout.input;
  out.input_lines = layout.input_lines;
  out.end_line = layout.end_line;
  out.end_column = layout.end_column;
  const bool located = layout.layer_columns.size() == layout.stages.size();
  for (int s = 0; s < layout.num_stages(); ++s) {
    const size_t su = static_cast<size_t>(s);
    if (s % group == 0) {
      out.stages.emplace_back();
      if (located) {
        out.layer_columns.emplace_back();
        out.layer_lines.emplace_back();
        out.stage_columns.push_back(layout.stage_columns[su]);
        out.stage_lines.push_back(su < layout.stage_lines.size() ? layout.stage_lines[su] : 1);
      }
    }
    const auto& layers = layout.stages[su];
    out.stages.back().insert(out.stages.back().end(), layers.begin(), layers.end());
    if (located) {
      const auto& cols = layout.layer_columns[su];
      out.layer_columns.back().insert(out.layer_columns.back().end(), cols.begin(), cols.end());
      if (su < layout.layer_lines.size()) {
        const auto& lines = layout.layer_lines[su];
        out.layer_lines.back().insert(out.layer_lines.back().end(), lines.begin(), lines.end());
      } else {
        out.layer_lines.back().insert(out.layer_lines.back().end(), cols.size(), 1);
      }
    }
  }
  // The merged layout in the layout language: stages of symbols separated by '|'.
  for (size_t s = 0; s < out.stages.size(); ++s) {
    if (s) out.source += '|';
    for (LayerKind k : out.stages[s]) out.source += layer_symbol(k);
  }
  return out;
}

LayerCost scaled(LayerCost c, double k) {
  c.f *= k;
  c.i *= k;
  c.w *= k;
  if (c.b) *c.b *= k;
  c.activation *= k;
  c.params *= k;
  return c;
}

struct Config {
  Layout layout;
  CostModel cost;
  std::string note;
};

// The stages per copy the schedule needs at this pp, given a layout of `stages` stages.
int wanted_stages(const ScheduleInfo& info, int pp, int stages) {
  switch (info.vpp_rule) {
    case VppRule::One:
      return pp;
    case VppRule::Two:
      return 2 * pp;
    case VppRule::Any:
      return stages;
  }
  return stages;
}

// The layout and costs a schedule runs on, or the reason it cannot run.
std::optional<Config> configure(const ScheduleInfo& info, const CompareOptions& opts,
                                const CostModel& base, std::string* why) {
  const int S = opts.layout.num_stages(), pp = opts.pp;
  const int want = wanted_stages(info, pp, S);
  const char* per_rank =
      info.vpp_rule == VppRule::One ? "one stage per rank" : "two stages per rank";
  if (want % pp != 0) {
    *why = fmt::format("{} stages are not a multiple of --pp {}", S, pp);
    return std::nullopt;
  }
  Config c;
  c.cost = base;
  if (!opts.has_model) {
    c.layout = generic_layout(want);
    if (want != S) {
      c.cost.empty_stage = scaled(base.empty_stage, static_cast<double>(S) / want);
      c.note = fmt::format("{} generic stages re-split into {} ({} per rank)", S, want, want / pp);
    }
  } else if (want == S) {
    c.layout = opts.layout;
  } else if (S % want == 0) {
    c.layout = merge_stages(opts.layout, S / want);
    c.note =
        fmt::format("{} stages merged in groups of {} into {} ({})", S, S / want, want, per_rank);
  } else {
    *why = fmt::format(
        "needs {} ({} stages at --pp {}); the layout's {} stages cannot be merged into {}",
        per_rank, want, pp, S, want);
    return std::nullopt;
  }
  if (info.copies > 1)
    c.note += std::string(c.note.empty() ? "" : "; ") + "two model copies (2x parameters)";
  return c;
}

}  // namespace

CompareRow compare_row(VerifiedPlan checked, std::optional<double> memory_limit) {
  CompareRow row;
  const Plan& plan = checked.plan;
  row.schedule = plan.schedule;
  row.vpp = plan.vpp();
  row.placement = plan.placement.style;
  row.report = std::move(checked.report);
  row.sim = std::move(*checked.sim);
  for (int r = 0; r < plan.pp(); ++r) {
    const size_t ru = static_cast<size_t>(r);
    if (row.sim.peak_memory[ru] > row.peak_memory) {
      row.peak_memory = row.sim.peak_memory[ru];
      row.peak_rank = r;
    }
    const double total = row.sim.peak_memory[ru] + row.sim.param_memory[ru];
    if (total > row.peak_total) {
      row.peak_total = total;
      row.peak_total_rank = r;
    }
  }
  row.comm_bytes = row.sim.comm_bytes;
  row.messages = row.sim.messages;
  row.fits = !memory_limit || row.peak_total <= *memory_limit;
  row.plan = std::move(checked.plan);
  return row;
}

CompareRow measure_plan(Plan plan, const CostModel& cost, std::optional<double> memory_limit) {
  // Verified, lowered, verified again and simulated, with each replay run once.
  return compare_row(verify_and_lower_or_throw(std::move(plan), cost, "", SimulationNeed::Timeline),
                     memory_limit);
}

Comparison compare_schedules(const CompareOptions& opts) {
  if (opts.pp < 1 || opts.pp > kMaxPp)
    throw UserError(fmt::format("--pp must be between 1 and {}, got {}", kMaxPp, opts.pp));
  if (opts.microbatches < 1 || opts.microbatches > kMaxMicrobatches)
    throw UserError(fmt::format("--microbatches must be between 1 and {}, got {}", kMaxMicrobatches,
                                opts.microbatches));
  if (opts.has_model) check_model(opts.layout);
  const CostModel base = opts.cost.unit ? unit_layer_costs() : opts.cost;

  Comparison cmp;
  for (const ScheduleInfo& info : all_schedules()) {  // the named ones, then Auto
    std::string why;
    auto config = configure(info, opts, base, &why);
    if (!config) {
      cmp.skipped.push_back({info.name, why});
      continue;
    }
    CompileOptions co;
    co.layout = config->layout;
    co.has_model = opts.has_model;
    co.pp = opts.pp;
    co.schedule = info.name;
    co.microbatches = opts.microbatches;
    co.cost = &config->cost;  // Auto synthesizes for these
    co.memory_limit = opts.memory_limit;
    co.expert_parallel = opts.expert_parallel;
    Plan plan;
    try {
      plan = compile(co);
    } catch (const UserError& e) {
      std::string reason = e.message();
      if (reason.rfind(info.name + " ", 0) == 0) reason.erase(0, info.name.size() + 1);
      cmp.skipped.push_back({info.name, reason});
      continue;
    }
    CompareRow row = measure_plan(std::move(plan), config->cost, opts.memory_limit);
    row.layout_note = config->note;
    cmp.rows.push_back(std::move(row));
  }
  std::stable_sort(cmp.rows.begin(), cmp.rows.end(), [](const CompareRow& a, const CompareRow& b) {
    if (a.sim.makespan != b.sim.makespan) return a.sim.makespan < b.sim.makespan;
    if (a.sim.steady_period != b.sim.steady_period)
      return a.sim.steady_period < b.sim.steady_period;
    return a.peak_total < b.peak_total;
  });
  return cmp;
}

void emit_compare_table(const Comparison& cmp, const CompareOptions& opts, std::ostream& os) {
  const CostModel shown = opts.cost.unit ? unit_layer_costs() : opts.cost;
  const bool bytes = shown.memory_in_bytes;
  auto mem = [&](double v) { return format_memory(v, bytes); };
  const std::string model = opts.has_model
                                ? fmt::format("layout {}", opts.layout.source)
                                : fmt::format("{} generic stages", opts.layout.num_stages());
  os << fmt::format("{} | pp {} | {} microbatches | {}{}\n", model, opts.pp, opts.microbatches,
                    opts.cost.unit ? "unit costs per layer (F=I=W=1)" : describe(shown),
                    opts.memory_limit ? " | memory limit " + mem(*opts.memory_limit) : "");
  const bool limit = opts.memory_limit.has_value();
  os << fmt::format("{:<22} {:>3} {:<4} {:>11} {:>8} {:>8} {:>20} {:>11} {:>9}{}\n", "schedule",
                    "vpp", "plc", "makespan", "bubble%", "steady%", "peak activation", "comm",
                    "messages", limit ? "  fits (peak with parameters)" : "");
  for (const CompareRow& r : cmp.rows) {
    const std::string comm = r.comm_bytes > 0 ? format_memory(r.comm_bytes, true) : "-";
    os << fmt::format("{:<22} {:>3} {:<4} {:>11.6g} {:>8.2f} {:>8.2f} {:>20} {:>11} {:>9}{}\n",
                      r.schedule, r.vpp, placement_name(r.placement), r.sim.makespan,
                      100.0 * r.sim.bubble, 100.0 * r.sim.steady_bubble,
                      fmt::format("{} (rank {})", mem(r.peak_memory), r.peak_rank), comm,
                      r.messages,
                      limit ? fmt::format("  {} ({} on rank {})", r.fits ? "yes" : "no",
                                          mem(r.peak_total), r.peak_total_rank)
                            : "");
  }
  if (cmp.rows.empty()) os << "(no schedule can run this configuration)\n";
  bool any_note = false;
  for (const CompareRow& r : cmp.rows) {
    if (r.layout_note.empty()) continue;
    if (!any_note) os << "\nconfigurations:\n";
    any_note = true;
    os << fmt::format("  {}: {}\n", r.schedule, r.layout_note);
  }
  if (!cmp.skipped.empty()) {
    os << "\nskipped:\n";
    for (const Skipped& s : cmp.skipped) os << fmt::format("  {}: {}\n", s.schedule, s.reason);
  }
}

}  // namespace ppc
