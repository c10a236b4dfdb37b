#include "runtime/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "compiler/emit.h"
#include "compiler/verify.h"
#include "runtime/checkpoint/save_load.h"
#include "runtime/data/token_source.h"
#include "runtime/fail.h"
#include "runtime/launch/failure.h"
#include "runtime/model/stage.h"
#include "runtime/output/param_dump.h"
#include "runtime/output/report.h"
#include "runtime/output/step_log.h"
#include "runtime/output/trace.h"
#include "runtime/train/executor.h"
#include "runtime/train/grad_reducer.h"

namespace pprt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

at::Device device_for(const Job& job, int local_rank) {
  if (job.device != "cuda") return at::Device(at::kCPU);
  const int n = std::max(1, static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()));
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank % n));
}

TokenSource make_data(const Job& job) {
  return open_training_data(job);
}

// The rows of step `step`'s global batch that replica `replica` of `replicas` trains on.
at::Tensor batch_tensor(const TokenSource& data, const Job& job, int step, int replica,
                        int replicas, const at::Device& device) {
  std::vector<int64_t> rows;
  const int len = job.model.seq_len + 1;
  const int share = job.train.global_batch / replicas;
  data.batch(step, static_cast<int64_t>(replica) * share, share, len, rows);
  return at::from_blob(rows.data(), {share, len}, at::kLong).clone().to(device);
}

int total_decoders(const ppc::Layout& layout) {
  return layout.count(ppc::LayerKind::Decoder);
}

// A rank's parameters and the stages that use them (or the whole model, for the reference).
struct LocalModel {
  ParamStore store;
  std::vector<std::unique_ptr<Stage>> owned;
  std::vector<Stage*> stages;
  LocalModel(uint64_t seed, const at::Device& device) : store(seed, device) {}
  void add(const ModelConfig& c, StageSpec spec, const at::Device& device) {
    owned.push_back(std::make_unique<Stage>(c, std::move(spec), store, device));
    stages.push_back(owned.back().get());
  }
};

std::unique_ptr<torch::optim::AdamW> make_optimizer(ParamStore& store, const TrainOptions& o) {
  std::vector<at::Tensor> decay, no_decay;
  for (NamedParam& p : store.params()) (p.decay ? decay : no_decay).push_back(p.tensor);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(decay, options(o.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(o.lr));
}

void zero_grads(ParamStore& store) {
  for (NamedParam& p : store.params()) p.tensor.mutable_grad() = at::Tensor();
}

// The parameters a rank shares with others (model_spec.h: shared_groups), with a process group
// per set of ranks holding them. After each step their gradients are summed over the group.
struct SharedReduction {
  std::unique_ptr<Transport> group;
  std::vector<at::Tensor*> params;  // sorted by name: the same order on every member
};

struct Sharing {
  std::vector<SharedReduction> reductions;      // in the global order of the groups
  std::unordered_set<std::string> not_counted;  // shared, counted in the norm by a lower rank
};

Sharing make_sharing(const ppc::Plan& plan, const ModelConfig& c, int rank, ParamStore& store,
                     Transport* transport) {
  Sharing out;
  for (const SharedGroup& g : shared_groups(plan, c)) {
    if (!std::binary_search(g.ranks.begin(), g.ranks.end(), rank)) continue;
    SharedReduction red;
    red.group = transport->new_group(g.ranks, fmt::format("shared:{}", fmt::join(g.ranks, ",")));
    for (const std::string& name : g.names) {
      NamedParam* p = store.find(name);
      PPC_INTERNAL_ASSERT(p != nullptr, "a shared parameter is held by every rank of its group");
      red.params.push_back(&p->tensor);
      if (g.ranks.front() != rank) out.not_counted.insert(name);
    }
    out.reductions.push_back(std::move(red));
  }
  return out;
}

// Sums the gradients of each shared group over its ranks (one flat all-reduce per group).
void sum_shared_grads(Sharing& sharing, std::chrono::milliseconds timeout) {
  for (SharedReduction& red : sharing.reductions) {
    std::vector<at::Tensor> flat;
    for (at::Tensor* p : red.params)
      flat.push_back(p->grad().defined() ? p->grad().reshape({-1}) : at::zeros_like(*p).view({-1}));
    at::Tensor buf = at::cat(flat);
    red.group->allreduce_sum(buf, timeout);
    int64_t at = 0;
    for (at::Tensor* p : red.params) {
      at::Tensor part = buf.narrow(0, at, p->numel()).view_as(*p);
      at += p->numel();
      if (p->grad().defined())
        p->mutable_grad().copy_(part);
      else
        p->mutable_grad() = part.clone();
    }
  }
}

// What every rank learns at the end of a step, in one all-reduce: the squared gradient norm
// (shared parameters counted once) and each microbatch's losses (each computed on one rank).
struct StepStats {
  double grad_norm = 0;
  std::vector<double> losses, mtp_losses;
};

// `count_norm`: this rank's gradients count in the norm (replica 0's: after data parallelism's
// average every replica holds the same); the losses are averaged over the `replicas`.
StepStats gather_stats(ParamStore& store, const Sharing* sharing, const StepReport* rep, int mbs,
                       Transport* transport, std::chrono::milliseconds timeout,
                       const at::Device& device, bool count_norm = true, int replicas = 1) {
  at::Tensor sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  for (NamedParam& p : store.params())
    if (count_norm && p.tensor.grad().defined() && !(sharing && sharing->not_counted.count(p.name)))
      sq += p.tensor.grad().to(at::kDouble).pow(2).sum();
  std::vector<double> v(1 + 2 * static_cast<size_t>(mbs), 0.0);
  if (rep && rep->has_losses) {
    std::copy(rep->losses.begin(), rep->losses.end(), v.begin() + 1);
    std::copy(rep->mtp_losses.begin(), rep->mtp_losses.end(), v.begin() + 1 + mbs);
  }
  at::Tensor all = at::tensor(v, at::kDouble).to(device);
  all.narrow(0, 0, 1).add_(sq);
  if (transport && transport->size() > 1) transport->allreduce_sum(all, timeout);
  const at::Tensor cpu = all.cpu();
  const double* d = cpu.data_ptr<double>();
  StepStats out;
  out.grad_norm = std::sqrt(d[0]);
  out.losses.assign(d + 1, d + 1 + mbs);
  out.mtp_losses.assign(d + 1 + mbs, d + 1 + 2 * mbs);
  for (double& x : out.losses) x /= replicas;
  for (double& x : out.mtp_losses) x /= replicas;
  return out;
}

// Clips by the global norm (like torch.nn.utils.clip_grad_norm_).
void clip_gradients(ParamStore& store, const TrainOptions& o, double norm) {
  if (o.clip <= 0) return;
  const double coef = o.clip / (norm + 1e-6);
  if (coef < 1)
    for (NamedParam& p : store.params())
      if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(coef);
}

void optimizer_step(torch::optim::AdamW& opt, const TrainOptions& o, int step) {
  const double lr = learning_rate(o, step);
  for (auto& group : opt.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  opt.step();
}

bool save_due(const Job& job, int done) {
  return !job.save_dir.empty() &&
         (done == job.last_step() || (job.save_every > 0 && done % job.save_every == 0));
}

// The plan as a checkpoint records it (ppcompile's JSON).
std::string plan_json(const ppc::Plan& plan, bool verify) {
  std::ostringstream os;
  ppc::emit_json(plan, verify ? ppc::verify(plan) : ppc::VerifyReport{}, os);
  return os.str();
}

void dump_params(const Job& job, int rank, const ParamStore& store) {
  if (job.out.dump_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(job.out.dump_dir, ec);
  if (ec)
    fail("--dump-params",
         fmt::format("cannot create directory '{}': {}", job.out.dump_dir, ec.message()));
  ppc::AtomicFile f(fmt::format("{}/params.rank{}.jsonl", job.out.dump_dir, rank), "--dump-params");
  for (const NamedParam& p : store.params()) {
    const at::Tensor t = p.tensor.detach().to(at::kCPU).contiguous();
    f.write(param_dump_line(p.name, t.sizes().vec(), t.data_ptr<float>(),
                            static_cast<size_t>(t.numel())));
  }
  f.commit();
}

std::string header(const Job& job, const TokenSource& data, const char* transport, int world) {
  const ppc::Plan& p = job.plan;
  const int replicas = world == 0 ? 1 : job.dp;
  const int b = job.train.global_batch / replicas / p.microbatches;
  const std::string what =
      world == 0   ? "reference (unpipelined, 1 process)"
      : job.dp > 1 ? fmt::format("{} on {} ranks (vpp {}) x {} data-parallel replicas = {} ranks",
                                 p.schedule, p.pp(), p.vpp(), job.dp, p.pp() * job.dp)
                   : fmt::format("{} on {} ranks (vpp {})", p.schedule, p.pp(), p.vpp());
  const int depths = mtp_depths(p.layout);
  const std::string layers = depths ? fmt::format("{} layers + {} MTP depth{} (loss weight {:g})",
                                                  total_decoders(p.layout), depths,
                                                  depths == 1 ? "" : "s", job.train.mtp_loss_weight)
                                    : fmt::format("{} layers", total_decoders(p.layout));
  return fmt::format(
      "pprun: {}, {} microbatches of {} sequences{}\n"
      "pprun: model {} = {}, {:.2f}M parameters ({}); data: {}; {}, {}, {} thread{} per "
      "rank ({})\n",
      what, p.microbatches, b, replicas > 1 ? " per replica" : "", p.layout.source, layers,
      count_parameters(job.model, p.layout) / 1e6, describe(job.model), data.describe(), transport,
      job.device, job.threads, job.threads == 1 ? "" : "s", thread_pools());
}

// The loss rank's per-step output: metrics file and progress.
class StepLog {
 public:
  StepLog(const Job& job, bool active, FailureWatch* watch)
      : job_(job),
        active_(active),
        progress_(job.out.progress, job.last_step(), job.out.log_every, stdout,
                  static_cast<int>(job.start_step)) {
    if (active_ && !job.out.metrics_path.empty()) {
      metrics_.emplace(job.out.metrics_path, "--metrics");
      if (watch) watch->remove_on_stop(metrics_->temp_path());
    }
    start_ = Clock::now();
  }

  void step(int step, const StepStats& stats, double step_time_s) {
    if (!active_) return;
    StepMetrics m;
    m.step = step + 1;
    auto mean = [](const std::vector<double>& v) {
      double sum = 0;
      for (double x : v) sum += x;
      return v.empty() ? 0 : sum / static_cast<double>(v.size());
    };
    m.loss = mean(stats.losses);
    if (mtp_depths(job_.plan.layout) > 0) m.mtp_loss = mean(stats.mtp_losses);
    const double grad_norm = stats.grad_norm;
    m.lr = learning_rate(job_.train, step);
    m.grad_norm = grad_norm;
    m.step_time_s = step_time_s;
    m.tokens_per_s = step_time_s > 0 ? job_.train.global_batch *
                                           static_cast<double>(job_.model.seq_len) / step_time_s
                                     : 0;
    m.elapsed_s = seconds_since(start_);
    if (m.step == job_.start_step + 1) first_loss_ = m.loss;
    last_loss_ = m.loss;
    if (metrics_) {
      metrics_->write(metrics_json(m) + "\n");
      metrics_->flush();
    }
    progress_.update(m);
  }

  void finish() {
    if (!active_) return;
    progress_.finish();
    if (metrics_) metrics_->commit();
    metrics_.reset();
    const int run = job_.last_step() - static_cast<int>(job_.start_step);
    std::printf("pprun: done: %d step%s in %.2f s, loss %.4f -> %.4f%s\n", run, run == 1 ? "" : "s",
                seconds_since(start_), first_loss_, last_loss_,
                job_.start_step > 0 || job_.last_step() < job_.train.steps
                    ? fmt::format(" (steps {}-{} of {})", job_.start_step + 1, job_.last_step(),
                                  job_.train.steps)
                          .c_str()
                    : "");
    std::fflush(stdout);
  }

 private:
  const Job& job_;
  bool active_;
  Progress progress_;
  std::optional<ppc::AtomicFile> metrics_;
  Clock::time_point start_;
  double first_loss_ = 0, last_loss_ = 0;
};

void train_rank_impl(const Job& job, int rank, int local_rank, const RankGroups& groups,
                     Store& store, FailureWatch& watch) {
  const ppc::Plan& plan = job.plan;
  const Topology topo = job.topology();
  const int prank = topo.pipeline_rank(rank), replica = topo.replica(rank);
  Transport* transport = groups.pipeline;
  const at::Device device = device_for(job, local_rank);
  const bool reporter = rank == topo.global(loss_rank(plan), 0);
  const TokenSource data = make_data(job);
  if (reporter) {
    std::fputs(
        header(job, data, groups.world ? groups.world->name() : "no transport", plan.pp()).c_str(),
        stdout);
    std::fflush(stdout);
  }
  const auto specs = stage_specs(plan.layout, job.train.mtp_loss_weight);
  LocalModel model(job.train.seed, device);
  for (int s : plan.placement.rank_stages[static_cast<size_t>(prank)])
    model.add(job.model, specs[static_cast<size_t>(plan.layout_stage(s))], device);
  Sharing sharing;
  if (transport) sharing = make_sharing(plan, job.model, prank, model.store, transport);
  auto opt = make_optimizer(model.store, job.train);
  RankReport report;
  report.rank = prank;
  if (!job.resume_path.empty()) {
    const auto l0 = Clock::now();
    report.load_bytes = load_checkpoint(Checkpoint(job.resume_path), model.store, *opt);
    report.load_seconds = seconds_since(l0);
  }
  SaveContext saver{&job,
                    &model.store,
                    opt.get(),
                    &data,
                    groups.world,
                    rank,
                    replica == 0,
                    prank,
                    plan.pp(),
                    &sharing.not_counted,
                    rank == 0 && !job.save_dir.empty() ? plan_json(plan, true) : ""};
  ExecutorOptions eo;
  eo.timeout = job.timeout;
  if (rank == job.kill_rank && job.kill_at == Job::KillAt::Step) {
    eo.kill_step = job.kill_step;
    eo.kill_action = plan.order()[static_cast<size_t>(prank)].size() / 2;
  }
  std::unique_ptr<GradReducer> reducer;
  if (groups.replicas) {
    reducer = std::make_unique<GradReducer>(plan, prank, job.model, model.store, *groups.replicas,
                                            job.timeout);
    eo.after_compute = [r = reducer.get()](size_t i) { r->action_done(i); };
  }
  Executor exec(plan, prank, model.stages, job.model, transport, device, eo);
  StepLog log(job, reporter, &watch);
  const bool trace = !job.out.trace_path.empty();
  constexpr int kAnalysedSteps = 20;
  const int first = static_cast<int>(job.start_step);
  for (int step = first; step < job.last_step(); ++step) {
    const auto t0 = Clock::now();
    zero_grads(model.store);
    data.check_unchanged();  // a data file replaced or modified mid-run stops the job
    const at::Tensor tokens = batch_tensor(data, job, step, replica, job.dp, device);
    StepReport rep = exec.run_step(tokens, step);
    const auto t1 = Clock::now();
    if (reducer) {
      const ReduceStats r = reducer->finish();
      if (step > first || first + 1 == job.last_step()) report.dp.add(r);
    }
    sum_shared_grads(sharing, job.timeout);
    const StepStats stats = gather_stats(model.store, &sharing, &rep, plan.microbatches,
                                         groups.world, job.timeout, device, replica == 0, job.dp);
    clip_gradients(model.store, job.train, stats.grad_norm);
    optimizer_step(*opt, job.train, step);
    const double step_s = seconds_since(t0);
    report.peak_inflight = std::max(report.peak_inflight, rep.peak_inflight);
    if (step == first || step >= job.last_step() - kAnalysedSteps) {
      StepTiming t{step,
                   rep.begin_unix_us,
                   rep.wall_ns,
                   rep.compute_ns,
                   rep.wait_ns,
                   rep.post_ns,
                   std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t1).count(),
                   rep.actions,
                   std::move(rep.spans)};
      report.steps.push_back(std::move(t));
    }
    log.step(step, stats, step_s);
    if (save_due(job, step + 1)) {
      const SaveResult saved = save_checkpoint(saver, step + 1);
      report.save_seconds.push_back(saved.seconds);
      report.save_bytes.push_back(saved.bytes);
    }
  }
  dump_params(job, rank, model.store);
  store.set(fmt::format("report/{}", rank), to_json(report));
  if (reporter) {
    std::vector<RankReport> all;  // replica 0's ranks, by pipeline rank
    for (int r = 0; r < plan.pp(); ++r)
      all.push_back(rank_report_from_json(store.get(fmt::format("report/{}", topo.global(r, 0)))));
    log.finish();
    TimingSummary summary = analyse(plan, all);
    summarise_saves(all, summary);
    summarise_dp(all, job.dp, summary);
    std::istringstream lines(summary_text(summary));
    for (std::string line; std::getline(lines, line);) std::printf("pprun: %s\n", line.c_str());
    if (trace) ppc::write_file_atomically(job.out.trace_path, chrome_trace(plan, all), "--trace");
    std::fflush(stdout);
  }
  watch.stop();  // after the barrier the store's host may be gone
  if (groups.world && groups.world->size() > 1) groups.world->barrier(job.timeout);
}

}  // namespace

void train_rank(const Job& job, int rank, int local_rank, const RankGroups& groups, Store& store,
                bool hosts_store) {
  const std::chrono::milliseconds grace = std::min(job.timeout, std::chrono::milliseconds(3000));
  const int world = job.topology().world();
  FailureWatch watch(&store, rank, world, grace, hosts_store);
  auto lost = [&](const std::string& what) {
    watch.main_failing();
    const std::string cause = diagnose_lost_rank(&store, rank, world, what, grace);
    return RunFailure(fmt::format("rank {}: {}; it stopped at {}", rank, cause, what));
  };
  try {
    train_rank_impl(job, rank, local_rank, groups, store, watch);
  } catch (const CommFailure& e) {
    throw lost(e.what());
  } catch (const TransportError& e) {
    throw lost(e.what());
  } catch (const ppc::UserError& e) {
    watch.main_failing();
    report_failure(&store, rank, first_line(e.format()));  // with its place: "FILE: ..."
    throw;
  } catch (const ppc::InternalError& e) {
    watch.main_failing();
    report_failure(&store, rank, e.what());
    throw;
  } catch (const std::exception& e) {
    watch.main_failing();
    report_failure(&store, rank, first_line(e.what()));
    throw RunFailure(fmt::format("rank {}: {}", rank, first_line(e.what())));
  }
}

void train_reference(const Job& job) {
  const at::Device device = device_for(job, 0);
  const TokenSource data = make_data(job);
  std::fputs(header(job, data, "no transport", 0).c_str(), stdout);
  LocalModel model(job.train.seed, device);
  model.add(job.model, whole_model_spec(job.plan.layout, job.train.mtp_loss_weight), device);
  Stage& stage = *model.stages.front();
  auto opt = make_optimizer(model.store, job.train);
  RankReport report;
  if (!job.resume_path.empty()) {
    const auto l0 = Clock::now();
    report.load_bytes = load_checkpoint(Checkpoint(job.resume_path), model.store, *opt);
    report.load_seconds = seconds_since(l0);
  }
  const SaveContext saver{&job,
                          &model.store,
                          opt.get(),
                          &data,
                          nullptr,
                          0,
                          true,
                          0,
                          1,
                          nullptr,
                          job.save_dir.empty() ? "" : plan_json(job.plan, false)};
  StepLog log(job, true, nullptr);
  const int mbs = job.plan.microbatches;
  const int b = job.train.global_batch / mbs;
  for (int step = static_cast<int>(job.start_step); step < job.last_step(); ++step) {
    const auto t0 = Clock::now();
    zero_grads(model.store);
    data.check_unchanged();
    const at::Tensor tokens = batch_tensor(data, job, step, 0, 1, device);
    StepReport rep;  // the losses, as a rank holding every L reports them
    rep.has_losses = true;
    for (int mb = 0; mb < mbs; ++mb) {
      const at::Tensor rows = tokens.narrow(0, static_cast<int64_t>(mb) * b, b);
      StageLosses parts;
      const at::Tensor loss = stage.forward(at::Tensor(), rows, nullptr, &parts);
      rep.losses.push_back(parts.main.item<double>());
      rep.mtp_losses.push_back(parts.mtp.defined() ? parts.mtp.mean().item<double>() : 0.0);
      torch::autograd::backward({loss * (1.0 / mbs)});
    }
    const StepStats stats =
        gather_stats(model.store, nullptr, &rep, mbs, nullptr, job.timeout, device);
    clip_gradients(model.store, job.train, stats.grad_norm);
    optimizer_step(*opt, job.train, step);
    log.step(step, stats, seconds_since(t0));
    if (save_due(job, step + 1)) {
      const SaveResult saved = save_checkpoint(saver, step + 1);
      report.save_seconds.push_back(saved.seconds);
      report.save_bytes.push_back(saved.bytes);
    }
  }
  dump_params(job, 0, model.store);
  log.finish();
  TimingSummary summary;
  summarise_saves({report}, summary);
  std::istringstream lines(saves_text(summary));
  for (std::string line; std::getline(lines, line);) std::printf("pprun: %s\n", line.c_str());
}

}  // namespace pprt
