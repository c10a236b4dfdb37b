#include <gtest/gtest.h>

#include <ostream>
#include <sstream>

#include "compiler/block_writer.h"
#include "compiler/output_buffer.h"

namespace ppc {
namespace {

// The same writes into an OutputBuffer and an ostringstream give the same text, across chunk
// boundaries, with single characters, short and long pieces.
TEST(OutputBuffer, HoldsExactlyWhatWasWritten) {
  OutputBuffer buf;
  std::ostream out(&buf);
  std::ostringstream want;
  EXPECT_EQ(buf.size(), 0u);
  EXPECT_EQ(buf.str(), "");
  std::string big(300000, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  for (int round = 0; round < 40; ++round) {
    for (std::ostream* os : {static_cast<std::ostream*>(&out), static_cast<std::ostream*>(&want)}) {
      *os << round << ' ';
      os->put('#');
      os->write(big.data(), static_cast<std::streamsize>(round * 7919 % big.size()));
      *os << "|\n";
    }
  }
  out.flush();
  EXPECT_EQ(buf.size(), want.str().size());
  EXPECT_EQ(buf.str(), want.str());
  size_t chunks = 0, total = 0;
  buf.for_each_chunk([&](const char*, size_t n) {
    ++chunks;
    total += n;
  });
  EXPECT_GT(chunks, 1u);
  EXPECT_EQ(total, want.str().size());
}

TEST(BlockWriter, WritesPiecesInOrder) {
  std::ostringstream os;
  std::string want;
  {
    BlockWriter w(os);
    for (int i = 0; i < 20000; ++i) {
      const Action a = Action::comm(ActionKind::SendB, i, 2 * i, 0);
      w.put(a);
      w.put(',');
      want += to_string(a) + ",";
      if (i % 1000 == 0) {
        const std::string long_piece(50000, static_cast<char>('A' + i % 26));
        w.put(long_piece);
        want += long_piece;
      }
    }
  }  // flushed by the destructor
  EXPECT_EQ(os.str(), want);
}

}  // namespace
}  // namespace ppc
