// The gradient reductions after a step's actions: data parallelism's average over the replicas
// (GradReducer) and the sum over the copies of a shared parameter (SharedGradSum).
//
// Data parallelism's gradient average: after a step every replica must hold the same gradients,
// the mean of the replicas'. A rank's gradients are summed with those of the same pipeline rank in
// every other replica (one process group per pipeline rank) and divided by the replica count.
//
// Like DDP's and Megatron's overlapped gradient reduction, the parameters are grouped in buckets
// by the moment their gradients are final in the step: the last backward of the rank's plan that
// adds to them (a B, or the W of a split backward; an I adds nothing, its weight gradients wait
// for their W). Each bucket's all-reduce starts, asynchronously, right after that action, so the
// reductions overlap the rest of the pipeline (its cool-down), and the step waits at its end only
// for what is still running. Buckets hold at most `bucket_bytes` of gradients (parameters of one
// readiness moment share buckets). Every replica starts them in the same order.
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/plan.h"
#include "runtime/model/stage.h"
#include "runtime/output/report.h"
#include "runtime/transport/transport.h"

namespace pprt {

// The gradients of `params` end to end in one flat tensor (zeros for a parameter without one).
at::Tensor flat_grads(const std::vector<at::Tensor*>& params);
// Sets the gradients of `params` from `flat` (as flat_grads laid them out).
void set_grads(const std::vector<at::Tensor*>& params, const at::Tensor& flat);

class GradReducer {
 public:
  // `pipeline_rank`'s parameters in `store`, held by `stages` (its stages, in the order of the
  // plan's placement), reduced over `group` (the replicas of this pipeline rank).
  GradReducer(const ppc::Plan& plan, int pipeline_rank, const std::vector<Stage*>& stages,
              ParamStore& store, Transport& group, std::chrono::milliseconds timeout,
              size_t bucket_bytes = size_t{25} << 20);
  ~GradReducer();

  // The executor's hook after each compute action of the step (its index in the rank's order):
  // starts the buckets that became ready, notes the ones that finished.
  void action_done(size_t index);
  // After the step's actions: starts any bucket not started, waits for all, and replaces each
  // gradient by the replicas' mean. Throws TransportError on a failure.
  ReduceStats finish();

  int buckets() const { return static_cast<int>(buckets_.size()); }
  // The limit of its waits from now on (the constructor's `timeout` at first).
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 private:
  struct Bucket {
    std::vector<at::Tensor*> params;
    size_t ready_at = 0;  // index of the action after which its gradients are final
    int64_t elements = 0;
    at::Tensor flat;
    std::unique_ptr<Work> work;
    int64_t started = 0, finished = 0;  // steady clock, ns
  };
  void start(Bucket& b);
  void poll();

  Transport& group_;
  std::chrono::milliseconds timeout_;
  double scale_;
  std::vector<Bucket> buckets_;  // in the order they start
  size_t next_ = 0;              // the first bucket not started
};

// The parameters several pipeline ranks hold (a parameter of one global name on several ranks:
// the embedding of E, of every m and of a tied head, a model's LayerInfo::shared tensors,
// DualPipe's two copies), from the names each rank holds: groups of (ranks, names), the names of
// a group sorted, groups ordered by their ranks.
struct SharedNames {
  std::vector<int> ranks;
  std::vector<std::string> names;
};
std::vector<SharedNames> shared_names(const std::vector<std::vector<std::string>>& held_by_rank);

// Every pipeline rank's parameter names (`mine`: this rank's), through the rendezvous store: each
// replica 0 publishes its own; every rank reads the pipeline's. Under expert parallelism the
// names depend on the rank's expert shard (replica % ep, `shard`): replica `shard` publishes them.
std::vector<std::vector<std::string>> gather_param_names(Store& store, int pipeline_rank,
                                                         int replica, int pp,
                                                         const std::vector<std::string>& mine,
                                                         int shard = 0);

// The parameters a rank holds with other ranks (shared_names): after each step their gradients
// are summed over a process group per set of ranks holding them, so that the copies stay
// identical.
class SharedGradSum {
 public:
  SharedGradSum() = default;  // nothing shared
  // The groups of `pipeline_rank`'s shared parameters in `store`, made over `pipeline` (every
  // member makes them, in the one global order of the groups); `held_by_rank`: every pipeline
  // rank's parameter names (gather_param_names).
  SharedGradSum(const std::vector<std::vector<std::string>>& held_by_rank, int pipeline_rank,
                ParamStore& store, Transport& pipeline);

  // One flat all-reduce per group (its parameters in name order: the same on every member).
  void sum(std::chrono::milliseconds timeout);

  // The shared parameters whose group's lowest rank is another: that rank counts them in the
  // global gradient norm and writes them to checkpoints.
  const std::unordered_set<std::string>& counted_elsewhere() const { return counted_elsewhere_; }

 private:
  struct Group {
    std::unique_ptr<Transport> transport;
    std::vector<at::Tensor*> params;
  };
  std::vector<Group> groups_;
  std::unordered_set<std::string> counted_elsewhere_;
};

}  // namespace pprt
