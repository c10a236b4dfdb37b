// What crosses stage boundaries (the executor's messages, executor.h): a boundary's tensors packed
// into one message and read back as views of it, the boundaries' specs per microbatch shape, and
// the receive buffers kept across steps. Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "compiler/layout.h"
#include "runtime/model/stage.h"

namespace pprt {

// One message holding `ts` in order, in `dtype`: the tensor itself when it is alone (no copy when
// it is contiguous and of `dtype`: what a boundary of one tensor has always sent), else their
// elements one after another (the bytes of their stack when they share a shape).
at::Tensor pack(const std::vector<at::Tensor>& ts, at::ScalarType dtype);
at::Tensor pack(const Tensors& ts, at::ScalarType dtype);  // (their tensors, in order)
// The tensors of `spec` as views of `message` (one packed for it).
std::vector<at::Tensor> unpack(const at::Tensor& message, const BoundarySpec& spec);

// The boundaries of a layout per microbatch shape (model/stage.h): declared by the model's layers
// (declared_boundaries) or, where a layer declares none, learned from one forward of the whole
// model on the first microbatch of that shape (learned_boundaries); each shape's once.
class BoundarySpecs {
 public:
  BoundarySpecs(const ModelContext& ctx, const ppc::Layout& layout);
  // Entry i enters layout stage i; `rows`: the token rows of a microbatch of that shape.
  const std::vector<BoundarySpec>& of(const MicrobatchShape& shape, const at::Tensor& rows);
  bool declared() const { return declared_; }  // (the last shape's: for messages)

 private:
  const ModelContext& ctx_;
  const ppc::Layout& layout_;
  std::map<MicrobatchShape, std::vector<BoundarySpec>> specs_;
  bool declared_ = true;
};

// A step's microbatch shapes (the model's shape_of of each microbatch's rows) and, where messages
// cross, what crosses each boundary for each microbatch. A model that declares no dimension (its
// shapes hold no sizes) gives every microbatch the first one's shape, which the batch's sizes tell:
// computed once for those sizes, not per microbatch and step (no tensor read, no lookup).
class BatchShapes {
 public:
  // Before a step's first action: `tokens` in `mbs` microbatches of `b` rows each; `specs` null
  // where no message crosses. A model learning its boundaries from one forward runs it here.
  // `granule` (--varlen; 0: off): each microbatch's length is its longest row's, in multiples of
  // it (runtime/data/documents.h), and every microbatch gets its own shape.
  // `targets_share`: what the weights are relative to (target_weights).
  void update(const Model& model, BoundarySpecs* specs, const at::Tensor& tokens, int mbs,
              int64_t b, int granule = 0, double targets_share = 0);
  const MicrobatchShape& shape(int mb) const { return shapes_[static_cast<size_t>(mb)]; }
  const std::vector<BoundarySpec>& bounds(int mb) const {
    return *bounds_[static_cast<size_t>(mb)];
  }
  bool empty() const { return shapes_.empty(); }
  // What microbatch mb's loss weighs in the step, relative to 1 / mbs: its targets' share of the
  // step's, times mbs (1 for rows without documents, whose microbatches predict equally many).
  double weight(int mb) const { return weights_.empty() ? 1.0 : weights_[static_cast<size_t>(mb)]; }

 private:
  std::vector<MicrobatchShape> shapes_;
  std::vector<const std::vector<BoundarySpec>*> bounds_;
  std::vector<int64_t> shaped_for_;  // the batch sizes they hold for (model declares none); or {}
  std::vector<double> weights_;      // empty: every microbatch 1
};

// The weights of BatchShapes::weight for a step's `tokens` in `mbs` microbatches: empty when the
// rows carry no documents (every microbatch predicts as many targets), else each microbatch's
// targets (documents.h) times mbs over `targets_share` (data parallelism: the step's targets over
// every replica divided by the replicas, so that the replicas' average weighs each target alike)
// or, where it is 0, over the targets of `tokens`. Read on the host (one copy of the rows).
std::vector<double> target_weights(const at::Tensor& tokens, int mbs, double targets_share = 0);

// --profile: counts the bytes allocated (positive) and freed (negative) on this thread while it is
// installed (LibTorch's allocators report to it as to the profiler's memory tracking).
struct NetAllocated final : c10::MemoryReportingInfoBase {
  int64_t net = 0;
  void reportMemoryUsage(void*, int64_t bytes, size_t, size_t, c10::Device) override {
    net += bytes;
  }
  bool memoryProfilingEnabled() const override { return true; }
};

// Receive buffers, kept across steps: pools of the buffers of the messages in flight (the
// executor's: one per local stage and direction). take() gives the first buffer of a pool that
// nothing else holds (the pool's reference is its storage's only one: the stage that read it and
// autograd are done with it) and of the message's size and dtype, or a new one, so that a plan's
// steps reuse the same buffers, as many per pool as its receives alive at once (per shape:
// microbatches of another shape get buffers of their own).
class ReceivePools {
 public:
  ReceivePools(size_t pools, const at::Device& device);
  // A buffer for a message of `spec` from pool `pool`: an alias (detach()), so that autograd's
  // flags and gradients set on what a stage receives stay off the pool's tensor. `profiled`
  // (--profile): allocated where the allocator keeps its size, so that a part that frees it (an I
  // or a W, measured) counts the bytes freed.
  at::Tensor take(size_t pool, const BoundarySpec& spec, bool profiled);
  std::vector<const void*> buffers() const;  // their data (for tests)

 private:
  at::Device device_;
  std::vector<std::vector<at::Tensor>> pools_;
};

}  // namespace pprt
