// The runtime's plain-C++ parts: model config, data, plan checks, rank environment, learning
// rate, reports and traces, parameter dumps, atomic output files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "compiler/atomic_file.h"
#include "compiler/compile.h"
#include "compiler/diagnostic.h"
#include "compiler/emit.h"
#include "compiler/execute.h"
#include "compiler/verify.h"
#include "runtime/data/token_source.h"
#include "runtime/job.h"
#include "runtime/launch/env.h"
#include "runtime/launch/plan_load.h"
#include "runtime/model/architecture.h"
#include "runtime/model/config.h"
#include "runtime/output/param_dump.h"
#include "runtime/output/report.h"
#include "runtime/output/step_log.h"
#include "runtime/output/trace.h"

namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pprt-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }

 private:
  std::string path_;
};

std::string user_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ppc::UserError& e) {
    return e.format();
  }
  return "(no error)";
}

ppc::Plan compile(const std::string& layout, int pp, const std::string& schedule, int mbs) {
  ppc::CompileOptions o;
  o.layout = ppc::parse_layout(layout);
  o.has_model = true;
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = mbs;
  return ppc::compile(o);
}

std::string plan_json(const ppc::Plan& plan) {
  std::ostringstream os;
  ppc::emit_json(plan, ppc::verify(plan), os);
  return os.str();
}

// --- model config ------------------------------------------------------------------------------

TEST(ModelConfig, ReadsFieldsOverDefaults) {
  const pprt::ModelConfig c =
      pprt::parse_model_config(R"({"hidden": 128, "heads": 8, "seq_len": 32})", "m.json");
  EXPECT_EQ(c.hidden, 128);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.seq_len, 32);
  EXPECT_EQ(pprt::describe(c), "hidden 128, heads 8 (kv 2), ffn 176, vocab 256, seq 32");
}

TEST(ModelConfig, ErrorsNameTheFileAndField) {
  EXPECT_EQ(user_error([] { pprt::parse_model_config(R"({"hiden": 64})", "m.json"); }),
            "m.json: hiden: unknown field (expected hidden, heads, kv_heads, ffn, vocab, seq_len, "
            "rope_theta, norm_eps, tie_embeddings)");
  // A key with a newline (fuzz finding: the message's first line was blank).
  EXPECT_EQ(user_error([] { pprt::parse_model_config(R"({"\n": 33})", "m.json"); }),
            "m.json: \\x0a: unknown field (expected hidden, heads, kv_heads, ffn, vocab, seq_len, "
            "rope_theta, norm_eps, tie_embeddings)");
  EXPECT_EQ(user_error([] { pprt::parse_model_config(R"({"heads": -1})", "m.json"); }),
            "m.json: heads: expected a positive integer, got -1");
  EXPECT_EQ(user_error([] { pprt::parse_model_config(R"({"tie_embeddings": 1})", "m.json"); }),
            "m.json: tie_embeddings: expected true or false, got 1");
  EXPECT_TRUE(pprt::parse_model_config(R"({"tie_embeddings": true})", "m.json").tie_embeddings);
  EXPECT_EQ(user_error([] { pprt::parse_model_config(R"({"hidden": 60, "heads": 8})", "m.json"); }),
            "m.json: hidden 60 is not a multiple of heads 8");
  EXPECT_EQ(
      user_error([] { pprt::parse_model_config(R"({"heads": 4, "kv_heads": 3})", "m.json"); }),
      "m.json: heads 4 is not a multiple of kv_heads 3");
  EXPECT_EQ(user_error([] {
              pprt::parse_model_config("[1,", "m.json");
            }).rfind("m.json: not valid JSON", 0),
            0u);
}

TEST(ModelConfig, FlagsOverrideTheFile) {
  TempDir d;
  const std::string path = d.write("m.json", R"({"hidden": 96, "heads": 6, "kv_heads": 3})");
  pprt::ModelOverrides o;
  o.hidden = 48;
  const pprt::ModelConfig c = pprt::resolve_model_config(path, o);
  EXPECT_EQ(c.hidden, 48);
  EXPECT_EQ(c.heads, 6);
  EXPECT_EQ(pprt::count_parameters(pprt::ModelConfig{}, ppc::parse_layout("EtL")),
            256 * 64 + (2 * 64 + (4 + 4) * 16 * 64 + 64 * 64 + 3 * 176 * 64) + 64 + 256 * 64);
}

// --- data --------------------------------------------------------------------------------------

TEST(Data, SyntheticBatchesAreDeterministicPerStep) {
  const auto src = pprt::TokenSource::synthetic(256, 5);
  std::vector<int64_t> a, b, c;
  src.batch(3, 4, 17, a);
  pprt::TokenSource::synthetic(256, 5).batch(3, 4, 17, b);
  src.batch(4, 4, 17, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), 68u);
  for (int64_t t : a) EXPECT_TRUE(t >= 0 && t < 256);
  EXPECT_EQ(src.describe(), "synthetic language (vocab 256)");
}

TEST(Data, SyntheticLanguageIsLearnable) {
  // Each token has at most four successors (or the sequence repeats its first half).
  const auto src = pprt::TokenSource::synthetic(64, 1);
  std::vector<int64_t> rows;
  src.batch(0, 200, 32, rows);
  std::map<int64_t, std::set<int64_t>> next;
  for (int r = 0; r < 200; ++r)
    for (int i = 0; i + 1 < 16; ++i)
      next[rows[static_cast<size_t>(r * 32 + i)]].insert(rows[static_cast<size_t>(r * 32 + i + 1)]);
  for (const auto& [t, s] : next) EXPECT_LE(s.size(), 4u) << "token " << t;
}

TEST(Data, FileWindowsAreBytes) {
  TempDir d;
  const std::string path = d.write("text.txt", "abcdefghijklmnopqrstuvwxyz");
  const auto src = pprt::TokenSource::from_file(path, 256, 4, 1);
  std::vector<int64_t> rows;
  src.batch(0, 3, 5, rows);
  for (int r = 0; r < 3; ++r)
    for (int i = 1; i < 5; ++i)
      EXPECT_EQ(rows[static_cast<size_t>(r * 5 + i)], rows[static_cast<size_t>(r * 5 + i - 1)] + 1);
  EXPECT_EQ(src.describe(), "bytes of " + path + " (26 bytes)");
}

TEST(Data, FileErrors) {
  TempDir d;
  EXPECT_EQ(user_error([] { pprt::TokenSource::from_file("/no/such/file", 256, 8, 1); }),
            "--data: cannot open data file '/no/such/file'");
  const std::string small = d.write("s.txt", "abc");
  EXPECT_EQ(user_error([&] { pprt::TokenSource::from_file(small, 256, 8, 1); }),
            "--data: data file '" + small + "' has 3 bytes; one sequence needs seq_len + 1 = 9");
  EXPECT_EQ(user_error([&] { pprt::TokenSource::from_file(small, 100, 2, 1); }),
            "--data: byte-level data needs vocab >= 256, the model has 100");
}

// --- plans -------------------------------------------------------------------------------------

TEST(PlanLoad, ReadsAndVerifiesACompiledPlan) {
  TempDir d;
  const ppc::Plan plan = compile("Ett|ttL", 2, "1F1B", 4);
  const ppc::Plan back = pprt::load_plan(d.write("p.json", plan_json(plan)));
  EXPECT_EQ(back.lowered, plan.lowered);
  EXPECT_EQ(pprt::loss_rank(back), 1);
  EXPECT_FALSE(pprt::check_fifo_order(back).has_value());
}

TEST(PlanLoad, LowersAComputeOnlyPlan) {
  TempDir d;
  ppc::Plan plan = compile("Ett|ttL", 2, "GPipe", 2);
  std::string text = plan_json(plan);
  nlohmann::json j = nlohmann::json::parse(text);
  for (auto& r : j["ranks"]) r.erase("actions");
  EXPECT_EQ(pprt::load_plan(d.write("p.json", j.dump())).lowered, plan.lowered);
}

TEST(PlanLoad, RejectsWhatItCannotRun) {
  TempDir d;
  const std::string good = plan_json(compile("Ett|ttL", 2, "1F1B", 4));
  nlohmann::json j = nlohmann::json::parse(good);
  j["version"] = 2;
  const std::string v2 = d.write("v2.json", j.dump());
  EXPECT_EQ(user_error([&] { pprt::load_plan(v2); }),
            v2 + ": version: unsupported plan version 2 (this build reads version 1)");
  const std::string cut = d.write("cut.json", good.substr(0, good.size() / 2));
  EXPECT_EQ(user_error([&] { pprt::load_plan(cut); }).rfind(cut + ": not valid JSON", 0), 0u);
  // Rank 1 receives its first activation after the forward that needs it.
  j = nlohmann::json::parse(good);
  auto& acts = j["ranks"][1]["actions"];
  ASSERT_EQ(acts[0], "1RECV_F0");
  std::swap(acts[0], acts[1]);
  const std::string swapped = d.write("swapped.json", j.dump());
  EXPECT_EQ(user_error([&] { pprt::load_plan(swapped); }),
            swapped +
                ": the plan is not valid: rank 1, action 0 (1F0): needs the activation of stage 0 "
                "microbatch 0 from "
                "rank 0, but rank 1 receives it only later, at its action 1");
  // A layout that breaks the model rules (edited by hand: no E).
  j = nlohmann::json::parse(good);
  j["layout"]["stages"][0] = "t t";
  const std::string no_e = d.write("no-e.json", j.dump());
  EXPECT_EQ(user_error([&] { pprt::load_plan(no_e); }).rfind(no_e + ": layout: ", 0), 0u)
      << user_error([&] { pprt::load_plan(no_e); });
  ppc::CompileOptions o;
  o.layout = ppc::generic_layout(2);
  o.pp = 2;
  o.schedule = "1F1B";
  o.microbatches = 2;
  const std::string generic = d.write("generic.json", plan_json(ppc::compile(o)));
  EXPECT_EQ(user_error([&] { pprt::load_plan(generic); }),
            generic +
                ": layout: the plan describes no model (it was compiled with --stages N); compile "
                "it with --layout or "
                "--layout-file");
}

// Every plan ppcompile emits for a model runs: multi-token prediction, DualPipe's two copies.
TEST(PlanLoad, AcceptsMtpAndDualPipePlans) {
  TempDir d;
  const std::string mtp = d.write("mtp.json", plan_json(compile("Ett|tmL", 2, "1F1B", 2)));
  EXPECT_EQ(pprt::load_plan(mtp).layout.count(ppc::LayerKind::Mtp), 1);
  const std::string dual = d.write("dual.json", plan_json(compile("Ett|ttL", 2, "DualPipe", 4)));
  EXPECT_EQ(pprt::load_plan(dual).copies, 2);
}

// --- model spec: parameters, boundaries, sharing ---------------------------------------------

std::vector<std::string> names(const std::vector<pprt::ParamSpec>& ps) {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(p.name);
  return out;
}

TEST(ModelSpec, ParametersOfMtpAndTiedEmbeddings) {
  pprt::ModelConfig c;
  const auto base = pprt::count_parameters(c, ppc::parse_layout("EtL"));
  const int64_t H = c.hidden, V = c.vocab;
  const int64_t decoder = 2 * H + (4 + 2 + 2) * 16 * H + H * 4 * 16 + 3 * c.ffn * H;
  // An MTP depth: two norms, the 2H -> H projection, a decoder layer, a final norm; it uses the
  // embedding of E (one parameter, not two).
  EXPECT_EQ(pprt::count_parameters(c, ppc::parse_layout("EtmL")) - base,
            3 * H + 2 * H * H + decoder);
  c.tie_embeddings = true;
  EXPECT_EQ(pprt::count_parameters(c, ppc::parse_layout("EtL")), base - V * H);
  const auto mtp = names(pprt::params_of(c, pprt::number_layers(ppc::parse_layout("EtmL"))[0], 1));
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "embed.weight"), 1);
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "head.out.weight"), 0);
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "mtp.0.eh_proj.weight"), 1);
  EXPECT_EQ(std::count(mtp.begin(), mtp.end(), "mtp.0.layer.attn.wq.weight"), 1);
}

TEST(ModelSpec, WhatCrossesEachBoundary) {
  using K = pprt::Boundary::Kind;
  const auto specs = pprt::stage_specs(ppc::parse_layout("|Et|tm|m|L|"), 0.1);
  ASSERT_EQ(specs.size(), 6u);
  std::vector<std::pair<K, int>> in;
  for (const auto& s : specs) in.push_back({s.in.kind, s.in.streams});
  EXPECT_EQ(in, (std::vector<std::pair<K, int>>{{K::Tokens, 0},
                                                {K::Tokens, 0},
                                                {K::Hidden, 1},
                                                {K::Hidden, 2},
                                                {K::Hidden, 3},
                                                {K::Loss, 0}}));
  EXPECT_EQ(specs[4].out.kind, K::Loss);
  pprt::ModelConfig c;
  EXPECT_EQ(specs[3].in.shape(4, c), (std::vector<int64_t>{2, 4, c.seq_len, c.hidden}));
  EXPECT_EQ(specs[0].in.shape(4, c), (std::vector<int64_t>{1}));
  EXPECT_TRUE(specs[5].in.shape(4, c).empty());
  EXPECT_EQ(specs[0].mtp_depths, 2);
}

TEST(ModelSpec, SharedGroupsOfMtpTiedEmbeddingsAndDualPipe) {
  pprt::ModelConfig c;
  // DeepSeek-V3's layout at pp 16, vpp 2: E on rank 0, m (stage 30) on rank 14, L on rank 15.
  const ppc::Plan v3 = compile("Et*3|(tt|)*29,m|L", 16, "Interleaved1F1B", 16);
  auto groups = pprt::shared_groups(v3, c);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 14}));
  EXPECT_EQ(groups[0].names, (std::vector<std::string>{"embed.weight"}));
  c.tie_embeddings = true;
  groups = pprt::shared_groups(v3, c);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 14, 15}));
  // m and E on one rank: nothing to share until the head is tied.
  c.tie_embeddings = false;
  EXPECT_TRUE(pprt::shared_groups(compile("Et|tt|t,m|L", 2, "Interleaved1F1B", 4), c).empty());
  // DualPipe: layout stage k runs on ranks k and pp-1-k; every parameter has two copies.
  const ppc::Plan dual = compile("Et|tt|tt|tL", 4, "DualPipe", 8);
  groups = pprt::shared_groups(dual, c);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{1, 2}));
  size_t shared = 0;
  for (const auto& g : groups) shared += g.names.size();
  EXPECT_EQ(shared, pprt::model_params(c, dual.layout).size());
  EXPECT_TRUE(std::is_sorted(groups[0].names.begin(), groups[0].names.end()));
}

TEST(PlanLoad, FifoOrderCheckFindsCrossedMessages) {
  ppc::Plan plan = compile("Ett|ttL", 2, "GPipe", 2);
  EXPECT_FALSE(pprt::check_fifo_order(plan).has_value());
  // Rank 1 receives microbatch 1's activation before microbatch 0's: fine with tags, not with NCCL.
  auto& acts = plan.lowered[1];
  auto r0 = std::find(acts.begin(), acts.end(), ppc::Action::comm(ppc::ActionKind::RecvF, 1, 0, 0));
  auto r1 = std::find(acts.begin(), acts.end(), ppc::Action::comm(ppc::ActionKind::RecvF, 1, 1, 0));
  ASSERT_TRUE(r0 != acts.end() && r1 != acts.end());
  std::iter_swap(r0, r1);
  const auto bad = pprt::check_fifo_order(plan);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(*bad,
            "rank 0 sends the activation of stage 0 microbatch 0 as its message 0 to rank 1, which "
            "receives the "
            "activation of stage 0 microbatch 1 there");
}

// --- launch environment ------------------------------------------------------------------------

pprt::GetEnv env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnv, Torchrun) {
  const auto e = pprt::launch_env(env_of({{"RANK", "1"},
                                          {"WORLD_SIZE", "4"},
                                          {"LOCAL_RANK", "1"},
                                          {"MASTER_ADDR", "10.0.0.1"},
                                          {"MASTER_PORT", "29500"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                          {"TORCHELASTIC_RUN_ID", "x"},
                                          {"TORCHELASTIC_RESTART_COUNT", "2"},
                                          {"LOCAL_WORLD_SIZE", "2"},
                                          {"GLOO_SOCKET_IFNAME", "eth1"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->launcher, "torchrun");
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->world, 4);
  EXPECT_TRUE(e->external_store);
  EXPECT_EQ(e->store_prefix, "pprun/2/");
  EXPECT_EQ(e->master_addr, "10.0.0.1");
  EXPECT_EQ(e->local_world, 2);
  EXPECT_EQ(e->gloo_interface, "eth1");
  EXPECT_EQ(e->progress, "");
}

TEST(LaunchEnv, Slurm) {
  const auto e = pprt::launch_env(env_of({{"SLURM_PROCID", "0"},
                                          {"SLURM_NTASKS", "8"},
                                          {"SLURM_LOCALID", "0"},
                                          {"MASTER_ADDR", "node1"},
                                          {"MASTER_PORT", "29500"},
                                          {"SLURM_NTASKS_PER_NODE", "4"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->launcher, "SLURM");
  EXPECT_EQ(e->world, 8);
  EXPECT_FALSE(e->external_store);  // rank 0 serves the store
  EXPECT_EQ(e->local_world, 4);
}

TEST(LaunchEnv, ARankPprunSpawned) {
  const auto e = pprt::launch_env(env_of({{"RANK", "0"},
                                          {"WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "127.0.0.1"},
                                          {"MASTER_PORT", "29500"},
                                          {"PPRUN_SPAWNED", "1"},
                                          {"PPRUN_PROGRESS", "bar"}}));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->launcher, "pprun");
  EXPECT_TRUE(e->external_store);  // the spawning pprun serves the store
  EXPECT_EQ(e->progress, "bar");   // its terminal decides the progress display
  EXPECT_EQ(e->local_world, 0);
}

TEST(LaunchEnv, NoneMeansSpawn) {
  EXPECT_FALSE(pprt::launch_env(env_of({})).has_value());
}

TEST(LaunchEnv, Errors) {
  EXPECT_EQ(user_error([] {
              pprt::launch_env(env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
            }),
            "environment: RANK='4' is not an integer in 0..3");
  EXPECT_EQ(user_error([] {
              pprt::launch_env(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}));
            }).rfind("environment: MASTER_ADDR is not set (under SLURM, export MASTER_ADDR=", 0),
            0u);
}

// --- learning rate -----------------------------------------------------------------------------

TEST(LearningRate, WarmsUpLinearlyThenDecaysToTheMinimum) {
  pprt::TrainOptions o;
  o.steps = 101;
  o.lr = 1.0;
  o.warmup = 10;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 0), 0.1);
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 9), 1.0);
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 10), 1.0);
  EXPECT_NEAR(pprt::learning_rate(o, 55), 0.55,
              1e-12);  // half way through the decay (steps 10..100)
  EXPECT_DOUBLE_EQ(pprt::learning_rate(o, 100), 0.1);
  for (int s = 11; s < 101; ++s)
    EXPECT_LT(pprt::learning_rate(o, s), pprt::learning_rate(o, s - 1));
}

// --- reports and traces ------------------------------------------------------------------------

// Reports for `plan` in which every compute action took `ns` and nothing else took time.
std::vector<pprt::RankReport> fake_reports(const ppc::Plan& plan, int64_t ns) {
  std::vector<pprt::RankReport> out;
  const ppc::Execution ex = ppc::execute(plan, nullptr, false);
  EXPECT_TRUE(ex.finished());
  ppc::ExecCosts costs;
  costs.compute = [&](const ppc::Action&, int) { return static_cast<double>(ns); };
  const ppc::Execution timed = ppc::execute(plan, &costs, true);
  for (int r = 0; r < plan.pp(); ++r) {
    pprt::RankReport rep;
    rep.rank = r;
    rep.peak_inflight = ppc::peak_inflight(plan)[static_cast<size_t>(r)];
    for (int step = 0; step < 3; ++step) {
      pprt::StepTiming t;
      t.step = step;
      t.begin_unix_us = 1000000 + step * 100000;
      t.actions = plan.order()[static_cast<size_t>(r)].size();
      for (const ppc::Interval& iv : timed.times[static_cast<size_t>(r)]) {
        const auto s = static_cast<int64_t>(iv.start), e = static_cast<int64_t>(iv.end);
        t.spans.push_back({s, s, e});
        t.wall_ns = std::max(t.wall_ns, e);
      }
      for (size_t i = 0; i < t.actions; ++i)
        if (!ppc::is_comm(plan.order()[static_cast<size_t>(r)][i].kind)) t.compute_ns += ns;
      t.wait_ns = t.wall_ns - t.compute_ns -
                  100 * static_cast<int64_t>(t.actions);  // leaves 100 ns per action
      rep.steps.push_back(t);
    }
    out.push_back(pprt::rank_report_from_json(pprt::to_json(rep)));  // through the store's format
  }
  return out;
}

TEST(Report, AnalysisComparesTheStepWithTheSimulation) {
  const ppc::Plan plan = compile("Ett|ttL", 2, "1F1B", 4);
  const pprt::TimingSummary s = pprt::analyse(plan, fake_reports(plan, 1000000));
  EXPECT_EQ(s.peak_inflight, ppc::peak_inflight(plan));
  EXPECT_EQ(s.predicted_inflight, std::vector<int>({2, 1}));
  EXPECT_EQ(s.analysed_steps, 2);  // the first step is left out
  EXPECT_NEAR(s.overhead_us_per_action, 0.1, 1e-9);
  EXPECT_NEAR(s.ratio, 1.0, 1e-9);  // measured = simulated when actions took what they took
  EXPECT_NEAR(s.simulated_ms, 10.0,
              1e-9);  // 1F1B, pp 2, 4 microbatches, F = B = 1 ms: 2 (4 + 2 - 1) ms
  EXPECT_NE(pprt::summary_text(s).find("the plan predicts 2 1"), std::string::npos);
}

TEST(Report, TraceHasEveryActionOnceAndPairedFlows) {
  const ppc::Plan plan = compile("Et|tt|tt|tL", 2, "Interleaved1F1B", 4);
  const nlohmann::json t =
      nlohmann::json::parse(pprt::chrome_trace(plan, fake_reports(plan, 1000)));
  EXPECT_EQ(t["otherData"]["generator"], "pprun");
  EXPECT_EQ(t["otherData"]["step"], 3);
  std::map<int, std::vector<std::string>> names;
  std::map<int64_t, std::pair<int, int>> flows;  // id -> starts, finishes
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      names[e["pid"].get<int>()].push_back(e["name"]);
      EXPECT_EQ(
          e["tid"].get<int>(),
          ppc::is_comm(ppc::parse_action(e["name"].get<std::string>(), nullptr)->kind) ? 1 : 0);
    }
    if (e["ph"] == "s") ++flows[e["id"].get<int64_t>()].first;
    if (e["ph"] == "f") ++flows[e["id"].get<int64_t>()].second;
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> want;
    for (const auto& a : plan.lowered[static_cast<size_t>(r)]) want.push_back(ppc::to_string(a));
    auto got = names[r];
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "rank " << r;
  }
  EXPECT_EQ(flows.size(), 24u);  // one per transfer
  for (const auto& [id, sf] : flows) EXPECT_EQ(sf, std::make_pair(1, 1)) << "flow " << id;
}

TEST(Report, CommSlicesOfOneThreadNest) {
  const ppc::Plan plan = compile("Ett|ttL", 2, "1F1B", 4);
  auto reports = fake_reports(plan, 1000);
  // Pretend every op was seen complete only at the end of the step (sends are waited for there).
  for (auto& r : reports)
    for (auto& step : r.steps)
      for (size_t i = 0; i < step.spans.size(); ++i)
        if (ppc::is_comm(plan.lowered[static_cast<size_t>(r.rank)][i].kind))
          step.spans[i].end = step.wall_ns;
  const nlohmann::json t = nlohmann::json::parse(pprt::chrome_trace(plan, reports));
  std::map<int, std::vector<std::pair<double, double>>> slices;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["tid"] == 1)
      slices[e["pid"].get<int>()].emplace_back(e["ts"].get<double>(),
                                               e["ts"].get<double>() + e["dur"].get<double>());
  for (auto& [pid, v] : slices)
    for (const auto& a : v)
      for (const auto& b : v) {
        const bool disjoint = a.second <= b.first || b.second <= a.first;
        const bool nested = (a.first <= b.first && b.second <= a.second) ||
                            (b.first <= a.first && a.second <= b.second);
        EXPECT_TRUE(disjoint || nested) << "rank " << pid << ": [" << a.first << "," << a.second
                                        << ") and [" << b.first << "," << b.second << ")";
      }
}

// --- parameter dumps and output files ------------------------------------------------------------

TEST(ParamDump, RoundTripsFloatsExactlyAndCompares) {
  TempDir d;
  fs::create_directories(d.file("a"));
  fs::create_directories(d.file("b"));
  const std::vector<float> x{0.1f, -3.25e-8f, 1.0f / 3.0f, 12345.678f};
  std::vector<float> y = x;
  y[2] += 1e-5f;
  d.write("a/params.rank0.jsonl", pprt::param_dump_line("w", {2, 2}, x.data(), 4) +
                                      pprt::param_dump_line("only_a", {1}, x.data(), 1));
  d.write("b/params.rank1.jsonl", pprt::param_dump_line("w", {2, 2}, y.data(), 4));
  const auto a = pprt::read_param_dump(d.file("a"));
  EXPECT_EQ(a.at("w").data, x);
  EXPECT_EQ(a.at("w").shape, std::vector<int64_t>({2, 2}));
  const auto c = pprt::compare_param_dumps(a, pprt::read_param_dump(d.file("b")));
  EXPECT_EQ(c.compared, 1u);
  EXPECT_EQ(c.only_in_a, std::vector<std::string>({"only_a"}));
  EXPECT_EQ(c.worst, "w");
  EXPECT_NEAR(c.max_abs_diff, 1e-5, 1e-7);
}

// A shared parameter appears in the dump of every rank holding a copy: the merged view accepts it
// only if the copies are identical.
TEST(ParamDump, SharedCopiesMustBeIdentical) {
  TempDir d;
  fs::create_directories(d.file("same"));
  fs::create_directories(d.file("differ"));
  const std::vector<float> x{0.5f, 0.25f}, y{0.5f, 0.2500001f};
  d.write("same/params.rank0.jsonl", pprt::param_dump_line("embed.weight", {2}, x.data(), 2));
  d.write("same/params.rank14.jsonl", pprt::param_dump_line("embed.weight", {2}, x.data(), 2));
  const auto by_rank = pprt::read_param_dump_by_rank(d.file("same"));
  ASSERT_EQ(by_rank.size(), 2u);
  EXPECT_TRUE(by_rank.count(14) && by_rank.at(14).count("embed.weight"));
  EXPECT_EQ(pprt::read_param_dump(d.file("same")).at("embed.weight").data, x);
  d.write("differ/params.rank0.jsonl", pprt::param_dump_line("embed.weight", {2}, x.data(), 2));
  d.write("differ/params.rank3.jsonl", pprt::param_dump_line("embed.weight", {2}, y.data(), 2));
  EXPECT_EQ(user_error([&] { pprt::read_param_dump(d.file("differ")); }),
            d.file("differ") +
                ": the copies of shared parameter 'embed.weight' differ between params.rank0.jsonl "
                "and params.rank3.jsonl");
}

TEST(AtomicFile, LeavesNothingUnlessCommitted) {
  TempDir d;
  {
    ppc::AtomicFile f(d.file("m.jsonl"), "--metrics");
    f.write("half");
  }
  EXPECT_TRUE(fs::is_empty(d.file("")));
  {
    ppc::AtomicFile f(d.file("m.jsonl"), "--metrics");
    f.write("all\n");
    f.commit();
  }
  std::ifstream in(d.file("m.jsonl"));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "all");
  EXPECT_EQ(user_error([] { ppc::AtomicFile("/no/such/dir/m.jsonl", "--metrics"); }),
            "--metrics: cannot create '/no/such/dir/m.jsonl': No such file or directory");
}

TEST(Output, MetricsLineAndProgressLines) {
  pprt::StepMetrics m{3, 2.5, 1e-3, 0.75, 0.5, 2048, 1.5, {}};
  EXPECT_EQ(
      pprt::metrics_json(m),
      R"({"step":3,"loss":2.5,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5})");
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  pprt::Progress p(pprt::ProgressMode::Lines, 4, 2, f);
  for (int s = 1; s <= 4; ++s)
    p.update(pprt::StepMetrics{s, 5.0 - s, 1e-3, 1, 0.5, 2048, 0.5 * s, {}});
  p.finish();
  std::fclose(f);
  const std::string out(buf, len);
  std::free(buf);
  EXPECT_EQ(out,
            "step 1/4 loss 4.0000 lr 0.001 grad-norm 1.000 tok/s 2.0k eta 0:02\n"
            "step 2/4 loss 3.0000 lr 0.001 grad-norm 1.000 tok/s 2.0k eta 0:01\n"
            "step 4/4 loss 1.0000 lr 0.001 grad-norm 1.000 tok/s 2.0k eta 0:00\n");
  // With multi-token prediction: its loss beside the main one, in the file and on the line.
  m.mtp_loss = 2.75;
  m.step = 4;
  EXPECT_EQ(
      pprt::metrics_json(m),
      R"({"step":4,"loss":2.5,"mtp_loss":2.75,"lr":0.001,"grad_norm":0.75,"step_time_s":0.5,"tokens_per_s":2048.0,"elapsed_s":1.5})");
  f = open_memstream(&buf, &len);
  pprt::Progress q(pprt::ProgressMode::Lines, 4, 2, f);
  q.update(m);
  std::fclose(f);
  EXPECT_EQ(std::string(buf, len),
            "step 4/4 loss 2.5000 mtp-loss 2.7500 lr 0.001 grad-norm 0.750 tok/s 2.0k eta 0:00\n");
  std::free(buf);
}

}  // namespace
