// The linear partition behind --balance (balance.h): a model's layers as a list, a split of
// them at given cuts, and the split into S contiguous parts that minimizes the heaviest part.
#include "compiler/balance.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "compiler/diagnostic.h"

namespace ppc {

std::vector<LayerKind> model_layers(const Layout& layout) {
  std::vector<LayerKind> out;
  for (const auto& stage : layout.stages) out.insert(out.end(), stage.begin(), stage.end());
  return out;
}

Layout split_layers(const std::vector<LayerKind>& layers, const std::vector<int>& cuts) {
  PPC_INTERNAL_ASSERT(
      cuts.size() >= 2 && cuts.front() == 0 && cuts.back() == static_cast<int>(layers.size()),
      "cuts must run from 0 to the number of layers");
  Layout out;
  out.stages.resize(cuts.size() - 1);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    PPC_INTERNAL_ASSERT(cuts[k] <= cuts[k + 1], "cuts must not decrease");
    out.stages[k].assign(layers.begin() + cuts[k], layers.begin() + cuts[k + 1]);
  }
  return out;
}

// --- the linear partition ----------------------------------------------------------------------

namespace {

// Non-negative doubles order like their bit patterns: a binary search over the patterns visits
// every representable value, so it ends on the exact optimum in at most 64 steps.
uint64_t to_bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// The largest j in [from, to] with prefix[j] - prefix[from] <= cap (prefix is non-decreasing, so
// the difference is too, also in floating point).
size_t furthest(const std::vector<double>& prefix, size_t from, size_t to, double cap) {
  size_t lo = from, hi = to;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo + 1) / 2;
    if (prefix[mid] - prefix[from] <= cap)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Whether the weights split into at most `stages` non-empty parts of at most `cap` (greedy).
bool fits_in(const std::vector<double>& prefix, int stages, double cap) {
  const size_t n = prefix.size() - 1;
  size_t start = 0;
  for (int parts = 0; start < n; ++parts) {
    if (parts == stages) return false;
    const size_t j = furthest(prefix, start, n, cap);
    if (j == start) return false;  // one weight alone is over the cap
    start = j;
  }
  return true;
}

}  // namespace

BottleneckSplit min_bottleneck_split(const std::vector<double>& weights, int stages,
                                     double empty_weight) {
  PPC_INTERNAL_ASSERT(stages >= 1 && !weights.empty(), "min_bottleneck_split needs input");
  const size_t n = weights.size();
  const size_t S = static_cast<size_t>(stages);
  std::vector<double> prefix(n + 1, 0.0);
  double heaviest = 0;
  for (size_t j = 0; j < n; ++j) {
    PPC_INTERNAL_ASSERT(weights[j] >= 0 && std::isfinite(weights[j]), "weights must be >= 0");
    prefix[j + 1] = prefix[j] + weights[j];
    heaviest = std::max(heaviest, weights[j]);
  }
  BottleneckSplit out;
  out.cuts.assign(S + 1, 0);
  if (n < S) {
    // Some stage is empty whatever the split, and one layer per stage is then optimal.
    for (size_t k = 0; k <= S; ++k) out.cuts[k] = static_cast<int>(std::min(k, n));
    out.bottleneck = std::max(heaviest, empty_weight);
    return out;
  }
  // With n >= S no stage needs to be empty: a split into fewer parts can be split further.
  uint64_t lo = to_bits(heaviest), hi = to_bits(prefix[n]);
  double cap = heaviest;
  if (!fits_in(prefix, stages, cap)) {
    while (hi - lo > 1) {  // lo does not fit, hi does
      const uint64_t mid = lo + (hi - lo) / 2;
      if (fits_in(prefix, stages, from_bits(mid)))
        hi = mid;
      else
        lo = mid;
    }
    cap = from_bits(hi);
  }
  // back[k]: the first layer from which the rest fits in the last S - k stages (greedy from the
  // end takes as much as it can). A cut k at or after back[k] can always be completed.
  std::vector<size_t> back(S + 1, n);
  for (size_t k = S; k-- > 0;) {
    size_t j = back[k + 1];
    while (j > 0 && prefix[back[k + 1]] - prefix[j - 1] <= cap) --j;
    back[k] = j;
  }
  // Forward: each cut as close as the cap allows to an even spread of the rest, no stage empty.
  for (size_t k = 1; k < S; ++k) {
    const size_t from = static_cast<size_t>(out.cuts[k - 1]);
    const size_t lo_j = std::max(back[k], from + 1);
    const size_t hi_j = std::min(furthest(prefix, from, n, cap), n - (S - k));
    PPC_INTERNAL_ASSERT(lo_j <= hi_j, "linear partition: no room for a cut");
    const double target =
        prefix[from] + (prefix[n] - prefix[from]) / static_cast<double>(S - k + 1);
    // The first position whose prefix is nearest the target (binary searches: zero weights can
    // make the range as long as the model).
    const auto first = prefix.begin() + static_cast<std::ptrdiff_t>(lo_j);
    const auto last = prefix.begin() + static_cast<std::ptrdiff_t>(hi_j) + 1;
    auto j = std::lower_bound(first, last, target);
    if (j == last || (j != first && target - *(j - 1) <= *j - target))
      j = std::lower_bound(first, last, *(j - 1));
    out.cuts[k] = static_cast<int>(j - prefix.begin());
  }
  out.cuts[S] = static_cast<int>(n);
  for (size_t k = 0; k < S; ++k)
    out.bottleneck = std::max(out.bottleneck, prefix[static_cast<size_t>(out.cuts[k + 1])] -
                                                  prefix[static_cast<size_t>(out.cuts[k])]);
  return out;
}

}  // namespace ppc
