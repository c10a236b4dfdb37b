// Helper of the end-to-end tests: two runs' --dump-params folders compared
// (runtime/output/param_dump.h).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "runtime/output/param_dump.h"

namespace pprun_e2e {

struct ComparedDumps {
  std::map<std::string, pprt::DumpedParam> got, want;
  pprt::DumpComparison cmp;
};

// Expects the dumps `got` and `want` to hold the same parameters, at least one, of the same
// shapes, each within `tolerance` (absolute; 0: bit for bit) of the other's. Reading a dump throws
// (and so ends the test) if two ranks' copies of a parameter differ in any bit. Returns what it
// read, for the caller's own checks.
inline ComparedDumps expect_dumps_within(const std::string& got, const std::string& want,
                                         double tolerance) {
  ComparedDumps d{pprt::read_param_dump(got), pprt::read_param_dump(want), {}};
  d.cmp = pprt::compare_param_dumps(d.got, d.want);
  EXPECT_TRUE(d.cmp.only_in_a.empty() && d.cmp.only_in_b.empty() && d.cmp.shape_differs.empty());
  EXPECT_GT(d.cmp.compared, 0u);
  EXPECT_EQ(d.cmp.compared, d.want.size());
  EXPECT_LE(d.cmp.max_abs_diff, tolerance) << "worst: " << d.cmp.worst;
  return d;
}

}  // namespace pprun_e2e
