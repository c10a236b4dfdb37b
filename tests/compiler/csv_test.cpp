// PyTorch's CSV format (csv.h): written, read back, read as PyTorch writes it, and its errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sstream>

#include "compiler/compile.h"
#include "compiler/csv.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/verify.h"
#include "tests/compiler/error_cases.h"
#include "tests/compiler/plan_fixtures.h"
#include "tests/compiler/plan_text.h"

namespace ppc {
namespace {

std::string csv_of(const Plan& p, bool compute_only) {
  std::ostringstream ss;
  emit_csv(p, ss, compute_only);
  return ss.str();
}

TEST(Csv, LoweredPlanRoundTrips) {
  Plan p = pptest::generated_plan("Interleaved1F1B", 4, 2, 6, true);
  CsvImportOptions io;
  io.input_name = "plan.csv";
  Plan q = read_csv(csv_of(p, false), io);
  EXPECT_EQ(q.lowered, p.lowered);
  EXPECT_EQ(q.compute, p.compute);
  EXPECT_EQ(q.placement, p.placement);
  EXPECT_EQ(q.microbatches, 6);
  EXPECT_TRUE(verify(q).ok());
}

TEST(Csv, ComputeOnlyImportIsLoweredLikeOurOwn) {
  Plan p = pptest::generated_plan("Interleaved1F1B", 2, 2, 4, true);
  CsvImportOptions io;
  io.input_name = "plan.csv";
  Plan q = read_csv(csv_of(p, true), io);
  EXPECT_FALSE(q.is_lowered());
  EXPECT_EQ(q.compute, p.compute);
  EXPECT_EQ(lower_send_recv(q).lowered, p.lowered);
}

TEST(Csv, ReadsWhatPyTorchWrites) {
  // PyTorch's _dump_csv writes None bubbles as empty cells, CRLF line ends, and its runtime's
  // lowering adds FSDP actions (UNSHARD/RESHARD/REDUCE_GRAD): all are accepted.
  const std::string text =
      "0F0,0F1,,0B0,0B1,0REDUCE_GRAD\r\n"
      ",1F0,1B0,1F1,1B1\r\n";
  CsvImportOptions io;
  io.input_name = "torch.csv";
  Plan q = read_csv(text, io);
  EXPECT_EQ(pptest::orders_text(q.compute), "0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n");
  EXPECT_EQ(q.pp(), 2);
  EXPECT_TRUE(verify(q).ok());
}

TEST(Csv, ReadsVPlacementAndOverlap) {
  // Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2 (V placement).
  const std::string text =
      "0F0,0F1,3F0,3B0,(3F1;0B0)OVERLAP_F_B,3B1,0B1\n"
      "1F0,2F0,1F1,2B0,2F1,1B0,2B1,1B1\n";
  CsvImportOptions io;
  io.input_name = "v.csv";
  Plan q = read_csv(text, io);
  EXPECT_EQ(q.placement.style, PlacementStyle::V);
  EXPECT_EQ(q.compute[0][4].kind, ActionKind::OverlapFB);
  VerifyReport r = verify(q);
  EXPECT_TRUE(r.ok()) << r.errors.front();
}

// Every case of tests/compiler/errors/csv.txt.
TEST(Csv, ErrorsPointAtTheCell) {
  CsvImportOptions io;
  io.input_name = "bad.csv";
  for (const pptest::ErrorCase& c : pptest::error_cases("csv"))
    pptest::expect_message(c, pptest::message_of([&] { read_csv(c["csv"], io); }));
}

// A CSV row is a rank's whole order (tens of kilobytes for a large plan): the error shows 100
// characters of it around the cell, the caret under the cell.
TEST(Csv, ErrorsInALongRowShowTheCellsNeighbourhood) {
  CsvImportOptions io;
  io.input_name = "long.csv";
  std::string row;
  for (int mb = 0; mb < 2000; ++mb) row += fmt::format("0F{},", mb);
  const std::string middle = row + "0Q7," + row + "0F9";
  const std::string e = pptest::message_of([&] { read_csv(middle + "\n", io); });
  const size_t column = row.size() + 1;
  ASSERT_EQ(e.substr(0, e.find('\n')),
            fmt::format("long.csv:1:{}: '0Q7': unknown action kind", column));
  const std::string shown = e.substr(e.find('\n') + 1, e.rfind('\n') - e.find('\n') - 1);
  const std::string caret = e.substr(e.rfind('\n') + 1);
  EXPECT_EQ(shown.size(), 2 + 3 + 100 + 3) << shown;  // "  ..." 100 characters "..."
  EXPECT_EQ(shown.substr(0, 5), "  ...");
  EXPECT_EQ(shown.substr(shown.size() - 3), "...");
  EXPECT_EQ(caret.back(), '^');
  EXPECT_EQ(shown.substr(caret.size() - 1, 4), "0Q7,") << shown << "\n" << caret;
  // Near the start of the line: no leading "...", the caret at the column itself.
  const std::string early = pptest::message_of([&] { read_csv("0F0,0Q1," + row + "\n", io); });
  EXPECT_NE(early.find("\n  0F0,0Q1,0F0,"), std::string::npos) << early.substr(0, 300);
  EXPECT_NE(early.find("...\n      ^"), std::string::npos) << early.substr(0, 300);
  // Near the end: no trailing "...".
  const std::string late = pptest::message_of([&] { read_csv(row + "0Q1\n", io); });
  EXPECT_EQ(late.substr(late.find('\n') + 1, 5), "  ...");
  EXPECT_NE(late.find("0Q1\n"), std::string::npos);
}

}  // namespace
}  // namespace ppc
