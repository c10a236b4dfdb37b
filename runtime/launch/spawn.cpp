#include "runtime/launch/spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"

extern char** environ;

namespace pprt {

namespace {

int env_int(const GetEnv& getenv, const char* name, int lo, int hi) {
  const char* v = getenv(name);
  if (!v || !*v) fail("environment", fmt::format("{} is not set", name));
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno || *end || x < lo || x > hi)
    fail("environment", fmt::format("{}='{}' is not an integer in {}..{}", name, v, lo, hi));
  return static_cast<int>(x);
}

std::string env_str(const GetEnv& getenv, const char* name, const char* hint) {
  const char* v = getenv(name);
  if (!v || !*v) fail("environment", fmt::format("{} is not set{}", name, hint));
  return v;
}

}  // namespace

std::optional<LaunchEnv> launch_env(const GetEnv& getenv) {
  LaunchEnv e;
  if (getenv("RANK") && getenv("WORLD_SIZE")) {
    const bool spawned = getenv("PPRUN_SPAWNED") != nullptr;
    e.launcher = spawned ? "pprun" : getenv("TORCHELASTIC_RUN_ID") ? "torchrun" : "RANK/WORLD_SIZE";
    e.world = env_int(getenv, "WORLD_SIZE", 1, 1 << 20);
    e.rank = env_int(getenv, "RANK", 0, e.world - 1);
    e.local_rank = getenv("LOCAL_RANK") ? env_int(getenv, "LOCAL_RANK", 0, 1 << 20) : e.rank;
    e.master_addr =
        env_str(getenv, "MASTER_ADDR", " (torchrun sets it; set it when launching by hand)");
    e.master_port = env_int(getenv, "MASTER_PORT", 1, 65535);
    const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    e.external_store = spawned || (agent && std::string(agent) == "True");
    const char* restart = getenv("TORCHELASTIC_RESTART_COUNT");
    e.store_prefix = fmt::format("pprun/{}/", restart ? restart : "0");
    return e;
  }
  if (getenv("SLURM_PROCID") && getenv("SLURM_NTASKS")) {
    e.launcher = "SLURM";
    e.world = env_int(getenv, "SLURM_NTASKS", 1, 1 << 20);
    e.rank = env_int(getenv, "SLURM_PROCID", 0, e.world - 1);
    e.local_rank = getenv("SLURM_LOCALID") ? env_int(getenv, "SLURM_LOCALID", 0, 1 << 20) : 0;
    const char* hint =
        " (under SLURM, export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
        "head -n1) "
        "and MASTER_PORT=29500)";
    e.master_addr = env_str(getenv, "MASTER_ADDR", hint);
    e.master_port = env_int(getenv, "MASTER_PORT", 1, 65535);
    e.external_store = false;
    const char* job = getenv("SLURM_JOB_ID");
    const char* step = getenv("SLURM_STEP_ID");
    e.store_prefix = fmt::format("pprun/{}.{}/", job ? job : "0", step ? step : "0");
    return e;
  }
  return std::nullopt;
}

namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  int fd = -1;
  bool err = false;
  std::string line;
  bool in_bar = false;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  Stream out, err;
  bool running = true;
  int status = 0;
  int stopped_by = 0;  // the signal that stopped it (SIGSTOP, ...) while it is stopped
  bool killed_stopped = false;
};

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

class Relay {
 public:
  void feed(Child& c, Stream& s, const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char ch = data[i];
      if (ch == '\r') {
        s.line.clear();
        s.in_bar = true;
      } else if (ch == '\n') {
        if (s.in_bar) {
          if (bar_shown_) write_all(1, "\n");
          bar_shown_ = false;
          s.in_bar = false;
          s.line.clear();
        } else {
          emit_line(c, s);
        }
      } else {
        s.line += ch;
      }
    }
    if (s.in_bar && !s.line.empty()) {
      std::string text = s.line;
      if (text.rfind("\033[K", 0) == 0) text.erase(0, 3);
      write_all(1, fmt::format("\r\033[K[rank {}] {}", c.rank, text));
      bar_shown_ = true;
    }
  }
  void flush(Child& c, Stream& s) {
    if (!s.in_bar && !s.line.empty()) emit_line(c, s);
    if (s.in_bar && bar_shown_) write_all(1, "\n");
    if (s.in_bar) bar_shown_ = false;
    s.in_bar = false;
    s.line.clear();
  }
  void message(const std::string& text) {
    if (bar_shown_) write_all(1, "\n");
    bar_shown_ = false;
    write_all(2, text);
  }

 private:
  void emit_line(Child& c, Stream& s) {
    if (bar_shown_) write_all(1, "\n");
    bar_shown_ = false;
    write_all(s.err ? 2 : 1, fmt::format("[rank {}] {}\n", c.rank, s.line));
    s.line.clear();
  }
  bool bar_shown_ = false;
};

std::string describe_status(const Child& c) {
  const int status = c.status;
  if (c.killed_stopped)
    return fmt::format("was stopped by signal {} ({}) and killed", c.stopped_by,
                       strsignal(c.stopped_by));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

bool failed(int status) {
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

}  // namespace

int spawn_ranks(const SpawnOptions& o) {
  // Everything the children need is built before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> args{o.exe};
  args.insert(args.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  static const char* const kOurs[] = {
      "RANK=",        "WORLD_SIZE=",    "LOCAL_RANK=",   "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
      "MASTER_PORT=", "PPRUN_SPAWNED=", "SLURM_PROCID=", "SLURM_NTASKS="};
  std::vector<std::string> base;
  for (char** e = environ; *e; ++e) {
    bool ours = false;
    for (const char* k : kOurs) ours = ours || std::strncmp(*e, k, std::strlen(k)) == 0;
    for (const auto& [k, v] : o.env) ours = ours || std::string(*e).rfind(k + "=", 0) == 0;
    if (!ours) base.push_back(*e);
  }
  for (const auto& [k, v] : o.env) base.push_back(k + "=" + v);
  base.push_back(fmt::format("WORLD_SIZE={}", o.world));
  base.push_back(fmt::format("LOCAL_WORLD_SIZE={}", o.world));
  base.push_back("MASTER_ADDR=127.0.0.1");
  base.push_back(fmt::format("MASTER_PORT={}", o.port));
  base.push_back("PPRUN_SPAWNED=1");
  std::vector<std::vector<std::string>> envs(static_cast<size_t>(o.world), base);
  std::vector<std::vector<char*>> envps(static_cast<size_t>(o.world));
  for (int r = 0; r < o.world; ++r) {
    auto& e = envs[static_cast<size_t>(r)];
    e.push_back(fmt::format("RANK={}", r));
    e.push_back(fmt::format("LOCAL_RANK={}", r));
    for (auto& s : e) envps[static_cast<size_t>(r)].push_back(s.data());
    envps[static_cast<size_t>(r)].push_back(nullptr);
  }

  sigset_t mask, old;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
  if (sigprocmask(SIG_BLOCK, &mask, &old) != 0) throw std::runtime_error("sigprocmask failed");
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) throw std::runtime_error(fmt::format("signalfd failed: {}", std::strerror(errno)));

  const pid_t parent = getpid();
  std::vector<Child> kids(static_cast<size_t>(o.world));
  for (int r = 0; r < o.world; ++r) {
    Child& c = kids[static_cast<size_t>(r)];
    c.rank = r;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
      throw std::runtime_error(fmt::format("pipe failed: {}", std::strerror(errno)));
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(fmt::format("fork failed: {}", std::strerror(errno)));
    if (pid == 0) {
      sigprocmask(SIG_SETMASK, &old, nullptr);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execve(argv[0], argv.data(), envps[static_cast<size_t>(r)].data());
      const char msg[] = "pprun: cannot execute the rank process\n";
      (void)!::write(2, msg, sizeof msg - 1);
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    c.pid = pid;
    c.out = Stream{out[0], false, {}, false};
    c.err = Stream{err[0], true, {}, false};
  }

  Relay relay;
  int running = o.world;
  int first_failure = -1;
  int interrupted = 0;
  bool terminating = false;
  std::optional<Clock::time_point> stop_at, kill_at;
  auto terminate_all = [&](int sig) {
    for (Child& c : kids)
      if (c.running) kill(c.pid, sig);
  };
  char buf[65536];
  for (;;) {
    std::vector<pollfd> fds{{sfd, POLLIN, 0}};
    std::vector<std::pair<Child*, Stream*>> owners{{nullptr, nullptr}};
    for (Child& c : kids)
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.emplace_back(&c, s);
        }
    if (running == 0 && fds.size() == 1) break;
    int timeout_ms = 200;
    const auto now = Clock::now();
    for (const auto& t : {stop_at, kill_at})
      if (t)
        timeout_ms = std::min<int>(
            timeout_ms,
            static_cast<int>(std::max<int64_t>(
                0, std::chrono::duration_cast<std::chrono::milliseconds>(*t - now).count())));
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("poll failed: {}", std::strerror(errno)));
    for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [c, s] = owners[i];
      const ssize_t got = read(s->fd, buf, sizeof buf);
      if (got > 0) {
        relay.feed(*c, *s, buf, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        relay.flush(*c, *s);
        close(s->fd);
        s->fd = -1;
      }
    }
    if (n > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        if (si.ssi_signo == SIGCHLD) continue;  // reaped below
        if (!interrupted) {
          interrupted = static_cast<int>(si.ssi_signo);
          relay.message(fmt::format("pprun: {}; stopping the ranks\n", strsignal(interrupted)));
          terminate_all(SIGTERM);
          kill_at = Clock::now() + std::chrono::seconds(3);
        }
      }
    }
    // Reap. A rank killed by a signal is the cause of a failure more likely than one that exited
    // with an error (the others exit with an error when they notice it): it is named first.
    std::vector<Child*> exited;
    for (Child& c : kids) {
      if (!c.running) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG | WUNTRACED | WCONTINUED) != c.pid) continue;
      if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
        c.stopped_by = WIFSTOPPED(status) ? WSTOPSIG(status) : 0;
        continue;
      }
      c.running = false;
      c.status = status;
      --running;
      exited.push_back(&c);
    }
    std::stable_sort(exited.begin(), exited.end(), [](const Child* a, const Child* b) {
      return WIFSIGNALED(a->status) > WIFSIGNALED(b->status);
    });
    for (Child* c : exited) {
      if (!failed(c->status) || interrupted || terminating) continue;
      if (WIFSIGNALED(c->status) && o.store) {
        try {
          o.store->set(fmt::format("lost/{}", c->rank),
                       fmt::format("killed by signal {}", WTERMSIG(c->status)));
        } catch (const TransportError&) {
        }
      }
      if (first_failure < 0) {
        first_failure = c->rank;
        stop_at = Clock::now() + o.grace;
      }
    }
    // A rank stopped by a signal (SIGSTOP) cannot notice a failure, nor exit: once another rank
    // has failed (its peers time out waiting for it), it is the cause. Record it for the ranks'
    // diagnosis and end it now rather than after the grace period.
    if (first_failure >= 0 && !interrupted)
      for (Child& c : kids)
        if (c.running && c.stopped_by && !c.killed_stopped) {
          c.killed_stopped = true;
          if (o.store) {
            try {
              o.store->set(fmt::format("lost/{}", c.rank),
                           fmt::format("stopped by signal {}", c.stopped_by));
            } catch (const TransportError&) {
            }
          }
          kill(c.pid, SIGKILL);
          relay.message(fmt::format("pprun: rank {} is stopped ({}): killing it\n", c.rank,
                                    strsignal(c.stopped_by)));
        }
    const auto t = Clock::now();
    if (stop_at && t >= *stop_at && running > 0) {
      relay.message(fmt::format(
          "pprun: ranks still running {:.0f} s after rank {} failed; terminating them\n",
          std::chrono::duration<double>(o.grace).count(), first_failure));
      terminate_all(SIGTERM);
      terminating = true;
      stop_at.reset();
      kill_at = t + std::chrono::seconds(3);
    }
    if (kill_at && t >= *kill_at && running > 0) {
      terminate_all(SIGKILL);
      kill_at.reset();
    }
  }
  close(sfd);
  sigprocmask(SIG_SETMASK, &old, nullptr);

  if (interrupted) return 128 + interrupted;
  if (first_failure < 0) return 0;
  // A rank that was stopped is the cause, whichever rank exited first.
  for (const Child& c : kids)
    if (c.killed_stopped) first_failure = c.rank;
  const Child& f = kids[static_cast<size_t>(first_failure)];
  std::string others;
  for (const Child& c : kids)
    if (c.rank != f.rank && failed(c.status))
      others += fmt::format(" rank {} {};", c.rank, describe_status(c));
  relay.message(fmt::format("pprun: rank {} {}{}{}\n", f.rank, describe_status(f),
                            others.empty() ? "" : "; then",
                            others.empty() ? "" : others.substr(0, others.size() - 1)));
  return WIFEXITED(f.status) ? WEXITSTATUS(f.status) : 1;
}

}  // namespace pprt
