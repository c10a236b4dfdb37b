#include "fuzz/fuzz_files.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#include "fuzz/fuzz_target.h"

namespace ppfuzz {

namespace fs = std::filesystem;

namespace {

bool valid_part(std::string_view p) {
  if (p.empty() || p == "." || p == "..") return false;
  for (char c : p)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  return true;
}

fs::path base_dir() {
  if (const char* t = std::getenv("TMPDIR"); t && *t) return t;
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return fs::temp_directory_path();
}

struct Scratch {
  std::string path;
  Scratch() {
    std::string pattern = (base_dir() / "pp-fuzz-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) violation("cannot create a scratch directory in " + pattern);
    path = pattern;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) return valid_part(name);
  return valid_part(name.substr(0, slash)) && valid_part(name.substr(slash + 1));
}

std::optional<std::vector<NamedFile>> split_files(std::string_view input) {
  constexpr std::string_view kHead = "=== ", kSep = "\n=== ";
  if (input.substr(0, kHead.size()) != kHead) return std::nullopt;
  std::vector<NamedFile> files;
  std::set<std::string, std::less<>> names, dirs;
  size_t at = kHead.size();
  while (true) {
    const size_t eol = input.find('\n', at);
    if (eol == std::string_view::npos) return std::nullopt;
    std::string name(input.substr(at, eol - at));
    if (!valid_name(name) || names.count(name) || files.size() == kMaxFiles) return std::nullopt;
    const size_t slash = name.find('/');
    if (slash != std::string::npos) dirs.insert(name.substr(0, slash));
    names.insert(name);
    const size_t end = input.find(kSep, eol + 1);
    const std::string_view bytes = input.substr(
        eol + 1, end == std::string_view::npos ? std::string_view::npos : end - (eol + 1));
    files.push_back(NamedFile{std::move(name), bytes});
    if (end == std::string_view::npos) break;
    at = end + kSep.size();
  }
  for (const std::string& d : dirs)
    if (names.count(d)) return std::nullopt;  // both a file and a directory
  return files;
}

const std::string& scratch_dir() {
  static Scratch scratch;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(scratch.path, ec)) fs::remove_all(e.path(), ec);
  return scratch.path;
}

void write_file(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) violation("cannot create " + path);
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) violation("cannot write " + path);
}

void write_files(const std::string& dir, const std::vector<NamedFile>& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const NamedFile& f : files) {
    const fs::path p = fs::path(dir) / f.name;
    fs::create_directories(p.parent_path(), ec);
    write_file(p.string(), f.bytes);
  }
}

}  // namespace ppfuzz
