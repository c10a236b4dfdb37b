// A step's gradients, the two ways the trainer makes them (trainer.h: its step loop is the same
// for both), and the process's model they work on. Included only by LibTorch translation units.
//  - A rank of the pipeline (PipelineGradients): the executor replays the rank's actions
//    (executor.h), then data parallelism averages the gradients over the replicas
//    (grad_reducer.h) and the copies of shared parameters are summed.
//  - The reference (AccumulatedGradients): the whole model in one process, the microbatches'
//    gradients accumulated.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime/job.h"
#include "runtime/model/stage.h"
#include "runtime/output/profile.h"
#include "runtime/output/report.h"
#include "runtime/train/executor.h"
#include "runtime/train/expert_grads.h"
#include "runtime/train/grad_reducer.h"
#include "runtime/train/replan.h"
#include "runtime/train/step_sums.h"
#include "runtime/train/trainer.h"
#include "runtime/train/where.h"

namespace pprt {

// The device a rank runs on: the CPU, or with --device cuda its local rank's GPU.
at::Device device_for(const Job& job, int local_rank);

// A process's parameters and the stages that use them (a rank's stages, or the whole model), of
// the model the job's family makes of its configuration.
struct LocalModel {
  Model model;
  at::Device device;
  RankModel rank;
  ParamStore& store;
  std::vector<Stage*>& stages;
  LocalModel(const Job& job, const at::Device& d);
};

class StepGradients {
 public:
  virtual ~StepGradients() = default;
  // Leaves the gradients of the step's mean loss in the parameters' .grad (the same in every copy
  // of a shared parameter, the mean over data-parallel replicas) and returns what the step
  // measured, its microbatches' losses among it. `targets`: with rows of documents, the step's
  // predicted targets over every data-parallel replica (0: rows without documents), which each
  // microbatch's loss is weighed against: the step's loss is the mean over the step's targets,
  // however unequally the replicas' rows predict.
  virtual StepReport run(const at::Tensor& tokens, int step, RankReport& report,
                         double targets) = 0;
  // Evaluation: the same microbatches forward only (no gradient, no optimizer state, no data
  // position touched); returns their losses as run() does.
  virtual StepReport evaluate(const at::Tensor& tokens) = 0;
  // The limit of the next step's waits for peers (step_timeout.h).
  virtual void set_timeout(std::chrono::milliseconds) {}
};

class PipelineGradients final : public StepGradients {
 public:
  // Global rank `rank` over `groups`; `store`: the rendezvous store (the shared parameters' names);
  // `where`: told what the rank does (where.h). Connects to the plan's peers before it returns
  // (peers.h).
  PipelineGradients(const Job& job, int rank, const RankGroups& groups, LocalModel& model,
                    Store& store, Where& where);

  StepReport run(const at::Tensor& tokens, int step, RankReport& report, double targets) override;
  StepReport evaluate(const at::Tensor& tokens) override;
  void set_timeout(std::chrono::milliseconds timeout) override;

  // The shared parameters whose gradient another rank counts in the norm.
  const std::unordered_set<std::string>& counted_elsewhere() const {
    return shared_.counted_elsewhere();
  }
  // --replan-lengths: each step's microbatch order planned for replica `replica`'s rows of `data`
  // (replan.h) instead of the plan's.
  void replan_lengths(const TokenSource& data, int replica);
  const ReplanTimes* replan_times() const { return planner_ ? &planner_->times() : nullptr; }

  // --profile: the rank's per-stage medians, each with its stage's parameter elements.
  std::vector<StageMedians> profile(LocalModel& model) const;
  // --profile: the elements of the message crossing each boundary for the last step's
  // microbatches.
  std::vector<int64_t> boundary_elements();
  // --profile: its parts per microbatch length (medians per length), and the length of the
  // microbatch boundary_elements() holds for.
  const ProfileRecorder& recorded() const { return profile_; }
  int64_t boundary_length() const { return exec_->boundaries_length(); }

 private:
  const Job& job_;
  Where& where_;
  std::chrono::milliseconds timeout_ = job_.timeout;
  int prank_;  // the pipeline rank
  SharedGradSum shared_;
  std::unique_ptr<GradReducer> reducer_;
  ExpertGradReduce expert_;  // --ep
  StepSums step_sums_;       // the layers' (Layer::step_sums)
  std::unique_ptr<Executor> exec_;
  ProfileRecorder profile_;                 // --profile
  std::unique_ptr<LengthPlanner> planner_;  // --replan-lengths
  int64_t step_ = 0;
  AllToAllLog* all_to_all_log_;  // --ep: the step's all-to-alls (timed_transport.h)
};

class AccumulatedGradients final : public StepGradients {
 public:
  AccumulatedGradients(const Job& job, Stage& model);
  // (The whole batch: its own targets are the step's.)
  StepReport run(const at::Tensor& tokens, int step, RankReport& report, double) override;
  StepReport evaluate(const at::Tensor& tokens) override;

 private:
  const Job& job_;
  Stage& model_;
  std::vector<Reported> reported_;  // the values the model reports (Model::reported)
};

}  // namespace pprt
