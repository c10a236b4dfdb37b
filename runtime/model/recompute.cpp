// Recomputation through a custom autograd function (recompute.h).
#include "runtime/model/recompute.h"

#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <chrono>
#include <utility>

#include "runtime/model/layer_probe.h"

namespace pprt {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local bool tl_recomputing = false;
thread_local bool tl_first_run = false;

// The piece to rerun, held by the autograd node until its backward.
struct Piece : torch::CustomClassHolder {
  TensorFn f;
  int64_t* runs = nullptr;
  LayerProbe* probe = nullptr;  // --profile: told each rerun's time (layer_probe.h), as `layer`
  LayerSample layer;
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& in) const {
    if (runs) ++*runs;
    return f(in);
  }
};

struct RecomputeFn : torch::autograd::Function<RecomputeFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<Piece> piece) {
    // Autograd is off here: `f` makes no graph, and only the inputs are kept.
    std::vector<at::Tensor> in(inputs.begin(), inputs.end());
    struct FirstRun {  // recompute_first_run() while it runs
      bool outer = tl_first_run;
      FirstRun() { tl_first_run = true; }
      ~FirstRun() { tl_first_run = outer; }
    };
    std::vector<at::Tensor> out;
    {
      const FirstRun first;
      out = piece->run(in);
    }
    ctx->save_for_backward(in);
    ctx->saved_data["piece"] = c10::IValue::make_capsule(std::move(piece));
    std::vector<at::Tensor> nondiff;
    for (const at::Tensor& t : out)
      if (t.defined() && !t.is_floating_point()) nondiff.push_back(t);
    if (!nondiff.empty()) ctx->mark_non_differentiable(nondiff);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto piece =
        c10::static_intrusive_pointer_cast<Piece>(ctx->saved_data["piece"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    std::vector<at::Tensor> in;
    in.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor t = saved[i].defined() ? saved[i].detach() : saved[i];
      if (t.defined() && ctx->needs_input_grad(i)) t.requires_grad_(true);
      in.push_back(std::move(t));
    }
    std::vector<at::Tensor> out;
    {
      at::AutoGradMode on(true);
      const bool outer = tl_recomputing;
      tl_recomputing = true;
      try {
        const auto t0 = std::chrono::steady_clock::now();
        out = piece->run(in);
        if (piece->probe) {
          LayerSample s = piece->layer;
          s.rerun = true;
          s.ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
          piece->probe->add(s);
        }
      } catch (...) {
        tl_recomputing = outer;
        throw;
      }
      tl_recomputing = outer;
    }
    std::vector<at::Tensor> roots, root_grads;
    for (size_t k = 0; k < out.size() && k < grads.size(); ++k)
      if (out[k].defined() && out[k].requires_grad() && grads[k].defined()) {
        roots.push_back(out[k]);
        root_grads.push_back(grads[k]);
      }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list result(in.size() + 1);  // one per input, and none for the piece
    // The rerun's inputs may live on in the weight work a W will run (the hand-written split's
    // deferred products): their gradients must not live on with them.
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].defined() && in[i].requires_grad()) {
        result[i] = in[i].grad();
        in[i].mutable_grad().reset();
      }
    return result;
  }
};

}  // namespace

bool recomputing() {
  return tl_recomputing;
}

bool recompute_first_run() {
  return tl_first_run;
}

std::vector<at::Tensor> recomputed(TensorFn f, const std::vector<at::Tensor>& inputs,
                                   int64_t* runs) {
  bool any = false;
  for (const at::Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  auto piece = c10::make_intrusive<Piece>();
  piece->f = std::move(f);
  piece->runs = runs;
  piece->probe = LayerProbe::current();
  if (piece->probe) piece->layer = LayerProbe::current_layer();
  if (!any || !at::GradMode::is_enabled()) return piece->run(inputs);
  return RecomputeFn::apply(at::TensorList(inputs), std::move(piece));
}

}  // namespace pprt
