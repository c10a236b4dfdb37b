// The transport's plain parts (transport.h): all_to_all()'s counts. No LibTorch.
#include "runtime/transport/transport.h"

#include <fmt/format.h>

namespace pprt {

std::vector<int64_t> all_to_all_counts(const std::vector<int64_t>& counts, int64_t rows, int size,
                                       const char* which) {
  std::vector<int64_t> out = counts;
  if (out.empty()) {
    if (size < 1 || rows % size != 0)
      throw TransportError(
          fmt::format("all-to-all: {} rows do not split equally over {} ranks", rows, size));
    out.assign(static_cast<size_t>(size), rows / size);
  }
  int64_t sum = 0;
  bool negative = false;
  for (int64_t c : out) {
    negative = negative || c < 0;
    sum += c;
  }
  if (static_cast<int>(out.size()) != size || negative || sum != rows)
    throw TransportError(
        fmt::format("all-to-all: {} counts for {} ranks ({} of them, {} rows in "
                    "all) do not split a tensor of {} rows",
                    which, size, out.size(), sum, rows));
  return out;
}

}  // namespace pprt
