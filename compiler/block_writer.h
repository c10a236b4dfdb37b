// For emitters that write millions of small pieces (actions, commas, quotes): formats them into a
// local block and hands the stream one large write per block, with no string per piece.
#pragma once

#include <algorithm>
#include <cstring>
#include <ostream>
#include <string_view>

#include "compiler/action.h"

namespace ppc {

class BlockWriter {
 public:
  explicit BlockWriter(std::ostream& os) : os_(os) {}
  BlockWriter(const BlockWriter&) = delete;
  BlockWriter& operator=(const BlockWriter&) = delete;
  ~BlockWriter() { flush(); }

  void put(char c) {
    if (size_ == kSize) flush();
    buf_[size_++] = c;
  }
  void put(std::string_view s) {
    while (!s.empty()) {
      if (size_ == kSize) flush();
      const size_t n = std::min(s.size(), kSize - size_);
      std::memcpy(buf_ + size_, s.data(), n);
      size_ += n;
      s.remove_prefix(n);
    }
  }
  void put(const Action& a) {
    if (kSize - size_ < kMaxActionText) flush();
    size_ = static_cast<size_t>(format_action(a, buf_ + size_) - buf_);
  }
  void flush() {
    if (size_ > 0) os_.write(buf_, static_cast<std::streamsize>(size_));
    size_ = 0;
  }

 private:
  static constexpr size_t kSize = 32 << 10;
  std::ostream& os_;
  size_t size_ = 0;
  char buf_[kSize];
};

}  // namespace ppc
