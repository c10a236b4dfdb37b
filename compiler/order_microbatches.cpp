#include "compiler/order_microbatches.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "compiler/deadlock_model.h"
#include "compiler/diagnostic.h"
#include "compiler/lengths.h"
#include "compiler/measured_costs.h"
#include "compiler/simulate.h"

namespace ppc {

namespace {

// The simulated makespan of `plan` for any microbatch order, without a timeline: the run the
// simulator makes (simulate.cpp), with the lengths' costs reassigned per order.
class StepTimer {
 public:
  StepTimer(const Plan& plan, const CostModel& model)
      : plan_(plan), model_(model), lengths_(plan, model) {
    costs_.compute = [this](const Action& a, int) { return lengths_.action_cost(a, model_); };
    costs_.begin = rank_starts(plan, stage_costs(plan, model));
    if (model.measured) {
      messages_ = message_costs(plan, model);
      costs_.transfer = [this](const Action& send) {
        return lengths_.transfer(send, messages_.time[MessageCosts::index(send)], model_.latency);
      };
    } else if (const double per_message = message_time(model); per_message > 0) {
      costs_.transfer = [this, per_message](const Action& send) {
        return lengths_.transfer(send, per_message, model_.latency);
      };
    }
    if (model.post > 0) eager_.post = {model.post};
    eager_.start = costs_.begin;
  }

  double step(const std::vector<int>& order) {
    lengths_.assign(order);
    ++runs_;
    const Execution ex = model_.messages == MessageModel::Eager
                             ? execute_eager(plan_, costs_, false, eager_)
                             : execute(plan_, &costs_, false);
    if (!ex.finished()) throw UserError("the plan does not run to completion: " + ex.failure());
    return *std::max_element(ex.end.begin(), ex.end.end());
  }
  int runs() const { return runs_; }

 private:
  const Plan& plan_;
  const CostModel& model_;
  LengthCosts lengths_;
  ExecCosts costs_;
  EagerOptions eager_;
  MessageCosts messages_;
  int runs_ = 0;
};

// `sorted` (data microbatches, shortest first) laid out with the short ones at both ends and the
// long ones in the middle, or the long ones at the ends when `long_ends`.
std::vector<int> organ_pipe(const std::vector<int>& sorted, bool long_ends) {
  const size_t n = sorted.size();
  std::vector<int> out(n);
  size_t front = 0, back = n;
  for (size_t k = 0; k < n; ++k) {
    const int mb = sorted[long_ends ? n - 1 - k : k];
    if (k % 2 == 0)
      out[front++] = mb;
    else
      out[--back] = mb;
  }
  return out;
}

// The first orders the search tries (lengths.h): see order_microbatches.h.
std::vector<std::vector<int>> first_orders(const Plan& plan, const std::vector<long long>& len) {
  const size_t m = len.size();
  std::vector<int> identity(m);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<int> asc = identity;
  std::stable_sort(asc.begin(), asc.end(), [&](int a, int b) {
    return len[static_cast<size_t>(a)] < len[static_cast<size_t>(b)];
  });
  std::vector<int> desc(asc.rbegin(), asc.rend());
  std::vector<std::vector<int>> out{identity, asc, desc, organ_pipe(asc, false),
                                    organ_pipe(asc, true)};
  if (plan.copies == 2) {  // the lengths dealt to the two directions in turn, longest first
    const size_t first = (m + 1) / 2;
    std::vector<int> a, b;
    for (size_t k = 0; k < m; ++k) {  // in snake order (a b b a a b b ...): totals stay close
      const bool to_a = k % 4 == 0 || k % 4 == 3;
      const bool a_full = a.size() == first, b_full = b.size() == m - first;
      ((to_a && !a_full) || b_full ? a : b).push_back(desc[k]);
    }
    std::vector<int> a_asc(a.rbegin(), a.rend()), b_asc(b.rbegin(), b.rend());
    for (bool long_ends : {false, true}) {
      std::vector<int> o = organ_pipe(a_asc, long_ends), ob = organ_pipe(b_asc, long_ends);
      o.insert(o.end(), ob.begin(), ob.end());
      out.push_back(std::move(o));
    }
    std::vector<int> o = a;  // longest first in each direction
    o.insert(o.end(), b.begin(), b.end());
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

OrderResult order_microbatches(const Plan& plan, const CostModel& model,
                               const OrderOptions& options) {
  PPC_INTERNAL_ASSERT(plan.is_lowered(), "order_microbatches needs a lowered plan");
  const auto& len = model.microbatch_lengths;
  PPC_INTERNAL_ASSERT(len.size() == static_cast<size_t>(plan.microbatches),
                      "order_microbatches needs one length per microbatch");
  StepTimer timer(plan, model);
  OrderResult r;
  const auto firsts = first_orders(plan, len);
  for (const auto& o : firsts) {
    const double t = timer.step(o);
    if (r.order.empty()) r.data_order_step = t;
    if (r.order.empty() || t < r.step) {
      r.step = t;
      r.order = o;
    }
  }
  const size_t m = len.size();
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<size_t> pick(0, m - 1);
  std::vector<int> o = r.order;
  // Draws of two slots; one of equal lengths changes nothing and is not simulated.
  for (long long draws = 0; m > 1 && timer.runs() < options.simulations &&
                            draws < 16LL * std::max(options.simulations, 1);
       ++draws) {
    const size_t i = pick(rng), j = pick(rng);
    if (len[static_cast<size_t>(o[i])] == len[static_cast<size_t>(o[j])]) continue;
    std::swap(o[i], o[j]);
    const double t = timer.step(o);
    if (t < r.step * (1 - 1e-12)) {
      r.step = t;
      r.order = o;
    } else {
      std::swap(o[i], o[j]);
    }
  }
  r.simulations = timer.runs();
  return r;
}

Plan plan_for_lengths(Plan plan, const CostModel& model, const std::vector<long long>& lengths,
                      const OrderOptions& options) {
  if (lengths.size() != static_cast<size_t>(plan.microbatches))
    throw UserError(
        fmt::format("{} lengths for a plan of {} microbatches", lengths.size(), plan.microbatches));
  for (long long t : lengths)
    if (t <= 0) throw UserError(fmt::format("a microbatch length must be positive, got {}", t));
  CostModel m = model;
  m.microbatch_lengths = lengths;
  plan.microbatch_order.clear();
  plan.microbatch_order = order_microbatches(plan, m, options).order;
  return plan;
}

}  // namespace ppc
