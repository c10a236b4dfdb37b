// The Verifier behind verify.h, shared by its files: verify.cpp (the checks before the scan, the
// scan of each rank's order, the deadlock model's run) and verify_counts.cpp (check 2, the counts).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/deadlock_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan.h"
#include "compiler/verify.h"

namespace ppc::verifier {

constexpr int kNumKinds = kNumPlainKinds;  // the kinds that index count tables

// The members declared inline are defined in verify.cpp, the one file that calls them: the scan
// of every action, kept inlinable as it was.
class Verifier {
  // What scanning one rank found.
  struct ScanResult {
    std::vector<std::string> errors;
    bool truncated = false;
    size_t compute_actions = 0, comm_actions = 0;
    void error(std::string msg, size_t max) {
      if (errors.size() < max)
        errors.push_back(std::move(msg));
      else
        truncated = true;
    }
  };

 public:
  // `streamed`: the plan is being lowered in place (run_streamed); verify its lowered order.
  Verifier(const Plan& plan, VerifyReport& rep, const VerifyOptions& opts, bool streamed = false)
      : plan_(plan),
        rep_(rep),
        opts_(opts),
        max_errors_(std::max<size_t>(opts.max_errors, 1)),
        streamed_(streamed),
        lowered_(streamed || (plan.is_lowered() && !opts.compute_only)) {}

  void run();

  // run() for a plan that `lower` lowers in place (lower_in_place with the feed it is given) on
  // this thread: a second thread scans each rank's lowered order as lowering publishes it, and
  // runs the deadlock model on the way.
  void run_streamed(const std::function<void(LoweringFeed*)>& lower);

 private:
  // The checks before the scan, and the scan's tables; false if the plan fails them.
  bool prepare();

  // After the scan: its results, the counts, and check 3 (the deadlock model, or its run made
  // beside the scan).
  void finish(std::vector<ScanResult>& scans, Execution* streamed);

  void error(std::string msg) {
    if (rep_.errors.size() < max_errors_)
      rep_.errors.push_back(std::move(msg));
    else
      rep_.truncated = true;
  }
  const std::vector<std::vector<Action>>& order() const {
    return lowered_ ? plan_.lowered : plan_.compute;
  }
  std::string where(int rank, size_t i, const Action& a) const {
    return fmt::format("rank {}, action {} ({})", rank, i, to_string(a));
  }

  bool check_shape();

  // Every (stage, microbatch) a model copy runs needs an F and a B (or an F, an I and a W), and
  // one compute action does at most two of these (an OVERLAP_F_B): a plan with fewer compute
  // actions than (stage, microbatch) pairs is wrong. Saying so here, from the orders' sizes,
  // keeps the tables below (an entry per stage and microbatch) in proportion to the plan's size,
  // whatever stage and microbatch counts it claims.
  bool check_enough_actions();

  // Range, ownership and peer checks of one plain action (or one part of an OverlapFB); counts it
  // when it passes.
  inline void check_part(int rank, size_t i, const Action& whole, const Action& a, ScanResult& out);

  // The checks of part_ok without a word, with what they read held in locals (the counts are
  // bytes, which may alias anything: the compiler would reload every field after each count).
  struct Fast {
    unsigned stages, microbatches;
    const int* stage_rank;
    const int* next_rank;
    const int* prev_rank;
    bool one_copy;
    uint8_t* count;
  };
  inline Fast fast();

  // True when plain action `a` passes every check of part_ok; otherwise part_ok looks again and
  // says what is wrong (millions of actions pass; few, if any, do not).
  inline bool passes(const Fast& f, int rank, const Action& a) const;

  // check_action for a run of actions: the ones that pass are counted here, the others (and every
  // OverlapFB) go through check_action.
  inline void check_actions(const Fast f, int rank, const Action* const data, size_t begin,
                            size_t end, ScanResult& out);

  bool part_ok(int rank, size_t i, const Action& whole, const Action& a, ScanResult& out);

  inline void check_action(int rank, size_t i, const Action& a, ScanResult& out);

  void scan_rank(int r, ScanResult& out);

  // Where comparing a rank's lowered order with its compute order has got to.
  struct OrderMatch {
    size_t k = 0;      // compute actions seen (the next one's index in the compute order)
    bool same = true;  // they equal the compute order so far
    std::vector<std::string> errors;
  };
  void match_compute_order(int r, const Action* low, size_t begin, size_t end, OrderMatch& m);
  void end_compute_order(int r, OrderMatch& m);

  // The scanner of run_streamed: scan_rank over each rank's lowered order as the feed publishes
  // it and, while every action so far passed, the deadlock model, run as far as the orders
  // written so far let it (GrowingExecution).
  void scan_stream(const LoweringFeed& feed, std::vector<ScanResult>& scans,
                   std::optional<Execution>& execution);

  size_t cindex(ActionKind k, int s, int mb) const {
    return (static_cast<size_t>(k) * plan_.num_stages() + static_cast<size_t>(s)) *
               plan_.microbatches +
           static_cast<size_t>(mb);
  }

  // "; see rank 0, action 3 (0F1), rank 0, action 9 (0F1)": the actions of rank `rank` of the
  // given kinds for (stage, mb), to locate a count error (only run on the error path).
  std::string see(std::initializer_list<std::tuple<int, ActionKind, int>> what, int mb) const;

  void check_counts();

  // The errors check_counts finds at (s, mb).
  void explain_counts(int s, int mb);

  void run_deadlock_model(Execution* streamed);

  const Plan& plan_;
  VerifyReport& rep_;
  const VerifyOptions& opts_;
  size_t max_errors_;
  bool streamed_;               // run_streamed: the plan is being lowered
  bool lowered_;                // verify the lowered order (else the compute order)
  std::vector<uint8_t> count_;  // per (kind, stage, microbatch), saturating
  std::vector<int> next_rank_,
      prev_rank_;  // per stage: the rank of its next / previous stage, or -1
};

}  // namespace ppc::verifier
