// Microbatches of different lengths (docs/cost-model.md, "Microbatches of different lengths"):
// the lengths file of `ppcompile --lengths`, the per-length entries of a cost file, and what each
// plan stage costs at each microbatch's length.
//
// A cost file's entries hold for microbatches of one length, its `lengths.seq_len` (T0). At
// another length T a stage's F, B, I and W take
//   - with no entry measured at another length: v0 ((1 - a) T / T0 + a (T / T0)^2), a the file's
//     `lengths.attention` (the share of the time at T0 that grows with T squared: attention);
//   - with one more length measured: the curve p T + q T^2 through both points;
//   - with two or more: the least-squares fit of c0 + c1 T + c2 T^2 through all of them;
// never less than 0. Activation memory grows linearly (v0 T / T0) unless measured at other lengths
// (then fitted the same way); parameters and the optimizer's time do not change. A message's bytes
// grow with T / T0 (its latency does not).
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/plan.h"

namespace ppc {

// A cost file's "lengths" object (docs/cost-model.md).
struct LengthModel {
  std::optional<double> seq_len;  // T0: the length the file's entries hold for
  double attention = 0;           // share of F, B, I and W at T0 that grows with T^2
  struct Point {
    double seq_len = 0;
    CostModel costs;  // the file's costs with this entry's layers/stages/stage in place
  };
  std::vector<Point> measured;  // entries measured at other lengths, shortest first
};

// The "lengths" object of the cost file `text` (already parsed as a whole by parse_cost_model),
// or null when it has none. Throws UserError naming `input_name` and the field.
std::shared_ptr<const LengthModel> parse_length_model(std::string_view text,
                                                      const std::string& input_name);

// The lengths file of --lengths: one positive integer per line (blank lines and '#' comments
// allowed), one per microbatch in data order. Throws UserError naming the file and line, or
// the count when it is not `microbatches`.
std::vector<long long> parse_lengths(std::string_view text, const std::string& input_name,
                                     int microbatches);
std::vector<long long> read_lengths(const std::string& path, int microbatches);

// What each plan stage costs for each microbatch of a step, by length. Built once per plan and
// cost model; `assign` maps the plan's microbatches to data microbatches (microbatch_order).
class LengthCosts {
 public:
  // `model.microbatch_lengths` must hold one length per microbatch of `plan`.
  LengthCosts(const Plan& plan, const CostModel& model);

  // Plan microbatch k processes data microbatch order[k] (empty: k).
  void assign(const std::vector<int>& order);

  const StageCost& cost(int stage, int mb) const {
    return at_[of_mb_[static_cast<size_t>(mb)]][static_cast<size_t>(stage)];
  }
  // Message bytes scale by this for plan microbatch mb.
  double scale(int mb) const { return scale_[static_cast<size_t>(mb)]; }
  double reference() const { return reference_; }
  // The duration of a compute action (an OverlapFB as a whole, each part at its own length).
  double action_cost(const Action& a, const CostModel& model) const;
  // The transfer of a SEND whose length-blind time is `time`: what exceeds the latency scales.
  double transfer(const Action& send, double time, double latency) const {
    const double fixed = std::min(latency, time);
    return fixed + (time - fixed) * scale(send.microbatch);
  }

 private:
  double reference_ = 0;
  std::vector<std::vector<StageCost>> at_;  // per distinct length: per plan stage
  std::vector<int> of_data_;                // per data microbatch: its entry in at_
  std::vector<double> data_scale_;          // per data microbatch: T / T0
  std::vector<int> of_mb_;                  // per plan microbatch: its entry in at_
  std::vector<double> scale_;               // per plan microbatch: T / T0
};

// --emit stats's lengths line: "8 microbatches of 64 .. 4096 tokens (mean 1279; costs at the
// mean); data order" (or "ordered by length" when the plan has a microbatch_order).
std::string describe_lengths(const Plan& plan, const CostModel& model);

}  // namespace ppc
