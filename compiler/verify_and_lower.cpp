#include "compiler/verify_and_lower.h"

#include <fmt/format.h>

#include <exception>
#include <optional>
#include <thread>
#include <utility>

#include "compiler/deadlock_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"

namespace ppc {

VerifyReport lower_while_verifying(Plan& plan, const VerifyOptions& opts,
                                   const std::function<void()>& lowered) {
  return verify_as_lowered(plan, opts, [&](LoweringFeed* feed) {
    lower_in_place(plan, LoweringCosts{}, feed);
    if (lowered) lowered();
  });
}

VerifiedPlan verify_and_lower(Plan plan, const CostModel& cost, SimulationNeed need,
                              const Alongside& alongside, const AfterPasses& after) {
  VerifiedPlan out;
  // Lowering under unit costs (lower_for_model's, and the verifier's own check of the compute
  // order) is one and the same run: do it once, below.
  const bool lower_here = !plan.is_lowered() && cost.unit;
  VerifyOptions compute;
  compute.compute_only = true;
  compute.check_runs = !lower_here;
  VerifyReport compute_report = verify(plan, compute);
  if (!compute_report.ok()) {
    out.report = std::move(compute_report);
    out.plan = std::move(plan);
    if (after.verified) after.verified(out.report);
    return out;
  }
  if (!lower_here && !plan.is_lowered()) plan = lower_for_model(plan, cost);
  out.plan = std::move(plan);  // lowered below in place when lower_here
  if (!lower_here && after.lowered) after.lowered(out.plan);

  std::optional<SimulationRun> run;
  if (need != SimulationNeed::None) run.emplace(out.plan, cost, need == SimulationNeed::Timeline);
  Execution ex;
  VerifyOptions lowered;
  if (run) {
    lowered.costs = &run->costs();
    lowered.record_times = run->timeline();
    lowered.execution = &ex;
  }
  std::exception_ptr alongside_error;
  auto call = [&](const AlongsideFn& part) {
    if (!part || alongside_error) return;
    try {
      part(out.plan);
    } catch (...) {
      alongside_error = std::current_exception();
    }
  };
  if (lower_here) {
    // Lowering, with the lowered plan's verification beside it (lower_while_verifying); the compute
    // order's part of `alongside` beside both, then its whole plan's part beside the rest of that
    // verification.
    std::jthread beside;  // joined on the way out, even on a throw
    if (alongside.compute_order) beside = std::jthread([&] { call(alongside.compute_order); });
    try {  // out.report is not what `alongside` reads: it may be written meanwhile
      out.report = lower_while_verifying(out.plan, lowered, [&] {
        if (after.lowered) after.lowered(out.plan);
        if (!alongside.whole_plan) return;
        if (beside.joinable()) beside.join();  // the compute order's part comes first
        beside = std::jthread([&] { call(alongside.whole_plan); });
      });
    } catch (const UserError& e) {
      out.report = std::move(compute_report);
      out.report.errors.push_back(e.message());  // as the verifier reports it
    }
    if (beside.joinable()) beside.join();  // `alongside` has finished with out.plan
  } else {
    out.report = verify(out.plan, lowered);
    if (out.report.ok()) {
      call(alongside.compute_order);
      call(alongside.whole_plan);
    }
  }
  if (after.verified) after.verified(out.report);
  if (!out.report.ok()) return out;
  if (alongside_error) std::rethrow_exception(alongside_error);
  if (run) {
    out.sim = run->finish(std::move(ex));
    if (after.simulated) after.simulated(*out.sim);
  }
  return out;
}

VerifiedPlan verify_and_lower_or_throw(Plan plan, const CostModel& cost,
                                       const std::string& imported_from, SimulationNeed need,
                                       const Alongside& alongside, const AfterPasses& after) {
  VerifiedPlan checked = verify_and_lower(std::move(plan), cost, need, alongside, after);
  const VerifyReport& report = checked.report;
  if (!report.ok()) {
    const bool imported = !imported_from.empty();
    std::string msg = imported ? "the plan is not valid:"
                               : fmt::format("internal error: the generated {} plan is not valid:",
                                             checked.plan.schedule);
    for (const auto& e : report.errors) msg += "\n  " + e;
    if (report.truncated) msg += "\n  (more errors not shown)";
    if (imported) throw UserError(msg, input_location(imported_from));
    throw InternalError(msg);
  }
  return checked;
}

}  // namespace ppc
