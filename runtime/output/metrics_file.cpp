#include "runtime/output/metrics_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/fail.h"

namespace pprt {

namespace {

[[noreturn]] void fail_io(const std::string& what, const std::string& path, int err) {
  fail("--metrics", fmt::format("cannot {} '{}': {}", what, path, std::strerror(err)));
}

// The length of the lines of `path` to keep: whole lines (ending in a newline) that parse as a
// JSON object whose "step" is at most `keep_through`, up to the first one that is not.
off_t kept_length(const std::string& path, int64_t keep_through) {
  std::ifstream in(path, std::ios::binary);
  off_t kept = 0;
  for (std::string line; std::getline(in, line);) {
    if (in.eof()) break;  // no newline after it: cut off
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
        j["step"].get<int64_t>() > keep_through)
      break;
    kept += static_cast<off_t>(line.size() + 1);
  }
  return kept;
}

}  // namespace

MetricsFile::MetricsFile(std::string path, int64_t keep_through)
    : path_(std::move(path)), keep_through_(keep_through) {}

MetricsFile::~MetricsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsFile::open() {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) fail_io("open", path_, errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail_io("stat", path_, errno);
  if (!S_ISREG(st.st_mode)) return;  // a pipe, a terminal (/dev/stdout): only appended to
  const off_t keep = keep_through_ < 0 ? 0 : kept_length(path_, keep_through_);
  if (::ftruncate(fd_, keep) != 0) fail_io("truncate", path_, errno);
}

void MetricsFile::append(const std::string& json) {
  if (fd_ < 0) open();
  const std::string line = json + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_io("write to", path_, errno);
    done += static_cast<size_t>(n);
  }
}

void MetricsFile::sync() {
  if (fd_ >= 0 && ::fsync(fd_) != 0) fail_io("fsync", path_, errno);
}

}  // namespace pprt
