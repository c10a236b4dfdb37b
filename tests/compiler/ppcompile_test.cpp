// ppcompile as a user runs it: exit codes, messages, files.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/compile.h"
#include "compiler/csv.h"
#include "compiler/emit_text.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan_json.h"
#include "compiler/verify_and_lower.h"
#include "tests/compiler/plan_text.h"
#include "tests/compiler/test_util.h"

namespace {

using pptest::run_ppcompile;

TEST(Cli, HelpAndListSchedules) {
  auto h = run_ppcompile({"--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("--schedule"), std::string::npos);
  EXPECT_NE(h.out.find("--microbatches"), std::string::npos);
  auto l = run_ppcompile({"--list-schedules"});
  EXPECT_EQ(l.exit_code, 0);
  for (const char* s : {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS"})
    EXPECT_NE(l.out.find(s), std::string::npos) << s;
}

TEST(Cli, EmitLayoutIsOneLinePerStage) {
  auto r = run_ppcompile({"--layout", "Et|t*4|t|tL", "--pp", "2", "--schedule", "Interleaved1F1B",
                          "--microbatches", "4", "--emit", "layout"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "stage 0 rank 0 chunk 0: E t\n"
            "stage 1 rank 1 chunk 0: t t t t\n"
            "stage 2 rank 0 chunk 1: t\n"
            "stage 3 rank 1 chunk 1: t L\n");
}

// Every command of tests/compiler/errors/ppcompile.txt exits and prints exactly as shown there (a
// message on stderr, nothing on stdout).
TEST(Cli, MessagesOfBadCommandLines) {
  const std::string file = "tests/compiler/errors/ppcompile.txt";
  const auto commands = pptest::parse_transcript(pptest::slurp(pptest::source_path(file)));
  ASSERT_GT(commands.size(), 10u);
  for (const auto& c : commands) {
    const auto r = run_ppcompile(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << file << ":" << c.line;
    if (c.exit_code != 0) {
      EXPECT_EQ(r.out, "") << file << ":" << c.line;
    }
    EXPECT_EQ(r.out + r.err, c.expected) << file << ":" << c.line;
  }
}

TEST(Cli, NothingWrittenOnFailure) {
  pptest::TempDir dir;
  const std::string out = dir.file("plan.csv");
  auto bad = run_ppcompile({"--stages", "4", "--pp", "3", "--schedule", "1F1B", "--microbatches",
                            "4", "--emit", "csv", "-o", out});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(out));
  // An existing file is left as it was.
  dir.write("plan.csv", "old\n");
  bad = run_ppcompile(
      {"--stages", "4", "--pp", "3", "--schedule", "1F1B", "--microbatches", "4", "-o", out});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(pptest::slurp(out), "old\n");
  auto good = run_ppcompile({"--stages", "4", "--pp", "4", "--schedule", "1F1B", "--microbatches",
                             "4", "--emit", "csv", "-o", out});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(good.out, "");
  EXPECT_EQ(pptest::slurp(out).substr(0, 8), "0F0,0SEN");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}),
            1);  // no temp file left
}

// Output is written as it is emitted (a large plan is megabytes): -o FILE gets exactly what
// stdout gets, and no temporary file is left.
TEST(Cli, LargeOutputToAFileEqualsStdout) {
  pptest::TempDir dir;
  for (const char* emit : {"json", "csv", "table", "stats"}) {
    const std::string file = dir.file(std::string("plan.") + emit);
    const std::vector<std::string> args = {
        "--stages",       "64",  "--pp",   "16", "--schedule", "Interleaved1F1B",
        "--microbatches", "128", "--emit", emit};
    auto to_stdout = run_ppcompile(args);
    ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
    auto with_file = args;
    with_file.insert(with_file.end(), {"-o", file});
    auto to_file = run_ppcompile(with_file);
    ASSERT_EQ(to_file.exit_code, 0) << to_file.err;
    EXPECT_EQ(to_file.out, "");
    EXPECT_EQ(pptest::slurp(file), to_stdout.out) << emit;
  }
  EXPECT_GT(std::filesystem::file_size(dir.file("plan.json")), 500000u);  // many writes
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 4);
}

TEST(Cli, ImportsADeadlockingCsvAndExplainsIt) {
  pptest::TempDir dir;
  const std::string csv = dir.write("bad.csv",
                                    "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                                    "1RECV_F1,1F1,1B1,1SEND_B1,1RECV_F0,1F0,1B0,1SEND_B0\n");
  auto r = run_ppcompile({"--from-csv", csv});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(
      r.err.find("the plan is not valid:\n  deadlock: rank 0 waits at its action 1 (0SEND_F0)"),
      std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cycle: rank 0 -> rank 1 -> rank 0"), std::string::npos);
  for (const char* emit : {"table", "csv", "json"}) {  // written beside verification: not shown
    auto e = run_ppcompile({"--from-csv", csv, "--emit", emit});
    EXPECT_EQ(e.exit_code, 2) << emit;
    EXPECT_EQ(e.out, "") << emit;
  }
}

// ppcompile writes the table, the CSV and the JSON plan beside the lowered plan's verification
// (for a plan it lowers itself) or after it (for an imported one), and the report's parts last:
// the bytes are those of the emitters run one after the other on the checked plan. The text is
// held in memory in chunks of 1 MiB until the plan is valid: the second plan's CSV and JSON span
// several of them.
TEST(Cli, OutputsWrittenBesideVerificationEqualTheEmitters) {
  struct Size {
    int stages, pp, microbatches;
  };
  for (const Size size : {Size{16, 8, 16}, Size{64, 16, 512}}) {
    SCOPED_TRACE(size.microbatches);
    pptest::TempDir dir;
    ppc::CompileOptions co;
    co.layout = ppc::generic_layout(size.stages);
    co.pp = size.pp;
    co.schedule = "Interleaved1F1B";
    co.microbatches = size.microbatches;
    const ppc::VerifiedPlan checked =
        ppc::verify_and_lower_or_throw(ppc::compile(co), ppc::CostModel{}, "");
    std::ostringstream table, csv, json;
    ppc::emit_table(checked.plan, checked.report, table, ppc::TableOptions{});
    ppc::emit_csv(checked.plan, csv, false);
    ppc::emit_json(checked.plan, checked.report, json);
    if (size.microbatches == 512) {
      EXPECT_GT(csv.str().size(), size_t{3} << 19);
      EXPECT_GT(json.str().size(), size_t{5} << 19);
    }
    const std::vector<std::string> generated = {
        "--stages",       std::to_string(size.stages),
        "--pp",           std::to_string(size.pp),
        "--schedule",     "Interleaved1F1B",
        "--microbatches", std::to_string(size.microbatches)};
    const std::string imported = dir.write("plan.csv", csv.str());
    for (const std::vector<std::string>& source :
         {generated, std::vector<std::string>{"--from-csv", imported}}) {
      for (const auto& [emit, want] : {std::pair<std::string, std::string>{"table", table.str()},
                                       {"csv", csv.str()},
                                       {"json", json.str()}}) {
        if (emit != "csv" && source != generated) continue;  // an import names another schedule
        auto args = source;
        args.insert(args.end(), {"--emit", emit});
        auto r = run_ppcompile(args);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, want) << emit << " from " << source.front();
      }
    }
  }
}

// Each cell of an imported CSV once kept a copy of its whole line (for error messages), so memory
// grew with the square of a row's length: a 1.9 MB CSV of 16 ranks took 23 GB and 30 s. Here 4
// ranks of about 4,000 cells (35 KB) each: about 560 MB that way, a few MB now.
// A spawned child's peak memory includes the peak of the process that spawned it (at exec the
// kernel keeps the high-water mark of the memory the child shared with it), so this measures only
// from a test process that is still small: as ctest runs it, one test per process.
TEST(Cli, ImportingACsvTakesMemoryLinearInItsSize) {
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  if (self.ru_maxrss >= 50 << 10)
    GTEST_SKIP() << "this test process already peaked at " << self.ru_maxrss
                 << " KiB: run this test by itself";
  pptest::TempDir dir;
  const std::string csv = dir.file("long_rows.csv");
  auto a = run_ppcompile({"--stages", "16", "--pp", "4", "--schedule", "Interleaved1F1B",
                          "--microbatches", "256", "--emit", "csv", "-o", csv});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_GT(std::filesystem::file_size(csv), 120000u);
  auto b = run_ppcompile({"--from-csv", csv, "--emit", "csv"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(b.out, pptest::slurp(csv));
  EXPECT_LT(b.max_rss_kib, 100 << 10);
}

TEST(Cli, CsvRoundTripsThroughTheTool) {
  pptest::TempDir dir;
  const std::string csv = dir.file("p.csv");
  auto a = run_ppcompile({"--stages", "8", "--pp", "4", "--schedule", "LoopedBFS", "--microbatches",
                          "3", "--emit", "csv", "--compute-only", "-o", csv});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto b = run_ppcompile({"--from-csv", csv, "--emit", "csv"});
  auto c = run_ppcompile({"--stages", "8", "--pp", "4", "--schedule", "LoopedBFS", "--microbatches",
                          "3", "--emit", "csv"});
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(b.out, c.out);
  auto j = run_ppcompile({"--from-csv", csv, "--emit", "json", "-o", dir.file("p.json")});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  auto k = run_ppcompile({"--from-json", dir.file("p.json"), "--emit", "csv"});
  EXPECT_EQ(k.out, c.out);
}

// The lines of `text` that follow the heading of --dump-after PASS, up to the next heading.
std::string dump_of(const std::string& text, const std::string& pass) {
  const std::string heading = "--- ppcompile: after " + pass + " ---\n";
  const size_t at = text.find(heading);
  if (at == std::string::npos) return "(no dump after " + pass + ")";
  const size_t begin = at + heading.size();
  return text.substr(begin, text.find("--- ppcompile: after ", begin) - begin);
}

// The rank lines of a dumped plan, as pptest::orders_text writes orders.
std::string dumped_orders(const std::string& dump) {
  std::istringstream in(dump);
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("  rank ", 0) == 0) out += line.substr(line.find(": ") + 2) + "\n";
  return out;
}

// --dump-after writes what each pass hands the next to stderr, and changes nothing else: the
// orders after generate and lower are the library's compile() and its lowering, the report's
// counts are the plan's, the simulation's makespan is the one --emit stats prints.
TEST(Cli, DumpAfterShowsEachPassAndChangesNothingElse) {
  const std::vector<std::string> args = {
      "--layout",   "Ett|tt|tt|ttL", "--pp",           "2", "--vpp", "2",
      "--schedule", "ZBV",           "--microbatches", "4"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = args;
    a.insert(a.end(), more.begin(), more.end());
    return run_ppcompile(a);
  };
  const auto plain = with({"--emit", "json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto dumped = with(
      {"--emit", "json", "--dump-after", "parse,place,generate,lower", "--dump-after", "verify"});
  ASSERT_EQ(dumped.exit_code, 0) << dumped.err;
  EXPECT_EQ(dumped.out, plain.out);
  EXPECT_EQ(plain.err, "");

  ppc::CompileOptions co;
  co.layout = ppc::parse_layout("Ett|tt|tt|ttL");
  co.has_model = true;
  co.pp = 2;
  co.schedule = "ZBV";
  co.microbatches = 4;
  const ppc::Plan compiled = ppc::compile(co);
  const ppc::Plan lowered = ppc::lower_send_recv(compiled);
  EXPECT_EQ(dump_of(dumped.err, "parse"),
            "layout Ett|tt|tt|ttL: 4 stages\n  stage 0: E t t\n  stage 1: t t\n"
            "  stage 2: t t\n  stage 3: t t L\n");
  EXPECT_EQ(dump_of(dumped.err, "place"),
            "plan ZBVZeroBubble: pp 2, vpp 2, 4 microbatches, 1 model copy, v placement; placed, "
            "no order yet\n  stage 0: rank 0 chunk 0\n  stage 1: rank 1 chunk 0\n"
            "  stage 2: rank 1 chunk 1\n  stage 3: rank 0 chunk 1\n");
  EXPECT_EQ(dumped_orders(dump_of(dumped.err, "generate")), pptest::orders_text(compiled.compute));
  EXPECT_EQ(dumped_orders(dump_of(dumped.err, "lower")), pptest::orders_text(lowered.lowered));
  const std::string verify = dump_of(dumped.err, "verify");
  size_t computes = 0, comms = 0;
  for (const auto& order : lowered.lowered)
    for (const ppc::Action& a : order) ++(ppc::is_comm(a.kind) ? comms : computes);
  EXPECT_EQ(
      verify.rfind(fmt::format("valid: {} compute actions, {} SEND/RECV in ", computes, comms), 0),
      0u)
      << verify;
  EXPECT_EQ(dump_of(dumped.err, "simulate"), "(no dump after simulate)");

  // simulate: asked for, the plan is simulated even where the output does not need it.
  const auto stats = with({"--emit", "stats"});
  const auto sim = with({"--emit", "layout", "--dump-after", "simulate"});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const size_t at = stats.out.find("makespan      ");
  ASSERT_NE(at, std::string::npos) << stats.out;
  const std::string makespan = stats.out.substr(at + 14, stats.out.find('\n', at) - at - 14);
  EXPECT_EQ(dump_of(sim.err, "simulate").rfind("makespan " + makespan + ", ", 0), 0u)
      << sim.err << " vs " << makespan;
}

TEST(Cli, DumpAfterNamesAPassOfOnePlan) {
  const auto bad = run_ppcompile({"--stages", "4", "--pp", "4", "--schedule", "1F1B",
                                  "--microbatches", "4", "--dump-after", "optimize"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "ppcompile: error: --dump-after: optimize not in "
            "{parse,place,generate,lower,verify,simulate}\n(run ppcompile --help for usage)\n");
  const auto many = run_ppcompile(
      {"--stages", "8", "--pp", "4", "--microbatches", "8", "--compare", "--dump-after", "lower"});
  EXPECT_EQ(many.exit_code, 2);
  EXPECT_EQ(many.err,
            "ppcompile: error: --dump-after: shows the passes of one plan; --compare compiles "
            "many\n");
  EXPECT_EQ(many.out, "");
  // A plan that fails verification: the report that says so, then the error.
  pptest::TempDir dir;
  const std::string csv = dir.file("stuck.csv");
  {
    std::ofstream f(csv);
    f << "0B0,0F0\n1F0,1B0\n";  // rank 0 runs a backward before its forward
  }
  const auto stuck = run_ppcompile({"--from-csv", csv, "--dump-after", "parse,verify"});
  EXPECT_EQ(stuck.exit_code, 2);
  EXPECT_NE(dump_of(stuck.err, "parse").find("  rank 0: 0B0 0F0\n"), std::string::npos)
      << stuck.err;
  EXPECT_EQ(dump_of(stuck.err, "verify").rfind("not valid: ", 0), 0u) << stuck.err;
  EXPECT_NE(stuck.err.find("ppcompile: error: " + csv + ": the plan is not valid:"),
            std::string::npos)
      << stuck.err;
}

// The value of a line of --emit stats ("makespan      123" -> "123").
std::string stats_line(const std::string& stats, const std::string& key) {
  const size_t at = stats.find("\n" + key + " ");
  if (at == std::string::npos) return "(no " + key + ")";
  const size_t begin = stats.find_first_not_of(' ', at + 1 + key.size());
  return stats.substr(begin, stats.find('\n', begin) - begin);
}

// --lengths: the simulation costs each microbatch at its length; Auto orders them (the plan's
// microbatch_order), which --from-json reads back to the same step; --microbatch-order data keeps
// data order; a plan without lengths has no order.
TEST(Cli, LengthsOrderAutosMicrobatches) {
  pptest::TempDir dir;
  const std::string lengths = dir.write(
      "lengths.txt", "# one per microbatch\n4096\n128\n256\n3000\n\n128\n512\n2048\n64\n");
  const std::vector<std::string> base = {"--stages",       "8", "--pp",      "4",
                                         "--microbatches", "8", "--lengths", lengths};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return run_ppcompile(args);
  };
  const auto data = with({"--schedule", "Auto", "--microbatch-order", "data", "--emit", "stats"});
  ASSERT_EQ(data.exit_code, 0) << data.err;
  EXPECT_EQ(stats_line(data.out, "lengths"),
            "8 microbatches of 64 .. 4096 tokens (mean 1279; costs at the mean); data order");
  const auto ordered = with({"--schedule", "Auto", "--emit", "stats"});
  ASSERT_EQ(ordered.exit_code, 0) << ordered.err;
  EXPECT_EQ(stats_line(ordered.out, "lengths"),
            "8 microbatches of 64 .. 4096 tokens (mean 1279; costs at the mean); ordered by "
            "length");
  EXPECT_EQ(stats_line(ordered.out, "verified"), "yes, deadlock-free");
  EXPECT_LT(std::stod(stats_line(ordered.out, "makespan")),
            std::stod(stats_line(data.out, "makespan")));
  // Without lengths every microbatch costs the same: the makespan is another.
  const auto blind = run_ppcompile({"--stages", "8", "--pp", "4", "--microbatches", "8",
                                    "--schedule", "Auto", "--emit", "stats"});
  EXPECT_EQ(stats_line(blind.out, "lengths"), "(no lengths)");

  const std::string json = dir.file("plan.json");
  ASSERT_EQ(with({"--schedule", "Auto", "--emit", "json", "-o", json}).exit_code, 0);
  EXPECT_NE(pptest::slurp(json).find("\"microbatch_order\": ["), std::string::npos);
  const auto back = run_ppcompile({"--from-json", json, "--lengths", lengths, "--emit", "stats"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(stats_line(back.out, "makespan"), stats_line(ordered.out, "makespan"));
  EXPECT_EQ(stats_line(back.out, "lengths"), stats_line(ordered.out, "lengths"));

  ASSERT_EQ(with({"--schedule", "Interleaved1F1B", "--emit", "json", "-o", json}).exit_code, 0);
  EXPECT_EQ(pptest::slurp(json).find("microbatch_order"), std::string::npos);
  const auto one = with({"--schedule", "Interleaved1F1B", "--emit", "stats"});
  EXPECT_EQ(stats_line(one.out, "lengths"),
            "8 microbatches of 64 .. 4096 tokens (mean 1279; costs at the mean); data order");
}

}  // namespace
