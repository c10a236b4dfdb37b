// The median of a list of values (the mean of the two middle ones for an even count; 0 for none):
// the summaries, --profile's cost file and the replanner take it over steps and microbatches.
#pragma once

#include <algorithm>
#include <vector>

namespace pprt {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace pprt
