// Expert parallelism's all-to-alls as a step measured them (all_to_all_stats.h).
#include "runtime/output/all_to_all_stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "runtime/output/median.h"

namespace pprt {

namespace {

int64_t common(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// The length of the union of `pieces` (sorted here).
int64_t union_length(std::vector<std::pair<int64_t, int64_t>> pieces) {
  std::sort(pieces.begin(), pieces.end());
  int64_t length = 0, reached = INT64_MIN;
  for (const auto& [b, e] : pieces) {
    if (e <= reached) continue;
    length += e - std::max(b, reached);
    reached = e;
  }
  return length;
}

// The steps kept for analysis: the first of the run left out when there are others.
template <class F>
void for_analysed(const RankReport& r, F&& f) {
  for (size_t k = r.steps.size() > 1 ? 1 : 0; k < r.steps.size(); ++k) f(k, r.steps[k]);
}

}  // namespace

AllToAllStep all_to_all_step(const StepTiming& t) {
  AllToAllStep out;
  std::vector<std::pair<int64_t, int64_t>> pieces;  // the exposed parts, for the union
  for (const AllToAllSpan& a : t.all_to_all) {
    ++out.count;
    out.total_ns += a.end - a.start;
    out.sent_bytes += a.sent_bytes;
    const OverlapSpan* o = nullptr;
    for (const OverlapSpan& c : t.overlaps)
      if (a.start >= c.begin && a.start <= std::max(c.forward_end, c.backward_end)) o = &c;
    if (o == nullptr) {
      out.exposed_ns += a.end - a.start;
      pieces.emplace_back(a.start, a.end);
      continue;
    }
    // The other part: the backward one for a forward all-to-all, and the other way round.
    const int64_t other_end = a.backward ? o->forward_end : o->backward_end;
    const int64_t in0 = std::max(a.start, o->begin), in1 = std::min(a.end, other_end);
    if (a.start < std::min(a.end, o->begin))
      pieces.emplace_back(a.start, std::min(a.end, o->begin));
    if (std::max(a.start, other_end) < a.end)
      pieces.emplace_back(std::max(a.start, other_end), a.end);
    int64_t covered = common(a.start, a.end, o->begin, other_end);
    for (const AllToAllSpan& b : t.all_to_all)  // the other part's own all-to-alls
      if (b.backward != a.backward && b.start >= o->begin && b.start <= other_end) {
        const int64_t both = common(in0, in1, b.start, b.end);
        covered -= both;
        if (both > 0) pieces.emplace_back(std::max(in0, b.start), std::min(in1, b.end));
      }
    out.exposed_ns += (a.end - a.start) - std::max<int64_t>(0, covered);
  }
  out.exposed_wall_ns = union_length(std::move(pieces));
  return out;
}

AllToAllSummary summarise_all_to_all(const std::vector<RankReport>& ranks) {
  AllToAllSummary s;
  size_t steps = 0;
  for (const RankReport& r : ranks) steps = std::max(steps, r.steps.size());
  std::vector<double> count, total, exposed, wall, sent;
  for (size_t k = steps > 1 ? 1 : 0; k < steps; ++k) {
    AllToAllStep sum;
    int n = 0;
    for (const RankReport& r : ranks) {
      if (k >= r.steps.size()) continue;
      const AllToAllStep one = all_to_all_step(r.steps[k]);
      if (one.count == 0) continue;
      sum.count += one.count;
      sum.total_ns += one.total_ns;
      sum.exposed_ns += one.exposed_ns;
      sum.exposed_wall_ns += one.exposed_wall_ns;
      sum.sent_bytes += one.sent_bytes;
      ++n;
    }
    if (n == 0) continue;
    count.push_back(static_cast<double>(sum.count) / n);
    total.push_back(static_cast<double>(sum.total_ns) / n / 1e6);
    exposed.push_back(static_cast<double>(sum.exposed_ns) / n / 1e6);
    wall.push_back(static_cast<double>(sum.exposed_wall_ns) / n / 1e6);
    sent.push_back(static_cast<double>(sum.sent_bytes) / n / 1e6);
  }
  s.steps = static_cast<int>(total.size());
  s.count = median(count);
  s.total_ms = median(total);
  s.exposed_ms = median(exposed);
  s.exposed_wall_ms = median(wall);
  s.sent_mb = median(sent);
  return s;
}

std::string all_to_all_text(const AllToAllSummary& s) {
  if (s.steps == 0) return "";
  return fmt::format(
      "all-to-alls (expert parallelism, median of {} step{}, per rank): {:g} per step, {:.2f} ms "
      "({:.3f} MB sent), {:.2f} ms exposed ({:.1f} % hidden by OVERLAP_F_B; {:.2f} ms of the "
      "step with no thread computing)\n",
      s.steps, s.steps == 1 ? "" : "s", s.count, s.total_ms, s.sent_mb, s.exposed_ms,
      100.0 * s.hidden(), s.exposed_wall_ms);
}

AllToAllProfile profile_all_to_all(const std::vector<RankReport>& ranks,
                                   int64_t tokens_per_microbatch) {
  std::vector<double> per_op, k;
  for (const RankReport& r : ranks)
    for_analysed(r, [&](size_t, const StepTiming& t) {
      int64_t ns = 0, rows = 0;
      int ops = 0, dispatches = 0;
      bool after_counts[2] = {false, false};  // per communicator: the last one was a counts'
      for (const AllToAllSpan& a : t.all_to_all) {
        ns += a.end - a.start;
        bool& counts = after_counts[a.backward ? 1 : 0];
        if (a.counts) {
          counts = true;
          continue;
        }
        ++ops;
        if (counts && !a.backward) rows += a.sent_rows, ++dispatches;  // a forward's dispatch
        counts = false;
      }
      if (ops > 0) per_op.push_back(static_cast<double>(ns) / ops / 1e6);
      if (dispatches > 0 && tokens_per_microbatch > 0)
        k.push_back(static_cast<double>(rows) / dispatches /
                    static_cast<double>(tokens_per_microbatch));
    });
  return AllToAllProfile{median(per_op), median(k)};
}

}  // namespace pprt
