// A soak: one training run of 60 steps on 4 ranks (pp 4, 1F1B, a uint16 token file, a checkpoint
// every 5 steps) is interrupted in turn by
//   1. a rank killed with SIGKILL,
//   2. a rank stopped with SIGSTOP (it hangs without dying),
//   3. the rendezvous port taken by another program (ranks launched by hand, as SLURM does),
//   4. the disk filling up during a save (the checkpoints on a small tmpfs; needs root),
//   5. the data file replaced mid-run,
// and resumed after each from the last complete checkpoint. Every fault must end with every rank
// exiting non-zero within the timeout, the culprit named, and the last complete checkpoint intact
// and loadable (pprun --export reads and checks all of it). Since resuming is exact, the final
// parameters must equal those of the same 60 steps run without interruption, bit for bit.
// The test prints the table that docs/reliability.md reproduces (scripts/soak.sh).
#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/socket.h>

#include <cmath>
#include <regex>
#include <thread>

#include "e2e_dumps.h"
#include "e2e_util.h"

namespace {

using namespace pprun_e2e;
using namespace std::chrono_literals;

constexpr int kSteps = 60;
constexpr int kTimeout = 10;  // --timeout, seconds
// --timeout of the ranks that find the rendezvous port taken. Their probe gives up after 5 s,
// whatever the timeout: with a timeout well past that (and past the time four processes take to
// start on a loaded machine), detection before it shows the probe, not the timeout, stopped them.
constexpr int kPortTimeout = 30;

// A tmpfs mounted for the test's life (needs root; mounted() says whether it could be).
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, uint64_t bytes) : dir_(dir) {
    fs::create_directories(dir);
    ok_ = mount("tmpfs", dir.c_str(), "tmpfs", 0, fmt::format("size={}", bytes).c_str()) == 0;
  }
  ~Tmpfs() {
    if (ok_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return ok_; }

 private:
  std::string dir_;
  bool ok_ = false;
};

struct Row {
  std::string fault, detection, exit, named, checkpoint, lost, loadable;
};

std::string loadable(const TempDir& d, const std::string& ck) {
  const Proc ex = pprun({"--export", ck, d.file("export.safetensors")});
  return ex.exit_code() == 0 ? "yes (pprun --export)" : "NO: " + ex.out;
}

class Soak : public ::testing::Test {
 protected:
  TempDir d;
  std::string plan, data, ck;
  std::vector<Row> rows;

  std::vector<std::string> args(int timeout = kTimeout) const {
    return concat(kSize, {"--plan", plan, "--steps", std::to_string(kSteps), "--data", data,
                          "--threads", "1", "--timeout", std::to_string(timeout), "--progress",
                          "lines", "--log-every", "1", "--save-every", "5"});
  }

  void SetUp() override {
    plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
    std::vector<uint16_t> ids(40000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>((i * 11 + i / 7) % 256);
    data = d.file("train.bin");
    std::ofstream(data, std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()),
               static_cast<std::streamsize>(2 * ids.size()));
    ck = d.file("ck");
  }

  // Starts a run resuming from `from` (none: fresh) and saving to `to`, waits until its
  // checkpoint `to` is at least `at_least` steps and it has done one more step.
  Proc start_run(const std::string& from, const std::string& to, int at_least) {
    auto a = concat(args(), {"--save", to});
    if (!from.empty()) a = concat(a, {"--resume", from});
    Proc p = start(concat({PPRUN_BIN}, a));
    EXPECT_TRUE(wait_until(
        p, [&] { return checkpoint_step(to) >= at_least && last_step(p.out, kSteps) > at_least; },
        120s))
        << p.out;
    return p;
  }

  // Waits for the run to end; returns the seconds since `since`.
  double finish_run(Proc& p, Clock::time_point since) {
    finish(p, std::chrono::seconds(3 * kTimeout + 30), Clock::now());
    return std::chrono::duration<double>(Clock::now() - since).count();
  }

  void record(const std::string& fault, double seconds, const Proc& p, const std::string& named,
              const std::string& dir, const std::string& loaded) {
    const int saved = checkpoint_step(dir);
    const int done = last_step(p.out, kSteps);
    rows.push_back({fault, fmt::format("{:.1f} s", seconds), std::to_string(p.exit_code()), named,
                    fmt::format("step {}", saved),
                    fmt::format("{} step{} ({}-{})", done - saved, done - saved == 1 ? "" : "s",
                                saved + 1, done),
                    loaded});
  }
};

TEST_F(Soak, FiveFaultsInTurnThenTheSameModelAsAnUninterruptedRun) {
  // 1. SIGKILL of rank 2 once a checkpoint exists.
  Proc a = start_run("", ck, 5);
  auto pids = rank_pids(a.pid);
  ASSERT_EQ(pids.size(), 4u) << a.out;
  auto t0 = Clock::now();
  kill(pids.at(2), SIGKILL);
  double s = finish_run(a, t0);
  EXPECT_NE(a.exit_code(), 0);
  EXPECT_LT(s, kTimeout) << a.out;
  EXPECT_NE(a.out.find("pprun: rank 2 was killed by signal 9"), std::string::npos) << a.out;
  for (int r : {0, 1, 3})
    EXPECT_NE(
        a.out.find(fmt::format("[rank {}] pprun: rank {}: lost rank 2 (killed by signal 9)", r, r)),
        std::string::npos)
        << a.out;
  record("rank 2 killed (SIGKILL)", s, a, "every rank: `lost rank 2 (killed by signal 9)`", ck,
         loadable(d, ck));

  // 2. SIGSTOP of rank 1: its peers time out waiting for it.
  const int before_stop = checkpoint_step(ck);
  Proc b = start_run(ck, ck, before_stop + 5);
  pids = rank_pids(b.pid);
  ASSERT_EQ(pids.size(), 4u) << b.out;
  t0 = Clock::now();
  kill(pids.at(1), SIGSTOP);
  s = finish_run(b, t0);
  EXPECT_NE(b.exit_code(), 0);
  EXPECT_LT(s, kTimeout + 8) << b.out;
  EXPECT_NE(b.out.find("pprun: rank 1 was stopped by signal 19"), std::string::npos) << b.out;
  for (int r : {0, 2, 3})
    EXPECT_NE(b.out.find(fmt::format("[rank {}] pprun: rank {}: lost rank 1", r, r)),
              std::string::npos)
        << b.out;
  record("rank 1 stopped (SIGSTOP)", s, b,
         "every rank: `lost rank 1 (...)`; pprun: `rank 1 was stopped by signal 19 ... and killed`",
         ck, loadable(d, ck));

  // 3. The rendezvous port taken by another program; ranks started by hand (RANK, WORLD_SIZE).
  const int squatter = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(squatter, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(squatter, 64), 0);  // accepts connections (the kernel does), answers nothing
  socklen_t len = sizeof addr;
  getsockname(squatter, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  t0 = Clock::now();
  std::vector<Proc> hand;
  for (int r = 0; r < 4; ++r)
    hand.push_back(
        start(concat({PPRUN_BIN}, concat(args(kPortTimeout), {"--save", ck, "--resume", ck})),
              {"RANK=" + std::to_string(r), "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1",
               "MASTER_PORT=" + port}));
  double slowest = 0;
  for (auto& p : hand) slowest = std::max(slowest, finish_run(p, t0));
  close(squatter);
  for (auto& p : hand) EXPECT_NE(p.exit_code(), 0) << p.out;
  EXPECT_LT(slowest, kPortTimeout) << hand[1].out;
  EXPECT_NE(hand[0].out.find("Address already in use"), std::string::npos) << hand[0].out;
  for (int r : {1, 2, 3})
    EXPECT_NE(hand[static_cast<size_t>(r)].out.find("the rendezvous store at 127.0.0.1:" + port +
                                                    " does not answer within 15 s"),
              std::string::npos)
        << hand[static_cast<size_t>(r)].out;
  Proc none;
  none.status = hand[1].status;
  none.out = hand[0].out;  // no step ran: nothing lost
  record("rendezvous port taken", slowest, none,
         "rank 0: `Address already in use`; ranks 1-3: `the rendezvous store at 127.0.0.1:PORT "
         "does not answer`",
         ck, loadable(d, ck));
  rows.back().lost = "nothing (no step ran)";

  // 4. The disk fills during a save: checkpoints on a tmpfs with room for one and a half.
  const std::string small = d.file("small");
  const uint64_t one = [&] {
    uint64_t bytes = 0;
    for (const auto& e : fs::recursive_directory_iterator(
             ck + "/" + fmt::format("step-{:08}", checkpoint_step(ck))))
      if (e.is_regular_file()) bytes += e.file_size();
    return bytes;
  }();
  const Tmpfs disk(small, one * 3 / 2);
  const bool mounted = disk.mounted();
  std::string from = ck;
  if (mounted) {
    const int base = checkpoint_step(ck);
    Proc c = start_run(ck, small, base + 5);
    // The save after step base + 10 cannot fit: time from that step to the end.
    EXPECT_TRUE(wait_until(
        c, [&] { return last_step(c.out, kSteps) >= base + 10; }, 120s))
        << c.out;
    t0 = Clock::now();
    s = finish_run(c, t0);
    EXPECT_NE(c.exit_code(), 0);
    EXPECT_LT(s, kTimeout + 30) << c.out;
    EXPECT_NE(c.out.find("No space left on device"), std::string::npos) << c.out;
    EXPECT_EQ(checkpoint_step(small), base + 5) << c.out;
    record("disk full during a save (tmpfs)", s, c,
           "the rank that could not write: `FILE: ...: No space left on device`; the others: that "
           "failure or `lost rank ...`",
           small, loadable(d, small));
    from = small;
  } else {
    rows.push_back(
        {"disk full during a save", "skipped: mounting a tmpfs needs root", "", "", "", "", ""});
  }

  // 5. The data file replaced mid-run (renamed over; the old one stays readable through its map).
  const int base = checkpoint_step(from);
  Proc e = start_run(from, ck, std::max(base, checkpoint_step(ck)) + 5);
  fs::rename(data, d.file("train.bin.original"));
  fs::copy_file(d.file("train.bin.original"), data);  // the same bytes, another file
  t0 = Clock::now();
  s = finish_run(e, t0);
  // Each rank stops by itself at its next step (exit 2, a user error) or, if it is waiting for a
  // peer that stopped first, through its failure watch (exit 1): either way it names the file.
  EXPECT_NE(e.exit_code(), 0) << e.out;
  EXPECT_LT(s, kTimeout) << e.out;
  for (int r = 0; r < 4; ++r) {
    std::smatch m;
    const std::regex line("\\[rank " + std::to_string(r) + "\\] pprun: [^\\n]*" +
                          std::regex_replace(data, std::regex("[.]"), "\\.") +
                          ": the data file was replaced since pprun opened it");
    EXPECT_TRUE(std::regex_search(e.out, m, line)) << "rank " << r << "\n" << e.out;
  }
  record("data file replaced", s, e,
         "every rank: `FILE: the data file was replaced since pprun "
         "opened it`",
         ck, loadable(d, ck));

  // The run, resumed once more (the data file is a copy with the same content), finishes.
  Proc f = start(concat({PPRUN_BIN}, concat(args(), {"--save", ck, "--resume", ck, "--dump-params",
                                                     d.file("soaked")})));
  finish(f, 180s, Clock::now());
  ASSERT_EQ(f.exit_code(), 0) << f.out;
  EXPECT_EQ(checkpoint_step(ck), kSteps);
  // The same 60 steps without a fault.
  const Proc g =
      pprun(concat(args(), {"--save", d.file("ck-straight"), "--dump-params", d.file("straight")}));
  ASSERT_EQ(g.exit_code(), 0) << g.out;
  const auto cmp = expect_dumps_within(d.file("soaked"), d.file("straight"), 0.0).cmp;
  EXPECT_EQ(cmp.compared, 75u);

  std::string table =
      "| fault | detection | exit code | the culprit named | last complete checkpoint | lost | "
      "checkpoint loadable |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const Row& r : rows)
    table += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", r.fault, r.detection, r.exit,
                         r.named, r.checkpoint, r.lost, r.loadable);
  table += fmt::format(
      "\nAfter the five faults the run resumed to step {} and its {} parameters equal, bit for "
      "bit, those of the same run without interruption.\n",
      kSteps, cmp.compared);
  std::printf("%s", table.c_str());
}

}  // namespace
