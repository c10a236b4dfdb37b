// Output held in memory until it is complete, then written at once (ppcompile writes nothing when
// it fails halfway). Unlike std::ostringstream, the buffer grows in chunks that are never copied
// or reallocated, and the text is handed out chunk by chunk instead of as one more copy.
#pragma once

#include <cstddef>
#include <streambuf>
#include <string>
#include <vector>

namespace ppc {

class OutputBuffer : public std::streambuf {
 public:
  OutputBuffer() = default;
  OutputBuffer(const OutputBuffer&) = delete;
  OutputBuffer& operator=(const OutputBuffer&) = delete;
  ~OutputBuffer() override;

  size_t size() const;
  // Calls fn(const char* data, size_t size) for each chunk, in order.
  template <class Fn>
  void for_each_chunk(Fn&& fn) const {
    for (size_t i = 0; i < chunks_.size(); ++i) {
      const size_t n = i + 1 < chunks_.size() ? chunks_[i].used : used_in_last();
      if (n > 0) fn(static_cast<const char*>(chunks_[i].data), n);
    }
  }
  std::string str() const;  // the whole text as one string (for tests)

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  struct Chunk {
    char* data;
    size_t capacity;
    size_t used;  // set when the next chunk is started
  };
  size_t used_in_last() const;
  void next_chunk(size_t at_least);

  std::vector<Chunk> chunks_;
};

}  // namespace ppc
