// What ppcompile does with every plan before it emits it, generated or imported (CSV, JSON):
// check_and_lower (verify the compute order, lower it if the plan holds no lowered order, verify
// the lowered order, simulate it if asked), and the error when the plan fails.
#pragma once

#include <string>

#include "compiler/check.h"
#include "compiler/plan.h"
#include "compiler/simulate.h"

namespace ppc {

// check_and_lower(plan, cost, need), and a plan that fails is a UserError naming `imported_from`
// (the file it was read from) with one verifier message per line, or, when `imported_from` is
// empty (the plan was generated), an InternalError. The result's plan is lowered and valid.
// `alongside` as in check_and_lower: its parts are called with the plan once it is known to be
// valid, or beside its last verification (and its lowering).
CheckedPlan prepare_plan(Plan plan, const CostModel& cost, const std::string& imported_from,
                         SimulationNeed need = SimulationNeed::None,
                         const Alongside& alongside = {});

}  // namespace ppc
