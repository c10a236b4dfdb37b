// A step's gradients, the two ways (gradients.h).
#include "runtime/train/gradients.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include "runtime/launch/process_setup.h"
#include "runtime/model/aux_loss.h"
#include "runtime/model/model_facts.h"
#include "runtime/model/precision.h"
#include "runtime/train/messages.h"
#include "runtime/train/peers.h"
#include "runtime/train/plan_order.h"
#include "runtime/train/timed_transport.h"

namespace pprt {

namespace {

// The context of the model the job trains (pprun's own, or a program's: pprt::main).
ModelContext model_context(const Job& job, const Model& model, const at::Device& device) {
  ModelContext ctx;
  ctx.model = &model;
  ctx.setup = job.setup;
  ctx.aux_loss_weight = job.train.mtp_loss_weight;
  ctx.seed = job.train.seed;
  ctx.device = device;
  ctx.dtype = compute_dtype(job.train.dtype);
  ctx.memory = job.memory;
  ctx.offload_host_copy = job.offload_host_copy;
  return ctx;
}

}  // namespace

at::Device device_for(const Job& job, int local_rank) {
  if (job.device != "cuda") return at::Device(at::kCPU);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(
                                   gpu_for_local_rank(local_rank, cuda_device_count())));
}

LocalModel::LocalModel(const Job& job, const at::Device& d)
    : model(job.family.model(job.model)),
      device(d),
      rank(model_context(job, model, d)),
      store(rank.store),
      stages(rank.stages) {}

// --- a rank of the pipeline ----------------------------------------------------------------

PipelineGradients::PipelineGradients(const Job& job, int rank, const RankGroups& groups,
                                     LocalModel& model, Store& store, Where& where)
    : job_(job),
      where_(where),
      prank_(job.topology().pipeline_rank(rank)),
      all_to_all_log_(groups.all_to_all_log) {
  const ppc::Plan& plan = job.plan;
  const int prank = prank_;
  if (groups.pipeline) {  // the parameters other pipeline ranks hold too: from their names
    std::vector<std::string> mine;
    for (const NamedParam& p : model.store.params()) mine.push_back(p.name);
    shared_ =
        SharedGradSum(gather_param_names(store, prank, job.topology().replica(rank), plan.pp(),
                                         mine, job.topology().replica(rank) % job.ep),
                      prank, model.store, *groups.pipeline);
  }
  ExecutorOptions eo;
  eo.timeout = job.timeout;
  if (rank == job.kill_rank &&
      (job.kill_at == Job::KillAt::Step || job.kill_at == Job::KillAt::Hang)) {
    eo.kill_step = job.kill_step;
    eo.kill_action = plan.order()[static_cast<size_t>(prank)].size() / 2;
    eo.hang = job.kill_at == Job::KillAt::Hang;
  }
  eo.where = &where;
  eo.granule = job.train.granule;
  eo.overlap = job.train.overlap;
  if (rank == job.slow_rank) eo.slow_factor = job.slow_factor;
  if (groups.replicas) {
    reducer_ = std::make_unique<GradReducer>(plan, prank, model.stages, model.store,
                                             *groups.replicas, job.timeout);
    eo.after_compute = [r = reducer_.get()](size_t i) { r->action_done(i); };
  }
  if (job.ep > 1) expert_ = ExpertGradReduce(model.store, groups.expert_replicas, job.dp);
  step_sums_ = StepSums(plan, model.stages, groups.replicas, groups.pipeline, model.device);
  if (!job.out.profile_path.empty())
    eo.on_part = [this](const PartSample& s) { profile_.add(step_, s); };
  exec_ = std::make_unique<Executor>(plan, prank, model.stages, model.rank.ctx, groups.pipeline,
                                     model.device, eo);
  if (groups.pipeline) {  // every connection made before the first step (peers.h)
    where.outside("connecting to the ranks its plan exchanges tensors with", false);
    connect_peers(*groups.pipeline, plan, prank, model.device, job.timeout);
  }
}

StepReport PipelineGradients::run(const at::Tensor& tokens, int step, RankReport& report,
                                  double targets) {
  step_ = step;
  // Plan microbatch k runs data microbatch order[k] (plan_order.h).
  std::vector<int> order = planner_ ? planner_->order(step) : job_.plan.microbatch_order;
  // Each microbatch weighs against the step's targets per replica: after data parallelism's
  // average over the replicas, the mean over the step's targets (messages.h: target_weights).
  StepReport rep = exec_->run_step(rows_in_plan_order(tokens, order), step, targets / job_.dp);
  if (all_to_all_log_) all_to_all_log_->take(rep.begin_ns, rep.all_to_all);
  report_in_data_order(rep, order);
  rep.microbatch_order = std::move(order);
  if (reducer_) {
    where_.outside("data parallelism's all-reduce of the gradients", true);
    const ReduceStats r = reducer_->finish();
    // The run's first step warms up: it counts only in a run of one step.
    if (step > job_.start_step || job_.start_step + 1 == job_.last_step()) report.dp.add(r);
  }
  if (job_.ep > 1) {
    where_.outside("expert parallelism's all-reduce of the experts' gradients", true);
    expert_.finish(timeout_);
  }
  where_.outside("the all-reduce of shared parameters' gradients", true);
  shared_.sum(timeout_);
  if (!step_sums_.empty()) {
    where_.outside("the all-reduce of the layers' step sums (a MoE layer's expert loads)", true);
    step_sums_.sum(timeout_);
  }
  return rep;
}

void PipelineGradients::replan_lengths(const TokenSource& data, int replica) {
  planner_ = std::make_unique<LengthPlanner>(job_, data, replica);
}

void PipelineGradients::set_timeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  exec_->set_timeout(timeout);
  if (reducer_) reducer_->set_timeout(timeout);
}

StepReport PipelineGradients::evaluate(const at::Tensor& tokens) {
  return exec_->run_forward(tokens);
}

std::vector<StageMedians> PipelineGradients::profile(LocalModel& model) const {
  std::vector<StageMedians> out = profile_.medians();
  const auto& held = job_.plan.placement.rank_stages[static_cast<size_t>(prank_)];
  for (StageMedians& m : out)
    for (size_t i = 0; i < held.size(); ++i)
      if (held[i] == m.stage)
        for (const std::string& name : model.stages[i]->param_names())
          m.params += model.rank.store.find(name)->tensor.numel();
  return out;
}

std::vector<int64_t> PipelineGradients::boundary_elements() {
  std::vector<int64_t> out;
  const std::vector<BoundarySpec>& bounds = exec_->boundaries();
  for (size_t k = 1; k + 1 < bounds.size(); ++k)  // leaving layout stage k - 1
    out.push_back(bounds[k].numel());
  return out;
}

// --- the reference ---------------------------------------------------------------------------

AccumulatedGradients::AccumulatedGradients(const Job& job, Stage& model)
    : job_(job), model_(model), reported_(job.facts.reported(layout_info(job.plan.layout))) {}

StepReport AccumulatedGradients::run(const at::Tensor& tokens, int, RankReport&, double) {
  const int mbs = job_.plan.microbatches;
  const int b = job_.train.global_batch / mbs;
  StepReport rep;  // the losses, as a rank holding every L reports them
  rep.has_losses = true;
  rep.reported = no_reports(reported_.size(), mbs);
  // Rows of documents: each microbatch weighs as its share of the step's targets (messages.h).
  const std::vector<double> weights = target_weights(tokens, mbs);
  for (int mb = 0; mb < mbs; ++mb) {
    const at::Tensor rows = tokens.narrow(0, static_cast<int64_t>(mb) * b, b);
    LossReport parts;
    WeightWork work;  // not deferring: a B
    const at::Tensor loss =
        model_.forward(at::Tensor(), rows, mb, model_.splits_backward() ? &work : nullptr, &parts);
    const double w = weights.empty() ? 1.0 : weights[static_cast<size_t>(mb)];
    rep.losses.push_back(parts.main.item<double>() * w);
    add_reported(parts, mb, reported_, rep.reported);
    torch::autograd::backward({loss * (w / mbs)});
  }
  return rep;
}

StepReport AccumulatedGradients::evaluate(const at::Tensor& tokens) {
  c10::NoGradGuard no_grad;
  const int mbs = job_.plan.microbatches;
  const int b = static_cast<int>(tokens.size(0)) / mbs;
  StepReport rep;
  rep.has_losses = true;
  rep.reported = no_reports(reported_.size(), mbs);
  for (int mb = 0; mb < mbs; ++mb) {
    LossReport parts;
    model_.forward(at::Tensor(), tokens.narrow(0, static_cast<int64_t>(mb) * b, b), mb, nullptr,
                   &parts);
    rep.losses.push_back(parts.main.item<double>());
    add_reported(parts, mb, reported_, rep.reported);
  }
  return rep;
}

}  // namespace pprt
