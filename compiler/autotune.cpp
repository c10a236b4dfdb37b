// ppcompile --autotune: --compare's configurations plus every schedule x stages per rank on a
// balanced layout, for each microbatch count asked; ranked by simulated makespan (autotune.h).
#include "compiler/autotune.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <exception>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "compiler/balance.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "compiler/measured_costs.h"
#include "compiler/schedule.h"
#include "compiler/split_list.h"
#include "compiler/synthesize.h"

namespace ppc {

namespace {

constexpr size_t kMaxCounts = 64;  // microbatch counts one search takes
constexpr int kMaxAutoVpp = 8;     // stages per rank tried for the schedules that take any

[[noreturn]] void bad_counts(const std::string& text, const std::string& why) {
  throw UserError(fmt::format("{} in '{}' (give a count, a list such as 8,16,32 or a range such "
                              "as 8-64 or 8-64:8)",
                              why, text),
                  input_location("--microbatches"));
}

int parse_count(const std::string& text, std::string_view s) {
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    bad_counts(text, fmt::format("'{}' is not a count", s));
  if (v < 1 || v > kMaxMicrobatches)
    bad_counts(text, fmt::format("{} is not between 1 and {}", v, kMaxMicrobatches));
  return v;
}

}  // namespace

int parse_microbatch_count(const std::string& text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (!text.empty() && ec == std::errc() && end == text.data() + text.size()) return v;
  if (text.find_first_of(",-") != std::string::npos)
    throw UserError(fmt::format("'{}': lists and ranges of counts are for --autotune", text),
                    input_location("--microbatches"));
  throw UserError(fmt::format("expected a count, got '{}'", text),
                  input_location("--microbatches"));
}

std::vector<int> parse_microbatch_counts(const std::string& text, int pp) {
  std::set<int> counts;
  for (const std::string_view item : split_list(text)) {
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      counts.insert(parse_count(text, item));
    } else {
      const size_t colon = item.find(':', dash);
      const int lo = parse_count(text, item.substr(0, dash));
      const int hi = parse_count(
          text, item.substr(dash + 1, colon == std::string_view::npos ? std::string_view::npos
                                                                      : colon - dash - 1));
      if (lo > hi) bad_counts(text, fmt::format("the range {}-{} is empty", lo, hi));
      const int step =
          colon == std::string_view::npos ? 0 : parse_count(text, item.substr(colon + 1));
      const size_t before = counts.size();
      for (long long m = lo; m <= hi && counts.size() <= kMaxCounts; ++m)
        if (step ? (m - lo) % step == 0 : pp > 0 && m % pp == 0) counts.insert(static_cast<int>(m));
      if (counts.size() == before && !step)
        bad_counts(text, fmt::format("no multiple of --pp {} lies in {}-{}", pp, lo, hi));
    }
    if (counts.size() > kMaxCounts)
      bad_counts(text, fmt::format("more than {} microbatch counts", kMaxCounts));
  }
  return {counts.begin(), counts.end()};
}

Autotune autotune(const AutotuneOptions& opts) {
  check_model(opts.layout);
  if (opts.microbatches.empty()) throw UserError("--microbatches is required");
  std::vector<const ScheduleInfo*> schedules;
  for (const std::string& name : opts.schedules) {
    const ScheduleInfo* info = find_schedule(name);
    if (!info)
      throw UserError(fmt::format("unknown schedule '{}' (known: {}; see --list-schedules)", name,
                                  schedule_names()),
                      input_location("--schedule"));
    schedules.push_back(info);
  }
  if (schedules.empty()) {
    for (const ScheduleInfo& info : all_schedules()) schedules.push_back(&info);
  }
  auto searched = [&](const std::string& name) {
    return std::any_of(schedules.begin(), schedules.end(),
                       [&](const ScheduleInfo* s) { return s->name == name; });
  };

  const CostModel cost = opts.cost.unit ? unit_layer_costs() : opts.cost;
  const int layers = static_cast<int>(model_layers(opts.layout).size());
  const int max_vpp = std::clamp(layers / std::max(1, opts.pp), 1, kMaxAutoVpp);
  struct Config {
    const ScheduleInfo* info;
    int vpp;
  };
  std::vector<Config> configs;
  for (const ScheduleInfo* info : schedules) {
    if (info->vpp_rule == VppRule::One) configs.push_back({info, 1});
    if (info->vpp_rule == VppRule::Two) configs.push_back({info, 2});
    if (info->vpp_rule == VppRule::Any)
      for (int v = 1; v <= max_vpp; ++v) configs.push_back({info, v});
  }

  Autotune at;
  at.several_counts = opts.microbatches.size() > 1;
  // Tasks: per microbatch count, --compare's configurations, then each schedule x vpp balanced.
  struct Task {
    int m;
    const Config* config;  // null: compare_schedules
  };
  std::vector<Task> tasks;
  for (const int m : opts.microbatches) {
    tasks.push_back({m, nullptr});
    for (const Config& c : configs) tasks.push_back({m, &c});
  }
  struct Outcome {
    std::vector<AutotuneRow> rows;
    std::vector<Skipped> skipped;
    long long simulations = 0;
  };
  std::vector<Outcome> outcomes(tasks.size());
  auto run_task = [&](const Task& t, Outcome& out) {
    const std::string at_m = at.several_counts ? fmt::format(" (m {})", t.m) : "";
    if (!t.config) {
      // --compare's configurations, as they are.
      CompareOptions co;
      co.layout = opts.layout;
      co.has_model = true;
      co.pp = opts.pp;
      co.microbatches = t.m;
      co.cost = opts.cost;
      co.memory_limit = opts.memory_limit;
      for (CompareRow& row : compare_schedules(co).rows) {
        if (!searched(row.schedule)) continue;
        AutotuneRow r;
        r.layout = layout_string(row.plan.layout);
        r.microbatches = t.m;
        r.row = std::move(row);
        out.rows.push_back(std::move(r));
      }
      return fmt::format("--compare's configurations{}", at_m);
    }
    const Config& c = *t.config;
    if (c.info->synthesize) {
      // Its order depends on the split, so --balance's search does not apply: synthesized once,
      // on the bottleneck-optimal split of the layers into pp x vpp stages.
      try {
        const std::vector<LayerKind> layers = model_layers(opts.layout);
        std::vector<double> weights;
        for (const StageCost& l : model_layer_costs(cost, layers))
          weights.push_back(l.f + std::min(l.b, l.i + l.w));
        const LayerCost& e = cost.empty_stage;
        const BottleneckSplit split =
            min_bottleneck_split(weights, opts.pp * c.vpp, e.f + std::min(e.backward(), e.i + e.w));
        CompileOptions cc;
        cc.layout = split_layers(layers, split.cuts);
        cc.layout.source = layout_string(cc.layout);
        cc.layout.input = "balanced layout";
        cc.has_model = true;
        cc.pp = opts.pp;
        cc.vpp = c.vpp;
        cc.schedule = c.info->name;
        cc.microbatches = t.m;
        cc.cost = &cost;
        cc.memory_limit = opts.memory_limit;
        AutotuneRow r;
        r.row = measure_plan(compile(cc), cost, opts.memory_limit);
        r.microbatches = t.m;
        r.balanced = true;
        r.layout = cc.layout.source;
        out.rows.push_back(std::move(r));
      } catch (const UserError& e) {
        out.skipped.push_back({fmt::format("{} vpp {}", c.info->name, c.vpp), e.message() + at_m});
      }
      return fmt::format("{} vpp {}{}", c.info->name, c.vpp, at_m);
    }
    try {
      BalanceOptions bo;
      bo.layout = opts.layout;
      bo.pp = opts.pp;
      bo.vpp = c.vpp;
      bo.schedule = c.info->name;
      bo.microbatches = t.m;
      bo.cost = cost;
      bo.memory_limit = opts.memory_limit;
      bo.budget = opts.budget;
      const BalanceResult b = balance_layout(bo);
      CompileOptions cc;
      cc.layout = b.layout;
      cc.has_model = true;
      cc.pp = opts.pp;
      cc.vpp = c.vpp;
      cc.schedule = c.info->name;
      cc.microbatches = t.m;
      AutotuneRow r;
      r.row = measure_plan(compile(cc), cost, opts.memory_limit);
      r.microbatches = t.m;
      r.balanced = true;
      r.proven_optimal = b.proven_optimal;
      r.simulations = b.simulations;
      r.layout = b.layout.source;
      out.simulations += b.simulations;
      out.rows.push_back(std::move(r));
    } catch (const UserError& e) {
      std::string reason = e.message();
      if (reason.rfind(c.info->name + " ", 0) == 0) reason.erase(0, c.info->name.size() + 1);
      out.skipped.push_back({fmt::format("{} vpp {}", c.info->name, c.vpp), reason + at_m});
    }
    return fmt::format("{} vpp {}{}", c.info->name, c.vpp, at_m);
  };
  // Best first: rows that fit the limit, then the shorter makespan (per microbatch when several
  // counts were searched), then the shorter steady period, then less memory; a balanced row
  // before the same layout as given.
  const auto ranks_before = [&](const AutotuneRow& a, const AutotuneRow& b) {
    if (a.row.fits != b.row.fits) return a.row.fits;
    const double ka = at.several_counts ? a.per_microbatch() : a.row.sim.makespan;
    const double kb = at.several_counts ? b.per_microbatch() : b.row.sim.makespan;
    if (ka != kb) return ka < kb;
    if (a.row.sim.steady_period != b.row.sim.steady_period)
      return a.row.sim.steady_period < b.row.sim.steady_period;
    if (a.row.peak_total != b.row.peak_total) return a.row.peak_total < b.row.peak_total;
    return a.balanced && !b.balanced;
  };
  using Key = std::tuple<std::string, int, int, std::string>;  // schedule, vpp, m, layout
  const auto key = [](const AutotuneRow& r) {
    return Key{r.row.schedule, r.row.vpp, r.microbatches, r.layout};
  };
  // The table needs the rows' numbers, not their plans; the best row so far keeps its plan and
  // timeline (the winner is emitted as the search verified and simulated it). The best is the
  // first row of the ranking, ties going to the earlier task and row as in the stable sort below,
  // so the row held is the winner whatever the order in which tasks finish.
  struct Held {
    size_t task = 0, row = 0;
    Key key;
    Plan plan;
    std::vector<std::vector<Interval>> times;
    std::vector<std::vector<MemoryPoint>> memory;
  };
  std::optional<Held> held;
  const auto keep_best = [&](size_t task, std::vector<AutotuneRow>& rows) {
    for (size_t j = 0; j < rows.size(); ++j) {
      AutotuneRow& r = rows[j];
      const AutotuneRow* best = held ? &outcomes[held->task].rows[held->row] : nullptr;
      if (!best || ranks_before(r, *best) ||
          (!ranks_before(*best, r) && std::pair(task, j) < std::pair(held->task, held->row)))
        held = Held{task,
                    j,
                    key(r),
                    std::move(r.row.plan),
                    std::move(r.row.sim.times),
                    std::move(r.row.sim.memory)};
      r.row.plan = Plan{};
      r.row.sim.times.clear();
      r.row.sim.memory.clear();
    }
  };
  // Workers take the next task in turn; results land in the task's slot, so the outcome does not
  // depend on the number of threads or on timing.
  std::atomic<size_t> next{0};
  std::mutex mutex;  // for `held`, `done` and the progress calls
  int done = 0;
  auto worker = [&]() {
    for (size_t i; (i = next++) < tasks.size();) {
      Outcome& out = outcomes[i];
      const std::string what = run_task(tasks[i], out);
      std::lock_guard<std::mutex> lock(mutex);
      keep_best(i, out.rows);
      ++done;
      if (opts.progress) opts.progress(done, static_cast<int>(tasks.size()), what);
    }
  };
  unsigned threads = opts.threads > 0
                         ? static_cast<unsigned>(opts.threads)
                         : std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<unsigned>(threads, static_cast<unsigned>(tasks.size()));
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        worker();
      } catch (...) {
        errors[t] = std::current_exception();
        next = tasks.size();
      }
    });
  try {
    worker();
  } catch (...) {
    errors[0] = std::current_exception();
    next = tasks.size();
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (Outcome& o : outcomes) {
    for (AutotuneRow& r : o.rows) at.rows.push_back(std::move(r));
    for (Skipped& sk : o.skipped) at.skipped.push_back(std::move(sk));
    at.simulations += o.simulations;
  }
  at.configurations = static_cast<int>(tasks.size());
  std::stable_sort(at.rows.begin(), at.rows.end(), ranks_before);
  // The same configuration found both ways appears once.
  std::set<Key> seen;
  std::vector<AutotuneRow> unique;
  for (AutotuneRow& r : at.rows)
    if (seen.insert(key(r)).second) unique.push_back(std::move(r));
  at.rows = std::move(unique);
  if (!at.rows.empty()) {  // the winner: the row held
    AutotuneRow& w = at.rows.front();
    PPC_INTERNAL_ASSERT(held && key(w) == held->key, "the row held is not the winner");
    w.row.plan = std::move(held->plan);
    w.row.plan.layout.source = w.layout;  // named as the table names it
    w.row.sim.times = std::move(held->times);
    w.row.sim.memory = std::move(held->memory);
  }
  return at;
}

void emit_autotune_table(const Autotune& at, const AutotuneOptions& opts, size_t top,
                         std::ostream& os) {
  const CostModel shown = opts.cost.unit ? unit_layer_costs() : opts.cost;
  const bool bytes = shown.memory_in_bytes;
  auto mem = [&](double v) { return format_memory(v, bytes); };
  std::string counts;
  for (int m : opts.microbatches) {
    if (!counts.empty()) counts += ',';
    counts += std::to_string(m);
  }
  os << fmt::format("autotune: layout {} | pp {} | {} microbatches | {}{}\n", opts.layout.source,
                    opts.pp, counts,
                    opts.cost.unit ? "unit costs per layer (F=I=W=1)" : describe(shown),
                    opts.memory_limit ? " | memory limit " + mem(*opts.memory_limit) : "");
  os << fmt::format("{} configurations, {} splits simulated; {} by {}, best first{}\n",
                    at.configurations, at.simulations,
                    at.rows.size() > top ? fmt::format("the best {} of {}", top, at.rows.size())
                                         : fmt::format("{} results", at.rows.size()),
                    at.several_counts ? "makespan per microbatch" : "makespan",
                    opts.memory_limit ? " (those that fit the limit first)" : "");
  const bool limit = opts.memory_limit.has_value();
  os << fmt::format("{:>3}  {:<22} {:>3} {:<4} {:>5} {:>11}{} {:>8} {:>20}{}  {:<8} {}\n", "#",
                    "schedule", "vpp", "plc", "m", "makespan",
                    at.several_counts ? fmt::format(" {:>9}", "per mb") : "", "bubble%",
                    "peak per rank", limit ? "  fits" : "", "split", "layout");
  for (size_t i = 0; i < at.rows.size() && i < top; ++i) {
    const AutotuneRow& r = at.rows[i];
    const char* split = !r.balanced ? "as given" : r.proven_optimal ? "optimal" : "balanced";
    os << fmt::format(
        "{:>3}  {:<22} {:>3} {:<4} {:>5} {:>11.6g}{} {:>8.2f} {:>20}{}  {:<8} {}\n", i + 1,
        r.row.schedule, r.row.vpp, placement_name(r.row.placement), r.microbatches,
        r.row.sim.makespan, at.several_counts ? fmt::format(" {:>9.4g}", r.per_microbatch()) : "",
        100.0 * r.row.sim.bubble,
        fmt::format("{} (rank {})", mem(r.row.peak_total), r.row.peak_total_rank),
        limit ? fmt::format("  {:<4}", r.row.fits ? "yes" : "no") : "", split, r.layout);
  }
  if (at.rows.empty()) {
    os << "(no configuration can run)\n";
  } else {
    const AutotuneRow& w = at.rows.front();
    os << fmt::format("\nwinner: {} vpp {} ({} placement), {} microbatches, layout {}\n",
                      w.row.schedule, w.row.vpp, placement_name(w.row.placement), w.microbatches,
                      w.layout);
    os << "peak memory per rank (activations + parameters):";
    for (size_t r = 0; r < w.row.sim.peak_memory.size(); ++r)
      os << fmt::format("{} {}: {}", r ? "," : "", r,
                        mem(w.row.sim.peak_memory[r] + w.row.sim.param_memory[r]));
    os << '\n';
    if (limit && !w.row.fits) os << "no configuration fits the memory limit\n";
  }
  os << "\nsplit: 'as given' is --compare's configuration of the layout; 'balanced' a split found "
        "by --balance; 'optimal' one it proved best\n";
  if (!at.skipped.empty()) {
    os << "\nskipped:\n";
    for (const Skipped& s : at.skipped) os << fmt::format("  {}: {}\n", s.schedule, s.reason);
  }
}

}  // namespace ppc
