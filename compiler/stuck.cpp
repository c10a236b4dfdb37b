#include "compiler/stuck.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "compiler/diagnostic.h"

namespace ppc {

namespace {

// The rank that produces what `n` stands for.
int producer_rank(const Plan& plan, const Need& n, int rank) {
  switch (n.event) {
    case Event::RecvF: {
      int p = plan.prev_stage(n.stage);
      return p >= 0 ? plan.rank_of(p) : -1;
    }
    case Event::RecvB: {
      int q = plan.next_stage(n.stage);
      return q >= 0 ? plan.rank_of(q) : -1;
    }
    default:
      return rank;
  }
}

}  // namespace

std::string describe_need(const Plan& plan, const Need& n, int rank) {
  switch (n.event) {
    case Event::RecvF:
      return fmt::format("the activation of stage {} microbatch {} from rank {}",
                         plan.prev_stage(n.stage), n.microbatch, producer_rank(plan, n, rank));
    case Event::RecvB:
      return fmt::format("the gradient of stage {} microbatch {} from rank {}",
                         plan.next_stage(n.stage), n.microbatch, producer_rank(plan, n, rank));
    default:
      return fmt::format("its own {} of stage {} microbatch {}, which comes later in its order",
                         event_description(n.event), n.stage, n.microbatch);
  }
}

StuckRank describe_stuck_compute(const Plan& plan, const EventFlags& ev, int rank, int index,
                                 const Action& a) {
  StuckRank s;
  s.rank = rank;
  s.index = index;
  s.at = fmt::format("its action {} ({})", index, to_string(a));
  auto consider = [&](const Action& part) {
    if (!s.waits_for.empty()) return;
    for_each_need(plan, part, [&](const Need& n) {
      if (!s.waits_for.empty() || ev.happened(n)) return;
      s.waits_for = describe_need(plan, n, rank);
      s.waits_on = producer_rank(plan, n, rank);
    });
  };
  for_each_part(a, consider);
  if (s.waits_for.empty()) s.waits_for = "nothing (internal: should have run)";
  return s;
}

void throw_if_computes_stuck(const Plan& plan, const EventFlags& ev,
                             const std::vector<size_t>& next) {
  std::vector<StuckRank> stuck;
  for (int r = 0; r < plan.pp(); ++r) {
    const auto& order = plan.compute[static_cast<size_t>(r)];
    const size_t i = next[static_cast<size_t>(r)];
    if (i < order.size())
      stuck.push_back(describe_stuck_compute(plan, ev, r, static_cast<int>(i), order[i]));
  }
  if (!stuck.empty()) throw UserError("the compute order cannot run: " + explain_stuck(stuck));
}

std::string explain_stuck(const std::vector<StuckRank>& stuck) {
  if (stuck.empty()) return "no rank is stuck";
  std::map<int, const StuckRank*> by_rank;
  for (const auto& s : stuck) by_rank[s.rank] = &s;
  std::string out;
  std::vector<int> path;
  std::set<int> seen;
  int r = stuck.front().rank;
  while (by_rank.count(r) && !seen.count(r)) {
    seen.insert(r);
    path.push_back(r);
    const StuckRank& s = *by_rank[r];
    if (!out.empty()) out += "; ";
    out += fmt::format("rank {} waits at {} for {}", s.rank, s.at, s.waits_for);
    r = s.waits_on;
    if (r < 0) break;
  }
  if (r >= 0 && seen.count(r)) {
    // Print the cycle starting at the first repeated rank.
    std::string cycle;
    bool in = false;
    for (int x : path) {
      if (x == r) in = true;
      if (in) cycle += fmt::format("rank {} -> ", x);
    }
    out += fmt::format("; cycle: {}rank {}", cycle, r);
  } else if (r >= 0) {
    out += fmt::format("; rank {} has finished and will never provide it", r);
  }
  if (stuck.size() > path.size()) out += fmt::format(" ({} ranks stuck in all)", stuck.size());
  return out;
}

}  // namespace ppc
