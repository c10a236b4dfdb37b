// Recomputation (issue 42, docs/pprun.md "Activation memory"): a piece of a forward that keeps
// only its inputs, and runs again, with autograd, when its backward comes.
//
// The backward of a recomputed piece reruns its forward once on the kept inputs and runs the
// backward of what that gives at once, inside the autograd engine: what the piece's operations
// save for their own backward lives only from there to the end of the piece's backward. Layers
// that split their own backward (pprt::Layer::splits_backward) defer their weight work to the
// microbatch's WeightWork as usual during the rerun: an I recomputes once, and its W reuses what
// the rerun kept for it, with nothing recomputed again.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace pprt {

using TensorFn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Runs `f` on `inputs` and returns its outputs, keeping for the backward only `inputs` (the
// tensors themselves, not the graph `f` makes): `f` runs without autograd now and once more with
// it in the backward. `f` must give the same outputs both times (pprun's layers are
// deterministic). Outputs depend on the inputs that require grad; with none, nothing is
// recomputed and the outputs need no gradient (the caller should not recompute such a piece).
// `runs`, if not null, counts each run of `f` (the first included).
std::vector<at::Tensor> recomputed(TensorFn f, const std::vector<at::Tensor>& inputs,
                                   int64_t* runs = nullptr);

// Whether this thread is rerunning a recomputed piece's forward inside its backward. A layer's
// collectives there belong to the backward: expert parallelism's all-to-alls go on the backward
// communicator (moe_dispatch.cpp), as the deadlock proof counts them (compiler/all_to_all.h), so
// that a concurrent OVERLAP_F_B's forward thread keeps the forward communicator to itself.
bool recomputing();

// Whether this thread runs a recomputed piece's first run: its forward without autograd, which
// the backward reruns with it. A layer that keeps per-step state of training (a mixture of
// experts' expert loads and balancing bias) takes it for a training forward, autograd off or not.
bool recompute_first_run();

}  // namespace pprt
