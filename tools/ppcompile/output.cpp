#include "tools/ppcompile/output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "compiler/diagnostic.h"

namespace {

ppc::UserError output_error(std::string message) {
  return ppc::UserError(std::move(message), ppc::SourceLocation{"-o", 0, 0, ""});
}

}  // namespace

Output::Output(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  tmp_ = path_ + ".tmp." + std::to_string(getpid());
  file_.open(tmp_, std::ios::binary);
  if (!file_) throw output_error(fmt::format("cannot open '{}' for writing", path_));
}

Output::~Output() {
  if (!path_.empty() && !committed_) {
    file_.close();
    std::remove(tmp_.c_str());
  }
}

std::ostream& Output::stream() {
  return path_.empty() ? std::cout : file_;
}

void Output::commit() {
  committed_ = true;
  if (path_.empty()) {
    std::cout << std::flush;
    return;
  }
  file_.close();
  if (!file_) {
    std::remove(tmp_.c_str());
    throw output_error(fmt::format("error writing '{}'", path_));
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    throw output_error(fmt::format("cannot write '{}': {}", path_, ec.message()));
  }
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
