#include "compiler/prepare.h"

#include <utility>

#include "compiler/diagnostic.h"

namespace ppc {

PreparedPlan prepare_plan(Plan plan, const CostModel& cost, const std::string& imported_from) {
  // The compute order first: lowering assumes a well-formed one.
  Plan compute_only = plan;
  compute_only.lowered.clear();
  VerifyReport report = verify(compute_only);
  if (report.ok()) {
    if (!plan.is_lowered()) plan = lower_for_model(plan, cost);
    report = verify(plan);
  }
  if (!report.ok()) {
    const bool imported = !imported_from.empty();
    std::string msg =
        imported ? "the plan is not valid:" : "internal error: the generated plan is not valid:";
    for (const auto& e : report.errors) msg += "\n  " + e;
    if (report.truncated) msg += "\n  (more errors not shown)";
    if (imported) throw UserError(msg, input_location(imported_from));
    throw InternalError(msg);
  }
  return PreparedPlan{std::move(plan), std::move(report)};
}

}  // namespace ppc
