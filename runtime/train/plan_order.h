// The plan's microbatch order (Plan::microbatch_order; docs/pprun.md, "The microbatch order"):
// plan microbatch k processes the step's data microbatch order[k]. The executor runs plan
// microbatches (microbatch mb is rows [mb b, (mb + 1) b) of what it is given), so the rows go in
// plan order and what it reports per microbatch comes back in data order. Included only by
// LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "runtime/train/executor.h"

namespace pprt {

// `tokens` (data order, `order.size()` microbatches of equal rows) with microbatch k's rows those
// of data microbatch order[k]; `tokens` itself when `order` is empty or data order.
at::Tensor rows_in_plan_order(const at::Tensor& tokens, const std::vector<int>& order);

// `rep`'s per-microbatch losses and reported values, given per plan microbatch, put in data order:
// entry order[k] takes plan microbatch k's. Nothing when `order` is empty.
void report_in_data_order(StepReport& rep, const std::vector<int>& order);

}  // namespace pprt
