#include "runtime/train/trainer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>

#include "compiler/atomic_file.h"
#include "compiler/diagnostic.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"
#include "runtime/checkpoint/hf_load.h"
#include "runtime/checkpoint/save_load.h"
#include "runtime/data/token_source.h"
#include "runtime/launch/failure.h"
#include "runtime/model/aux_loss.h"
#include "runtime/model/kernel_choice.h"
#include "runtime/model/model_facts.h"
#include "runtime/model/precision.h"
#include "runtime/model/stage.h"
#include "runtime/output/all_to_all_stats.h"
#include "runtime/output/allocator_peak.h"
#include "runtime/output/param_dump.h"
#include "runtime/output/profile.h"
#include "runtime/output/report.h"
#include "runtime/output/step_log.h"
#include "runtime/output/trace.h"
#include "runtime/train/executor.h"
#include "runtime/train/fused_step.h"
#include "runtime/train/grad_reducer.h"
#include "runtime/train/gradients.h"
#include "runtime/train/step_stats.h"
#include "runtime/train/step_timeout.h"
#include "runtime/train/timed_transport.h"
#include "runtime/train/where.h"

namespace pprt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

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

// --init-from: the parameters from a Hugging Face directory; --resume: the parameters and AdamW
// state from the checkpoint.
void resume(const Job& job, ParamStore& store, torch::optim::AdamW& opt, RankReport& report) {
  if (!job.init_from.empty()) {
    load_hf_weights(job.init_from, job.hf_format, store);
    return;
  }
  if (job.resume_path.empty()) return;
  const auto t0 = Clock::now();
  report.load_bytes = load_checkpoint(Checkpoint(job.resume_path), store, opt);
  report.load_seconds = seconds_since(t0);
}

// --- the step loop ----------------------------------------------------------------------------

// `targets` (if given): with rows of documents, the predicted targets (data/documents.h) of the
// step's global batch, every replica's rows (each rank draws the other replicas' rows itself, as
// they depend on (seed, step, row) alone: no message); else 0.
at::Tensor batch_tensor(const TokenSource& data, const Job& job, int step,
                        const TrainerPlace& place, const at::Device& device,
                        double* targets = nullptr) {
  std::vector<int64_t> rows;
  const int len = job.setup.seq_len + 1;
  const int share = job.train.global_batch / place.replicas;
  data.batch(step, static_cast<int64_t>(place.replica) * share, share, len, rows);
  if (targets) {
    *targets = 0;
    if (data.rows() != RowMode::Windows) {
      std::vector<int64_t> others;
      for (int q = 0; q < place.replicas; ++q) {
        if (q != place.replica)
          data.batch(step, static_cast<int64_t>(q) * share, share, len, others);
        const std::vector<int64_t>& of = q == place.replica ? rows : others;
        for (int r = 0; r < share; ++r)
          *targets += static_cast<double>(predicted_targets(of.data() + r * len, len));
      }
    }
  }
  return at::from_blob(rows.data(), {share, len}, at::kLong).clone().to(device);
}

void zero_grads(ParamStore& store) {
  for (NamedParam& p : store.params()) p.tensor.mutable_grad() = at::Tensor();
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

// Keeps what the step measured for the summary and the trace: the first step of the run and the
// last kAnalysedSteps.
// `own_ns`: the rank's own work between replays (StepTiming::own_ns), `step_ns` the whole step.
void keep_timing(const Job& job, int step, StepReport& rep, Clock::time_point replayed,
                 int64_t own_ns, int64_t step_ns, RankReport& report) {
  constexpr int kAnalysedSteps = 20;
  report.peak_inflight = std::max(report.peak_inflight, rep.peak_inflight);
  // The first step's forwards also leave what the run allocates once and keeps (not held until a
  // backward): the peak is over the steps after the first, as the timings (or the only step).
  if (step != job.start_step || job.last_step() == job.start_step + 1)
    report.peak_activation_bytes =
        std::max(report.peak_activation_bytes, rep.peak_activation_bytes);
  report.offloaded_bytes = std::max(report.offloaded_bytes, rep.offloaded_bytes);
  if (step != job.start_step && step < job.last_step() - kAnalysedSteps) return;
  StepTiming& t = report.steps.emplace_back(std::move(rep));
  t.step = step;
  t.optimizer_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - replayed).count();
  t.own_ns = own_ns;
  t.step_ns = step_ns;
}

bool save_due(const Job& job, int done) {
  return !job.save_dir.empty() &&
         (done == job.last_step() || (job.save_every > 0 && done % job.save_every == 0));
}

// The training of a rank of the pipeline or of the reference, which differ in `place` and `grads`:
// AdamW over `model`'s parameters (from the checkpoint, with --resume), then the steps from the
// checkpoint's (or the first) to the last. `save`: where the process sits for checkpoints;
// `saves_group`: every rank, for asynchronous saves (null: alone or synchronous); `where`: told
// what the rank does (null: the reference).
RankReport train(const Job& job, const TrainerPlace& place, LocalModel& model, StepGradients& grads,
                 const TokenSource& data, const std::optional<TokenSource>& eval_data,
                 SaveContext save, StepLog& log, std::shared_ptr<Transport> saves_group = nullptr,
                 Where* where = nullptr) {
  auto at = [&](const char* what, bool watched) {
    if (where) where->outside(what, watched);
  };
  auto opt = make_optimizer(model.store, job.train);
  // Clipping and AdamW through fused multi-tensor operations (GPUs; PPRUN_KERNELS).
  std::optional<FusedAdamW> fused;
  if (fused_optimizer(kernel_choice_from_env(), model.device.is_cpu())) fused.emplace(*opt);
  RankReport report;
  resume(job, model.store, *opt, report);
  if (job.eval.only) {  // the model as it starts, evaluated; no step, nothing saved
    log.start();
    at("the evaluation", false);
    log.evaluated(static_cast<int>(job.start_step),
                  evaluate(job, place, grads, *eval_data, model.device));
    return report;
  }
  save.job = &job;
  save.store = &model.store;
  save.opt = opt.get();
  save.data = &data;
  save.device = model.device;
  CheckpointSaver saver(save, job.save_async, std::move(saves_group));
  StepTimeout timeouts(job.timeout, job.step_timeout);
  log.start();
  for (int step = static_cast<int>(job.start_step); step < job.last_step(); ++step) {
    // The allocator's peak covers the steps after the first (the timed ones), or the only one.
    if (step <= job.start_step + 1) reset_allocator_peak(model.device);
    const auto t0 = Clock::now();
    const std::chrono::milliseconds timeout = timeouts.current();
    grads.set_timeout(timeout);
    if (where) where->start_step(step, timeout);
    const bool writing = saver.writing();  // a checkpoint is written beside this step
    zero_grads(model.store);
    data.check_unchanged();  // a data file replaced or modified mid-run stops the job
    double targets = 0;
    at::Tensor tokens = batch_tensor(data, job, step, place, model.device, &targets);
    const auto prepared = Clock::now();
    StepReport rep = grads.run(tokens, step, report, targets);
    const auto replayed = Clock::now();
    int64_t norm_ns = 0;  // the rank's own part of gather_stats, before its all-reduce
    std::optional<FusedUpdate> update;
    if (fused) update = FusedUpdate{&*fused, learning_rate(job.train, step), job.train.clip};
    // Fused: the clipping and AdamW are queued inside gather_stats, after its all-reduce.
    at(fused ? "the all-reduce of the step's statistics and the optimizer"
             : "the all-reduce of the step's statistics",
       true);
    StepStats stats =
        gather_stats(model.store, rep, job, place, model.device, timeout, norm_ns, update);
    stats.targets = targets;
    stats.microbatch_order = rep.microbatch_order;
    const auto reduced = Clock::now();
    if (!fused) {
      at("the optimizer", true);
      clip_gradients(model.store, job.train, stats.grad_norm);
      optimizer_step(*opt, job.train, step);
    }
    const auto stepped = Clock::now();
    timeouts.step_done(stepped - t0);
    const double step_s = seconds_since(t0);
    // The rank's own work between replays: everything outside the replay and the all-reduce's
    // wait for the other ranks.
    auto ns = [](Clock::duration d) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    };
    const int64_t own_ns = ns(prepared - t0) + norm_ns + ns(stepped - reduced);
    keep_timing(job, step, rep, replayed, own_ns, ns(stepped - t0), report);
    std::optional<EvalStats> eval;
    if (job.eval.due(step + 1, job.last_step())) {
      at("the evaluation", false);
      eval = evaluate(job, place, grads, *eval_data, model.device);
      timeouts.generous_next();
    }
    at("logging", false);
    log.step(step, stats, step_s, eval);
    saver.check();  // a background save that failed stops the rank
    if (step > job.start_step && job.save_async) {
      const bool beside = writing || saver.writing();
      (beside ? report.write_steps : report.other_steps) += 1;
      (beside ? report.write_steps_s : report.other_steps_s) += step_s;
    }
    if (save_due(job, step + 1)) {
      at("saving the checkpoint", false);
      const SaveResult saved = saver.save(step + 1);
      timeouts.generous_next();
      report.save_seconds.push_back(saved.seconds);
      report.save_wait_seconds.push_back(saved.waited);
      report.save_bytes.push_back(saved.bytes);
      log.sync();  // the metrics of the steps the checkpoint holds outlive the machine too
    }
  }
  saver.finish();
  report.save_write_seconds = saver.write_seconds();
  report.allocator_peak_bytes = allocator_peak_bytes(model.device);
  return report;
}

// Every rank's address towards the store (failure.h: RankHosts), in one all-reduce: each rank
// puts its IPv4 address, as a number plus one, in its own slot.
RankHosts gather_hosts(RankHosts hosts, int rank, Transport* world, const Job& job,
                       const at::Device& device) {
  if (!world || world->size() < 2) return hosts;
  const auto n = static_cast<size_t>(world->size());
  const std::string mine = hosts.hosts.size() > static_cast<size_t>(rank)
                               ? hosts.hosts[static_cast<size_t>(rank)]
                               : std::string();
  std::vector<double> v(n, 0.0);
  v[static_cast<size_t>(rank)] = static_cast<double>(ipv4_number(mine));
  at::Tensor all = at::tensor(v, at::kDouble).to(device);
  world->allreduce_sum(all, job.timeout);
  const at::Tensor cpu = all.cpu();
  hosts.hosts.assign(n, "");
  for (size_t q = 0; q < n; ++q)
    hosts.hosts[q] = ipv4_text(static_cast<uint64_t>(cpu.data_ptr<double>()[q]));
  return hosts;
}

// --- after the last step ----------------------------------------------------------------------

// The plan as a checkpoint records it (ppcompile's JSON).
std::string plan_json(const ppc::Plan& plan, bool verify) {
  std::ostringstream os;
  ppc::emit_json(plan, verify ? ppc::verify(plan) : ppc::VerifyReport{}, os);
  return os.str();
}

// --eval-data, opened (and checked again) by every rank.
std::optional<TokenSource> open_eval(const Job& job) {
  if (!job.eval.enabled()) return std::nullopt;
  return open_eval_data(job);
}

void dump_params(const Job& job, int rank, const ParamStore& store) {
  if (job.out.dump_dir.empty()) return;  // (make_job created the directory)
  ppc::AtomicFile f(fmt::format("{}/params.rank{}.jsonl", job.out.dump_dir, rank), "--dump-params");
  for (const NamedParam& p : store.params()) {
    const at::Tensor t = p.tensor.detach().to(at::kCPU).contiguous();
    f.write(param_dump_line(p.name, t.sizes().vec(), t.data_ptr<float>(),
                            static_cast<size_t>(t.numel())));
  }
  f.commit();
}

void train_rank_impl(const Job& job, int rank, int local_rank, const RankGroups& given,
                     Store& store, FailureWatch& watch, const RankHosts& where) {
  RankGroups groups = given;
  const ppc::Plan& plan = job.plan;
  const Topology topo = job.topology();
  const int prank = topo.pipeline_rank(rank), replica = topo.replica(rank);
  const bool reporter = rank == topo.global(loss_rank(plan), 0);
  const TokenSource data = open_training_data(job);
  const std::optional<TokenSource> eval_data = open_eval(job);
  if (reporter)
    print_lines(run_header(job, data, groups.world ? groups.world->name() : "no transport", false));
  LocalModel model(job, device_for(job, local_rank));
  // --ep: the layers' communicators (pprt::ExpertGroup), timed (timed_transport.h).
  std::optional<TimedExperts> timed;
  if (groups.experts_forward) {
    timed.emplace(groups.experts_forward, groups.experts_backward);
    groups.all_to_all_log = &timed->log();
    model.rank.ctx.experts =
        ExpertGroup{timed->forward(), timed->backward(), groups.experts_forward->rank(),
                    groups.experts_forward->size(), job.timeout};
  }
  // Where this rank is in its plan, for the lines a failure prints (where.h).
  std::vector<int> names;
  for (int p = 0; p < plan.pp(); ++p) names.push_back(topo.global(p, replica));
  const auto place_in_plan = std::make_shared<Where>(plan, prank, names, model.device.is_cuda());
  watch.set_where([place_in_plan] { return place_in_plan->describe(); },
                  [place_in_plan] { return place_in_plan->overdue(std::chrono::seconds(5)); });
  place_in_plan->outside("gathering the ranks' addresses", false);
  watch.set_hosts(gather_hosts(where, rank, groups.world, job, model.device));
  check_same_start(store, rank, job);
  std::shared_ptr<Transport> saves_group;  // asynchronous saves agree over a group of their own
  if (job.save_async && groups.world && groups.world->size() > 1) {
    std::vector<int> all(static_cast<size_t>(groups.world->size()));
    std::iota(all.begin(), all.end(), 0);
    saves_group = groups.world->new_group(all, "checkpoints");
  }
  for (int s : plan.placement.rank_stages[static_cast<size_t>(prank)])
    model.rank.add(plan.layout, plan.layout_stage(s));
  PipelineGradients grads(job, rank, groups, model, store, *place_in_plan);
  if (job.replan_costs) grads.replan_lengths(data, replica);
  StepLog log(job, reporter);
  const TrainerPlace place{
      replica,         job.dp, groups.world, rank, replica == 0, &grads.counted_elsewhere(),
      replica < job.ep};
  RankReport report =
      train(job, place, model, grads, data, eval_data,
            SaveContext{
                .world = groups.world,
                .rank = rank,
                .writes = replica<job.ep, .shard = prank * job.ep + replica % job.ep,
                                  .shards = plan.pp() * job.ep, .experts_only = replica> 0,
                .not_owned = &grads.counted_elsewhere(),
                .plan_json = rank == 0 && !job.save_dir.empty() ? plan_json(plan, true) : "",
            },
            log, std::move(saves_group), place_in_plan.get());
  place_in_plan->outside("the end of the run (reports, the final barrier)", false);
  report.rank = prank;
  dump_params(job, rank, model.store);
  publish_report(store, rank, report);
  if (!job.out.profile_path.empty()) {
    publish_profile(store, rank, grads.profile(model));
    publish_length_profiles(store, rank, grads.recorded());
  }
  if (reporter && job.eval.only) {
    log.finish();  // no step to report on
  } else if (reporter) {
    const std::vector<RankReport> all = gather_reports(store, topo);
    log.finish();
    const std::string transport = groups.world ? groups.world->name() : "";
    TimingSummary summary =
        summarise(plan, all, job.dp, ppc::message_model_of_transport(transport));
    summary.balance = log.balance();
    print_lines(summary_text(summary));
    print_lines(all_to_all_text(summarise_all_to_all(all)));  // --ep (all_to_all_stats.h)
    if (const ReplanTimes* t = grads.replan_times()) {
      std::vector<double> step_s;
      for (const StepTiming& s : report.steps)
        step_s.push_back(static_cast<double>(s.step_ns) / 1e9);
      print_lines(replan_summary(*t, step_s));
    }
    if (!job.out.trace_path.empty())
      ppc::write_file_atomically(job.out.trace_path, chrome_trace(plan, all), "--trace");
    const int64_t rows = job.train.global_batch / job.dp / plan.microbatches;
    if (!job.out.profile_path.empty()) {
      LengthProfiles by_length = gather_length_profiles(store, topo);  // (--varlen)
      by_length.boundary_length = grads.boundary_length();
      ppc::write_file_atomically(
          job.out.profile_path,
          profile_json(plan, rows, grads.boundary_elements(), gather_profiles(store, topo), all,
                       job.train.dtype == Precision::Bf16 ? 2 : 4, transport, job.setup.seq_len,
                       by_length),
          "--profile");
    }
  }
  watch.stop();  // after the barrier the store's host may be gone
  if (groups.world && groups.world->size() > 1) groups.world->barrier(job.timeout);
}

}  // namespace

void train_rank(const Job& job, int rank, int local_rank, const RankGroups& groups, Store& store,
                bool hosts_store, const RankHosts& where) {
  const std::chrono::milliseconds grace = std::min(job.timeout, std::chrono::milliseconds(3000));
  const int world = job.topology().world();
  FailureWatch watch(&store, rank, world, grace, hosts_store);
  watch.set_hosts(where);  // the store's address (the ranks' are gathered first thing)
  auto lost = [&](const std::string& what) {
    watch.main_failing();
    const std::string cause =
        diagnose_lost_rank(&store, rank, world, what, grace, watch.hosts().get());
    return RunFailure(fmt::format("rank {}: {}; it stopped at {}", rank, cause, what));
  };
  try {
    train_rank_impl(job, rank, local_rank, groups, store, watch, where);
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
  const TokenSource data = open_training_data(job);
  const std::optional<TokenSource> eval_data = open_eval(job);
  print_lines(run_header(job, data, "no transport", true));
  LocalModel model(job, device_for(job, 0));
  model.rank.add(job.plan.layout, -1);
  AccumulatedGradients grads(job, *model.stages.front());
  StepLog log(job, true);
  const RankReport report =
      train(job, TrainerPlace{}, model, grads, data, eval_data,
            SaveContext{.plan_json = job.save_dir.empty() ? "" : plan_json(job.plan, false)}, log);
  dump_params(job, 0, model.store);
  log.finish();
  TimingSummary summary;
  summarise_saves({report}, summary);
  print_lines(saves_text(summary));
}

}  // namespace pprt
