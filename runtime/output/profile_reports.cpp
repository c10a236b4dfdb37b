// --profile's times read from the ranks' reports (profile.h): each boundary's message transfer,
// the time to post a SEND or RECV, and each stage's share of its ranks' work between steps.
#include <unordered_map>

#include "runtime/output/median.h"
#include "runtime/output/profile.h"

namespace pprt {

using ppc::Action;
using ppc::ActionKind;

std::vector<std::optional<double>> transfer_times(const ppc::Plan& plan,
                                                  const std::vector<RankReport>& ranks) {
  const auto& order = plan.order();
  const int S = plan.stages_per_copy();
  std::vector<std::vector<double>> samples(static_cast<size_t>(std::max(S - 1, 0)));
  if (ranks.empty() || static_cast<int>(ranks.size()) != plan.pp()) return {};
  const size_t nsteps = ranks.front().steps.size();
  for (const RankReport& r : ranks)
    if (r.steps.size() != nsteps) return {};
  // Where each SEND sits: (sending stage, microbatch, backward) -> (rank, index).
  struct Where {
    int rank;
    size_t index;
  };
  auto key = [](int stage, int mb, bool backward) {
    return (static_cast<int64_t>(stage) << 33) | (static_cast<int64_t>(mb) << 1) |
           (backward ? 1 : 0);
  };
  std::unordered_map<int64_t, Where> sends;
  for (int r = 0; r < plan.pp(); ++r) {
    const auto& acts = order[static_cast<size_t>(r)];
    for (size_t i = 0; i < acts.size(); ++i)
      if (ppc::is_send(acts[i].kind))
        sends[key(acts[i].stage, acts[i].microbatch, acts[i].kind == ActionKind::SendB)] =
            Where{r, i};
  }
  const size_t first = (nsteps > 1 && ranks.front().steps.front().step == 0) ? 1 : 0;
  for (size_t k = first; k < nsteps; ++k) {
    for (const RankReport& rr : ranks) {
      const int r = rr.rank;
      const auto& acts = order[static_cast<size_t>(r)];
      const StepTiming& t = rr.steps[k];
      if (t.spans.size() != acts.size()) continue;
      const int64_t base = t.begin_unix_us * 1000;
      for (size_t j = 0; j < acts.size(); ++j) {
        const Action& a = acts[j];
        if (a.kind != ActionKind::RecvF && a.kind != ActionKind::RecvB) continue;
        const bool backward = a.kind == ActionKind::RecvB;
        const int sender = backward ? plan.next_stage(a.stage) : plan.prev_stage(a.stage);
        auto it = sends.find(key(sender, a.microbatch, backward));
        if (it == sends.end()) continue;
        const RankReport& peer = ranks[static_cast<size_t>(it->second.rank)];
        const StepTiming& pt = peer.steps[k];
        if (pt.spans.size() != order[static_cast<size_t>(it->second.rank)].size()) continue;
        // The compute that needed it: did it wait for it?
        size_t c = j + 1;
        for (; c < acts.size(); ++c) {
          const Action& x = acts[c];
          if (ppc::is_comm(x.kind)) continue;
          const Action part = backward ? (x.kind == ActionKind::OverlapFB ? x.backward_part() : x)
                                       : (x.kind == ActionKind::OverlapFB ? x.forward_part() : x);
          const bool is_backward = part.kind == ActionKind::B || part.kind == ActionKind::I;
          if (part.stage == a.stage && part.microbatch == a.microbatch &&
              (backward ? is_backward : part.kind == ActionKind::F))
            break;
        }
        if (c == acts.size()) continue;
        const ActionSpan& consumer = t.spans[c];
        const int64_t done = base + t.spans[j].end;
        const int64_t posted = std::max(base + t.spans[j].start,
                                        pt.begin_unix_us * 1000 + pt.spans[it->second.index].start);
        // Only where the receiver was already waiting when both sides had posted is the moment
        // its wait ended the moment the message arrived.
        if (base + consumer.wait > posted) continue;
        const int boundary = plan.layout_stage(backward ? plan.prev_stage(sender) : sender);
        if (done > posted && boundary >= 0 && boundary < S - 1)
          samples[static_cast<size_t>(boundary)].push_back(static_cast<double>(done - posted) /
                                                           1e6);
      }
    }
  }
  std::vector<std::optional<double>> out;
  for (const auto& v : samples)
    out.push_back(v.empty() ? std::nullopt : std::optional<double>(median(v)));
  return out;
}

double post_ms_per_op(const ppc::Plan& plan, const std::vector<RankReport>& ranks) {
  std::vector<double> per_step;
  if (ranks.empty()) return 0;
  const size_t nsteps = ranks.front().steps.size();
  const size_t first = (nsteps > 1 && ranks.front().steps.front().step == 0) ? 1 : 0;
  for (size_t k = first; k < nsteps; ++k) {
    double ns = 0;
    size_t ops = 0;
    for (const RankReport& r : ranks) {
      if (k >= r.steps.size()) continue;
      ns += static_cast<double>(r.steps[k].post_ns);
      for (const Action& a : plan.order()[static_cast<size_t>(r.rank)]) ops += ppc::is_comm(a.kind);
    }
    if (ops) per_step.push_back(ns / static_cast<double>(ops) / 1e6);
  }
  return per_step.empty() ? 0 : median(per_step);
}

std::vector<std::optional<double>> optimizer_ms(const ppc::Plan& plan,
                                                const std::vector<int64_t>& numel,
                                                const std::vector<RankReport>& ranks) {
  const int S = plan.stages_per_copy();
  std::vector<std::optional<double>> out(static_cast<size_t>(S));
  std::vector<double> sum(static_cast<size_t>(S), 0.0);
  std::vector<int> n(static_cast<size_t>(S), 0);
  for (const RankReport& r : ranks) {
    if (r.rank < 0 || r.rank >= plan.pp() || r.steps.empty()) continue;
    const size_t first = (r.steps.size() > 1 && r.steps.front().step == 0) ? 1 : 0;
    std::vector<double> own;
    for (size_t k = first; k < r.steps.size(); ++k)
      own.push_back(static_cast<double>(r.steps[k].own_ns) / 1e6);
    const double ms = median(own);
    // Split over the rank's plan stages by their parameters (equally when none has any).
    const auto& held = plan.placement.rank_stages[static_cast<size_t>(r.rank)];
    double total = 0;
    for (int st : held)
      total += static_cast<double>(numel[static_cast<size_t>(plan.layout_stage(st))]);
    for (int st : held) {
      const size_t k = static_cast<size_t>(plan.layout_stage(st));
      const double share = total > 0 ? static_cast<double>(numel[k]) / total
                                     : 1.0 / static_cast<double>(held.size());
      sum[k] += ms * share;
      ++n[k];
    }
  }
  // DualPipe's two copies of a layout stage: their mean, as for the other entries.
  for (int k = 0; k < S; ++k)
    if (n[static_cast<size_t>(k)] > 0)
      out[static_cast<size_t>(k)] = sum[static_cast<size_t>(k)] / n[static_cast<size_t>(k)];
  return out;
}

}  // namespace pprt
