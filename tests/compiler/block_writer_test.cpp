#include <gtest/gtest.h>

#include <ostream>
#include <sstream>

#include "compiler/block_writer.h"

namespace ppc {
namespace {

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
