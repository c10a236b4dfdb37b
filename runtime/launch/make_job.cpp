// make_job (run.h): pprun's options checked and resolved into the Job every rank runs, before
// anything runs or is written (bad input: one line naming the flag, exit 2).
#include "runtime/launch/run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "compiler/layout.h"
#include "runtime/checkpoint/format.h"
#include "runtime/checkpoint/hf.h"
#include "runtime/data/token_source.h"
#include "runtime/fail.h"
#include "runtime/launch/expert_groups.h"
#include "runtime/launch/memory_flags.h"
#include "runtime/launch/plan_load.h"
#include "runtime/launch/process_setup.h"
#include "runtime/model/model_facts.h"
#include "runtime/train/replan.h"
#include "runtime/train/trainer.h"
#include "runtime/transport/transport.h"

namespace pprt {

namespace {

ppc::Plan reference_plan(const RunOptions& o) {
  if (o.layout.empty())
    fail("--reference", "give the model as --plan FILE, or as --layout STR with --microbatches M");
  if (!o.microbatches) fail("--microbatches", "--reference --layout needs --microbatches");
  ppc::Plan plan;
  // Any letter: a symbol the model has no layer for is reported by name below (resume_from).
  plan.layout = ppc::parse_layout(o.layout, "layout", ppc::kAnySymbols);
  plan.has_model = true;
  plan.microbatches = *o.microbatches;
  plan.schedule = "reference";
  plan.placement = ppc::make_placement(1, 1, ppc::PlacementStyle::Loop);
  plan.compute.assign(1, {});  // one rank, whose order gradient accumulation replaces
  check_runnable(plan, "--layout");
  return plan;
}

// An output file must be creatable before anything runs (it is written atomically at the end).
void check_writable(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  ppc::AtomicFile probe(path, flag);  // throws naming the flag; leaves nothing behind
}

// --metrics: a file the run may append to (output/metrics_file.h), checked without creating or
// changing it: the file itself if it exists, else its directory.
void check_appendable(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  std::error_code ec;
  const std::filesystem::path p(path);
  if (std::filesystem::exists(p, ec)) {
    if (std::filesystem::is_directory(p, ec)) fail(flag, fmt::format("'{}' is a directory", path));
    if (access(path.c_str(), W_OK) != 0)
      fail(flag, fmt::format("cannot write to '{}': {}", path, std::strerror(errno)));
    return;
  }
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    fail(flag, fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
}

void parse_fault(const std::string& text, Job& job) {
  int rank = -1;
  long long step = -1;
  char where[8] = {0};
  const int n = std::sscanf(text.c_str(), "%d:%lld:%7s", &rank, &step, where);
  const std::string at = where;
  if (n < 2 || rank < 0 || step < 1 || (n == 3 && at != "save" && at != "commit" && at != "hang"))
    fail("--fault-kill",
         fmt::format("expected RANK:STEP[:save|commit|hang] (STEP from 1), got '{}'", text));
  job.kill_rank = rank;
  job.kill_step = step - 1;
  job.kill_at = at == "save"     ? Job::KillAt::Save
                : at == "commit" ? Job::KillAt::Commit
                : at == "hang"   ? Job::KillAt::Hang
                                 : Job::KillAt::Step;
}

void parse_slow(const std::string& text, Job& job) {
  int rank = -1;
  double factor = 0;
  char end = 0;
  if (std::sscanf(text.c_str(), "%d:%lf%c", &rank, &factor, &end) != 2 || rank < 0 ||
      !(factor >= 1) || factor > 1000)
    fail("--fault-slow",
         fmt::format("expected RANK:FACTOR (FACTOR from 1 to 1000), got '{}'", text));
  job.slow_rank = rank;
  job.slow_factor = factor;
}

// --ep: a divisor of --dp, of a model with routed experts it divides (the reference, one
// process, holds every expert: its ep is 1), and the plan's expert_parallel where ppcompile --ep
// wrote one (the plan's all-to-alls were proved, and its costs taken, at that size).
void check_expert_parallelism(Job& job, const RunOptions& o) {
  if (o.ep < 1) fail("--ep", fmt::format("must be at least 1, got {}", o.ep));
  if (const int planned = job.plan.expert_parallel.ep;
      planned > 1 && o.ep != planned && !o.reference)
    fail("--ep", fmt::format("{} differs from the plan's expert_parallel ep {} (ppcompile --ep "
                             "{}): run with --ep {} or compile the plan with --ep {}",
                             o.ep, planned, planned, planned, o.ep));
  if (o.ep == 1) return;
  const int experts =
      job.facts.routed_experts
          ? run_hook([&] { return job.facts.routed_experts(layout_info(job.plan.layout)); })
          : 0;
  if (experts == 0)
    fail("--ep", fmt::format("{}: model '{}' has no mixture-of-experts layer to shard (layout {})",
                             o.ep, job.facts.family, job.plan.layout.source));
  if (experts % o.ep != 0)
    fail("--ep",
         fmt::format("{} does not divide the {} routed experts of each MoE layer", o.ep, experts));
  if (!o.reference && o.dp % o.ep != 0)
    fail("--ep", fmt::format("{} does not divide --dp {}: the experts are sharded over "
                             "data-parallel replicas",
                             o.ep, o.dp));
  job.ep = o.reference ? 1 : o.ep;
}

// The model of configuration `job.model`: its facts and setup, and the checks it asks for.
void set_model(Job& job) {
  job.setup = setup_of(job.model, job.family.name());
  job.facts = model_facts(job.family, job.model);
}

// --resume: the checkpoint's model (the options given may change it, as long as it stays the
// same model: the family's check in words, then Checkpoint::check_params), seed and step.
void resume_from(const RunOptions& o, const std::string& dir, Job& job) {
  const Checkpoint ckpt(dir);
  const CheckpointState& st = ckpt.state();
  job.model = job.family.configured(&st.model, o.model);
  set_model(job);
  if (o.seed_given && o.train.seed != st.train.seed)
    fail("--seed", fmt::format("is {}, but the checkpoint {} was trained with seed {} (which also "
                               "orders the data): leave --seed out to resume",
                               o.train.seed, ckpt.dir(), st.train.seed));
  job.train.seed = st.train.seed;
  ppc::Layout theirs;
  try {
    theirs = ppc::parse_layout(st.layout, "layout", ppc::kAnySymbols);  // checked when saved
  } catch (const ppc::UserError& e) {
    fail(ckpt.dir() + "/trainer_state.json", "layout: " + e.message());
  }
  const LayoutInfo layout = layout_info(job.plan.layout);
  job.family.check_same(st.model, layout_info(theirs), job.model, layout, ckpt.dir());
  // Without the model's list, each rank's parameters are checked by name and shape as they load.
  if (job.facts.parameters)
    ckpt.check_params(run_hook([&] { return job.facts.parameters(layout, job.setup); }));
  job.resume_path = ckpt.dir();
  job.start_step = st.step;
  job.resumed_dtype = st.train.dtype;
}

// --init-from: the model of a Hugging Face directory, as the family reads its config.json and
// checks it against the layout, every weight file checked (names, shapes, dtypes) before anything
// runs.
void init_from_hf(const RunOptions& o, Job& job) {
  if (!o.resume_dir.empty() && o.resume_dir != "auto")
    fail("--init-from", "cannot be combined with --resume (a checkpoint holds its own weights)");
  for (const std::string& flag : o.model.given())
    if (flag != "--seq-len")
      fail(flag, fmt::format("the model comes from {}/config.json (--init-from); only --seq-len "
                             "may be given",
                             o.init_from));
  HfDirectory hf(o.init_from);
  const LayoutInfo layout = layout_info(job.plan.layout);
  job.model =
      job.family.from_hf(hf.config(), hf.config_file(),
                         o.model.integer("--seq-len").value_or(ModelSetup{}.seq_len), layout);
  set_model(job);
  hf.open_weights();
  if (!job.facts.hugging_face)
    fail("--init-from", fmt::format("model '{}' has no Hugging Face form (Model::hugging_face)",
                                    job.facts.family));
  job.hf_format = run_hook([&] { return job.facts.hugging_face(layout, job.setup, "float32"); });
  hf.check_weights(job.hf_format);
  job.init_from = o.init_from;
}

// The data must be the data the checkpoint was trained on (its position is the step).
void check_same_data(const Job& job, const TokenSource& data) {
  const CheckpointState st = Checkpoint(job.resume_path).state();
  const DataIdentity now = data.identity();
  if (now.format != st.data.format || now.fingerprint != st.data.fingerprint ||
      now.tokens != st.data.tokens)
    fail("--data", fmt::format("the checkpoint {} was trained on {} data{}, this run's is {}{}: "
                               "resume on the same data",
                               job.resume_path, st.data.format,
                               st.data.path.empty() ? "" : " from " + st.data.path, now.format,
                               now.path.empty() ? "" : " from " + now.path));
}

// --eval-data, --eval-every, --eval-batches: the held-out file opened and checked like --data;
// by default as many whole global batches of its sequences as it holds, from 1 to
// kDefaultEvalBatches.
void resolve_eval(const RunOptions& o, Job& job) {
  constexpr int64_t kDefaultEvalBatches = 20;
  EvalOptions& e = job.eval;
  if (!e.enabled()) {
    if (o.eval_every) fail("--eval-every", "needs --eval-data FILE (the held-out data)");
    if (o.eval_batches) fail("--eval-batches", "needs --eval-data FILE (the held-out data)");
    if (o.eval_only) fail("--eval-only", "needs --eval-data FILE (the held-out data)");
    return;
  }
  if (o.eval_only && o.eval_every)
    fail("--eval-every", "--eval-only evaluates once, before any step: leave --eval-every out");
  if (o.eval_every && *o.eval_every < 0)
    fail("--eval-every",
         fmt::format("must be at least 0 (0: only after the last step), got {}", *o.eval_every));
  if (o.eval_batches && *o.eval_batches < 1)
    fail("--eval-batches", fmt::format("must be at least 1, got {}", *o.eval_batches));
  const TokenSource held = open_eval_data(job);  // opens and validates it
  e.every = o.eval_every.value_or(0);
  const int64_t whole = held.sequence_count(job.setup.seq_len + 1) / job.train.global_batch;
  e.batches = o.eval_batches ? *o.eval_batches
                             : static_cast<int>(std::clamp<int64_t>(whole, 1, kDefaultEvalBatches));
}

}  // namespace

Job make_job(const RunOptions& o, const std::optional<LaunchEnv>& env) {
  Job job;
  if (!o.plan_path.empty())
    job.plan = load_plan(o.plan_path);
  else if (o.reference)
    job.plan = reference_plan(o);
  else
    fail("--plan",
         "a plan is required: pprun --plan plan.json (write one with ppcompile --emit json -o "
         "plan.json)");
  if (o.microbatches && *o.microbatches != job.plan.microbatches)
    fail("--microbatches", fmt::format("is {}, but the plan {} was compiled for {} microbatches",
                                       *o.microbatches, o.plan_path, job.plan.microbatches));
  if (job.plan.microbatches < 1) fail("--microbatches", "must be at least 1");

  job.train = o.train;
  job.family = o.family;
  if (o.dtype != "fp32" && o.dtype != "bf16")
    fail("--dtype", fmt::format("'{}': expected fp32 or bf16", o.dtype));
  job.train.dtype = o.dtype == "bf16" ? Precision::Bf16 : Precision::Fp32;
  std::string resume = o.resume_dir;
  if (resume == "auto") {  // a job restarted by its launcher goes on by itself
    if (o.save_dir.empty())
      fail("--resume", "auto resumes from the latest checkpoint of --save DIR: give --save");
    job.resume_auto = true;
    resume = holds_checkpoint(o.save_dir) ? o.save_dir : "";
  }
  if (!resume.empty()) {
    resume_from(o, resume, job);
  } else if (!o.init_from.empty()) {  // with --resume auto: only while --save holds no checkpoint
    init_from_hf(o, job);
  } else {
    job.model = job.family.configured(nullptr, o.model);
    set_model(job);
  }
  for (size_t st = 0; st < job.plan.layout.stages.size(); ++st)  // as model/stage.cpp says it
    for (ppc::LayerKind k : job.plan.layout.stages[st])
      if (const char c = ppc::layer_symbol(k); job.facts.symbols.find(c) == std::string::npos)
        fail("layout", fmt::format("symbol '{}' (stage {}) has no layer in the model '{}'", c, st,
                                   job.facts.family));
  if (job.train.dtype != Precision::Fp32 && job.facts.precision == MixedPrecision::None)
    fail("--dtype", fmt::format("{}: model '{}' trains in fp32 only (it takes no part in mixed "
                                "precision: Model::mixed_precision)",
                                o.dtype, job.facts.family));
  const TrainOptions& t = job.train;
  if (t.steps < 1)
    fail("--steps", fmt::format("must be at least 1, got {} (the validation loss without "
                                "training: --eval-only with --eval-data)",
                                t.steps));
  if (o.dp < 1) fail("--dp", fmt::format("must be at least 1, got {}", o.dp));
  job.dp = o.reference ? 1 : o.dp;  // the reference trains on the same global batch alone
  check_expert_parallelism(job, o);
  if (t.global_batch < 1 || t.global_batch % (job.dp * job.plan.microbatches) != 0)
    fail("--global-batch",
         job.dp > 1 ? fmt::format("{} is not a positive multiple of --dp {} x the plan's {} "
                                  "microbatches",
                                  t.global_batch, job.dp, job.plan.microbatches)
                    : fmt::format("{} is not a positive multiple of the plan's {} microbatches",
                                  t.global_batch, job.plan.microbatches));
  if (!(t.lr > 0)) fail("--lr", "must be positive");
  if (t.clip < 0) fail("--clip", "must be at least 0 (0 = no clipping)");
  if (!(t.mtp_loss_weight >= 0)) fail("--mtp-loss-weight", "must be at least 0");
  if (job.facts.check) run_hook([&] { job.facts.check(layout_info(job.plan.layout), job.setup); });
  job.eval.data_path = o.eval_data;
  job.eval.only = o.eval_only;
  const TokenSource data = open_training_data(job);  // opens and validates the data file
  // (an evaluation reads no training data: any --data goes with a checkpoint then)
  if (!job.resume_path.empty() && !job.eval.only) check_same_data(job, data);
  resolve_eval(o, job);
  if (o.save_every < 0) fail("--save-every", "must be at least 0 (0: only at the end)");
  if (o.keep < 0) fail("--keep", "must be at least 0 (0: keep every checkpoint)");
  if ((o.save_every > 0 || o.keep > 0 || o.save_async) && o.save_dir.empty())
    fail(o.save_every > 0 ? "--save-every"
         : o.keep > 0     ? "--keep"
                          : "--save-async",
         "needs --save DIR");
  if (o.stop_after < 0) fail("--stop-after", "must be at least 0 (0: train to --steps)");
  job.stop_after = o.stop_after;
  job.save_dir = o.save_dir;
  job.save_every = o.save_every;
  job.keep = o.keep;
  job.save_async = o.save_async;

  job.out = o.out;
  std::string progress = o.progress;
  if (progress == "auto" && env && !env->progress.empty()) progress = env->progress;
  if (progress == "auto") progress = isatty(STDOUT_FILENO) ? "bar" : "lines";
  if (progress == "bar")
    job.out.progress = ProgressMode::Bar;
  else if (progress == "lines")
    job.out.progress = ProgressMode::Lines;
  else if (progress == "none")
    job.out.progress = ProgressMode::None;
  else
    fail("--progress",
         fmt::format("unknown mode '{}' (expected auto, bar, lines or none)", progress));

  job.device = o.device;
  check_device(job.device);
  resolve_memory(o.recompute, o.offload, o.offload_test_host_copy, job);
  if (o.replan_lengths) {  // after the data's flags and the plan
    if (o.reference)
      fail("--replan-lengths", "orders a pipeline's microbatches, and --reference runs none");
    if (job.train.granule == 0)
      fail("--replan-lengths", "needs --varlen: the microbatches' lengths are --varlen's");
    if (o.ep > 1)  // an expert group's all-to-alls need one order on every replica of it
      fail("--replan-lengths",
           fmt::format("each replica orders its own microbatches, and --ep {}'s all-to-alls need "
                       "one order across an expert group",
                       o.ep));
    job.replan_costs =
        std::make_shared<const ppc::CostModel>(replan_cost_model(job, o.replan_costs));
  }
  if (job.device == "cuda" && !o.reference)
    if (auto bad = check_fifo_order(job.plan))
      fail(o.plan_path,
           "the NCCL transport needs sends and receives between two ranks in the same order: " +
               *bad);
  if (!(o.timeout_s > 0)) fail("--timeout", "must be positive");
  job.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  if (!(o.step_timeout_s >= 0)) fail("--step-timeout", "must be positive (0: ten times the step)");
  job.step_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.step_timeout_s * 1000));

  int local_ranks = o.reference ? 1 : job.topology().world();
  if (env && env->local_world > 0) local_ranks = env->local_world;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  job.threads = o.threads > 0 ? o.threads : std::max(1, cores / local_ranks);
  if (!o.fault_kill.empty()) parse_fault(o.fault_kill, job);
  if (!o.fault_slow.empty()) parse_slow(o.fault_slow, job);
  // Outputs last: nothing is created if anything above is wrong.
  check_appendable(job.out.metrics_path, "--metrics");
  check_writable(job.out.trace_path, "--trace");
  if (job.eval.only && !job.out.trace_path.empty())
    fail("--trace", "traces a training step, and --eval-only runs none");
  if (job.eval.only && !job.out.profile_path.empty())
    fail("--profile", "measures training steps, and --eval-only runs none");
  if (o.reference && !job.out.profile_path.empty())
    fail("--profile", "needs a plan to run: the reference has no stages to measure");
  check_writable(job.out.profile_path, "--profile");
  if (!job.save_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(job.save_dir, ec);
    if (ec || access(job.save_dir.c_str(), W_OK) != 0)
      fail("--save", fmt::format("cannot write to directory '{}'{}", job.save_dir,
                                 ec ? ": " + ec.message() : ""));
  }
  if (!job.out.dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(job.out.dump_dir, ec);
    if (ec)
      fail("--dump-params",
           fmt::format("cannot create directory '{}': {}", job.out.dump_dir, ec.message()));
  }
  return job;
}

}  // namespace pprt
