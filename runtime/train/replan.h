// --replan-lengths (issue 41; docs/pprun.md, "The microbatch order"): each step's microbatch order
// planned for the lengths the data loader delivers in that step (ppc::plan_for_lengths), on a
// thread of its own while the step before runs, and checked before it runs. No LibTorch.
//
// Every rank of a pipeline reads its replica's rows itself (token_source.h) and plans from them
// with the same plan and cost model: plan_for_lengths is deterministic (order_microbatches.h), so
// the ranks that exchange a replica's microbatches run the same order without a message. Each
// replica plans for its own rows (the plan's actions, which data parallelism's reductions follow,
// are the same in every order).
#pragma once

#include <future>
#include <memory>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/plan.h"

namespace pprt {

struct Job;
class TokenSource;

// --replan-lengths's cost model (Job::replan_costs): --replan-costs FILE's (a cost file, such as
// pprun --profile writes, with its per-length entries), else a unit cost per layer whose time grows
// with the microbatch's length as a Llama layer's does (attention's share T0 / (6 d + T0) at
// --seq-len T0 for hidden size d, docs/cost-model.md). Checked against the job's plan: a cost file
// that does not fit it is a ppc::UserError naming --replan-costs.
ppc::CostModel replan_cost_model(const Job& job, const std::string& cost_file);

// The lengths of step `step`'s microbatches, in data order, as --varlen cuts them (varlen_length
// of each microbatch's rows of replica `replica`'s share).
std::vector<long long> step_lengths(const Job& job, const TokenSource& data, int step, int replica);

// `ordered` is `base` (lowered and verified when it was loaded) with only its microbatch_order
// changed, to a permutation of the microbatches: then everything the verification proved (the
// dependencies and deadlock freedom of the actions, which name plan microbatches) holds for it.
// Throws ppc::InternalError otherwise.
void check_replanned(const ppc::Plan& base, const ppc::Plan& ordered);

// What the planning of the run's steps took.
struct ReplanTimes {
  std::vector<double> planning_s;  // per step: its rows read, its lengths and plan_for_lengths
  std::vector<double> waited_s;    // per step: how long the step waited for its order
  // per step: the simulated step under the cost model in data order and in the planned order
  std::vector<double> data_order_step, planned_step;
  int reordered = 0;  // steps whose order is not data order
};

class LengthPlanner {
 public:
  // Plans replica `replica`'s share of each step of `job` (job.replan_costs set).
  LengthPlanner(const Job& job, const TokenSource& data, int replica);
  ~LengthPlanner();  // waits for a planning in flight

  // Step `step`'s Plan::microbatch_order (planned in the background since the previous call, or
  // now for the first); then starts planning step + 1 if the run has one.
  std::vector<int> order(int step);
  const ReplanTimes& times() const { return times_; }

 private:
  struct Planned {
    int step = 0;
    std::vector<int> order;
    double seconds = 0;
    double data_order_step = 0, planned_step = 0;  // simulated
  };
  Planned plan(int step) const;

  const Job& job_;
  const TokenSource& data_;
  int replica_;
  std::future<Planned> next_;
  ReplanTimes times_;
};

// The end-of-run line: "replanned the microbatch order of 20 steps for their lengths (18 out of
// data order): planning 0.41 ms a step (median; max 0.9), 0.3 % of the median step; ..." and a
// second line with the simulated steps in data order and planned. `step_s`: the run's step times.
std::string replan_summary(const ReplanTimes& t, const std::vector<double>& step_s);

}  // namespace pprt
