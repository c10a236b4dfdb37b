// --replan-lengths (replan.h).
#include "runtime/train/replan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "compiler/diagnostic.h"
#include "compiler/lengths.h"
#include "compiler/order_microbatches.h"
#include "runtime/data/documents.h"
#include "runtime/data/token_source.h"
#include "runtime/fail.h"
#include "runtime/job.h"
#include "runtime/output/median.h"

namespace pprt {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

ppc::CostModel replan_cost_model(const Job& job, const std::string& cost_file) {
  ppc::CostModel m;
  if (!cost_file.empty()) {
    try {
      m = ppc::read_cost_model(cost_file);
    } catch (const ppc::UserError& e) {
      const std::string text = e.format();  // "FILE: FIELD: ..." (its first line)
      fail("--replan-costs", text.substr(0, text.find('\n')));
    }
  } else {
    m = ppc::unit_layer_costs();
    auto lengths = std::make_shared<ppc::LengthModel>();
    const double t0 = job.setup.seq_len;
    lengths->seq_len = t0;
    if (job.model.is_object() && job.model.contains("hidden") && job.model["hidden"].is_number())
      lengths->attention = t0 / (6 * job.model["hidden"].get<double>() + t0);
    m.length_model = std::move(lengths);
  }
  // The file against the plan: one planning for lengths of --seq-len (every stage costed, every
  // message timed); what it finds wrong names the flag.
  try {
    ppc::OrderOptions once;
    once.simulations = 1;
    ppc::plan_for_lengths(
        job.plan, m,
        std::vector<long long>(static_cast<size_t>(job.plan.microbatches), job.setup.seq_len),
        once);
  } catch (const ppc::UserError& e) {
    fail("--replan-costs", fmt::format("{}: {}", cost_file, e.message()));
  }
  return m;
}

std::vector<long long> step_lengths(const Job& job, const TokenSource& data, int step,
                                    int replica) {
  const int mbs = job.plan.microbatches, len = job.setup.seq_len + 1;
  const int share = job.train.global_batch / job.dp, b = share / mbs;
  std::vector<int64_t> rows;
  data.batch(step, static_cast<int64_t>(replica) * share, share, len, rows);
  std::vector<long long> out;
  for (int mb = 0; mb < mbs; ++mb)
    out.push_back(job.train.granule > 0
                      ? varlen_length(rows.data() + static_cast<ptrdiff_t>(mb) * b * len, b, len,
                                      job.train.granule)
                      : job.setup.seq_len);
  return out;
}

void check_replanned(const ppc::Plan& base, const ppc::Plan& ordered) {
  const auto m = static_cast<size_t>(base.microbatches);
  PPC_INTERNAL_ASSERT(ordered.microbatch_order.empty() || ordered.microbatch_order.size() == m,
                      "a replanned order of one entry per microbatch");
  std::vector<bool> seen(m, false);
  for (int d : ordered.microbatch_order) {
    PPC_INTERNAL_ASSERT(d >= 0 && static_cast<size_t>(d) < m && !seen[static_cast<size_t>(d)],
                        "a replanned order that is a permutation of the microbatches");
    seen[static_cast<size_t>(d)] = true;
  }
  PPC_INTERNAL_ASSERT(ordered.compute == base.compute && ordered.lowered == base.lowered &&
                          ordered.placement == base.placement &&
                          ordered.microbatches == base.microbatches &&
                          ordered.copies == base.copies,
                      "a replanned plan that runs the verified plan's actions");
}

LengthPlanner::LengthPlanner(const Job& job, const TokenSource& data, int replica)
    : job_(job), data_(data), replica_(replica) {
  PPC_INTERNAL_ASSERT(job.replan_costs != nullptr, "--replan-lengths's cost model");
}

LengthPlanner::~LengthPlanner() {
  if (next_.valid()) next_.wait();
}

LengthPlanner::Planned LengthPlanner::plan(int step) const {
  const auto t0 = Clock::now();
  // ppc::plan_for_lengths, keeping the simulated steps it compares.
  ppc::CostModel costs = *job_.replan_costs;
  costs.microbatch_lengths = step_lengths(job_, data_, step, replica_);
  const ppc::OrderResult r = ppc::order_microbatches(job_.plan, costs);
  ppc::Plan ordered = job_.plan;
  ordered.microbatch_order = r.order;
  check_replanned(job_.plan, ordered);
  return Planned{step, r.order, std::chrono::duration<double>(Clock::now() - t0).count(),
                 r.data_order_step, r.step};
}

std::vector<int> LengthPlanner::order(int step) {
  const auto t0 = Clock::now();
  Planned p;
  if (next_.valid()) {
    p = next_.get();  // rethrows what the planning threw
    PPC_INTERNAL_ASSERT(p.step == step, "the steps are planned in turn");
  } else {
    p = plan(step);
  }
  times_.waited_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  times_.planning_s.push_back(p.seconds);
  times_.data_order_step.push_back(p.data_order_step);
  times_.planned_step.push_back(p.planned_step);
  bool data_order = true;
  for (size_t k = 0; k < p.order.size(); ++k) data_order &= p.order[k] == static_cast<int>(k);
  if (!data_order) ++times_.reordered;
  if (step + 1 < job_.last_step())
    next_ = std::async(std::launch::async, [this, next = step + 1] { return plan(next); });
  return p.order;
}

std::string replan_summary(const ReplanTimes& t, const std::vector<double>& step_s) {
  if (t.planning_s.empty()) return "";
  const double plan = median(t.planning_s), step = median(step_s);
  // The first step's planning is not hidden (nothing runs before it): the waits after it are.
  std::vector<double> waited(t.waited_s.begin() + 1, t.waited_s.end());
  std::string s = fmt::format(
      "microbatch order replanned for the lengths of {} steps ({} out of data order): planning "
      "{:.3f} ms a step (median; max {:.3f})",
      t.planning_s.size(), t.reordered, plan * 1e3,
      *std::max_element(t.planning_s.begin(), t.planning_s.end()) * 1e3);
  if (step > 0) s += fmt::format(", {:.2f} % of the median step", 100 * plan / step);
  if (!waited.empty())
    s += fmt::format(
        "; hidden behind the step before: the steps after the first waited {:.3f} ms "
        "for it (median; max {:.3f})",
        median(waited) * 1e3, *std::max_element(waited.begin(), waited.end()) * 1e3);
  const double data = median(t.data_order_step), planned = median(t.planned_step);
  s += fmt::format(
      "\nsimulated step under --replan-lengths's costs: {:.4g} in data order, {:.4g} in the "
      "planned order (medians over the steps; {:.1f} % shorter)",
      data, planned, data > 0 ? 100 * (data - planned) / data : 0.0);
  return s;
}

}  // namespace pprt
