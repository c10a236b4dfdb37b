// The simulator: start and end of every action of a lowered plan under a cost model, following
// the deadlock model's semantics (deadlock_model.h): compute takes its cost, a communication batch
// waits for its peers' matching batches and then for the transfer.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/deadlock_model.h"
#include "compiler/layout.h"
#include "compiler/plan.h"

namespace ppc {

// Costs per layer kind (docs/cost-model.md). Times in any unit (the simulator reports the same
// unit); memory in bytes.
struct LayerCost {
  double f = 0, i = 0, w = 0;
  std::optional<double> b;  // full backward; I + W when absent
  double activation = 0;    // activation memory one microbatch keeps from F until its backward
  double params = 0;        // parameter memory
  // Time the rank holding it spends on this layer's share of the work between two steps (the
  // gradient norm, clipping, the optimizer step, zeroing gradients): rank r begins a step at the
  // sum of its stages' optimizer (docs/cost-model.md, "What the simulator computes").
  double optimizer = 0;
  double backward() const { return b ? *b : i + w; }
};

struct MeasuredCosts;  // measured_costs.h

// Per plan stage s: time[2s] and bytes[2s] of SEND_F(s) (to the next stage), time[2s + 1] and
// bytes[2s + 1] of SEND_B(s) (to the previous one). See message_costs() in measured_costs.h.
struct MessageCosts {
  std::vector<double> time, bytes;
  bool uniform = true;  // every entry the same
};

// How a transport moves the messages of a batch (docs/cost-model.md, "Message models").
enum class MessageModel {
  // A batch waits until every op meets its counterpart in the peer's current batch, then for the
  // transfers (the deadlock model's grouped exchange: NCCL's batched P2P). The default.
  Rendezvous,
  // A batch is posted without blocking; a message arrives its transfer time after both of its
  // ends were posted, and only the compute that reads it waits for it (pprun on Gloo).
  Eager,
};

// "gloo" -> Eager; any other transport (nccl) -> Rendezvous.
MessageModel message_model_of_transport(const std::string& transport);

struct CostModel {
  // Unit costs: every stage, whatever its layers, costs F=1, B=2, I=W=1 and keeps 1 unit of
  // activation per in-flight microbatch; no communication cost. Otherwise costs come from layers.
  bool unit = true;
  // Per layer symbol: E, t, m, L and a model's own symbols (docs/cost-model.md). Read through
  // layer(): E, t, m or L with no entry costs nothing; a model's own symbol with no entry costs
  // what 't' costs.
  std::map<char, LayerCost> layers;
  const LayerCost& layer(LayerKind k) const;
  // What an empty stage (or a generic --stages stage) costs when unit == false.
  LayerCost empty_stage{};
  double latency = 0;        // per message
  double bandwidth = 0;      // bytes per time unit; 0 = infinite
  double message_bytes = 0;  // size of one activation / gradient message
  // Fraction of a microbatch's activation memory kept after I until its W (0 = freed at I).
  double weight_grad_memory = 0;
  // An OverlapFB takes max(F, B) + (1 - overlap) * min(F, B); 0 = no overlap (F + B).
  double overlap = 0;
  // Activation and parameter memory are in bytes (a cost file or flag gave them); otherwise they
  // count units (one per layer or stage and microbatch). Only changes how memory is printed.
  bool memory_in_bytes = false;
  // How the simulator times messages. Deadlock freedom is verified under the rendezvous model
  // whatever this says (a plan must stay valid for NCCL).
  MessageModel messages = MessageModel::Rendezvous;
  // Under the eager model: the time a rank spends posting one SEND or RECV (it goes on once the
  // op is out). The rendezvous model has no place for it (pprun's profile folds it into the
  // messages' time there).
  double post = 0;
  // Per-stage and per-boundary entries of a cost file (measured_costs.h), which override the
  // per-layer costs and the message costs where they apply; null when the file has none.
  std::shared_ptr<const MeasuredCosts> measured;
};

// "97.9 GiB" when in bytes, else the plain number ("31").
std::string format_memory(double value, bool in_bytes);

struct StageCost {
  double f = 1, b = 2, i = 1, w = 1;
  double activation = 1, params = 0;
  double optimizer = 0;  // between steps (LayerCost::optimizer); 0 under unit costs
  // A whole backward is shorter than its I and W apart (measured profiles: Auto then runs Bs where
  // a held-back W would not fill idle time).
  bool whole_backward_shorter() const { return b < (i + w) * (1 - 1e-9); }
};

// Per rank: when it begins a step, the sum of `optimizer` over the stages it holds (both copies
// under DualPipe): the previous step's optimizer, after the all-reduce every rank waits at. Empty
// when every one is 0.
std::vector<double> rank_starts(const Plan& plan, const std::vector<StageCost>& costs);

std::vector<StageCost> stage_costs(const Plan& plan, const CostModel& model);

// Duration of a compute action (an OverlapFB as a whole) given the stage costs.
double action_cost(const Action& a, const std::vector<StageCost>& costs, const CostModel& model);
// Duration of one message: latency + message_bytes / bandwidth (0 under unit costs).
double message_time(const CostModel& model);
struct MemoryPoint {
  double time;
  double value;
};

struct Simulation {
  double makespan = 0;
  std::vector<double> busy;                      // per rank: time spent computing
  std::vector<double> rank_bubble;               // per rank: 1 - busy / makespan
  double bubble = 0;                             // overall: 1 - sum(busy) / (pp * makespan)
  std::vector<double> peak_memory;               // per rank: peak activation memory
  std::vector<std::vector<MemoryPoint>> memory;  // per rank, activation memory after each change
  double comm_bytes = 0;
  size_t messages = 0;
  std::vector<std::vector<Interval>> times;  // per rank, per lowered action
  bool unit = true;  // costs were unit costs (memory counts microbatch-stages)

  // Iterations back to back: each rank starts the next step as soon as it has finished this one
  // (the zero-bubble paper's optimizer post-validation), so a step costs the longest span of a rank
  // from its first compute to its last. This is the bubble the ZB-H2 and ZBV "zero" refers to.
  std::vector<double> first_start;   // per rank: start of its first compute action
  std::vector<double> last_end;      // per rank: end of its last compute action
  double steady_period = 0;          // max over ranks of last_end - first_start
  double steady_bubble = 0;          // 1 - sum(busy) / (pp * steady_period)
  std::vector<double> param_memory;  // per rank: parameters of the stages it holds (both copies)
  // Per rank: when it begins the step (rank_starts(); empty when every rank begins at 0). The
  // makespan runs from the all-reduce that ends the previous step, so it includes these.
  std::vector<double> start;
};

// `plan` must be lowered and verified. Throws UserError if it does not run to completion.
// Times follow model.messages.
Simulation simulate(const Plan& plan, const CostModel& model);

// The run of a lowered plan under the eager message model (MessageModel::Eager), in execute()'s
// form (deadlock_model.h): times, per-rank ends, busy, first start and last end. A rank ends once
// its last compute has ended and its messages have arrived (the runtime waits for its sends at
// the end of a step). A plan that finishes under the deadlock model finishes under this one; if a
// rank cannot, `errors` says where.
struct EagerOptions {
  // The time a rank spends posting one SEND or RECV (before the op is out and the rank goes on):
  // none, one for every rank, or one per rank.
  std::vector<double> post;
  // Per rank: when it begins (empty: all at 0). pprun's check gives each rank its measured start.
  std::vector<double> start;
};
Execution execute_eager(const Plan& plan, const ExecCosts& costs, bool record_times,
                        const EagerOptions& options = {});

// The simulator in two steps, so that another run of the deadlock model can serve it (the
// verifier's, in verify_and_lower): run `plan` under execute() with costs() (recording times when
// timeline()), then finish() the run. The result equals simulate(plan, model)'s, except that
// without a timeline `times` and `memory` are left empty (what --emit stats needs).
class SimulationRun {
 public:
  SimulationRun(const Plan& plan, const CostModel& model, bool timeline);
  SimulationRun(const SimulationRun&) = delete;
  SimulationRun& operator=(const SimulationRun&) = delete;

  const ExecCosts& costs() const { return exec_; }
  bool timeline() const { return timeline_; }
  // `ex` must have finished. Under the eager message model `ex` only proves that the plan runs:
  // finish_eager() times it.
  Simulation finish(Execution&& ex);
  // The plan timed under the eager message model (model.messages == Eager), without a run of the
  // deadlock model. Throws UserError if it does not run to completion.
  Simulation finish_eager();

 private:
  Simulation finish_timed(Execution&& ex);
  // The activation memory of `rank` as it runs plain action `part` from start to end.
  void change_memory(int rank, const Action& part, double start, double end);

  const Plan& plan_;
  const CostModel& model_;
  bool timeline_;
  std::vector<StageCost> costs_;
  ExecCosts exec_;
  Simulation sim_;
  std::vector<double> mem_;  // per rank: activation memory now
  MessageCosts messages_;    // per-boundary message costs (measured costs only)
};

}  // namespace ppc
