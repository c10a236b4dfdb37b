// compute_steps: lowering's replay of the compute order (lower_send_recv.cpp) with every compute
// lasting one step and free transfers, reduced to what decides the start times.
//
// Under those costs lowering keeps every rank on whole steps, and at each step t:
//  1. every compute started at t - 1 ends and posts its transfers. A SEND to a rank that is still
//     computing waits for that rank's boundary, which is also at t (every compute lasts one
//     step), so each transfer of step t is matched at t, before any rank starts at t, and its
//     RECV is posted: the consumer's input is there from t on;
//  2. every rank that is not computing starts its next compute if that compute's inputs are there
//     (received, or produced by an earlier compute of the same rank; a compute's own outputs are
//     marked when it starts).
// A start at t only marks events of its own rank (inputs from other ranks are always RECV
// events, marked in 1), so the ranks of step 2 do not depend on each other: the order in which
// they are tried does not matter. A rank that nothing happened to since it last failed to start
// still cannot start, so only the ranks that finished at t or received at t are tried.
//
// The golden tables and a test against lowering followed by the deadlock model's run (both with
// one-step costs) pin this equivalence.
#include "compiler/compute_steps.h"

#include "compiler/dependencies.h"
#include "compiler/stuck.h"
#include "compiler/transfers.h"

namespace ppc {

std::vector<std::vector<int32_t>> compute_steps(const Plan& plan) {
  const int pp = plan.pp();
  const CrossRank cross(plan);
  EventFlags ev(plan.num_stages(), plan.microbatches);

  std::vector<std::vector<int32_t>> steps(static_cast<size_t>(pp));
  std::vector<size_t> pos(static_cast<size_t>(pp), 0);
  std::vector<int> running, next_running, tried;  // ranks that started at t - 1 / at t; to try
  std::vector<int32_t> tried_at(static_cast<size_t>(pp), -1);
  size_t left = 0;
  for (int r = 0; r < pp; ++r) {
    const size_t n = plan.compute[static_cast<size_t>(r)].size();
    steps[static_cast<size_t>(r)].reserve(n);
    left += n;
    tried.push_back(r);
  }
  auto touch = [&](int r, int32_t t) {
    if (tried_at[static_cast<size_t>(r)] == t) return;
    tried_at[static_cast<size_t>(r)] = t;
    tried.push_back(r);
  };
  for (int32_t t = 0; left > 0; ++t) {
    if (t > 0) {
      tried.clear();
      for (int r : running) {  // 1: the computes of t - 1 end and post their transfers
        touch(r, t);
        const Action& done = plan.compute[static_cast<size_t>(r)][pos[static_cast<size_t>(r)] - 1];
        for_each_part(done, [&](const Action& p) {
          if (const auto transfer = cross.transfer(r, p)) {
            const Action& recv = transfer->recv;
            ev.set(event_of(recv.kind), recv.stage, recv.microbatch);
            touch(transfer->peer, t);
          }
        });
      }
    }
    next_running.clear();
    for (int r : tried) {  // 2: the ranks that can start do
      const auto& order = plan.compute[static_cast<size_t>(r)];
      size_t& i = pos[static_cast<size_t>(r)];
      if (i == order.size()) continue;
      const Action& a = order[i];
      if (!inputs_ready(plan, ev, a)) continue;
      for_each_part(a, [&](const Action& p) { ev.set(event_of(p.kind), p.stage, p.microbatch); });
      steps[static_cast<size_t>(r)].push_back(t);
      ++i;
      --left;
      next_running.push_back(r);
    }
    running.swap(next_running);
    // Nothing runs, so nothing ever will: lowering's error.
    if (running.empty() && left > 0) throw_if_computes_stuck(plan, ev, pos);
  }
  return steps;
}

}  // namespace ppc
