// The terminal table's modes for terminals: compact (one letter per action, the chunk digit, a
// legend), colors (ANSI by kind, idle as a dim dot), and compact when wider than the terminal.
// The default output is pinned by the golden files (golden_test.cpp).
#include <gtest/gtest.h>

#include <sstream>

#include "compiler/emit_text.h"
#include "tests/compiler/viz_test_util.h"

namespace {

std::string table(const pptest::Simulated& s, ppc::TableOptions opts) {
  std::ostringstream os;
  ppc::emit_table(s.plan, s.report, os, opts);
  return os.str();
}

TEST(VizTable, CompactShowsKindAndChunkWithALegend) {
  const auto s = pptest::simulated("Interleaved1F1B", 4, 2, 2);
  EXPECT_EQ(table(s, {false, true, 0}),
            "        0  1\n"
            "Step 0: F0\n"
            "Step 1: F0 F0\n"
            "Step 2: F1 F0\n"
            "Step 3: F1 F1\n"
            "Step 4:    B1\n"
            "Step 5: B1 F1\n"
            "Step 6:    B1\n"
            "Step 7: B1 B0\n"
            "Step 8: B0 B0\n"
            "Step 9: B0\n"
            "Legend: F forward, B backward; the digit is the chunk (the rank's local stage)\n"
            "Interleaved1F1B | pp 2 | vpp 2 | 2 microbatches | 10 steps | 16 compute actions | 12 "
            "send/recv pairs in "
            "15 batches | peak in-flight per rank: 4 3 | verified: deadlock-free\n");
}

TEST(VizTable, CompactLettersForSplitBackwardAndOverlap) {
  const auto s = pptest::simulated("DualPipeV", 8, 4, 8);
  const std::string t = table(s, {false, true, 0});
  for (const char* cell : {"F0", "F1", "I0", "W1", "X0", "X1"})
    EXPECT_NE(t.find(cell), std::string::npos) << cell;
  EXPECT_NE(t.find("Legend: F forward, B backward, I input-grad backward, W weight-grad backward, "
                   "X overlapped F+B"),
            std::string::npos)
      << t;
}

TEST(VizTable, ColorsByKindAndDimDotsForIdle) {
  const auto s = pptest::simulated("1F1B", 2, 2, 2);
  EXPECT_EQ(table(s, {true, false, 0}),
            "        Rank 0 Rank 1\n"
            "Step 0: \x1b[34m0F0\x1b[0m    \x1b[2m·\x1b[0m\n"
            "Step 1: \x1b[34m0F1\x1b[0m    \x1b[34m1F0\x1b[0m\n"
            "Step 2: \x1b[2m·\x1b[0m      \x1b[32m1B0\x1b[0m\n"
            "Step 3: \x1b[32m0B0\x1b[0m    \x1b[34m1F1\x1b[0m\n"
            "Step 4: \x1b[2m·\x1b[0m      \x1b[32m1B1\x1b[0m\n"
            "Step 5: \x1b[32m0B1\x1b[0m    \x1b[2m·\x1b[0m\n"
            "Legend: \x1b[34mF\x1b[0m forward, \x1b[32mB\x1b[0m backward; \x1b[2m·\x1b[0m idle\n"
            "1F1B | pp 2 | vpp 1 | 2 microbatches | 6 steps | 8 compute actions | 4 send/recv "
            "pairs in 7 batches | "
            "peak in-flight per rank: 2 1 | verified: deadlock-free\n");
}

TEST(VizTable, TurnsCompactWhenWiderThanTheTerminal) {
  const auto s = pptest::simulated("1F1B", 8, 8, 8);
  const std::string full = table(s, {false, false, 0});
  EXPECT_EQ(table(s, {false, false, 200}), full);  // fits: the default table, unchanged
  const std::string narrow = table(s, {false, false, 40});
  EXPECT_EQ(narrow.substr(0, narrow.find('\n')), "         0 1 2 3 4 5 6 7");
  EXPECT_NE(narrow.find("(compact: the full table is wider than the terminal)"), std::string::npos);
}

}  // namespace
