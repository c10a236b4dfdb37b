// The exposed all-to-all time (runtime/output/all_to_all_stats.h) on hand-made steps: outside an
// overlapped OVERLAP_F_B all of an all-to-all is exposed; inside one, only what the other part
// did not cover (before it began, after it ended, or while it waited in its own all-to-all); and
// the figures survive the report's JSON.
#include <gtest/gtest.h>

#include "runtime/output/all_to_all_stats.h"

namespace pprt {
namespace {

AllToAllSpan a2a(int64_t start, int64_t end, bool backward) {
  AllToAllSpan s;
  s.start = start;
  s.end = end;
  s.backward = backward;
  s.sent_bytes = 100;
  return s;
}

TEST(Report, AllToAllOutsideAnOverlapIsExposed) {
  StepTiming t;
  t.all_to_all = {a2a(0, 10, false), a2a(20, 25, true)};
  const AllToAllStep s = all_to_all_step(t);
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(s.total_ns, 15);
  EXPECT_EQ(s.exposed_ns, 15);
  EXPECT_EQ(s.exposed_wall_ns, 15);
  EXPECT_EQ(s.sent_bytes, 200);
}

TEST(Report, AllToAllUnderTheOtherPartIsHidden) {
  StepTiming t;
  // Both parts start at 100; the forward part ends at 150, the backward one at 200.
  t.overlaps = {OverlapSpan{100, 150, 200}};
  t.all_to_all = {
      a2a(101, 105, false),  // the backward part computes all along: hidden
      a2a(110, 130, false),  // the backward part waits in its own 120..125: 5 exposed
      a2a(120, 125, true),   // the forward part waits in its own all along: 5 exposed
      a2a(140, 160, true),   // the forward part ends at 150: 10 exposed
      a2a(170, 180, true),   // after the forward part: all 10 exposed
  };
  const AllToAllStep s = all_to_all_step(t);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.total_ns, 4 + 20 + 5 + 20 + 10);
  EXPECT_EQ(s.exposed_ns, 0 + 5 + 5 + 10 + 10);
  // 120..125 is exposed in both parts' all-to-alls at once: the sum counts it twice, the wall
  // time once (120..125, 150..160, 170..180)
  EXPECT_EQ(s.exposed_wall_ns, 5 + 10 + 10);
}

TEST(Report, AllToAllSummaryLeavesTheFirstStepOut) {
  RankReport r;
  for (int k = 0; k < 3; ++k) {
    StepTiming t;
    t.step = k;
    // step 0: 4 ms, exposed (no overlap); then 2 ms, hidden (a forward all-to-all under the
    // backward part)
    t.all_to_all = {k == 0 ? a2a(2'000'000, 6'000'000, false) : a2a(0, 2'000'000, false)};
    if (k > 0) t.overlaps = {OverlapSpan{0, 2'000'000, 3'000'000}};
    r.steps.push_back(t);
  }
  const AllToAllSummary s =
      summarise_all_to_all({rank_report_from_json(to_json(r))});  // through the store's JSON
  EXPECT_EQ(s.steps, 2);
  EXPECT_DOUBLE_EQ(s.total_ms, 2.0);
  EXPECT_DOUBLE_EQ(s.exposed_ms, 0.0);
  EXPECT_DOUBLE_EQ(s.exposed_wall_ms, 0.0);
  EXPECT_DOUBLE_EQ(s.hidden(), 1.0);
  EXPECT_NE(all_to_all_text(s).find("100.0 % hidden"), std::string::npos) << all_to_all_text(s);
  EXPECT_EQ(all_to_all_text(AllToAllSummary{}), "");
}

}  // namespace
}  // namespace pprt
