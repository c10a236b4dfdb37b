// The transfers lowering inserts: where each compute's output goes when another rank consumes it
// (used by lowering and by the table's steps, which follow lowering).
#pragma once

#include <optional>
#include <type_traits>
#include <vector>

#include "compiler/action.h"
#include "compiler/dependencies.h"
#include "compiler/plan.h"

namespace ppc {

// One transfer of a compute's output to the rank that consumes it.
struct Transfer {
  Action send, recv;
  int peer;
};

// Per stage, the rank its output goes to when that is another rank: forward[s] for F(s)'s
// activation (to the next stage), backward[s] for B/I(s)'s gradient (to the previous stage);
// -1 when the output stays on the rank or there is no such stage.
struct CrossRank {
  std::vector<int> forward, backward;
  explicit CrossRank(const Plan& plan)
      : forward(static_cast<size_t>(plan.num_stages()), -1),
        backward(static_cast<size_t>(plan.num_stages()), -1) {
    for (int s = 0; s < plan.num_stages(); ++s) {
      if (forward_crosses_ranks(plan, s)) forward[static_cast<size_t>(s)] = plan.rank_of(s + 1);
      if (backward_crosses_ranks(plan, s)) backward[static_cast<size_t>(s)] = plan.rank_of(s - 1);
    }
  }
  // The rank a plain compute part's output goes to, or -1.
  int peer(const Action& part) const {
    const size_t s = static_cast<size_t>(part.stage);
    switch (flow_of(part.kind)) {
      case Flow::Forward:
        return forward[s];
      case Flow::Backward:
        return backward[s];
      case Flow::None:
        break;
    }
    return -1;
  }
  // The transfer a plain compute part of `rank` needs, if its output goes to another rank (the
  // next stage is s + 1 and the previous s - 1 whenever they exist).
  std::optional<Transfer> transfer(int rank, const Action& part) const {
    const int s = part.stage, mb = part.microbatch;
    // One branch per flow, so that each reads its FlowInfo as constants (this runs for every
    // compute action lowering places).
    auto of_flow = [&](auto flow, int q) -> std::optional<Transfer> {
      if (q < 0) return std::nullopt;
      constexpr FlowInfo f = flow_info(decltype(flow)::value);
      const int to = f.to_next ? s + 1 : s - 1;
      return Transfer{Action::comm(f.send, s, mb, q), Action::comm(f.recv, to, mb, rank), q};
    };
    switch (flow_of(part.kind)) {
      case Flow::Forward:
        return of_flow(std::integral_constant<Flow, Flow::Forward>{},
                       forward[static_cast<size_t>(s)]);
      case Flow::Backward:
        return of_flow(std::integral_constant<Flow, Flow::Backward>{},
                       backward[static_cast<size_t>(s)]);
      case Flow::None:
        break;
    }
    return std::nullopt;
  }
};

}  // namespace ppc
