// The banker's algorithm of Auto's list scheduler: bankers_memory.h.
#include "compiler/schedules/bankers_memory.h"

#include <cmath>
#include <limits>
#include <utility>

namespace ppc {

BankersMemory::BankersMemory(std::vector<double> need, std::vector<double> budget,
                             int microbatches)
    : need_(std::move(need)), budget_(std::move(budget)) {
  if (budget_.empty()) budget_.assign(need_.size(), std::numeric_limits<double>::infinity());
  for (double n : need_) need_total_ += n;
  for (double b : budget_) limited_ |= std::isfinite(b);
  used_.assign(need_.size(), 0.0);
  held_.assign(static_cast<size_t>(microbatches) * need_.size(), 0.0);
  rem_.assign(held_.size(), 0.0);
  outstanding_.assign(static_cast<size_t>(microbatches), 0.0);
}

double BankersMemory::tolerance(int r) const {
  return 1e-12 * std::abs(budget_[static_cast<size_t>(r)]);
}

bool BankersMemory::can_allocate(int r, int mb, double a, int next) const {
  if (!limited_) return true;
  const double free = budget_[static_cast<size_t>(r)] - used_[static_cast<size_t>(r)] - a;
  if (free < -tolerance(r)) return false;
  double older = 0;  // held on r by the microbatches older than j
  for (int j = oldest_; j < mb && j < next; ++j) {
    if (outstanding_[static_cast<size_t>(j)] <= 0) continue;
    if (free + older < rem_[at(j, r)] - tolerance(r)) return false;
    older += held_[at(j, r)];
  }
  return true;
}

void BankersMemory::admit(int mb) {
  for (size_t r = 0; r < need_.size(); ++r) rem_[at(mb, static_cast<int>(r))] = need_[r];
  outstanding_[static_cast<size_t>(mb)] = need_total_;
}

void BankersMemory::allocate(int r, int mb, double a) {
  held_[at(mb, r)] += a;
  rem_[at(mb, r)] -= a;
  used_[static_cast<size_t>(r)] += a;
}

void BankersMemory::release(int r, int mb, double d, int next) {
  held_[at(mb, r)] -= d;
  used_[static_cast<size_t>(r)] -= d;
  double& left = outstanding_[static_cast<size_t>(mb)];
  left -= d;
  if (left <= 1e-9 * need_total_) left = 0;
  while (oldest_ < next && outstanding_[static_cast<size_t>(oldest_)] <= 0) ++oldest_;
}

}  // namespace ppc
