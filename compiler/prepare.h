// What ppcompile does with every plan before it emits it, generated or imported (CSV, JSON):
// verify the compute order, lower it if the plan holds no lowered order, verify the lowered order.
#pragma once

#include <string>

#include "compiler/plan.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace ppc {

struct PreparedPlan {
  Plan plan;  // lowered
  VerifyReport report;
};

// Verifies `plan`'s compute order, lowers it with lower_for_model(plan, cost) unless it is lowered
// already, and verifies the lowered order. A plan that fails is a UserError naming `imported_from`
// (the file it was read from) with one verifier message per line, or, when `imported_from` is
// empty (the plan was generated), an InternalError.
PreparedPlan prepare_plan(Plan plan, const CostModel& cost, const std::string& imported_from);

}  // namespace ppc
