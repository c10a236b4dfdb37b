// The cost model: what each layer, stage and message costs (docs/cost-model.md), which the
// simulator, lowering and the searches read; and building one: from a JSON file, from the simple
// command-line flags, or the unit-per-layer model that --compare uses by default.
//
// Every reader throws UserError with one self-contained line: "cost.json: layers.t.f: expected
// a non-negative number, got -1", "--cost-b: 1 is less than --cost-w 2".
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  // Issue 42's memory modes (docs/cost-model.md, "Recomputation and offloading"); absent: the
  // defaults of memory_costs.h (layer_mode_cost).
  std::optional<double> activation_selective{}, activation_full{};  // bytes each mode keeps
  std::optional<double> recompute_selective{}, recompute_full{};    // time to rebuild the rest
  // Issue 40: one all-to-all (a dispatch or a combine) of one MoE layer of this kind for one
  // microbatch at the plan's EP size (pprun --profile measures it); absent: derived
  // (all_to_all_costs.h). Counted only under expert parallelism.
  std::optional<double> all_to_all{};
  double backward() const { return b ? *b : i + w; }
};

struct MeasuredCosts;  // measured_costs.h
struct LengthModel;    // lengths.h

// Per plan stage s: time[2s] and bytes[2s] of SEND_F(s) (to the next stage), time[2s + 1] and
// bytes[2s + 1] of SEND_B(s) (to the previous one). See message_costs() in measured_costs.h.
struct MessageCosts {
  std::vector<double> time, bytes;
  bool uniform = true;  // every entry the same
  // The entry of a SEND: 2s for SEND_F(s), 2s + 1 for SEND_B(s).
  static size_t index(const Action& send) {
    return 2 * static_cast<size_t>(send.stage) + (flow_of(send.kind) == Flow::Backward);
  }
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
  const LayerCost& layer(LayerKind k) const {
    static const LayerCost kFree{};
    if (auto it = layers.find(layer_symbol(k)); it != layers.end()) return it->second;
    return is_builtin(k) ? kFree : layer(LayerKind::Decoder);
  }
  // What an empty stage (or a generic --stages stage) costs when unit == false.
  LayerCost empty_stage{};
  double latency = 0;    // per message
  double bandwidth = 0;  // bytes per time unit; 0 = infinite
  // Device-to-host bandwidth of an offload (bytes per time unit, 0 = infinite); `bandwidth` when
  // absent (memory_costs.h).
  std::optional<double> host_bandwidth;
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
  // Microbatches of different lengths (lengths.h): the cost file's per-length entries (null: the
  // file's costs hold for every length) and each microbatch's length, in data order (empty:
  // every microbatch costs what the entries above say).
  std::shared_ptr<const LengthModel> length_model;
  std::vector<long long> microbatch_lengths;
  // Experts per token (issue 40): how many copies of a microbatch's activations a dispatch
  // all-to-all sends, for the all-to-alls a cost file does not give (all_to_all_costs.h).
  double top_k = 1;
};

// "97.9 GiB" when in bytes, else the plain number ("31").
std::string format_memory(double value, bool in_bytes);

struct StageCost {
  double f = 1, b = 2, i = 1, w = 1;
  double activation = 1, params = 0;
  double optimizer = 0;  // between steps (LayerCost::optimizer); 0 under unit costs
  // Issue 42's memory modes (memory_costs.h; all 0 without a memory policy): `activation` is then
  // what the stage keeps from F to its backward; `transient` more is live during its B or I (the
  // recomputed or prefetched part) and `forward_transient` during its F (what is offloaded after
  // it). `recompute` is the forward time b and i include to rebuild it, `offload` the time one
  // way of an offload's transfer on the side stream (`exposed` of both ways not hidden, in b, i).
  double transient = 0, forward_transient = 0;
  double recompute = 0, offload = 0, exposed = 0;
  // Issue 40 (all_to_all_costs.h): how much of f is its all-to-alls, and of b and of i theirs
  // (recomputed forwards' included); 0 without expert parallelism.
  double all_to_all_f = 0, all_to_all_b = 0;
  double all_to_all(ActionKind k) const {
    if (k == ActionKind::F) return all_to_all_f;
    return k == ActionKind::B || k == ActionKind::I ? all_to_all_b : 0.0;
  }
  // A whole backward is shorter than its I and W apart (measured profiles: Auto then runs Bs where
  // a held-back W would not fill idle time).
  bool whole_backward_shorter() const { return b < (i + w) * (1 - 1e-9); }
  // The time of a plain compute kind (0 for SEND and RECV).
  double time(ActionKind k) const {
    switch (k) {
      case ActionKind::F:
        return f;
      case ActionKind::B:
        return b;
      case ActionKind::I:
        return i;
      case ActionKind::W:
        return w;
      default:
        return 0.0;
    }
  }
};

// Per rank: when it begins a step, the sum of `optimizer` over the stages it holds (both copies
// under DualPipe): the previous step's optimizer, after the all-reduce every rank waits at. Empty
// when every one is 0.
std::vector<double> rank_starts(const Plan& plan, const std::vector<StageCost>& costs);

// The costs of every plan stage under the plan's memory policy (plan.memory, applied by
// apply_memory_policy in memory_costs.h), and as they are when every stage keeps everything.
std::vector<StageCost> stage_costs(const Plan& plan, const CostModel& model);
std::vector<StageCost> stage_costs_keeping_all(const Plan& plan, const CostModel& model);

// Duration of an OVERLAP_F_B whose forward part takes f, a_f of it in all-to-alls, and whose
// backward part takes b, a_b of it in all-to-alls (docs/cost-model.md, "All-to-alls and
// overlap"): the computations overlap as `overlap` says, each part's all-to-alls run under the
// other's computation, and the pair lasts at least each part alone and both all-to-alls one after
// the other. Without all-to-alls: max(f, b) + (1 - overlap) * min(f, b).
inline double overlapped_time(double f, double a_f, double b, double a_b, double overlap) {
  a_f = std::min(a_f, f);
  a_b = std::min(a_b, b);
  const double cf = f - a_f, cb = b - a_b;
  const double compute = std::max(cf, cb) + (1.0 - overlap) * std::min(cf, cb);
  return std::max({compute, f, b, a_f + a_b});
}

// Duration of a compute action (an OverlapFB as a whole) given the stage costs.
inline double action_cost(const Action& a, const std::vector<StageCost>& costs,
                          const CostModel& model) {
  auto cost = [&](const Action& p) -> const StageCost& {
    return costs[static_cast<size_t>(p.stage)];
  };
  if (!is_compound(a.kind)) return cost(a).time(a.kind);
  const Action fp = a.forward_part(), bp = a.backward_part();
  const StageCost &f = cost(fp), &b = cost(bp);
  return overlapped_time(f.f, f.all_to_all_f, b.time(bp.kind), b.all_to_all(bp.kind),
                         model.overlap);
}
// Duration of one message: latency + message_bytes / bandwidth (0 under unit costs).
inline double message_time(const CostModel& model) {
  if (model.unit) return 0.0;
  return model.latency + (model.bandwidth > 0 ? model.message_bytes / model.bandwidth : 0.0);
}

struct Simulation;  // simulate.h

// Building a cost model.
CostModel parse_cost_model(std::string_view json_text, const std::string& input_name);
CostModel read_cost_model(const std::string& path);

// The simple case on the command line: one set of costs for every layer, whatever its kind, and
// for every generic stage (--stages N). Unset fields take the defaults of docs/cost-model.md.
struct CostFlags {
  std::optional<double> f, b, i, w;     // --cost-f, --cost-b, --cost-i, --cost-w
  std::optional<double> activation;     // --cost-activation (bytes per microbatch per layer)
  std::optional<double> params;         // --cost-params (bytes per layer)
  std::optional<double> latency;        // --cost-latency (time per message)
  std::optional<double> bandwidth;      // --cost-bandwidth (bytes per time unit)
  std::optional<double> message_bytes;  // --cost-message (bytes per activation/gradient message)
  std::optional<double> overlap;        // --cost-overlap (0..1)
  bool any() const {
    return f || b || i || w || activation || params || latency || bandwidth || message_bytes ||
           overlap;
  }
};
CostModel cost_model_from_flags(const CostFlags& flags);

// Every layer (E, t, m, L) and every generic stage: F = I = W = 1, B = 2, one unit of activation
// per in-flight microbatch, no parameters, free communication.
CostModel unit_layer_costs();

// The symbols of the model's own that `layout` uses and `model` gives no per-layer cost for (they
// cost what 't' costs); empty under unit or measured per-stage costs, where per-layer costs do not
// apply. ppcompile says so once on stderr.
std::string uncosted_own_symbols(const CostModel& model, const Layout& layout);

// "80GiB", "80GB", "8e10", "512M": a memory size in bytes (K/M/G/T = powers of 1000 with or
// without B, KiB/MiB/GiB/TiB = powers of 1024). UserError naming `flag` otherwise.
double parse_memory_size(const std::string& text, const char* flag);

// "memory limit  80.0 GiB: fits (peak 45.2 GiB on rank 0: activations 31.7 GiB, parameters 13.5
// GiB)" or
// "... exceeded on ranks 0, 1 (...)": peak activation plus parameters of each rank vs the limit.
std::string memory_check(const Simulation& sim, double limit, bool in_bytes);

// A one-line description for --emit stats: "unit (per stage ...)" or "cost model (...)".
std::string describe(const CostModel& model);

}  // namespace ppc
