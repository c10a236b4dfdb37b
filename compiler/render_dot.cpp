#include "compiler/render_dot.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "compiler/diagnostic.h"

extern char** environ;

namespace ppc {

namespace {

// A fresh private directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ppcompile-dot-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      throw UserError(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const char* name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

UserError not_found(const std::string& binary) {
  return UserError(
      fmt::format("cannot run '{}': Graphviz is not installed (apt-get install graphviz), or use "
                  "--emit dot and render the graph elsewhere",
                  binary));
}

}  // namespace

std::string render_dot(const std::string& graph, const std::string& format, size_t nodes,
                       const std::string& dot_binary) {
  if (format != "svg" && format != "png")
    throw UserError(fmt::format("dot cannot render '{}' here", format));
  if (nodes > kMaxDotNodes)
    throw UserError(fmt::format(
        "the dependency graph has {} nodes, too many for dot to lay out (at most {}): use "
        "--emit dot -o FILE and a faster engine (sfdp), or fewer microbatches",
        nodes, kMaxDotNodes));
  TempDir dir;
  const std::string in = dir.file("plan.dot"), out = dir.file("plan.out"),
                    err = dir.file("dot.err");
  {
    std::ofstream f(in, std::ios::binary);
    f << graph;
    if (!f) throw UserError(fmt::format("cannot write the graph to '{}'", in));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> args{dot_binary, "-T" + format, "-o", out, in};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, dot_binary.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc == ENOENT) throw not_found(dot_binary);
  if (rc != 0) throw UserError(fmt::format("cannot run '{}': {}", dot_binary, std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw UserError(fmt::format("waiting for '{}': {}", dot_binary, std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) throw not_found(dot_binary);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string msg = slurp(err);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
    throw UserError(fmt::format("'{}' failed ({}){}{}", dot_binary,
                                WIFEXITED(status) ? fmt::format("exit code {}", WEXITSTATUS(status))
                                                  : fmt::format("signal {}", WTERMSIG(status)),
                                msg.empty() ? "" : ": ", msg));
  }
  return slurp(out);
}

}  // namespace ppc
