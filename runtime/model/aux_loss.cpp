// Auxiliary losses joined to a stage's backward (aux_loss.h).
#include "runtime/model/aux_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace pprt {

namespace {

// Forward: `out` as it is. Backward: its gradient passed on, and `scale` for the loss.
struct AttachLoss : torch::autograd::Function<AttachLoss> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& out,
                            const at::Tensor& loss, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["loss_options"] = at::empty({}, loss.options());
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor like = ctx->saved_data["loss_options"].toTensor();
    return {grads[0], at::full({}, ctx->saved_data["scale"].toDouble(), like.options()),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor attach_aux_losses(const at::Tensor& out, const std::vector<at::Tensor>& terms,
                             double scale) {
  if (terms.empty() || !out.requires_grad()) return out;
  at::Tensor loss = terms.front();
  for (size_t i = 1; i < terms.size(); ++i) loss = loss + terms[i];
  if (!loss.requires_grad()) return out;
  return AttachLoss::apply(out, loss, scale);
}

void add_reported(const LossReport& r, int mb, const std::vector<Reported>& reported,
                  std::vector<ReportedSums>& out) {
  add_reported(r, mb, reported, out,
               [](const at::Tensor& value, double* sum) { *sum += value.item<double>(); });
}

void add_reported(const LossReport& r, int mb, const std::vector<Reported>& reported,
                  std::vector<ReportedSums>& out, const AddValue& add) {
  for (const LossReport::Value& v : r.values)
    for (size_t k = 0; k < reported.size(); ++k)
      if (reported[k].name == v.name && reported[k].loss == v.loss) {
        add(v.value.mean(), &out[k].sum[static_cast<size_t>(mb)]);
        out[k].count[static_cast<size_t>(mb)] += 1;
      }
}

void HostSums::add(const at::Tensor& value, double* sum) {
  if (value.is_cpu()) {
    *sum += value.item<double>();
  } else {
    values_.push_back(value.reshape({}).to(at::kDouble));
    into_.push_back(sum);
  }
}

void HostSums::read() {
  if (values_.empty()) return;
  const at::Tensor host = at::stack(values_).cpu();
  const double* d = host.data_ptr<double>();
  for (size_t i = 0; i < into_.size(); ++i) *into_[i] += d[i];
  values_.clear();
  into_.clear();
}

std::vector<ReportedSums> no_reports(size_t values, int microbatches) {
  const auto n = static_cast<size_t>(microbatches);
  return std::vector<ReportedSums>(
      values, ReportedSums{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)});
}

}  // namespace pprt
