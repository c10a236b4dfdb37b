// The input/weight split of a stage's backward through its autograd graph (docs/library-split.md),
// for stages whose layers do not split their own backward (pprt::Layer::splits_backward): the
// zero-bubble schedules' I computes only the gradient of the stage's input, and the W later the
// parameters' gradients, for any LibTorch module. The semantics of PyTorch's
// torch.distributed.pipelining stage_backward_input / stage_backward_weight:
//
//  - The graph from the stage's output splits into the input path C (the nodes from which the
//    input's gradient accumulator can be reached) and the rest R (nodes that lead only to
//    parameters). The nodes of C with an edge into R are where a weight's gradient path leaves
//    the input-gradient path (the "intermediates").
//  - I runs the autograd engine from the output over C only (the input's edge and every
//    intermediate's inputs are the engine's captured outputs, so no weight edge is followed and
//    nothing is accumulated), keeping the gradients that flowed into the intermediates. It then
//    cuts the intermediates' edges into C and frees the saved tensors of the rest of C.
//  - W runs the engine once from the intermediates with those gradients: only the weight
//    subgraphs run (the cut edges keep anything of C from running again or counting twice), and
//    the parameters' gradients are accumulated into their .grad as a full backward would. The
//    graph is freed after it.
// A stage without an input gradient (the model's first stage) has an empty C: its I keeps the
// output's gradient and its W is the whole backward. A stage of several tensors in and out (named
// boundaries) is the same with several roots and several inputs: C is every node from which an
// input can be reached.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/fail.h"

namespace pprt {

// Whether the environment asks for the generic split on every stage, the built-in model's
// included (PPRUN_GENERIC_SPLIT=1): for tests and benchmarks of the split itself.
bool generic_split_forced();

// Runs `f`, part `part` ("I" or "W") of the split of `who`'s backward (a stage); what the autograd
// engine throws (a module that modified a tensor its backward needs, say) becomes one line naming
// `who` (a ppc::UserError).
template <class F>
auto split_part(const std::string& who, const char* part, F&& f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    fail(who, fmt::format("its {} (the input/weight split through autograd) failed: {}", part,
                          what.substr(0, what.find('\n'))));
  }
}

// One stage's backward for one microbatch, split into I and W.
class AutogradSplit {
 public:
  AutogradSplit();
  ~AutogradSplit();
  AutogradSplit(AutogradSplit&&) noexcept;
  AutogradSplit& operator=(AutogradSplit&&) noexcept;

  // I: the gradients of `inputs` (leaves requiring grad; none for a stage that starts from the
  // token ids) from `outputs` and the gradients flowing into them (`grad_outputs`, one each; none
  // for a loss: ones). Returns one per input, undefined where the outputs do not depend on it.
  // Keeps what backward_weight needs; the caller may drop the outputs and the inputs.
  std::vector<at::Tensor> backward_input(const std::vector<at::Tensor>& outputs,
                                         const std::vector<at::Tensor>& grad_outputs,
                                         const std::vector<at::Tensor>& inputs);
  // The same for one output and one input (either undefined: none).
  at::Tensor backward_input(const at::Tensor& output, const at::Tensor& grad_output,
                            const at::Tensor& input);
  // W: accumulates the parameters' gradients into their .grad, then frees what I kept.
  void backward_weight();
  // Between an I and its W.
  bool pending() const;

  // What an I keeps for its W (valid until the W): the gradients it captured (bytes, each
  // tensor's storage once), and the autograd nodes the W starts from. The graph's saved tensors
  // come on top; pprun --profile measures the whole (docs/library-split.md).
  struct Held {
    int64_t gradient_bytes = 0;
    int roots = 0;  // gradient edges the W starts from
    int nodes = 0;  // distinct nodes among them
  };
  Held held() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pprt
