// Rank reports as if measured, for the tests of the report and the trace.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compiler/deadlock_model.h"
#include "compiler/verify.h"
#include "runtime/output/report.h"

namespace rttest {

// Reports for `plan` in which every compute action took `ns` and nothing else took time.
inline std::vector<pprt::RankReport> fake_reports(const ppc::Plan& plan, int64_t ns) {
  std::vector<pprt::RankReport> out;
  const ppc::Execution ex = ppc::execute(plan, nullptr, false);
  EXPECT_TRUE(ex.finished());
  ppc::ExecCosts costs;
  costs.compute = [&](const ppc::Action&, int) { return static_cast<double>(ns); };
  const ppc::Execution timed = ppc::execute(plan, &costs, true);
  for (int r = 0; r < plan.pp(); ++r) {
    pprt::RankReport rep;
    rep.rank = r;
    rep.peak_inflight = ppc::peak_inflight(plan)[static_cast<size_t>(r)];
    for (int step = 0; step < 3; ++step) {
      pprt::StepTiming t;
      t.step = step;
      t.begin_unix_us = 1000000 + step * 100000;
      t.actions = plan.order()[static_cast<size_t>(r)].size();
      for (const ppc::Interval& iv : timed.times[static_cast<size_t>(r)]) {
        const auto s = static_cast<int64_t>(iv.start), e = static_cast<int64_t>(iv.end);
        t.spans.push_back({s, s, e});
        t.wall_ns = std::max(t.wall_ns, e);
      }
      for (size_t i = 0; i < t.actions; ++i)
        if (!ppc::is_comm(plan.order()[static_cast<size_t>(r)][i].kind)) t.compute_ns += ns;
      t.wait_ns = t.wall_ns - t.compute_ns -
                  100 * static_cast<int64_t>(t.actions);  // leaves 100 ns per action
      rep.steps.push_back(t);
    }
    out.push_back(pprt::rank_report_from_json(pprt::to_json(rep)));  // through the store's format
  }
  return out;
}

}  // namespace rttest
