// What crosses stage boundaries (messages.h).
#include "runtime/train/messages.h"

#include <ATen/ATen.h>

#include <optional>

#include "compiler/diagnostic.h"
#include "runtime/data/documents.h"

namespace pprt {

namespace {

// The shape of the message of `spec`: the tensor's own when it is alone, else flat.
std::vector<int64_t> message_shape(const BoundarySpec& spec) {
  if (spec.tensors.size() == 1) return spec.tensors.front().shape;
  return {spec.numel()};
}
// Whether `t` has that shape (compared in place: take() runs per RECV).
bool has_message_shape(const at::Tensor& t, const BoundarySpec& spec) {
  if (spec.tensors.size() == 1) return t.sizes() == at::IntArrayRef(spec.tensors.front().shape);
  return t.dim() == 1 && t.size(0) == spec.numel();
}

// A tensor alone as its message: detached only if it requires grad (a stage's output: the send
// must not hold its graph), converted only if of another dtype, copied only if not contiguous.
at::Tensor alone(const at::Tensor& t, at::ScalarType dtype) {
  at::Tensor m = t.requires_grad() ? t.detach() : t;
  if (m.scalar_type() != dtype) m = m.to(dtype);
  return m.is_contiguous() ? m : m.contiguous();
}

at::Tensor packed(const std::vector<at::Tensor>& ts, at::ScalarType dtype) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.detach().to(dtype).reshape({-1}));
  return at::cat(flat);
}

}  // namespace

at::Tensor pack(const std::vector<at::Tensor>& ts, at::ScalarType dtype) {
  PPC_INTERNAL_ASSERT(!ts.empty(), "a message holds a tensor");
  return ts.size() == 1 ? alone(ts.front(), dtype) : packed(ts, dtype);
}

at::Tensor pack(const Tensors& ts, at::ScalarType dtype) {
  PPC_INTERNAL_ASSERT(!ts.empty(), "a message holds a tensor");
  return ts.size() == 1 ? alone(ts.front().tensor, dtype) : packed(tensors_of(ts), dtype);
}

std::vector<at::Tensor> unpack(const at::Tensor& message, const BoundarySpec& spec) {
  if (spec.tensors.size() == 1)  // (a message of the tensor's shape is the tensor)
    return {has_message_shape(message, spec) ? message : message.view(spec.tensors.front().shape)};
  std::vector<at::Tensor> out;
  int64_t at_element = 0;
  for (const TensorSpec& t : spec.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    out.push_back(message.narrow(0, at_element, n).view(t.shape));
    at_element += n;
  }
  return out;
}

std::vector<double> target_weights(const at::Tensor& tokens, int mbs, double targets_share) {
  if (tokens.numel() == 0 || (tokens[0][0].item<int64_t>() >> kDocumentShift) == 0) return {};
  const at::Tensor host = tokens.cpu().contiguous();
  const int64_t n = host.size(1), b = host.size(0) / mbs;
  std::vector<double> w(static_cast<size_t>(mbs), 0.0);
  double all = 0;
  for (int mb = 0; mb < mbs; ++mb) {
    for (int64_t r = 0; r < b; ++r)
      w[static_cast<size_t>(mb)] +=
          static_cast<double>(predicted_targets(host.data_ptr<int64_t>() + (mb * b + r) * n, n));
    all += w[static_cast<size_t>(mb)];
  }
  if (targets_share > 0) all = targets_share;
  for (double& x : w) x = all > 0 ? x * mbs / all : 1.0;
  return w;
}

void BatchShapes::update(const Model& model, BoundarySpecs* specs, const at::Tensor& tokens,
                         int mbs, int64_t b, int granule, double targets_share) {
  weights_ = target_weights(tokens, mbs, targets_share);
  if (granule > 0) {  // --varlen: a shape per microbatch, its length from its rows
    shapes_.clear();
    bounds_.clear();
    shaped_for_.clear();
    const at::Tensor host = tokens.cpu().contiguous();
    const int64_t n = host.size(1);
    for (int mb = 0; mb < mbs; ++mb) {
      const at::Tensor rows = tokens.narrow(0, mb * b, b);
      MicrobatchShape shape = model.shape_of(rows);
      shape.length = varlen_length(host.data_ptr<int64_t>() + mb * b * n, b, n, granule);
      shapes_.push_back(shape);
      if (specs) bounds_.push_back(&specs->of(shapes_.back(), rows.narrow(1, 0, shape.length + 1)));
    }
    return;
  }
  if (!shaped_for_.empty() && tokens.sizes() == at::IntArrayRef(shaped_for_)) return;
  shapes_.clear();
  bounds_.clear();
  shaped_for_.clear();
  for (int mb = 0; mb < mbs; ++mb) {
    if (mb > 0 && shapes_.front().sizes.empty()) {
      shapes_.push_back(shapes_.front());
      if (specs) bounds_.push_back(bounds_.front());
      continue;
    }
    const at::Tensor rows = tokens.narrow(0, mb * b, b);
    shapes_.push_back(model.shape_of(rows));
    if (specs) bounds_.push_back(&specs->of(shapes_.back(), rows));
  }
  if (shapes_.front().sizes.empty()) shaped_for_ = tokens.sizes().vec();
}

BoundarySpecs::BoundarySpecs(const ModelContext& ctx, const ppc::Layout& layout)
    : ctx_(ctx), layout_(layout) {}

const std::vector<BoundarySpec>& BoundarySpecs::of(const MicrobatchShape& shape,
                                                   const at::Tensor& rows) {
  if (auto it = specs_.find(shape); it != specs_.end()) return it->second;
  auto d = declared_boundaries(*ctx_.model, ctx_.setup, layout_, shape, nullptr, ctx_.dtype);
  // A layer declares no shape: one forward of the whole model tells them (stage.h).
  declared_ = d.has_value();
  return specs_.emplace(shape, d ? std::move(*d) : learned_boundaries(ctx_, layout_, rows))
      .first->second;
}

ReceivePools::ReceivePools(size_t pools, const at::Device& device)
    : device_(device), pools_(pools) {}

at::Tensor ReceivePools::take(size_t pool, const BoundarySpec& spec, bool profiled) {
  const at::ScalarType dtype = spec.tensors.front().dtype;
  auto& buffers = pools_[pool];
  for (const at::Tensor& t : buffers)
    if (t.storage().use_count() == 1 && has_message_shape(t, spec) && t.scalar_type() == dtype)
      return t.detach();
  std::optional<c10::DebugInfoGuard> seen;
  if (profiled) seen.emplace(c10::DebugInfoKind::PROFILER_STATE, std::make_shared<NetAllocated>());
  buffers.push_back(
      at::empty(message_shape(spec), at::TensorOptions().dtype(dtype).device(device_)));
  return buffers.back().detach();
}

std::vector<const void*> ReceivePools::buffers() const {
  std::vector<const void*> v;
  for (const auto& pool : pools_)
    for (const at::Tensor& t : pool) v.push_back(t.data_ptr());
  return v;
}

}  // namespace pprt
