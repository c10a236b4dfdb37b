// Helpers of the end-to-end tests: the real ppcompile and pprun binaries in real processes, their
// output collected, with a time limit.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace pprun_e2e {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pprun-e2e-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct Proc {
  pid_t pid = -1;
  int fd = -1;  // stdout and stderr together
  std::string out;
  int status = -1;
  double seconds = 0;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
};

// Starts `argv` with `env` added to this process's environment, in its own process group.
inline Proc start(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.push_back(*e);
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> a, e;
  std::vector<std::string> args = argv;
  for (auto& s : args) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : envs) e.push_back(s.data());
  e.push_back(nullptr);
  int p[2];
  EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
  Proc proc;
  proc.pid = fork();
  if (proc.pid == 0) {
    setpgid(0, 0);
    dup2(p[1], 1);
    dup2(p[1], 2);
    const int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execve(a[0], a.data(), e.data());
    _exit(127);
  }
  close(p[1]);
  proc.fd = p[0];
  return proc;
}

// Waits for `p` (reading its output) at most `timeout`; then kills its process group.
inline void finish(Proc& p, std::chrono::seconds timeout, Clock::time_point started) {
  char buf[4096];
  const auto deadline = started + timeout;
  for (;;) {
    const int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (ms <= 0) {
      kill(-p.pid, SIGKILL);
      p.out += "\n[test: killed after the timeout]\n";
      break;
    }
    pollfd pfd{p.fd, POLLIN, 0};
    if (poll(&pfd, 1, ms) <= 0) continue;
    const ssize_t n = read(p.fd, buf, sizeof buf);
    if (n <= 0) break;
    p.out.append(buf, static_cast<size_t>(n));
  }
  close(p.fd);
  waitpid(p.pid, &p.status, 0);
  p.seconds = std::chrono::duration<double>(Clock::now() - started).count();
}

inline Proc run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                std::chrono::seconds timeout = std::chrono::seconds(150)) {
  const auto t0 = Clock::now();
  Proc p = start(argv, env);
  finish(p, timeout, t0);
  return p;
}

inline std::vector<std::string> concat(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A small model so that the whole suite stays quick on two cores.
const std::vector<std::string> kSize = {"--hidden",   "32", "--heads",        "4",
                                        "--kv-heads", "2",  "--ffn",          "64",
                                        "--seq-len",  "16", "--global-batch", "16"};
const std::vector<std::string> kModel = concat(kSize, {"--progress", "none"});

inline Proc ppcompile(const std::vector<std::string>& args) {
  return run(concat({PPCOMPILE_BIN}, args));
}
inline Proc pprun(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return run(concat({PPRUN_BIN}, args), env);
}

// `d`: where the plan goes (a TempDir, or anything with file(NAME)).
// `extra`: more ppcompile flags (--symbols x, ...).
template <class Files>
std::string compile(const Files& d, const std::string& layout, int pp, const std::string& schedule,
                    int mbs, const std::string& name = "plan.json",
                    const std::vector<std::string>& extra = {}) {
  const std::string path = d.file(name);
  const Proc p =
      ppcompile(concat({"--layout", layout, "--pp", std::to_string(pp), "--schedule", schedule,
                        "--microbatches", std::to_string(mbs), "--emit", "json", "-o", path},
                       extra));
  EXPECT_EQ(p.exit_code(), 0) << p.out;
  return path;
}

// The lines of a --metrics file, parsed, as a reader of it must take them (docs/pprun.md,
// Outputs): a last line without its newline, which a run killed while writing it leaves, is not
// one of them.
inline std::vector<nlohmann::json> metrics_lines(const std::string& metrics) {
  std::ifstream in(metrics, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<nlohmann::json> out;
  for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1)
    out.push_back(nlohmann::json::parse(text.substr(at, end - at)));
  return out;
}

// The losses of the steps (an evaluation-only line has none).
inline std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  for (const nlohmann::json& j : metrics_lines(metrics))
    if (j.contains("loss")) out.push_back(j.at("loss").get<double>());
  return out;
}

// A run's per-step losses equal the reference's within 1e-5 (relative), step by step.
inline void expect_losses_of(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(std::fabs(got[i] - want[i]), 1e-5 * std::fabs(want[i])) << "step " << i + 1;
}

// The values of `key` in a --metrics file, one per line that has it (a step's, an evaluation's).
inline std::vector<double> field(const std::string& metrics, const std::string& key) {
  std::vector<double> out;
  for (const nlohmann::json& j : metrics_lines(metrics))
    if (j.contains(key)) out.push_back(j.at(key).get<double>());
  return out;
}

// A run's per-step "loss" and "mtp_loss" in the --metrics file `got` equal the reference's in
// `want` within `rel` (relative): `steps` values of the loss, as many of mtp_loss where the layout
// has MTP depths (`mtp`), else none.
inline void expect_metrics_of(const std::string& got, const std::string& want, size_t steps,
                              bool mtp, double rel) {
  for (const std::string key : {"loss", "mtp_loss"}) {
    const auto g = field(got, key), w = field(want, key);
    ASSERT_EQ(w.size(), key == "loss" || mtp ? steps : 0u) << key;
    ASSERT_EQ(g.size(), w.size()) << key;
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_LE(std::fabs(g[i] - w[i]), rel * std::fabs(w[i])) << key << " step " << i + 1;
  }
}

// pprun's line "peak in-flight activations per rank: ... (the plan predicts ...)" in `out`: the
// runtime's count of in-flight activations peaked where the compiler said it would.
inline void expect_peak_inflight_as_predicted(const std::string& out) {
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(
          "peak in-flight activations per rank: ([0-9 ]+) \\(the plan predicts ([0-9 ]+)\\)")))
      << out;
  EXPECT_EQ(m[1].str(), m[2].str());
}

inline std::set<std::string> schedules_of_ppcompile() {
  const Proc p = ppcompile({"--list-schedules"});
  std::set<std::string> out;
  std::istringstream in(p.out);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line))
    if (!line.empty()) out.insert(line.substr(0, line.find(' ')));
  return out;
}

inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// --- watching a run (the soak, restarts, clusters) ----------------------------------------------

// Reads what `p` printed so far (without blocking longer than `ms`).
inline void pump(Proc& p, int ms) {
  char buf[4096];
  pollfd pfd{p.fd, POLLIN, 0};
  while (poll(&pfd, 1, ms) > 0) {
    const ssize_t n = read(p.fd, buf, sizeof buf);
    if (n <= 0) break;
    p.out.append(buf, static_cast<size_t>(n));
    ms = 0;
  }
}

// Waits (reading output) until `done` holds; false after `timeout` or if the process exited.
inline bool wait_until(Proc& p, const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pump(p, 100);
    if (done()) return true;
    int status = 0;
    if (waitpid(p.pid, &status, WNOHANG) == p.pid) {
      p.status = status;
      return false;
    }
  }
  return false;
}

// The step of the checkpoint `dir`/latest names (-1: none).
inline int checkpoint_step(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  if (!(in >> name) || name.size() != 13) return -1;
  return std::stoi(name.substr(5));
}

// The last step of `steps` a run's progress lines ("step N/STEPS loss") report.
inline int last_step(const std::string& out, int steps) {
  int last = 0;
  const std::regex re("step ([0-9]+)/" + std::to_string(steps) + " loss");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    last = std::max(last, std::stoi((*it)[1]));
  return last;
}

// The rank processes a launcher (pprun, torchrun's agent) started: its children, by their RANK.
inline std::map<int, pid_t> rank_pids(pid_t launcher) {
  std::map<int, pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid != launcher) continue;
    std::ifstream env(e.path() / "environ");
    std::string var;
    while (std::getline(env, var, '\0'))
      if (var.rfind("RANK=", 0) == 0) out[std::stoi(var.substr(5))] = std::stoi(name);
  }
  return out;
}

}  // namespace pprun_e2e
