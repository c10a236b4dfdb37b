// The plan's microbatch order (plan_order.h).
#include "runtime/train/plan_order.h"

#include <ATen/ATen.h>

#include "compiler/diagnostic.h"

namespace pprt {

namespace {

bool data_order(const std::vector<int>& order) {
  for (size_t k = 0; k < order.size(); ++k)
    if (order[k] != static_cast<int>(k)) return false;
  return true;
}

// v[order[k]] = old v[k], for vectors of one entry per microbatch (empty ones left alone).
template <class T>
void to_data_order(std::vector<T>& v, const std::vector<int>& order) {
  if (v.empty()) return;
  PPC_INTERNAL_ASSERT(v.size() == order.size(), "one entry per microbatch");
  std::vector<T> out(v.size());
  for (size_t k = 0; k < order.size(); ++k) out[static_cast<size_t>(order[k])] = v[k];
  v = std::move(out);
}

}  // namespace

at::Tensor rows_in_plan_order(const at::Tensor& tokens, const std::vector<int>& order) {
  if (order.empty() || data_order(order)) return tokens;
  const auto m = static_cast<int64_t>(order.size());
  PPC_INTERNAL_ASSERT(tokens.size(0) % m == 0, "rows in whole microbatches");
  const int64_t b = tokens.size(0) / m;
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(tokens.size(0)));
  for (int d : order)
    for (int64_t r = 0; r < b; ++r) rows.push_back(d * b + r);
  return tokens.index_select(0, at::tensor(rows, at::kLong).to(tokens.device()));
}

void report_in_data_order(StepReport& rep, const std::vector<int>& order) {
  if (order.empty() || data_order(order)) return;
  to_data_order(rep.losses, order);
  for (ReportedSums& r : rep.reported) {
    to_data_order(r.sum, order);
    to_data_order(r.count, order);
  }
}

}  // namespace pprt
