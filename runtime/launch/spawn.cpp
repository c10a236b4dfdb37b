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

#include "runtime/fail.h"

extern char** environ;

namespace pprt {

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

// The program and each rank's environment, built before fork(): after it, only async-signal-safe
// calls. Holds the strings its pointers point into: built in place, never copied.
struct Command {
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::vector<std::vector<std::string>> envs;
  std::vector<std::vector<char*>> envps;

  explicit Command(const SpawnOptions& o) : args{o.exe} {
    args.insert(args.end(), o.args.begin(), o.args.end());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // This process's environment without the variables that place a rank, then the rank's own.
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
    envs.assign(static_cast<size_t>(o.world), base);
    envps.resize(static_cast<size_t>(o.world));
    for (int r = 0; r < o.world; ++r) {
      auto& e = envs[static_cast<size_t>(r)];
      e.push_back(fmt::format("RANK={}", r));
      e.push_back(fmt::format("LOCAL_RANK={}", r));
      for (auto& s : e) envps[static_cast<size_t>(r)].push_back(s.data());
      envps[static_cast<size_t>(r)].push_back(nullptr);
    }
  }
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;
};

// While the ranks run, SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked and read from a descriptor
// (a rank gets the mask back before it executes).
class Signals {
 public:
  Signals() {
    sigemptyset(&mask_);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask_, sig);
    if (sigprocmask(SIG_BLOCK, &mask_, &old_) != 0) throw std::runtime_error("sigprocmask failed");
    fd_ = signalfd(-1, &mask_, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) {
      const int e = errno;
      sigprocmask(SIG_SETMASK, &old_, nullptr);
      throw std::runtime_error(fmt::format("signalfd failed: {}", std::strerror(e)));
    }
  }
  ~Signals() {
    close(fd_);
    sigprocmask(SIG_SETMASK, &old_, nullptr);
  }
  Signals(const Signals&) = delete;
  Signals& operator=(const Signals&) = delete;
  int fd() const { return fd_; }
  const sigset_t& old_mask() const { return old_; }

 private:
  sigset_t mask_, old_;
  int fd_ = -1;
};

// Forks rank `r` with its stdout and stderr on pipes.
Child start_rank(int r, const Command& cmd, const Signals& signals, pid_t parent) {
  Child c;
  c.rank = r;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error(fmt::format("pipe failed: {}", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &signals.old_mask(), nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execve(cmd.argv[0], cmd.argv.data(), cmd.envps[static_cast<size_t>(r)].data());
    const char msg[] = ": cannot execute the rank process\n";  // after the program's name
    (void)!::write(2, program_name().data(), program_name().size());
    (void)!::write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  c.pid = pid;
  c.out = Stream{out[0], false, {}, false};
  c.err = Stream{err[0], true, {}, false};
  return c;
}

// Watches the running ranks: relays their output, passes signals on, reaps them, and when one
// fails gives the others `grace` to stop before terminating them.
class Supervisor {
 public:
  Supervisor(const SpawnOptions& o, std::vector<Child> kids)
      : o_(o), kids_(std::move(kids)), running_(static_cast<int>(kids_.size())) {}

  // One round: waits (200 ms at most, less before a deadline) for output or a signal and acts on
  // what happened. False once every rank has exited and its output is relayed.
  bool round(int signal_fd) {
    std::vector<pollfd> fds{{signal_fd, POLLIN, 0}};
    std::vector<std::pair<Child*, Stream*>> owners{{nullptr, nullptr}};
    for (Child& c : kids_)
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.emplace_back(&c, s);
        }
    if (running_ == 0 && fds.size() == 1) return false;
    const int n = poll(fds.data(), fds.size(), timeout_ms());
    if (n < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("poll failed: {}", std::strerror(errno)));
    if (n > 0) relay_output(fds, owners);
    if (n > 0 && (fds[0].revents & POLLIN)) read_signals(signal_fd);
    note_failures(reap());
    kill_stopped_ranks();
    enforce_deadlines();
    return true;
  }

  // 0 if every rank succeeded; else says which rank failed first and how, and returns its code.
  int exit_code() {
    if (interrupted_) return 128 + interrupted_;
    if (first_failure_ < 0) return 0;
    // A rank that found bad input (exit code 2: a model's wrong shape met mid-run) is the cause,
    // whichever rank exited first: the others failed because it stopped.
    for (const Child& c : kids_)
      if (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 2) {
        first_failure_ = c.rank;
        break;
      }
    // A rank that was stopped is the cause, whichever rank exited first.
    for (const Child& c : kids_)
      if (c.killed_stopped) first_failure_ = c.rank;
    const Child& f = kids_[static_cast<size_t>(first_failure_)];
    std::string others;
    for (const Child& c : kids_)
      if (c.rank != f.rank && failed(c.status))
        others += fmt::format(" rank {} {};", c.rank, describe_status(c));
    relay_.message(fmt::format("{}: rank {} {}{}{}\n", program_name(), f.rank, describe_status(f),
                               others.empty() ? "" : "; then",
                               others.empty() ? "" : others.substr(0, others.size() - 1)));
    return WIFEXITED(f.status) ? WEXITSTATUS(f.status) : 1;
  }

 private:
  int timeout_ms() const {
    int ms = 200;
    const auto now = Clock::now();
    for (const auto& t : {stop_at_, kill_at_})
      if (t)
        ms = std::min<int>(
            ms, static_cast<int>(std::max<int64_t>(
                    0, std::chrono::duration_cast<std::chrono::milliseconds>(*t - now).count())));
    return ms;
  }

  void relay_output(const std::vector<pollfd>& fds,
                    const std::vector<std::pair<Child*, Stream*>>& owners) {
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [c, s] = owners[i];
      const ssize_t got = read(s->fd, buf_, sizeof buf_);
      if (got > 0) {
        relay_.feed(*c, *s, buf_, static_cast<size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        relay_.flush(*c, *s);
        close(s->fd);
        s->fd = -1;
      }
    }
  }

  // SIGINT, SIGTERM, SIGHUP: the ranks are asked to stop, then killed 3 s later.
  void read_signals(int fd) {
    signalfd_siginfo si;
    while (read(fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      if (si.ssi_signo == SIGCHLD) continue;  // reaped below
      if (!interrupted_) {
        interrupted_ = static_cast<int>(si.ssi_signo);
        relay_.message(
            fmt::format("{}: {}; stopping the ranks\n", program_name(), strsignal(interrupted_)));
        signal_all(SIGTERM);
        kill_at_ = Clock::now() + std::chrono::seconds(3);
      }
    }
  }

  // The ranks that exited since the last round. A rank killed by a signal is the cause of a
  // failure more likely than one that exited with an error (the others exit with an error when
  // they notice it): it comes first.
  std::vector<Child*> reap() {
    std::vector<Child*> exited;
    for (Child& c : kids_) {
      if (!c.running) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG | WUNTRACED | WCONTINUED) != c.pid) continue;
      if (WIFSTOPPED(status) || WIFCONTINUED(status)) {
        c.stopped_by = WIFSTOPPED(status) ? WSTOPSIG(status) : 0;
        continue;
      }
      c.running = false;
      c.status = status;
      --running_;
      exited.push_back(&c);
    }
    std::stable_sort(exited.begin(), exited.end(), [](const Child* a, const Child* b) {
      return WIFSIGNALED(a->status) > WIFSIGNALED(b->status);
    });
    return exited;
  }

  // The first failure starts the others' grace period; a rank killed by a signal is recorded in
  // the store for the ranks' diagnosis.
  void note_failures(const std::vector<Child*>& exited) {
    for (Child* c : exited) {
      if (!failed(c->status) || interrupted_ || terminating_) continue;
      if (WIFSIGNALED(c->status))
        record_lost(*c, fmt::format("killed by signal {}", WTERMSIG(c->status)));
      if (first_failure_ < 0) {
        first_failure_ = c->rank;
        stop_at_ = Clock::now() + o_.grace;
      }
    }
  }

  // A rank stopped by a signal (SIGSTOP) cannot notice a failure, nor exit: once another rank
  // has failed (its peers time out waiting for it), it is the cause. Record it for the ranks'
  // diagnosis and end it now rather than after the grace period.
  void kill_stopped_ranks() {
    if (first_failure_ < 0 || interrupted_) return;
    for (Child& c : kids_)
      if (c.running && c.stopped_by && !c.killed_stopped) {
        c.killed_stopped = true;
        record_lost(c, fmt::format("stopped by signal {}", c.stopped_by));
        kill(c.pid, SIGKILL);
        relay_.message(fmt::format("{}: rank {} is stopped ({}): killing it\n", program_name(),
                                   c.rank, strsignal(c.stopped_by)));
      }
  }

  // After the grace period the ranks still running are terminated, and killed 3 s later.
  void enforce_deadlines() {
    const auto t = Clock::now();
    if (stop_at_ && t >= *stop_at_ && running_ > 0) {
      relay_.message(fmt::format(
          "{}: ranks still running {:.0f} s after rank {} failed; terminating them\n",
          program_name(), std::chrono::duration<double>(o_.grace).count(), first_failure_));
      signal_all(SIGTERM);
      terminating_ = true;
      stop_at_.reset();
      kill_at_ = t + std::chrono::seconds(3);
    }
    if (kill_at_ && t >= *kill_at_ && running_ > 0) {
      signal_all(SIGKILL);
      kill_at_.reset();
    }
  }

  void signal_all(int sig) {
    for (Child& c : kids_)
      if (c.running) kill(c.pid, sig);
  }

  // "lost/<rank>" in the store (best effort: it may be gone).
  void record_lost(const Child& c, const std::string& how) {
    if (!o_.store) return;
    try {
      o_.store->set(fmt::format("lost/{}", c.rank), how);
    } catch (const TransportError&) {
    }
  }

  const SpawnOptions& o_;
  std::vector<Child> kids_;
  Relay relay_;
  int running_;
  int first_failure_ = -1;
  int interrupted_ = 0;
  bool terminating_ = false;
  std::optional<Clock::time_point> stop_at_, kill_at_;
  char buf_[65536];
};

}  // namespace

int spawn_ranks(const SpawnOptions& o) {
  const Command cmd(o);
  const Signals signals;
  const pid_t parent = getpid();
  std::vector<Child> kids;
  for (int r = 0; r < o.world; ++r) kids.push_back(start_rank(r, cmd, signals, parent));
  Supervisor ranks(o, std::move(kids));
  while (ranks.round(signals.fd())) {
  }
  return ranks.exit_code();
}

}  // namespace pprt
