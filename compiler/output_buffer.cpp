#include "compiler/output_buffer.h"

#include <algorithm>
#include <cstring>

namespace ppc {

namespace {
constexpr size_t kFirstChunk = 64 << 10;  // small outputs stay small
constexpr size_t kLargestChunk = 8 << 20;
}  // namespace

OutputBuffer::~OutputBuffer() {
  for (const Chunk& c : chunks_) delete[] c.data;
}

size_t OutputBuffer::used_in_last() const {
  return chunks_.empty() ? 0 : static_cast<size_t>(pptr() - pbase());
}

size_t OutputBuffer::size() const {
  size_t n = 0;
  for_each_chunk([&](const char*, size_t k) { n += k; });
  return n;
}

std::string OutputBuffer::str() const {
  std::string s;
  s.reserve(size());
  for_each_chunk([&](const char* d, size_t k) { s.append(d, k); });
  return s;
}

void OutputBuffer::next_chunk(size_t at_least) {
  if (!chunks_.empty()) chunks_.back().used = used_in_last();
  const size_t grown =
      chunks_.empty() ? kFirstChunk : std::min(2 * chunks_.back().capacity, kLargestChunk);
  const size_t capacity = std::max(grown, at_least);
  chunks_.push_back(Chunk{new char[capacity], capacity, 0});
  setp(chunks_.back().data, chunks_.back().data + capacity);
}

OutputBuffer::int_type OutputBuffer::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  next_chunk(1);
  *pptr() = traits_type::to_char_type(c);
  pbump(1);
  return c;
}

std::streamsize OutputBuffer::xsputn(const char* s, std::streamsize n) {
  size_t left = static_cast<size_t>(n);
  while (left > 0) {
    size_t room = static_cast<size_t>(epptr() - pptr());
    if (room == 0) {
      next_chunk(1);
      room = static_cast<size_t>(epptr() - pptr());
    }
    const size_t k = std::min(room, left);
    std::memcpy(pptr(), s, k);
    pbump(static_cast<int>(k));
    s += k;
    left -= k;
  }
  return n;
}

}  // namespace ppc
