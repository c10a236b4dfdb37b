#include "tools/ppcompile/output.h"

#include <algorithm>
#include <cstring>
#include <iostream>

Output::Output(std::string path) {
  if (!path.empty()) file_.emplace(std::move(path), "-o");
}

std::ostream& Output::stream() {
  return file_ ? file_->stream() : std::cout;
}

void Output::commit() {
  if (file_)
    file_->commit();
  else
    std::cout << std::flush;
}

void HeldText::Chunks::write_to(std::ostream& out) const {
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const size_t n = i + 1 < chunks_.size() ? kChunk : static_cast<size_t>(pptr() - pbase());
    out.write(chunks_[i].get(), static_cast<std::streamsize>(n));
  }
}

void HeldText::Chunks::next_chunk() {
  // Every byte of a chunk is written before it is read: no need to clear it.
  chunks_.push_back(std::make_unique_for_overwrite<char[]>(kChunk));
  char* begin = chunks_.back().get();
  setp(begin, begin + kChunk);
}

HeldText::Chunks::int_type HeldText::Chunks::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  next_chunk();  // the current one is full, or there is none yet
  *pptr() = traits_type::to_char_type(c);
  pbump(1);
  return c;
}

std::streamsize HeldText::Chunks::xsputn(const char* s, std::streamsize n) {
  std::streamsize done = 0;
  while (done < n) {
    if (pptr() == epptr()) next_chunk();
    const std::streamsize k = std::min<std::streamsize>(epptr() - pptr(), n - done);
    std::memcpy(pptr(), s + done, static_cast<size_t>(k));
    pbump(static_cast<int>(k));
    done += k;
  }
  return n;
}
