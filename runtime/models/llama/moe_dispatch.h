// Expert parallelism's token exchange for a mixture of experts (moe.h, pprun --ep): the routed
// experts of a layer sharded over the ranks of a pprt::ExpertGroup, each rank holding
// experts / size of them, contiguous (rank r: [r * L, (r + 1) * L)). A rank's (token, slot) pairs,
// grouped by expert, go to the ranks holding their experts (dispatch: an all-to-all with unequal
// splits, the counts exchanged first), each expert runs on the pairs every rank sent it, and the
// outputs come back in the order they left (combine: the reverse all-to-all). The backward runs the
// two exchanges in reverse on the group's backward communicator. Deterministic: a pair's output
// does not depend on where its expert runs, and the caller adds them up in expert order.
//
// Included only by LibTorch translation units.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "pprt/pprt.h"

namespace pprt {

// `input`'s rows, `send[j]` of them to rank j of `g`, and `recv[j]` from rank j, as
// Transport::all_to_all, differentiable: its backward sends the gradient back the way it came,
// through g.backward.
at::Tensor all_to_all_rows(const at::Tensor& input, const std::vector<int64_t>& recv,
                           const std::vector<int64_t>& send, const ExpertGroup& g);

// One local expert's outputs for the rows it is given (`local`: among this rank's, from 0).
using ExpertFn = std::function<at::Tensor(int64_t local, const at::Tensor& rows)>;

// The routed experts' outputs [P, hidden] for this rank's pairs `pairs` [P, hidden], grouped by
// expert, `counts` (int64, [experts], on the CPU) of them per expert; every rank of `g` calls it
// for the same layer and microbatch in the same order.
at::Tensor dispatch_to_experts(const at::Tensor& pairs, const at::Tensor& counts,
                               const ExpertGroup& g, const ExpertFn& expert);

}  // namespace pprt
