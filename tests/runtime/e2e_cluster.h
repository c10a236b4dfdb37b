// Helpers of the cluster tests (e2e_cluster_test.cpp): test hosts made of network namespaces
// (scripts/test-hosts.sh), a one-node SLURM cluster inside one (scripts/slurm-cluster.sh), and a
// teardown that runs even when the test process is killed. Both need root: the tests skip
// without it.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <random>

#include "e2e_util.h"

namespace pprun_e2e {

#define PPRUN_SKIP_UNLESS_ROOT()                                                                  \
  do {                                                                                            \
    if (geteuid() != 0)                                                                           \
      GTEST_SKIP() << "needs root (network namespaces, SLURM's daemons): run the suite as root, " \
                      "as CI does";                                                               \
  } while (0)

// Runs `command` (sh -c, in the source directory) once: when the object is destroyed, or as
// soon as this process dies if it dies first (an assertion that aborts, ctest's timeout kill). A
// watcher process, outside this process's tree so that killing the tree spares it, waits for the
// end of a pipe only this process holds; the destructor closes it and waits for the command.
class Teardown {
 public:
  explicit Teardown(const std::string& command) {
    int go[2], done[2];
    if (pipe2(go, O_CLOEXEC) != 0 || pipe2(done, O_CLOEXEC) != 0) return;
    const pid_t child = fork();
    if (child == 0) {
      if (fork() != 0) _exit(0);  // the watcher: a grandchild, reparented to init
      setsid();
      // The pipe's ends at 3 (closed on exec: the command must not hold it) and 4 (held through
      // the command: its end tells the destructor), by way of numbers no other fd has.
      const int go_end = fcntl(go[0], F_DUPFD, 100), done_end = fcntl(done[1], F_DUPFD, 100);
      const int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      dup2(null, 1);
      dup2(null, 2);
      dup2(go_end, 3);
      dup2(done_end, 4);
      for (int fd = 5; fd < 1024; ++fd) close(fd);
      fcntl(3, F_SETFD, FD_CLOEXEC);
      fcntl(4, F_SETFD, 0);
      char byte;
      while (read(3, &byte, 1) != 0) {
      }
      if (chdir(PP_SOURCE_DIR) != 0) _exit(1);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(go[0]);
    close(done[1]);
    int status = 0;
    waitpid(child, &status, 0);
    go_ = go[1];
    done_ = done[0];
  }
  ~Teardown() {
    if (go_ < 0) return;
    close(go_);
    pollfd pfd{done_, POLLIN, 0};
    char byte;
    while (poll(&pfd, 1, 120'000) > 0 && read(done_, &byte, 1) > 0) {
    }
    close(done_);
  }
  Teardown(const Teardown&) = delete;
  Teardown& operator=(const Teardown&) = delete;

 private:
  int go_ = -1, done_ = -1;
};

inline std::string script(const std::string& name) {
  return std::string(PP_SOURCE_DIR) + "/scripts/" + name;
}

// A name no other test (or earlier run) uses: network namespaces are global to the machine.
inline std::string unique_name(const std::string& what) {
  std::random_device rd;
  return fmt::format("pp{}-{}{:04x}", what, getpid(), rd() & 0xffff);
}

// N test hosts (scripts/test-hosts.sh): host k (from 1) at 10.200.0.k, named hostk, in network
// namespace NAME-k, and a directory for the test's files; removed (every process in them killed)
// at the end, whatever happens.
class TestHosts {
 public:
  // `before`: a shell command the teardown runs first (given the hosts, their files' directory).
  explicit TestHosts(
      int n, const std::string& name = unique_name("h"),
      const std::function<std::string(const TestHosts&)>& before =
          [](const TestHosts&) { return std::string("true"); })
      : name_(name) {
    chmod(dir_.file("").c_str(), 0755);  // (munged wants its socket's directories open to all)
    teardown_ = std::make_unique<Teardown>(
        fmt::format("{}; bash {} down {} >/dev/null 2>&1; rm -rf {}", before(*this),
                    script("test-hosts.sh"), name_, dir_.file("")));
    const Proc p = run({"/bin/bash", script("test-hosts.sh"), "up", name_, std::to_string(n)});
    ok_ = p.exit_code() == 0;
    EXPECT_TRUE(ok_) << p.out;
  }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  std::string file(const std::string& name) const { return dir_.file(name); }
  static std::string address(int k) { return fmt::format("10.200.0.{}", k); }
  // `argv` to run on host k (its network, and host name hostk).
  std::vector<std::string> on(int k, const std::vector<std::string>& argv) const {
    return concat({"/bin/bash", script("test-hosts.sh"), "exec", name_, std::to_string(k)}, argv);
  }
  // `argv` in host k's network only (nsenter: the machine's own host name, /etc/hosts and /sys;
  // SLURM's daemons want the machine's cgroups).
  std::vector<std::string> net_of(int k, const std::vector<std::string>& argv) const {
    return concat({"/usr/bin/nsenter", fmt::format("--net=/run/netns/{}-{}", name_, k)}, argv);
  }
  void cut(int k) const {
    const Proc p = run({"/bin/bash", script("test-hosts.sh"), "cut", name_, std::to_string(k)});
    EXPECT_EQ(p.exit_code(), 0) << p.out;
  }

 private:
  std::string name_;
  TempDir dir_;
  std::unique_ptr<Teardown> teardown_;
  bool ok_ = false;
};

// A one-node SLURM cluster (scripts/slurm-cluster.sh) on a test host of its own: its ports, its
// processes and its jobs' processes stay there, and end with it. The teardown (whatever happens):
// the jobs cancelled and the daemons stopped, then the host removed with every process left in
// it, then the files.
class SlurmCluster {
 public:
  SlurmCluster() : host_(1, unique_name("s"), stop_command) {
    if (!host_.ok()) return;
    const Proc p = run(host_.net_of(1, {"/bin/bash", script("slurm-cluster.sh"), "up", dir()}));
    ok_ = p.exit_code() == 0;
    EXPECT_TRUE(ok_) << p.out;
  }
  bool ok() const { return ok_; }
  // A file of the test's (removed with the cluster).
  std::string file(const std::string& name) const { return host_.file(name); }
  // `argv` as a client of the cluster (srun, sbatch, scontrol), with `env` added.
  std::vector<std::string> client(const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env = {}) const {
    return host_.net_of(
        1, concat(concat({"/usr/bin/env", "SLURM_CONF=" + dir() + "/slurm.conf"}, env), argv));
  }
  // The daemons' logs, for a failed test's message.
  std::string logs() const {
    return run({"/bin/sh", "-c", "tail -n 20 " + dir() + "/log/*.log"}).out;
  }

 private:
  TestHosts host_;
  bool ok_ = false;

  std::string dir() const { return host_.file("slurm"); }
  static std::string stop_command(const TestHosts& host) {
    const std::string down = fmt::format("bash {} down {} >/dev/null 2>&1",
                                         script("slurm-cluster.sh"), host.file("slurm"));
    return fmt::format("nsenter --net=/run/netns/{}-1 {} || {}", host.name(), down, down);
  }
};

}  // namespace pprun_e2e
