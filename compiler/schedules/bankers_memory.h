// The memory of Auto's list scheduler (auto.cpp): the banker's algorithm over the microbatches in
// the order they entered the pipeline.
//
// Each microbatch in the pipeline holds some activation memory on each rank and will still take
// some (the forwards it has yet to run there). The state is safe if the microbatches can finish
// oldest first: on every rank, the memory free now plus what the older ones hold (freed when they
// finish) covers what each one still takes. A forward runs only if the state after it is safe, so
// the oldest microbatch can always run its next forward: the run never waits for memory that
// cannot come.
#pragma once

#include <cstddef>
#include <vector>

namespace ppc {

class BankersMemory {
 public:
  // `need`: per rank, what one microbatch takes there (its stages' activations); `budget`: per
  // rank, the most it may hold (empty: no limit); `microbatches`: how many will enter.
  BankersMemory(std::vector<double> need, std::vector<double> budget, int microbatches);

  double need(int r) const { return need_[static_cast<std::size_t>(r)]; }
  double budget(int r) const { return budget_[static_cast<std::size_t>(r)]; }

  // May microbatch `mb` (in the pipeline, or `next` itself: the next to enter) take `a` more on
  // rank r? `next` is the first microbatch that has not entered.
  bool can_allocate(int r, int mb, double a, int next) const;
  // Microbatch `mb` enters: it will take need(r) on every rank r.
  void admit(int mb);
  void allocate(int r, int mb, double a);
  // Microbatch `mb` gives back `d` on rank r (a negative `d` takes more: an I that leaves its W
  // more than its stage kept).
  void release(int r, int mb, double d, int next);

 private:
  std::size_t at(int mb, int r) const {
    return static_cast<std::size_t>(mb) * need_.size() + static_cast<std::size_t>(r);
  }
  double tolerance(int r) const;

  std::vector<double> need_, budget_;  // per rank
  double need_total_ = 0;
  bool limited_ = false;
  std::vector<double> used_;         // per rank: activation memory held
  std::vector<double> held_, rem_;   // per microbatch and rank: held, still to take
  std::vector<double> outstanding_;  // per microbatch: held or still to take, all ranks
  int oldest_ = 0;                   // the oldest microbatch holding or taking memory
};

}  // namespace ppc
