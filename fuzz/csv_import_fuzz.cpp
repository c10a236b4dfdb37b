// The CSV plan importer as ppcompile runs it (--from-csv FILE [--layout STR]): read, verify,
// lower, verify; an accepted plan is emitted as CSV (and as the default table) and read back.
//
// Input: the CSV text, optionally preceded by a line "#layout <LAYOUT>" that stands for
// --layout LAYOUT (no CSV cell starts with '#').
#include <sstream>
#include <string>

#include "compiler/csv.h"
#include "compiler/emit_text.h"
#include "compiler/layout.h"
#include "compiler/verify_and_lower.h"
#include "fuzz/fuzz_target.h"

PP_FUZZ_TARGET(csv_import) {
  std::string_view csv = input;
  std::optional<std::string_view> layout_text;
  if (csv.substr(0, 8) == "#layout ") {
    const size_t nl = csv.find('\n');
    layout_text = csv.substr(8, nl == std::string_view::npos ? csv.size() - 8 : nl - 8);
    csv = nl == std::string_view::npos ? std::string_view() : csv.substr(nl + 1);
  }
  ppc::CsvImportOptions io;
  io.input_name = "fuzz.csv";
  auto prepared = ppfuzz::accepted([&] {
    if (layout_text) {
      io.layout = ppc::parse_layout(*layout_text, "--layout");
      io.has_model = true;
    }
    return ppc::verify_and_lower_or_throw(ppc::read_csv(csv, io), ppc::CostModel{}, io.input_name);
  });
  if (!prepared) return;
  const ppc::Plan& plan = prepared->plan;
  ppfuzz::must_succeed("emitting the accepted plan", [&] {
    std::ostringstream table;
    ppc::emit_table(plan, prepared->report, table, ppc::TableOptions{});
    std::ostringstream out;
    ppc::emit_csv(plan, out, /*compute_only=*/false);
    const ppc::Plan back = ppc::read_csv(out.str(), io);
    // (A lowered plan without SEND/RECV, on one rank, reads back as its compute order.)
    ppfuzz::expect(back.order() == plan.order() && back.compute == plan.compute &&
                       back.placement == plan.placement && back.copies == plan.copies &&
                       back.microbatches == plan.microbatches,
                   "the emitted CSV reads back as another plan");
  });
}
