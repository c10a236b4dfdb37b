#include "compiler/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <streambuf>
#include <vector>

#include "compiler/diagnostic.h"

namespace ppc {

namespace {

// Writes all of `n` bytes (retrying short writes); false with errno set on failure.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

// The stream's buffer: 64 KiB in front of the file; larger writes go straight through. The first
// failed write's errno is kept (the stream then reports a bad state).
class AtomicFile::Buffer : public std::streambuf {
 public:
  explicit Buffer(int fd) : fd_(fd), data_(kSize) { setp(data_.data(), data_.data() + kSize); }
  int error() const { return error_; }

  // Writes out what is buffered.
  bool drain() {
    const bool ok = error_ == 0 && write_all(fd_, pbase(), static_cast<size_t>(pptr() - pbase()));
    if (!ok && error_ == 0) error_ = errno;
    setp(data_.data(), data_.data() + kSize);
    return ok;
  }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const auto size = static_cast<size_t>(n);
    if (size > static_cast<size_t>(epptr() - pptr())) {
      if (!drain()) return 0;
      if (size >= kSize) {
        if (write_all(fd_, s, size)) return n;
        error_ = errno;
        return 0;
      }
    }
    std::memcpy(pptr(), s, size);
    pbump(static_cast<int>(size));
    return n;
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  static constexpr size_t kSize = size_t{1} << 16;
  int fd_;
  std::vector<char> data_;
  int error_ = 0;
};

AtomicFile::AtomicFile(std::string path, std::string where, Sync sync)
    : path_(std::move(path)),
      tmp_(path_ + ".tmp." + std::to_string(::getpid())),
      where_(std::move(where)),
      sync_(sync) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) fail("create", errno);
  buf_ = std::make_unique<Buffer>(fd_);
  os_ = std::make_unique<std::ostream>(buf_.get());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  const std::string reason = std::strerror(err);
  if (what == "rename")
    throw UserError(where_.empty()
                        ? fmt::format("cannot rename '{}' into place: {}", tmp_, reason)
                        : fmt::format("cannot rename '{}' to '{}': {}", tmp_, path_, reason),
                    input_location(where_.empty() ? path_ : where_));
  throw UserError(where_.empty() ? fmt::format("cannot {}: {}", what, reason)
                                 : fmt::format("cannot {} '{}': {}", what, path_, reason),
                  input_location(where_.empty() ? path_ : where_));
}

void AtomicFile::check_buffer() {
  if (buf_->error()) fail("write", buf_->error());
}

std::ostream& AtomicFile::stream() {
  return *os_;
}

void AtomicFile::write(std::string_view text) {
  buf_->sputn(text.data(), static_cast<std::streamsize>(text.size()));
  check_buffer();
}

void AtomicFile::write_pieces(std::span<const std::string_view> pieces) {
  buf_->drain();
  check_buffer();
  std::vector<iovec> iov;
  for (std::string_view p : pieces)
    if (!p.empty()) iov.push_back({const_cast<char*>(p.data()), p.size()});
  size_t next = 0;
  while (next < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - next, IOV_MAX));
    const ssize_t w = ::writev(fd_, iov.data() + next, count);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write", w == 0 ? EIO : errno);
    // Skip what was written; a partly written piece keeps its rest.
    auto left = static_cast<size_t>(w);
    while (left > 0 && left >= iov[next].iov_len) left -= iov[next++].iov_len;
    if (left > 0) {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
    }
  }
}

void AtomicFile::flush() {
  buf_->drain();
  check_buffer();
}

void AtomicFile::commit() {
  flush();
  if (sync_ == Sync::Fsync && ::fsync(fd_) != 0) fail("write", errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail("write", errno);
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename", errno);
  committed_ = true;
}

void write_file_atomically(const std::string& path, std::string_view text, const std::string& where,
                           AtomicFile::Sync sync) {
  AtomicFile f(path, where, sync);
  f.write(text);
  f.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw UserError(fmt::format("cannot open the directory to fsync it: {}", std::strerror(errno)),
                    input_location(dir));
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    throw UserError(fmt::format("cannot fsync the directory: {}", std::strerror(e)),
                    input_location(dir));
  }
  ::close(fd);
}

}  // namespace ppc
