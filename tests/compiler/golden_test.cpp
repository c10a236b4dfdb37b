// Golden files: tests/compiler/golden/<schedule>/ppP_vppV.txt hold the output of ppcompile commands
// (scripts/regen-golden.sh writes them). This test reruns every command with the real binary and
// compares byte for byte, and verifies every CSV plan again through the importer and verifier.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "compiler/csv.h"
#include "compiler/verify.h"
#include "tests/compiler/test_util.h"

namespace {

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(pptest::source_path("tests/compiler/golden")))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(Golden, EveryCommandReproducesItsOutput) {
  const auto files = golden_files();
  ASSERT_FALSE(files.empty());
  size_t sections = 0, plans = 0;
  for (const auto& f : files) {
    for (const pptest::TranscriptCommand& s : pptest::parse_transcript(pptest::slurp(f))) {
      ++sections;
      auto r = pptest::run_ppcompile(s.args);
      ASSERT_EQ(r.exit_code, s.exit_code) << f << ":" << s.line << "\n" << r.err;
      ASSERT_EQ(r.out + r.err, s.expected) << f << ":" << s.line;
      const bool is_csv = std::find(s.args.begin(), s.args.end(), "csv") != s.args.end();
      if (is_csv && s.exit_code == 0) {
        ppc::CsvImportOptions io;
        io.input_name = f;
        ppc::Plan plan = ppc::read_csv(s.expected, io);
        ppc::VerifyReport rep = ppc::verify(plan);
        ASSERT_TRUE(rep.ok()) << f << ":" << s.line << ": " << rep.errors.front();
        if (plan.pp() > 1) {
          ASSERT_TRUE(rep.checked_lowered) << f << ":" << s.line;
        }
        ++plans;
      }
    }
  }
  EXPECT_GT(sections, 0u);
  EXPECT_GT(plans, 0u);
  std::cout << "[ golden ] " << files.size() << " files, " << sections << " commands, " << plans
            << " plans verified\n";
}

}  // namespace
