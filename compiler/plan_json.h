// The JSON plan (docs/plan-format.md), both ways: what `ppcompile --emit json` writes and what
// `--from-json` and pprun read. The emitters write to a std::ostream and never fail on a valid
// plan; the reader throws UserError naming the input and the field.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/plan.h"
#include "compiler/verify.h"

namespace ppc {

void emit_json(const Plan& plan, const VerifyReport& report, std::ostream& os);
// emit_json in two parts: everything up to the "verification" object, then that object.
// `compute_arrays`, if given, holds json_compute_arrays(plan), made beforehand (ppcompile makes
// them beside lowering).
void emit_json_plan(const Plan& plan, std::ostream& os,
                    const std::vector<std::string>* compute_arrays = nullptr);
// Each rank's "compute" array as emit_json_plan writes it.
std::vector<std::string> json_compute_arrays(const Plan& plan);
void emit_json_verification(const VerifyReport& report, std::ostream& os);

Plan read_plan_json(std::string_view text, const std::string& input_name);

}  // namespace ppc
