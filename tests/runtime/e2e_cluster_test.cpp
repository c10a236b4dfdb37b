// pprun on clusters (docs/pprun.md, Clusters), with real launchers on this machine:
//  1. SLURM: a one-node cluster from Debian's packages (scripts/slurm-cluster.sh, inside a
//     network namespace of its own) runs `srun -n 4 pprun`, `sbatch examples/slurm.sh` to
//     completion (both with the losses of --reference), and a job requeued mid-run that goes on
//     from its latest checkpoint by itself, ending with the parameters of an uninterrupted run.
//  2. Ranks on separate hosts: two test hosts (network namespaces joined by a bridge, each with an
//     address and a host name of its own: scripts/test-hosts.sh) run pp 4 as 2 hosts x 2 ranks,
//     through `torchrun --nnodes 2` with c10d rendezvous (Gloo on GLOO_SOCKET_IFNAME) and through
//     SLURM's environment variables (Gloo on the address the host name resolves to), with the
//     losses of --reference; then one host's link is cut mid-run: every rank stops within the
//     timeout (plus the diagnosis), naming the ranks it lost, and the checkpoints stay whole.
// Both need root (SLURM's daemons, network namespaces) and skip without it. Whatever they start
// is removed at the end, even if the test is killed (e2e_cluster.h: Teardown).
#include <fmt/format.h>

#include <cmath>
#include <thread>

#include "e2e_cluster.h"
#include "e2e_dumps.h"

namespace {

using namespace pprun_e2e;
using namespace std::chrono_literals;

const std::vector<std::string> kRun = concat(kSize, {"--threads", "1", "--progress", "lines"});

// The per-step losses of `pprun --reference` on the same model and data.
template <class Files>
std::vector<double> reference_losses(const Files& d, const std::string& plan, int steps) {
  const std::string metrics = d.file("reference.jsonl");
  const Proc r = pprun(concat(kRun, {"--plan", plan, "--reference", "--steps",
                                     std::to_string(steps), "--metrics", metrics}));
  EXPECT_EQ(r.exit_code(), 0) << r.out;
  return losses(metrics);
}

// --- SLURM ------------------------------------------------------------------------------------

TEST(Slurm, SrunRunsFourRanksWithTheLossesOfTheReference) {
  PPRUN_SKIP_UNLESS_ROOT();
  SlurmCluster slurm;
  ASSERT_TRUE(slurm.ok());
  const SlurmCluster& d = slurm;  // the test's files, removed with the cluster
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const Proc p = run(slurm.client(
      concat({"srun", "-n", "4", "--overcommit", PPRUN_BIN},
             concat(kRun, {"--plan", plan, "--steps", "4", "--metrics", d.file("m.jsonl")})),
      {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500"}));
  ASSERT_EQ(p.exit_code(), 0) << p.out << slurm.logs();
  EXPECT_NE(p.out.find("1F1B on 4 ranks"), std::string::npos) << p.out;
  expect_losses_of(losses(d.file("m.jsonl")), reference_losses(d, plan, 4));
}

std::string scontrol_field(const SlurmCluster& slurm, const std::string& job,
                           const std::string& field) {
  const Proc p = run(slurm.client({"scontrol", "show", "job", job}));
  std::smatch m;
  if (!std::regex_search(p.out, m, std::regex(field + "=(\\S+)"))) return "";
  return m[1];
}

bool wait_for(const std::function<bool()>& done, std::chrono::seconds limit) {
  for (const auto end = Clock::now() + limit; Clock::now() < end;
       std::this_thread::sleep_for(100ms))
    if (done()) return true;
  return false;
}

// Waits until `job` has ended (at most `limit`); returns its state, e.g. COMPLETED.
std::string wait_for_end(const SlurmCluster& slurm, const std::string& job,
                         std::chrono::seconds limit) {
  std::string state;
  wait_for(
      [&] {
        state = scontrol_field(slurm, job, "JobState");
        return state != "PENDING" && state != "RUNNING" && state != "COMPLETING" &&
               state != "CONFIGURING" && state != "REQUEUED" && state != "";
      },
      limit);
  return state;
}

// sbatch --parsable ARGS with `env`: the job's id.
std::string submit(const SlurmCluster& slurm, const std::vector<std::string>& args,
                   const std::vector<std::string>& env) {
  const Proc p = run(slurm.client(concat({"sbatch", "--parsable"}, args), env));
  EXPECT_EQ(p.exit_code(), 0) << p.out;
  return p.out.substr(0, p.out.find_first_of(";\n"));
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The example job script as a user submits it; it saves every 2 steps, in the background.
TEST(Slurm, SbatchRunsTheExampleScriptToCompletion) {
  PPRUN_SKIP_UNLESS_ROOT();
  SlurmCluster slurm;
  ASSERT_TRUE(slurm.ok());
  const SlurmCluster& d = slurm;  // the test's files, removed with the cluster
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const std::string job =
      submit(slurm,
             concat({"-n", "4", "--overcommit", "--output", d.file("job.out"), "--chdir",
                     d.file(""), std::string(PP_SOURCE_DIR) + "/examples/slurm.sh", plan},
                    concat(kRun, {"--steps", "4", "--metrics", d.file("m.jsonl")})),
             {std::string("PPRUN=") + PPRUN_BIN, "CKPT=" + d.file("ck"), "SAVE_EVERY=2"});
  const std::string state = wait_for_end(slurm, job, 150s);
  const std::string out = text_of(d.file("job.out"));
  ASSERT_EQ(state, "COMPLETED") << out << slurm.logs();
  EXPECT_NE(out.find("attempt 1, 4 ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("no checkpoint in " + d.file("ck") + " yet"), std::string::npos) << out;
  EXPECT_NE(out.find("checkpoints: 2 saved in the background"), std::string::npos) << out;
  EXPECT_EQ(checkpoint_step(d.file("ck")), 4);
  expect_losses_of(losses(d.file("m.jsonl")), reference_losses(d, plan, 4));
}

// `scontrol requeue` mid-run (as a node failure or a preemption would): SLURM starts the script
// again, and --resume auto goes on from the latest checkpoint.
TEST(Slurm, ARequeuedJobGoesOnFromItsLatestCheckpointByItself) {
  PPRUN_SKIP_UNLESS_ROOT();
  SlurmCluster slurm;
  ASSERT_TRUE(slurm.ok());
  const SlurmCluster& d = slurm;  // the test's files, removed with the cluster
  constexpr int kSteps = 16;
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const auto train = concat(kRun, {"--steps", std::to_string(kSteps), "--log-every", "1",
                                   "--dump-params", d.file("requeued")});
  const std::string ck = d.file("ck");
  const std::string job =
      submit(slurm,
             concat({"-n", "4", "--overcommit", "--output", d.file("job.out"), "--chdir",
                     d.file(""), std::string(PP_SOURCE_DIR) + "/examples/slurm.sh", plan},
                    train),
             {std::string("PPRUN=") + PPRUN_BIN, "CKPT=" + ck, "SAVE_EVERY=2"});
  auto job_out = [&] { return text_of(d.file("job.out")); };
  // Requeued once a checkpoint exists and training has gone past it.
  ASSERT_TRUE(wait_for(
      [&] {
        const int at = checkpoint_step(ck);
        return at >= 4 && last_step(job_out(), kSteps) > at;
      },
      120s))
      << job_out() << slurm.logs();
  const int before = checkpoint_step(ck);
  const Proc requeue = run(slurm.client({"scontrol", "requeue", job}));
  ASSERT_EQ(requeue.exit_code(), 0) << requeue.out;
  // SLURM starts a requeued job again once its old credentials have expired (the cluster's
  // cred_expire: 10 s).
  const std::string state = wait_for_end(slurm, job, 150s);
  ASSERT_EQ(state, "COMPLETED") << job_out() << slurm.logs();
  const std::string out = job_out();
  EXPECT_NE(out.find("attempt 2"), std::string::npos) << out;
  EXPECT_NE(out.find(fmt::format("resuming from {}/step-", ck)), std::string::npos) << out;
  EXPECT_GE(checkpoint_step(ck), before);
  EXPECT_EQ(checkpoint_step(ck), kSteps);
  // The same steps without interruption: the same parameters, bit for bit.
  const Proc straight =
      pprun(concat(concat(kRun, {"--plan", plan}),
                   {"--steps", std::to_string(kSteps), "--dump-params", d.file("straight")}));
  ASSERT_EQ(straight.exit_code(), 0) << straight.out;
  expect_dumps_within(d.file("requeued"), d.file("straight"), 0.0);
}

// --- ranks on separate hosts -------------------------------------------------------------------

// Rank r of 4 on host r / 2 + 1, by SLURM's environment variables (as srun sets them on two
// nodes); the rendezvous store is rank 0's, on host1.
std::vector<Proc> start_two_hosts(const TestHosts& hosts, const std::vector<std::string>& args) {
  std::vector<Proc> procs;
  for (int r = 0; r < 4; ++r)
    procs.push_back(start(hosts.on(r / 2 + 1, concat({PPRUN_BIN}, args)),
                          {"SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=4",
                           "SLURM_LOCALID=" + std::to_string(r % 2), "SLURM_NTASKS_PER_NODE=2",
                           "MASTER_ADDR=host1", "MASTER_PORT=29500"}));
  return procs;
}

TEST(TwoHosts, TorchrunWithC10dRendezvousGivesTheLossesOfTheReference) {
  PPRUN_SKIP_UNLESS_ROOT();
  if (std::string(TORCHRUN_BIN).empty() || !fs::exists(TORCHRUN_BIN))
    GTEST_SKIP() << "no torchrun (TORCHRUN_BIN)";
  TestHosts hosts(2);
  ASSERT_TRUE(hosts.ok());
  const TestHosts& d = hosts;  // the test's files, removed with the hosts
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const auto t0 = Clock::now();
  std::vector<Proc> nodes;
  for (int k : {1, 2})
    nodes.push_back(start(
        hosts.on(k,
                 concat({TORCHRUN_BIN, "--nnodes", "2", "--nproc_per_node", "2", "--rdzv_backend",
                         "c10d", "--rdzv_endpoint", TestHosts::address(1) + ":29400", "--rdzv_id",
                         "pprun-test", "--monitor_interval", "1", "--no_python", PPRUN_BIN},
                        concat(kRun, {"--plan", plan, "--steps", "4", "--metrics",
                                      d.file(fmt::format("m{}.jsonl", k))}))),
        {"GLOO_SOCKET_IFNAME=eth0"}));
  for (Proc& p : nodes) finish(p, 150s, t0);
  for (const Proc& p : nodes) ASSERT_EQ(p.exit_code(), 0) << p.out;
  // The loss rank (3) is on host 2.
  EXPECT_NE(nodes[1].out.find("1F1B on 4 ranks"), std::string::npos) << nodes[1].out;
  expect_losses_of(losses(d.file("m2.jsonl")), reference_losses(d, plan, 4));
}

TEST(TwoHosts, SlurmEnvironmentGivesTheLossesOfTheReference) {
  PPRUN_SKIP_UNLESS_ROOT();
  TestHosts hosts(2);
  ASSERT_TRUE(hosts.ok());
  const TestHosts& d = hosts;  // the test's files, removed with the hosts
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const auto t0 = Clock::now();
  std::vector<Proc> ranks = start_two_hosts(
      hosts, concat(kRun, {"--plan", plan, "--steps", "4", "--metrics", d.file("m.jsonl")}));
  for (Proc& p : ranks) finish(p, 150s, t0);
  for (const Proc& p : ranks) ASSERT_EQ(p.exit_code(), 0) << p.out;
  expect_losses_of(losses(d.file("m.jsonl")), reference_losses(d, plan, 4));
}

// Host 2's cable is pulled mid-run: no connection closes, packets are just lost, so each rank
// notices when a wait reaches the timeout; the ranks on host 1 then find ranks 2 and 3 silent,
// and those on host 2 find the store (on host 1) silent. Each rank says so and exits.
TEST(TwoHosts, ACutLinkStopsEveryRankWithinTheTimeoutNamingTheRanksLost) {
  PPRUN_SKIP_UNLESS_ROOT();
  constexpr int kTimeout = 10;
  TestHosts hosts(2);
  ASSERT_TRUE(hosts.ok());
  const TestHosts& d = hosts;  // the test's files, removed with the hosts
  const std::string plan = compile(d, "Ett|tt|tt|ttL", 4, "1F1B", 8);
  const std::string ck = d.file("ck");
  std::vector<Proc> ranks = start_two_hosts(
      hosts, concat(kRun, {"--plan", plan, "--steps", "2000", "--log-every", "1", "--timeout",
                           std::to_string(kTimeout), "--save", ck, "--save-every", "3"}));
  // Rank 3 (host 2) reports the steps; cut once a checkpoint exists and training goes on.
  ASSERT_TRUE(wait_until(
      ranks[3],
      [&] {
        return checkpoint_step(ck) >= 3 && last_step(ranks[3].out, 2000) > checkpoint_step(ck);
      },
      120s))
      << ranks[3].out;
  const auto cut = Clock::now();
  hosts.cut(2);
  for (Proc& p : ranks) finish(p, std::chrono::seconds(3 * kTimeout + 30), cut);
  for (int r = 0; r < 4; ++r) {
    const Proc& p = ranks[static_cast<size_t>(r)];
    EXPECT_EQ(p.exit_code(), 1) << p.out;
    // The wait that notices (up to the timeout), then the diagnosis: 3 s for the peers, 2 more
    // for a store that does not answer.
    EXPECT_LT(p.seconds, kTimeout + 8) << "rank " << r << "\n" << p.out;
    const std::string lost =
        r < 2 ? fmt::format("pprun: rank {}: lost ranks 2, 3 on 10.200.0.2 (no answer", r)
              : fmt::format(
                    "pprun: rank {}: lost ranks 0, 1 on 10.200.0.1 with the rendezvous "
                    "store at host1:29500, which does not answer",
                    r);
    EXPECT_NE(p.out.find(lost), std::string::npos) << "rank " << r << "\n" << p.out;
  }
  // No checkpoint half-written: `latest` names a whole one (pprun --export reads and checks every
  // tensor), and every step directory is complete (a save cut short stays a .tmp-step directory).
  const int last = checkpoint_step(ck);
  EXPECT_GE(last, 3);
  const Proc ex = pprun({"--export", ck, d.file("export.safetensors")});
  EXPECT_EQ(ex.exit_code(), 0) << ex.out;
  for (const auto& e : fs::directory_iterator(ck)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    const Proc one = pprun({"--export", e.path().string(), d.file("one.safetensors")});
    EXPECT_EQ(one.exit_code(), 0) << name << ": " << one.out;
  }
}

}  // namespace
