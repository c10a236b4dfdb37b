// The makespan lower bound of lower_bound.h; docs/schedules.md ("The lower bound") has the proof.
#include "compiler/lower_bound.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "compiler/all_to_all_costs.h"
#include "compiler/measured_costs.h"

namespace ppc {

namespace {

// The best matching of `a` with `b` (values with multiplicities) by min(x, y): sorted pairing,
// largest with largest, is optimal since min is supermodular (an exchange argument).
double best_matching(std::vector<std::pair<double, double>> a,
                     std::vector<std::pair<double, double>> b) {
  auto desc = [](const auto& x, const auto& y) { return x.first > y.first; };
  std::sort(a.begin(), a.end(), desc);
  std::sort(b.begin(), b.end(), desc);
  double total = 0;
  size_t i = 0, j = 0;
  double left_a = a.empty() ? 0 : a[0].second, left_b = b.empty() ? 0 : b[0].second;
  while (i < a.size() && j < b.size()) {
    const double n = std::min(left_a, left_b);
    total += n * std::min(a[i].first, b[j].first);
    left_a -= n;
    left_b -= n;
    if (left_a <= 0 && ++i < a.size()) left_a = a[i].second;
    if (left_b <= 0 && ++j < b.size()) left_b = b[j].second;
  }
  return total;
}

}  // namespace

LowerBound makespan_lower_bound(const Plan& plan, const CostModel& model) {
  const int S = plan.num_stages(), pp = plan.pp();
  const std::vector<StageCost> c = stage_costs(plan, model);
  const MessageCosts msg = message_costs(plan, model);
  // A pair saves at most ov * min(F, B) of its computations; with all-to-alls that it may hide
  // (issue 40), at most min(F, B) (overlapped_time() is at least each part alone).
  const double ov = model.unit ? 0.0 : hides_all_to_all(c) ? 1.0 : model.overlap;
  auto sc = [&](int s) -> const StageCost& { return c[static_cast<size_t>(s)]; };
  auto cross = [&](int a, int b) { return plan.rank_of(a) != plan.rank_of(b); };

  // Earliest start of a forward of each stage: the forwards before it in its copy, with a message
  // at each rank boundary.
  std::vector<double> fstart(static_cast<size_t>(S), 0.0);
  for (int s = 0; s < S; ++s)
    if (const int p = plan.prev_stage(s); p >= 0)
      fstart[static_cast<size_t>(s)] = fstart[static_cast<size_t>(p)] + sc(p).f +
                                       (cross(p, s) ? msg.time[2 * static_cast<size_t>(p)] : 0.0);
  // Earliest start of a backward of each stage. The last stage's may start with its own forward
  // (an OVERLAP_F_B of a microbatch's F and B there is a valid plan); every other stage's waits
  // for the next stage's input-gradient backward (B or I, the shorter) and its message.
  std::vector<double> bstart(static_cast<size_t>(S), 0.0);
  for (int s = S; s-- > 0;) {
    const int n = plan.next_stage(s);
    bstart[static_cast<size_t>(s)] =
        n < 0 ? fstart[static_cast<size_t>(s)]
              : bstart[static_cast<size_t>(n)] + std::min(sc(n).b, sc(n).i) +
                    (cross(s, n) ? msg.time[2 * static_cast<size_t>(n) + 1] : 0.0);
  }
  auto microbatches_of = [&](int s) -> double {
    if (plan.copies == 1) return plan.microbatches;
    const int first = (plan.microbatches + 1) / 2;
    return plan.copy_of_stage(s) == 0 ? first : plan.microbatches - first;
  };

  // When each rank may begin: its share of the previous step's optimizer (rank_starts()).
  const std::vector<double> begin = rank_starts(plan, c);
  LowerBound lb;
  lb.ranks.resize(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    RankBound& rb = lb.ranks[static_cast<size_t>(r)];
    const auto& stages = plan.placement.rank_stages[static_cast<size_t>(r)];
    rb.start = rb.first_backward = std::numeric_limits<double>::infinity();
    double largest_backward = 0, sum_f = 0;
    std::vector<std::pair<double, double>> fwd, bwd;  // (duration, count)
    for (int s : stages) {
      const double m = microbatches_of(s);
      if (m <= 0) continue;
      const StageCost& k = sc(s);
      rb.start = std::min(rb.start, fstart[static_cast<size_t>(s)]);
      rb.first_backward = std::min(rb.first_backward, bstart[static_cast<size_t>(s)]);
      rb.work += m * (k.f + std::min(k.b, k.i + k.w));
      sum_f += m * k.f;
      largest_backward = std::max({largest_backward, k.b, k.i});
      fwd.emplace_back(k.f, m);
      bwd.emplace_back(std::max(k.b, k.i), m);
    }
    const double late = begin.empty() ? 0.0 : begin[static_cast<size_t>(r)];
    if (fwd.empty()) {
      rb.start = rb.first_backward = 0;
      rb.bound = late;  // a rank without compute still ends no earlier than it begins
      if (rb.bound > lb.value) {
        lb.value = rb.bound;
        lb.rank = r;
      }
      continue;
    }
    // K and rho of lower_bound.h: forwards capped by the largest backward they could pair with.
    double capped = 0, rho = 1;
    for (const auto& [f, m] : fwd) {
      capped += m * std::min(f, largest_backward);
      if (f > 0) rho = std::min(rho, std::min(f, largest_backward) / f);
    }
    const double matching = best_matching(fwd, bwd);
    rb.max_saving = ov * matching;
    rb.unhidden = std::clamp(rb.first_backward - rb.start, 0.0, sum_f);
    rb.bound = rb.first_backward + rb.work - rb.unhidden -
               ov * std::min(matching, std::max(0.0, capped - rho * rb.unhidden));
    // The drain: every forward part runs in an action of its own, at least F long, so the last
    // forward of stage s starts no earlier than the rank's first start plus all its forward work
    // less F (or, counting stage s alone, than s's first start plus m - 1 F), and that
    // microbatch's backward at s then starts at least bstart - fstart after its forward did.
    double drain = 0, last_forward = std::numeric_limits<double>::infinity();
    for (int s : stages) {
      const double m = microbatches_of(s);
      if (m <= 0) continue;
      const StageCost& k = sc(s);
      // From a forward's start to the end of its microbatch's backward here: a B, or an I and
      // then its W.
      const double round_trip = bstart[static_cast<size_t>(s)] - fstart[static_cast<size_t>(s)] +
                                std::min(k.b, k.i + k.w);
      drain = std::max(drain, fstart[static_cast<size_t>(s)] + (m - 1) * k.f + round_trip);
      last_forward = std::min(last_forward, round_trip - k.f);
    }
    rb.drain = std::max(drain, rb.start + sum_f + last_forward);
    rb.bound = std::max(rb.bound, rb.drain);
    // A late start (the optimizer of the previous step) delays every action of the rank: it ends
    // no earlier than its start plus its busy time, which is at least its work less the most that
    // overlapping can save.
    rb.bound = std::max(rb.bound, late + rb.work - rb.max_saving);
    if (rb.bound > lb.value) {
      lb.value = rb.bound;
      lb.rank = r;
    }
  }
  return lb;
}

}  // namespace ppc
