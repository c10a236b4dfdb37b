// Helpers shared by the compiler tests: running the real ppcompile binary, temp files.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace pptest {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  long max_rss_kib = 0;  // the process's peak resident memory
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pptest-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    path_ = mkdtemp(buf.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `binary args...` with stdout and stderr captured to files (no shell involved).
inline CliResult run_binary(const std::string& binary, const std::vector<std::string>& args) {
  TempDir dir;
  const std::string out_path = dir.file("out"), err_path = dir.file("err");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> argv_s{binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  CliResult r;
  if (posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), environ) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    r.err = "spawn failed: " + binary;
    return r;
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  r.max_rss_kib = usage.ru_maxrss;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

#ifdef PPCOMPILE_BIN
inline CliResult run_ppcompile(const std::vector<std::string>& args) {
  return run_binary(PPCOMPILE_BIN, args);
}
#endif

inline std::string source_path(const std::string& rel) {
#ifdef PP_SOURCE_DIR
  return std::string(PP_SOURCE_DIR) + "/" + rel;
#else
  return rel;
#endif
}

// One command of a transcript (the golden files, tests/compiler/errors/ppcompile.txt): a line
// "$ ppcompile ARGS", or "$ ppcompile ARGS (exit N)", then what it prints (stdout, then stderr).
// ARGS are split at spaces. Lines starting "# " before the first command are comments.
struct TranscriptCommand {
  std::vector<std::string> args;
  int exit_code = 0;
  std::string expected;
  int line = 0;
};

inline std::vector<TranscriptCommand> parse_transcript(const std::string& text) {
  std::vector<TranscriptCommand> out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.rfind("# ", 0) == 0 && out.empty()) continue;
    if (line.rfind("$ ppcompile ", 0) == 0) {
      TranscriptCommand c;
      c.line = n;
      std::string cmd = line.substr(12);
      const std::string exit_tag = " (exit ";
      if (auto p = cmd.find(exit_tag); p != std::string::npos) {
        c.exit_code = std::stoi(cmd.substr(p + exit_tag.size()));
        cmd = cmd.substr(0, p);
      }
      std::istringstream words(cmd);
      for (std::string w; words >> w;) c.args.push_back(w);
      out.push_back(std::move(c));
      continue;
    }
    if (out.empty())
      throw std::runtime_error("transcript line " + std::to_string(n) + " outside a command");
    out.back().expected += line + "\n";
  }
  return out;
}

}  // namespace pptest
