// pprun --profile FILE: what the run measured, written as a cost file that ppcompile --cost reads
// (docs/cost-model.md, "Measured costs"): per layout stage the F, B, I and W times (per step the
// mean over microbatches, then the median over the steps after the first; milliseconds), the
// activation bytes one in-flight microbatch holds there, the parameter bytes and the time its ranks
// spend on it between steps (optimizer_ms below); per boundary the
// bytes of one message and its transfer time; for a run with I and W, the fraction of the
// activation a microbatch still holds from its I until its W (weight_grad_memory). For a run with
// memory modes (issue 42), on the CPU, per layer kind what one layer's forward takes and keeps
// under each mode it ran and what its recomputation takes (the cost model's `layers.x.activation`,
// `activation_selective`, `recompute_full`, ...), its stages converted to keeping everything.
//
// Each rank records every compute part it runs (the executor's hook: an OVERLAP_F_B gives its
// forward and its backward part separately), reduces them to per-stage medians and publishes them
// in the rendezvous store; the loss rank gathers them, adds the boundaries (message bytes from
// the model, transfer times from the gathered action spans) and writes the file atomically.
// No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/action.h"
#include "compiler/memory_mode.h"
#include "compiler/plan.h"
#include "runtime/job.h"
#include "runtime/model/layer_probe.h"
#include "runtime/output/report.h"
#include "runtime/transport/transport.h"

namespace pprt {

// One compute part as the executor ran it: its stage (plan stage), kind (F, B, I or W), compute
// time with any wait for a received input left out, and the bytes it allocated that were still
// allocated when it ended (for F: the activation the microbatch holds until its B or I; for a W,
// negative: less the bytes it freed, which are what its microbatch held from its I to its W).
struct PartSample {
  int stage = 0;
  ppc::ActionKind kind = ppc::ActionKind::F;
  int64_t ns = 0;
  int64_t bytes = 0;
  int64_t length = 0;  // its microbatch's sequence length (MicrobatchShape::length; 0: not known)
  // On the CPU (model/layer_probe.h): an F's layers, each with its mode, time and bytes left
  // allocated; a B's or I's reruns of recomputed pieces, whose summed time is `recompute_ns`.
  std::vector<LayerSample> layers;
  int64_t recompute_ns = 0;
};

// A stage's layers of one symbol under one memory mode, on one rank (per step the mean over the
// layers' forwards, then the median over the steps, as for the stages).
struct LayerMedians {
  char symbol = 't';
  ppc::MemoryMode mode = ppc::MemoryMode::None;
  int count = 0;         // such layers in the stage
  double f = 0;          // ms, one layer's forward
  double bytes = 0;      // what one layer's forward leaves allocated until its backward
  double recompute = 0;  // ms, one layer's reruns in its backward (0: none)
  double output = 0;     // one layer's output's bytes
};

// A stage's medians on one rank: times in milliseconds (nullopt: that kind never ran there).
struct StageMedians {
  int stage = 0;  // plan stage
  std::optional<double> f, b, i, w;
  std::optional<double> activation;  // bytes
  std::optional<double> held;        // bytes a microbatch holds from its I until its W
  int64_t params = 0;                // parameter elements (the rank's stage's own count)
  std::vector<LayerMedians> layers;  // on the CPU: its layers by symbol and mode
};

// Collects a rank's samples step by step; the first step of a run of several warms up (its
// allocations and first touches) and is left out.
class ProfileRecorder {
 public:
  void add(int64_t step, const PartSample& s);
  // Of every part, or of the parts of microbatches of `length` alone (per step the mean over
  // those, the median over the steps that ran one).
  std::vector<StageMedians> medians(std::optional<int64_t> length = std::nullopt) const;
  // The microbatch lengths the analysed steps ran, each with its count of parts.
  std::map<int64_t, int64_t> lengths() const;

 private:
  using Key = std::pair<int, ppc::ActionKind>;
  std::map<int64_t, std::map<Key, std::vector<PartSample>>> by_step_;
};

// The store's form of a rank's medians (published by every rank, gathered by the loss rank).
void publish_profile(Store& store, int rank, const std::vector<StageMedians>& medians);
std::vector<StageMedians> gather_profiles(Store& store, const Topology& topology);

// Microbatches of several lengths (--varlen): the medians per length, gathered over the ranks.
struct LengthMedians {
  int64_t parts = 0;  // the parts measured at that length (every rank's)
  std::vector<StageMedians> stages;
};
struct LengthProfiles {
  std::map<int64_t, LengthMedians> per_length;
  int64_t boundary_length = 0;  // the length profile_json's boundary_elements hold for (0: T0's)
};
// A rank's medians per length (recorder.lengths(); none when it ran one length), published and
// gathered as publish_profile's.
void publish_length_profiles(Store& store, int rank, const ProfileRecorder& recorder);
LengthProfiles gather_length_profiles(Store& store, const Topology& topology);

// Per boundary between plan stages k and k + 1 on different ranks: the median over the analysed
// steps of a message's transfer time in ms (its RECV seen complete less the later of its SEND's
// and RECV's posting, over the messages whose receiver already waited for them then), nullopt
// when never measured.
std::vector<std::optional<double>> transfer_times(const ppc::Plan& plan,
                                                  const std::vector<RankReport>& ranks);

// The median over the analysed steps of the time a rank spends posting one SEND or RECV to the
// transport (ms).
double post_ms_per_op(const ppc::Plan& plan, const std::vector<RankReport>& ranks);

// Per layout stage: the time (ms) its ranks spend between replays on its share of their own work
// (StepTiming::own_ns: the gradient norm, clipping, AdamW, zeroing gradients, the batch), the
// median over the analysed steps of each rank's, split over the stages the rank holds in
// proportion to their parameter elements (`numel`, per layout stage); DualPipe's two copies of a
// stage pooled (their mean). nullopt where no rank reported.
std::vector<std::optional<double>> optimizer_ms(const ppc::Plan& plan,
                                                const std::vector<int64_t>& numel,
                                                const std::vector<RankReport>& ranks);

// The cost file (JSON text) from every rank's medians (with their stages' parameters) and the
// ranks' reports: one entry per layout stage (DualPipe's two copies of a stage pooled) and per
// layout boundary k (between layout stages k and k + 1), whose message holds
// `boundary_elements[k]` elements (the tensor crossing it for microbatches of `microbatch_rows`
// sequences) of `activation_bytes` each (4: fp32; 2: --dtype bf16); `transport` ("gloo" or
// "nccl": the transport that ran the plan) becomes the file's "transport", which selects the
// simulator's message model.
// Under expert parallelism (the ranks' reports hold all-to-alls) it also gives
// layers.t.all_to_all, one dispatch or combine measured (all_to_all_stats.h: profile_all_to_all;
// "f" 0: the stages hold the times), and top_k, measured over microbatches of
// `microbatch_rows` x `seq_len` tokens.
// `by_length` with two lengths or more (--varlen's microbatches): the file's own entries are those
// measured at the length most parts ran at (ties: the longer), its `lengths.seq_len`, and each
// other length is an entry of `lengths.measured` (docs/cost-model.md, "Microbatches of different
// lengths"), with its stages' F, B, I, W and activation measured at that length; the message bytes
// scaled from `by_length.boundary_length` to that of the file's own entries.
std::string profile_json(const ppc::Plan& plan, int64_t microbatch_rows,
                         const std::vector<int64_t>& boundary_elements,
                         const std::vector<StageMedians>& medians,
                         const std::vector<RankReport>& ranks, int activation_bytes = 4,
                         const std::string& transport = "", int64_t seq_len = 0,
                         const LengthProfiles& by_length = {});

}  // namespace pprt
