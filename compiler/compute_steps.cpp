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
#include "compiler/diagnostic.h"
#include "compiler/stuck.h"

namespace ppc {

std::vector<std::vector<int32_t>> compute_steps(const Plan& plan) {
  const int pp = plan.pp(), num_stages = plan.num_stages();
  // Per stage, the rank that receives F(s)'s activation / B or I(s)'s gradient, or -1 when the
  // output stays on the rank.
  std::vector<int> forward_to(static_cast<size_t>(num_stages), -1),
      backward_to(static_cast<size_t>(num_stages), -1);
  for (int s = 0; s < num_stages; ++s) {
    if (forward_crosses_ranks(plan, s))
      forward_to[static_cast<size_t>(s)] = plan.rank_of(plan.next_stage(s));
    if (backward_crosses_ranks(plan, s))
      backward_to[static_cast<size_t>(s)] = plan.rank_of(plan.prev_stage(s));
  }
  EventFlags ev(num_stages, plan.microbatches);
  auto ready = [&](const Action& part, const Action* with) {
    bool ok = true;
    for_each_need(plan, part, [&](const Need& n) {
      if (ev.happened(n)) return;
      if (with && n.event == Event::F && n.stage == with->stage && n.microbatch == with->microbatch)
        return;  // the forward part of the same OverlapFB, which runs first
      ok = false;
    });
    return ok;
  };

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
          const size_t s = static_cast<size_t>(p.stage);
          if (p.kind == ActionKind::F) {
            if (const int q = forward_to[s]; q >= 0) {
              ev.set(Event::RecvF, plan.next_stage(p.stage), p.microbatch);
              touch(q, t);
            }
          } else if (is_backward_input(p.kind)) {
            if (const int q = backward_to[s]; q >= 0) {
              ev.set(Event::RecvB, plan.prev_stage(p.stage), p.microbatch);
              touch(q, t);
            }
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
      bool can = false;
      if (a.kind == ActionKind::OverlapFB) {
        const Action f = a.forward_part();
        can = ready(f, nullptr) && ready(a.backward_part(), &f);
      } else {
        can = ready(a, nullptr);
      }
      if (!can) continue;
      for_each_part(a, [&](const Action& p) { ev.set(event_of(p.kind), p.stage, p.microbatch); });
      steps[static_cast<size_t>(r)].push_back(t);
      ++i;
      --left;
      next_running.push_back(r);
    }
    running.swap(next_running);
    if (running.empty() && left > 0) {  // nothing runs and nothing will: lowering's error
      std::vector<StuckRank> stuck;
      for (int r = 0; r < pp; ++r) {
        const auto& order = plan.compute[static_cast<size_t>(r)];
        const size_t i = pos[static_cast<size_t>(r)];
        if (i < order.size())
          stuck.push_back(describe_stuck_compute(plan, ev, r, static_cast<int>(i), order[i]));
      }
      throw UserError("the compute order cannot run: " + explain_stuck(stuck));
    }
  }
  return steps;
}

}  // namespace ppc
