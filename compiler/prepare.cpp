#include "compiler/prepare.h"

#include <utility>

#include "compiler/diagnostic.h"

namespace ppc {

CheckedPlan prepare_plan(Plan plan, const CostModel& cost, const std::string& imported_from,
                         SimulationNeed need, const Alongside& alongside) {
  CheckedPlan checked = check_and_lower(std::move(plan), cost, need, alongside);
  const VerifyReport& report = checked.report;
  if (!report.ok()) {
    const bool imported = !imported_from.empty();
    std::string msg =
        imported ? "the plan is not valid:" : "internal error: the generated plan is not valid:";
    for (const auto& e : report.errors) msg += "\n  " + e;
    if (report.truncated) msg += "\n  (more errors not shown)";
    if (imported) throw UserError(msg, input_location(imported_from));
    throw InternalError(msg);
  }
  return checked;
}

}  // namespace ppc
