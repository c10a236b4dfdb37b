// The tensors that cross a stage boundary (stage.h): their specs, as the model declares them
// (declared_boundaries) or as a run of the whole model gives them (learned_boundaries).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/model/layer_shapes.h"
#include "runtime/model/stage.h"

namespace pprt {

namespace detail {

std::string shape_text(at::IntArrayRef s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::optional<std::vector<TensorShape>> declared_out(const Model::Symbol& sym,
                                                     const std::vector<TensorShape>& in,
                                                     const MicrobatchShape& mb,
                                                     const ModelSetup& setup) {
  if (sym.tensors_shape) return sym.tensors_shape(in, mb, setup);
  if (sym.shape && in.size() == 1)
    return std::vector<TensorShape>{TensorShape{"", sym.shape(in.front().shape, setup)}};
  return std::nullopt;
}

}  // namespace detail

using detail::declared_out;
using detail::shape_text;

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string to_string(const TensorSpec& s) {
  return fmt::format("{}{} {}", s.name.empty() ? "" : s.name + " ", shape_text(s.shape),
                     c10::toString(s.dtype));
}

int64_t BoundarySpec::numel() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) n += t.numel();
  return n;
}

std::string to_string(const BoundarySpec& s) {
  std::vector<std::string> parts;
  for (const TensorSpec& t : s.tensors) parts.push_back(to_string(t));
  return fmt::format("{}", fmt::join(parts, ", "));
}

BoundarySpec spec_of(const Tensors& ts) {
  BoundarySpec s;
  for (const NamedTensor& t : ts)
    s.tensors.push_back(TensorSpec{t.tensor.sizes().vec(), t.tensor.scalar_type(), t.name});
  return s;
}

std::vector<at::Tensor> tensors_of(const Tensors& ts) {
  std::vector<at::Tensor> out;
  for (const NamedTensor& t : ts) out.push_back(t.tensor);
  return out;
}

BoundarySpec placeholder_spec() {
  return BoundarySpec{{TensorSpec{{1}, at::kFloat, ""}}};
}
std::optional<std::vector<BoundarySpec>> declared_boundaries(
    const Model& model, const ModelSetup& setup, const ppc::Layout& layout,
    const MicrobatchShape& mb, std::string* missing, at::ScalarType dtype) {
  const std::vector<LayerPlace> places = layer_places(layout);
  std::vector<BoundarySpec> out{placeholder_spec()};
  std::vector<TensorShape> shapes{TensorShape{"", {1}}};
  size_t next = 0;
  for (size_t s = 0; s < layout.stages.size(); ++s) {
    at::ScalarType type = out.back().tensors.front().dtype;
    for (; next < places.size() && places[next].stage == static_cast<int>(s); ++next) {
      const LayerPlace& p = places[next];
      const Model::Symbol* sym = model.symbol(p.symbol);
      if (p.position == 0) shapes = {TensorShape{"", {mb.batch, mb.length}}};
      std::optional<std::vector<TensorShape>> o;
      if (sym) o = declared_out(*sym, shapes, mb, setup);
      if (!o) {
        if (missing) *missing = fmt::format("stage {}, layer '{}' #{}", p.stage, p.symbol, p.index);
        return std::nullopt;
      }
      shapes = std::move(*o);
      type = dtype;
      if (p.position == p.layers - 1) {  // the loss
        type = at::kFloat;
        if (model.loss()) shapes = {TensorShape{"", {}}};
      }
    }
    BoundarySpec& b = out.emplace_back();
    for (const TensorShape& t : shapes) b.tensors.push_back(TensorSpec{t.shape, type, t.name});
  }
  return out;
}

std::optional<std::vector<BoundarySpec>> declared_boundaries(const Model& model,
                                                             const ModelSetup& setup,
                                                             const ppc::Layout& layout,
                                                             int64_t rows, std::string* missing,
                                                             at::ScalarType dtype) {
  return declared_boundaries(model, setup, layout, MicrobatchShape{rows, setup.seq_len, {}},
                             missing, dtype);
}

std::vector<BoundarySpec> learned_boundaries(const ModelContext& ctx, const ppc::Layout& layout,
                                             const at::Tensor& rows) {
  RankModel whole(ctx);
  for (size_t s = 0; s < layout.stages.size(); ++s) whole.add(layout, static_cast<int>(s));
  at::NoGradGuard no_grad;
  const MicrobatchShape shape = ctx.model->shape_of(rows);
  std::vector<BoundarySpec> out{placeholder_spec()};
  Tensors x;
  for (Stage* stage : whole.stages) {
    LossReport losses;
    x = stage->forward(x, rows, shape, 0, nullptr, &losses);
    out.push_back(spec_of(x));
  }
  return out;
}
}  // namespace pprt
