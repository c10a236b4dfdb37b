// Reading a plan for execution: everything that can be wrong with it is reported here, as a
// ppc::UserError naming the file and the field, before any rank computes anything.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "compiler/plan.h"

namespace pprt {

// Reads a JSON plan (docs/plan-format.md), verifies it with the compiler's verifier (lowering
// it first if it holds only compute orders) and checks that pprun can run it (check_runnable).
ppc::Plan load_plan(const std::string& path);
// The same for a plan's text; `input` names it in messages.
ppc::Plan load_plan_text(std::string_view text, const std::string& input);

// A verified plan pprun can run: it describes a model (not --stages) whose layout follows the
// model rules (one E first, one L last, no t after an m). `input` names the plan in messages.
void check_runnable(const ppc::Plan& plan, const std::string& input);

// Transports without tags (NCCL) match the k-th send from rank a to rank b with the k-th
// receive on b from a. Returns a description of the first pair of ranks whose orders disagree,
// or nothing if the plan keeps that order.
std::optional<std::string> check_fifo_order(const ppc::Plan& plan);

}  // namespace pprt
