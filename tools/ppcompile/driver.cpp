// ppcompile's compile pipeline for one plan (driver.h), written out in order:
//
//   parse     the model of --layout, --layout-file or --stages; or a whole plan from --from-csv or
//             --from-json (placed and ordered, maybe lowered: place and generate have no work)
//   (balance  with --balance: the model's layers split again for the schedule, balance.h)
//   place     the stages onto the ranks: the plan's skeleton (compile.h)
//   generate  the schedule's compute order, or Auto's synthesized plan (compile.h, synthesize.h)
//   lower     SEND/RECV inserted where a stage's neighbour is on another rank (lower_for_model.h)
//   verify    the compute order, then the lowered plan (verify.h: shape, counts, deadlock model)
//   simulate  its times under the cost model, when the output needs them (simulate.h)
//   emit      the output --emit names (emitters.h), to stdout or -o FILE
//
// lower, verify and simulate are one call (verify_and_lower.h), which runs every replay of the
// plan once and the emitter's work beside them: the fast path that ppcompile's speed rests on.
// --dump-after PASS writes the IR after PASS to stderr (dump.h) and goes on.
#include "tools/ppcompile/driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "compiler/all_to_all.h"
#include "compiler/balance.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/csv.h"
#include "compiler/diagnostic.h"
#include "compiler/dump.h"
#include "compiler/lengths.h"
#include "compiler/order_microbatches.h"
#include "compiler/plan_json.h"
#include "compiler/read_file.h"
#include "compiler/verify.h"
#include "compiler/verify_and_lower.h"
#include "tools/ppcompile/emitters.h"
#include "tools/ppcompile/inputs.h"
#include "tools/ppcompile/searches.h"

namespace ppcompile {

namespace {

using ppc::SimulationNeed;

// --dump-after: the passes whose IR goes to stderr.
class Dumps {
 public:
  explicit Dumps(const std::vector<std::string>& passes) : passes_(passes) {}

  bool any() const { return !passes_.empty(); }
  bool wants(const char* pass) const {
    return std::find(passes_.begin(), passes_.end(), pass) != passes_.end();
  }
  // Writes `what` with `dump` under a heading, if --dump-after names `pass`.
  template <class T>
  void after(const char* pass, const T& what, void (*dump)(const T&, std::ostream&)) const {
    if (!wants(pass)) return;
    std::cerr << fmt::format("--- ppcompile: after {} ---\n", pass);
    dump(what, std::cerr);
    std::cerr.flush();
  }
  // verify_and_lower's passes.
  ppc::AfterPasses of_verify_and_lower() const {
    ppc::AfterPasses a;
    if (wants("lower"))
      a.lowered = [this](const ppc::Plan& p) { after("lower", p, ppc::dump_plan); };
    if (wants("verify"))
      a.verified = [this](const ppc::VerifyReport& r) { after("verify", r, ppc::dump_report); };
    if (wants("simulate"))
      a.simulated = [this](const ppc::Simulation& s) {
        after("simulate", s, ppc::dump_simulation);
      };
    return a;
  }

 private:
  const std::vector<std::string>& passes_;
};

// What parse read: a model's layout, or a whole plan.
struct Parsed {
  ppc::Layout layout;
  bool has_model = false;
  std::optional<ppc::Plan> imported;
};

// parse: the model (for --balance, the one whose layers it splits, checked first), or the plan of
// --from-csv or --from-json.
Parsed parse(const Options& o) {
  if (o.balance) {
    require_layout(o, "--balance", "re-splits");
    if (o.compare)
      throw ppc::UserError(
          "--compare takes the layout as given; --autotune balances every schedule",
          ppc::input_location("--balance"));
    return Parsed{model_to_split(o), true, std::nullopt};
  }
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
    return Parsed{{}, false, ppc::read_csv(ppc::read_file(o.from_csv), io)};
  }
  if (!o.from_json.empty())
    return Parsed{{}, false, ppc::read_plan_json(ppc::read_file(o.from_json), o.from_json)};
  auto [layout, has_model] = load_model(o, " (or --from-csv FILE)");
  return Parsed{std::move(layout), has_model, std::nullopt};
}

// What compile() takes for the model: the flags' sizes and schedule, `cost` and `limit` for Auto.
ppc::CompileOptions compile_options(const Options& o, Parsed&& model, std::optional<int> vpp,
                                    const ppc::CostModel& cost, std::optional<double> limit) {
  ppc::CompileOptions co;
  co.layout = std::move(model.layout);
  co.has_model = model.has_model;
  note_uncosted(cost, co.layout);
  require_sizes(o, true);
  if (o.num_layers >= 0) co.num_layers = o.num_layers;
  co.pp = o.pp;
  co.vpp = vpp;
  co.schedule = o.schedule;
  co.microbatches = o.microbatches;
  co.cost = &cost;
  co.memory_limit = limit;
  co.memory = memory_policy(o);
  co.memory_input = o.recompute.empty() ? "--offload" : "--recompute";
  co.expert_parallel = {o.ep, o.first_dense};
  return co;
}

// --ep on an imported plan, and --replica-plans (issue 40): the all-to-alls of every EP group
// issued in one order (all_to_all.h), one line and exit 2 where they are not.
void check_replicas(const Options& o, ppc::Plan& plan) {
  auto apply_ep = [&](ppc::Plan& p, const std::string& where) {
    if (o.ep == 1 && o.first_dense == 0) return;
    p.expert_parallel = {o.ep, o.first_dense};
    if (std::string bad = ppc::check_expert_parallel(p); !bad.empty())
      throw ppc::UserError(bad, ppc::input_location(where));
  };
  if (!o.from_json.empty() || !o.from_csv.empty()) apply_ep(plan, "--ep");
  if (o.replica_plans.empty()) return;
  if (!ppc::verify(plan).ok()) return;  // verify_and_lower says why, below
  if (!plan.expert_parallel.on())
    throw ppc::UserError("needs --ep above 1 (or a plan with expert_parallel)",
                         ppc::input_location("--replica-plans"));
  std::vector<ppc::Plan> others;
  for (const std::string& f : o.replica_plans) {
    others.push_back(ppc::read_plan_json(ppc::read_file(f), f));
    if (!others.back().expert_parallel.on()) others.back().expert_parallel = plan.expert_parallel;
    const ppc::VerifyReport rep = ppc::verify(others.back());
    if (!rep.ok())
      throw ppc::UserError("the plan is not valid: " + rep.errors.front(), ppc::input_location(f));
  }
  std::vector<const ppc::Plan*> replicas{&plan};
  for (const ppc::Plan& p : others) replicas.push_back(&p);
  const std::vector<std::string> errors = ppc::check_all_to_all_orders(replicas, 1);
  if (!errors.empty()) throw ppc::UserError(errors.front(), ppc::input_location("--replica-plans"));
}

}  // namespace

int compile_and_emit(const Options& o) {
  const Dumps dumps(o.dump_after);
  ppc::CostModel cost = cost_model(o);  // --lengths adds the microbatches' lengths below
  Emit e{.o = o, .cost = cost, .limit = memory_limit(o)};
  const std::string imported_from = !o.from_csv.empty() ? o.from_csv : o.from_json;

  Parsed parsed = parse(o);
  ppc::Plan plan;
  if (parsed.imported) {
    plan = std::move(*parsed.imported);
    for (const char* pass : {"parse", "place", "generate"}) dumps.after(pass, plan, ppc::dump_plan);
  } else {
    dumps.after("parse", parsed.layout, ppc::dump_layout);
    std::optional<ppc::BalanceResult> balanced;
    std::optional<int> vpp = o.vpp != -1 ? std::optional<int>(o.vpp) : std::nullopt;
    if (o.balance) {
      balanced = run_balance(o, parsed.layout, cost, e.limit);
      e.balanced = &*balanced;
      parsed.layout = balanced->layout;
      vpp = balanced->vpp;
    }
    const ppc::CompileOptions co = compile_options(o, std::move(parsed), vpp, cost, e.limit);
    const ppc::ScheduleInfo& info = ppc::resolve_schedule(co.schedule);
    plan = ppc::plan_skeleton(co, info);
    dumps.after("place", plan, ppc::dump_plan);
    plan = ppc::generate(std::move(plan), co, info);
    dumps.after("generate", plan, ppc::dump_plan);
  }

  check_replicas(o, plan);

  // --lengths: each microbatch at its length; Auto (or --microbatch-order lengths) orders them.
  if (!o.lengths_file.empty()) {
    cost.microbatch_lengths = ppc::read_lengths(o.lengths_file, plan.microbatches);
    const std::string order = !o.microbatch_order.empty() ? o.microbatch_order
                              : plan.schedule == "Auto"   ? "lengths"
                                                          : "data";
    if (order == "data" && !o.microbatch_order.empty()) plan.microbatch_order.clear();
    if (order == "lengths") {
      plan = ppc::verify_and_lower_or_throw(std::move(plan), cost, imported_from).plan;
      plan.microbatch_order = ppc::order_microbatches(plan, cost).order;
    }
  }

  // lower, verify (the compute order first: lowering assumes a well-formed one), simulate, emit.
  const ppc::AfterPasses after = dumps.of_verify_and_lower();
  return emit(e, [&](SimulationNeed need, const ppc::Alongside& alongside) {
    if (dumps.wants("simulate")) need = std::max(need, SimulationNeed::Summary);
    return ppc::verify_and_lower_or_throw(std::move(plan), cost, imported_from, need, alongside,
                                          after);
  });
}

}  // namespace ppcompile
