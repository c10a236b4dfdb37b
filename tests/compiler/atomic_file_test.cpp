// Files written whole or not at all (compiler/atomic_file.h): ppcompile's -o, pprun's metrics,
// trace and dumps, the files of a checkpoint.

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "test_util.h"
#include "tests/compiler/error_cases.h"

namespace {

using pptest::message_of;

TEST(AtomicFile, LeavesNothingUnlessCommitted) {
  pptest::TempDir d;
  {
    ppc::AtomicFile f(d.file("m.jsonl"), "--metrics");
    f.write("half");
  }
  EXPECT_TRUE(std::filesystem::is_empty(d.file("")));
  {
    ppc::AtomicFile f(d.file("m.jsonl"), "--metrics");
    f.write("all\n");
    f.commit();
  }
  std::ifstream in(d.file("m.jsonl"));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "all");
  EXPECT_EQ(message_of([] { ppc::AtomicFile("/no/such/dir/m.jsonl", "--metrics"); }),
            "--metrics: cannot create '/no/such/dir/m.jsonl': No such file or directory");
}

// Through the stream (buffered, large writes straight through), then pieces from the caller's
// memory, in order; what was there before is replaced only at commit().
TEST(AtomicFile, StreamAndPiecesInOrderReplacingTheFileAtCommit) {
  pptest::TempDir d;
  const std::string path = d.write("out.bin", "old");
  ppc::AtomicFile f(path, "", ppc::AtomicFile::Sync::Fsync);
  f.stream() << "head:" << 42 << ';';
  const std::string big(200'000, 'x');  // more than the stream's buffer
  f.stream() << big;
  const std::string tail = "tail";
  const std::vector<std::string_view> pieces{"[", tail, "", "]"};
  f.write_pieces(pieces);
  EXPECT_EQ(pptest::slurp(path), "old");
  EXPECT_TRUE(std::filesystem::exists(f.temp_path()));
  f.commit();
  EXPECT_EQ(pptest::slurp(path), "head:42;" + big + "[tail]");
  EXPECT_FALSE(std::filesystem::exists(f.temp_path()));
  ppc::write_file_atomically(path, "new", "--trace");
  EXPECT_EQ(pptest::slurp(path), "new");
}

// Without a flag, errors are located at the file itself.
TEST(AtomicFile, ErrorsNameTheFlagOrTheFile) {
  pptest::TempDir d;
  const std::string path = d.file("no/such/dir/latest");
  EXPECT_EQ(message_of([&] { ppc::write_file_atomically(path, "x"); }),
            path + ": cannot create: No such file or directory");
  // A rename over a directory fails: the temporary file goes, the directory stays.
  std::filesystem::create_directories(d.file("dir/inside"));
  EXPECT_EQ(message_of([&] {
              ppc::write_file_atomically(d.file("dir"), "x", "-o");
            }).rfind("-o: cannot rename '" + d.file("dir") + ".tmp.", 0),
            0u);
  EXPECT_TRUE(std::filesystem::is_directory(d.file("dir/inside")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d.path()), {}), 1);
  ppc::fsync_directory(d.path());
  EXPECT_EQ(message_of([&] { ppc::fsync_directory(d.file("none")); }),
            d.file("none") + ": cannot open the directory to fsync it: No such file or directory");
}

}  // namespace
