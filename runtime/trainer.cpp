#include "runtime/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adamw.h>
#include <torch/version.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include "compiler/diagnostic.h"
#include "runtime/data.h"
#include "runtime/executor.h"
#include "runtime/failure.h"
#include "runtime/model.h"
#include "runtime/output.h"
#include "runtime/param_dump.h"
#include "runtime/report.h"

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

at::Tensor batch_tensor(const TokenSource& data, const Job& job, int step,
                        const at::Device& device) {
  std::vector<int64_t> rows;
  const int len = job.model.seq_len + 1;
  data.batch(step, job.train.global_batch, len, rows);
  return at::from_blob(rows.data(), {job.train.global_batch, len}, at::kLong).clone().to(device);
}

int total_decoders(const ppc::Layout& layout) {
  return layout.count(ppc::LayerKind::Decoder);
}

std::unique_ptr<torch::optim::AdamW> make_optimizer(const std::vector<Stage*>& stages,
                                                    const TrainOptions& o) {
  std::vector<at::Tensor> decay, no_decay;
  for (Stage* s : stages)
    for (NamedParam& p : s->params()) (p.decay ? decay : no_decay).push_back(p.tensor);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(decay, options(o.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, options(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(o.lr));
}

void zero_grads(const std::vector<Stage*>& stages) {
  for (Stage* s : stages)
    for (NamedParam& p : s->params()) p.tensor.mutable_grad() = at::Tensor();
}

// Clips by the global norm over every rank's parameters (like torch.nn.utils.clip_grad_norm_);
// returns the norm before clipping.
double clip_gradients(const std::vector<Stage*>& stages, const TrainOptions& o,
                      Transport* transport, std::chrono::milliseconds timeout,
                      const at::Device& device) {
  at::Tensor sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  for (Stage* s : stages)
    for (NamedParam& p : s->params())
      if (p.tensor.grad().defined()) sq += p.tensor.grad().to(at::kDouble).pow(2).sum();
  if (transport && transport->size() > 1) transport->allreduce_sum(sq, timeout);
  const double norm = std::sqrt(sq.item<double>());
  if (o.clip > 0) {
    const double coef = o.clip / (norm + 1e-6);
    if (coef < 1)
      for (Stage* s : stages)
        for (NamedParam& p : s->params())
          if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(coef);
  }
  return norm;
}

void optimizer_step(torch::optim::AdamW& opt, const TrainOptions& o, int step) {
  const double lr = learning_rate(o, step);
  for (auto& group : opt.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  opt.step();
}

void dump_params(const Job& job, int rank, const std::vector<Stage*>& stages) {
  if (job.out.dump_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(job.out.dump_dir, ec);
  if (ec)
    throw ppc::UserError(
        fmt::format("cannot create directory '{}': {}", job.out.dump_dir, ec.message()),
        ppc::SourceLocation{"--dump-params", 0, 0, ""});
  AtomicFile f(fmt::format("{}/params.rank{}.jsonl", job.out.dump_dir, rank), "--dump-params");
  for (Stage* s : stages)
    for (const NamedParam& p : s->params()) {
      const at::Tensor t = p.tensor.detach().to(at::kCPU).contiguous();
      f.write(param_dump_line(p.name, t.sizes().vec(), t.data_ptr<float>(),
                              static_cast<size_t>(t.numel())));
    }
  f.commit();
}

std::string header(const Job& job, const TokenSource& data, const char* transport, int world) {
  const ppc::Plan& p = job.plan;
  const int b = job.train.global_batch / p.microbatches;
  const std::string what =
      world == 0 ? "reference (unpipelined, 1 process)"
                 : fmt::format("{} on {} ranks (vpp {})", p.schedule, p.pp(), p.vpp());
  return fmt::format(
      "pprun: {}, {} microbatches of {} sequences\n"
      "pprun: model {} = {} layers, {:.2f}M parameters ({}); data: {}; {}, {}, {} thread{} per "
      "rank\n",
      what, p.microbatches, b, p.layout.source, total_decoders(p.layout),
      count_parameters(job.model, p.layout) / 1e6, describe(job.model), data.describe(), transport,
      job.device, job.threads, job.threads == 1 ? "" : "s");
}

// The loss rank's per-step output: metrics file and progress.
class StepLog {
 public:
  StepLog(const Job& job, bool active, FailureWatch* watch)
      : job_(job),
        active_(active),
        progress_(job.out.progress, job.train.steps, job.out.log_every, stdout) {
    if (active_ && !job.out.metrics_path.empty()) {
      metrics_.emplace(job.out.metrics_path, "--metrics");
      if (watch) watch->remove_on_stop(metrics_->temp_path());
    }
    start_ = Clock::now();
  }

  void step(int step, const std::vector<double>& losses, double grad_norm, double step_time_s) {
    if (!active_) return;
    StepMetrics m;
    m.step = step + 1;
    double sum = 0;
    for (double l : losses) sum += l;
    m.loss = losses.empty() ? 0 : sum / static_cast<double>(losses.size());
    m.lr = learning_rate(job_.train, step);
    m.grad_norm = grad_norm;
    m.step_time_s = step_time_s;
    m.tokens_per_s = step_time_s > 0 ? job_.train.global_batch *
                                           static_cast<double>(job_.model.seq_len) / step_time_s
                                     : 0;
    m.elapsed_s = seconds_since(start_);
    if (m.step == 1) first_loss_ = m.loss;
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
    std::printf("pprun: done: %d step%s in %.2f s, loss %.4f -> %.4f\n", job_.train.steps,
                job_.train.steps == 1 ? "" : "s", seconds_since(start_), first_loss_, last_loss_);
    std::fflush(stdout);
  }

 private:
  const Job& job_;
  bool active_;
  Progress progress_;
  std::optional<AtomicFile> metrics_;
  Clock::time_point start_;
  double first_loss_ = 0, last_loss_ = 0;
};

struct LocalModel {
  std::vector<std::unique_ptr<Stage>> owned;
  std::vector<Stage*> stages;
};

LocalModel build_stages(const Job& job, const std::vector<std::vector<LayerSpec>>& stage_specs,
                        const at::Device& device) {
  LocalModel m;
  const int decoders = total_decoders(job.plan.layout);
  for (const auto& specs : stage_specs) {
    m.owned.push_back(std::make_unique<Stage>(job.model, specs, job.train.seed, decoders, device));
    m.stages.push_back(m.owned.back().get());
  }
  return m;
}

void train_rank_impl(const Job& job, int rank, int local_rank, Transport* transport, Store& store,
                     FailureWatch& watch) {
  const ppc::Plan& plan = job.plan;
  const at::Device device = device_for(job, local_rank);
  const bool reporter = rank == loss_rank(plan);
  const TokenSource data = make_data(job);
  if (reporter) {
    std::fputs(header(job, data, transport ? transport->name() : "no transport", plan.pp()).c_str(),
               stdout);
    std::fflush(stdout);
  }
  const auto numbered = number_layers(plan.layout);
  std::vector<std::vector<LayerSpec>> mine;
  for (int s : plan.placement.rank_stages[static_cast<size_t>(rank)])
    mine.push_back(numbered[static_cast<size_t>(plan.layout_stage(s))]);
  LocalModel model = build_stages(job, mine, device);
  auto opt = make_optimizer(model.stages, job.train);
  ExecutorOptions eo;
  eo.timeout = job.timeout;
  if (rank == job.kill_rank) {
    eo.kill_step = job.kill_step;
    eo.kill_action = plan.order()[static_cast<size_t>(rank)].size() / 2;
  }
  Executor exec(plan, rank, model.stages, job.model, transport, device, eo);
  StepLog log(job, reporter, &watch);
  RankReport report;
  report.rank = rank;
  const bool trace = !job.out.trace_path.empty();
  constexpr int kAnalysedSteps = 20;
  for (int step = 0; step < job.train.steps; ++step) {
    const auto t0 = Clock::now();
    zero_grads(model.stages);
    const at::Tensor tokens = batch_tensor(data, job, step, device);
    StepReport rep = exec.run_step(tokens, step);
    const auto t1 = Clock::now();
    const double norm = clip_gradients(model.stages, job.train, transport, job.timeout, device);
    optimizer_step(*opt, job.train, step);
    const double step_s = seconds_since(t0);
    report.peak_inflight = std::max(report.peak_inflight, rep.peak_inflight);
    if (step == 0 || step >= job.train.steps - kAnalysedSteps) {
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
    log.step(step, rep.losses, norm, step_s);
  }
  dump_params(job, rank, model.stages);
  store.set(fmt::format("report/{}", rank), to_json(report));
  if (reporter) {
    std::vector<RankReport> all;
    for (int r = 0; r < plan.pp(); ++r)
      all.push_back(rank_report_from_json(store.get(fmt::format("report/{}", r))));
    log.finish();
    const TimingSummary summary = analyse(plan, all);
    std::istringstream lines(summary_text(summary));
    for (std::string line; std::getline(lines, line);) std::printf("pprun: %s\n", line.c_str());
    if (trace) write_file_atomically(job.out.trace_path, chrome_trace(plan, all), "--trace");
    std::fflush(stdout);
  }
  watch.stop();  // after the barrier the store's host may be gone
  if (transport && transport->size() > 1) transport->barrier(job.timeout);
}

}  // namespace

void check_device(const std::string& device) {
  if (device == "cpu") return;
  if (device != "cuda")
    throw ppc::UserError(fmt::format("unknown device '{}' (expected cpu or cuda)", device),
                         ppc::SourceLocation{"--device", 0, 0, ""});
  if (!at::hasCUDA())
    throw ppc::UserError(
        fmt::format(
            "cuda: this LibTorch ({}) was built without CUDA; use a CUDA build of LibTorch, "
            "or --device cpu",
            TORCH_VERSION),
        ppc::SourceLocation{"--device", 0, 0, ""});
  if (!nccl_available())
    throw ppc::UserError(
        "cuda: this pprun was built without the NCCL transport (CMake found no CUDA toolkit or "
        "NCCL)",
        ppc::SourceLocation{"--device", 0, 0, ""});
  if (at::detail::getCUDAHooks().getNumGPUs() < 1)
    throw ppc::UserError("cuda: no CUDA device is visible",
                         ppc::SourceLocation{"--device", 0, 0, ""});
}

void set_threads(int threads) {
  at::set_num_threads(std::max(1, threads));
  try {
    at::set_num_interop_threads(1);
  } catch (const std::exception&) {  // already set (several ranks in one process)
  }
}

void train_rank(const Job& job, int rank, int local_rank, Transport* transport, Store& store,
                bool hosts_store) {
  const std::chrono::milliseconds grace = std::min(job.timeout, std::chrono::milliseconds(3000));
  FailureWatch watch(&store, rank, job.plan.pp(), grace, hosts_store);
  auto lost = [&](const std::string& what) {
    watch.main_failing();
    const std::string cause = diagnose_lost_rank(&store, rank, job.plan.pp(), what, grace);
    return RunFailure(fmt::format("rank {}: {}; it stopped at {}", rank, cause, what));
  };
  try {
    train_rank_impl(job, rank, local_rank, transport, store, watch);
  } catch (const CommFailure& e) {
    throw lost(e.what());
  } catch (const TransportError& e) {
    throw lost(e.what());
  } catch (const ppc::UserError& e) {
    watch.main_failing();
    report_failure(&store, rank, e.message());
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
  std::vector<LayerSpec> all;
  for (const auto& stage : number_layers(job.plan.layout))
    all.insert(all.end(), stage.begin(), stage.end());
  LocalModel model = build_stages(job, {all}, device);
  Stage& stage = *model.stages.front();
  auto opt = make_optimizer(model.stages, job.train);
  StepLog log(job, true, nullptr);
  const int mbs = job.plan.microbatches;
  const int b = job.train.global_batch / mbs;
  const int T = job.model.seq_len;
  for (int step = 0; step < job.train.steps; ++step) {
    const auto t0 = Clock::now();
    zero_grads(model.stages);
    const at::Tensor tokens = batch_tensor(data, job, step, device);
    std::vector<double> losses;
    for (int mb = 0; mb < mbs; ++mb) {
      const at::Tensor rows = tokens.narrow(0, static_cast<int64_t>(mb) * b, b);
      const at::Tensor loss = stage.forward(rows.narrow(1, 0, T).contiguous(),
                                            rows.narrow(1, 1, T).contiguous(), nullptr);
      losses.push_back(loss.item<double>());
      torch::autograd::backward({loss * (1.0 / mbs)});
    }
    const double norm = clip_gradients(model.stages, job.train, nullptr, job.timeout, device);
    optimizer_step(*opt, job.train, step);
    log.step(step, losses, norm, seconds_since(t0));
  }
  dump_params(job, 0, model.stages);
  log.finish();
}

}  // namespace pprt
