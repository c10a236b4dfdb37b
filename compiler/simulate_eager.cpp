// The eager message model (simulate.h, MessageModel::Eager): what a transport that posts a batch
// without blocking does (pprun on Gloo). A SEND is posted when its rank reaches it and forgotten;
// a RECV is posted likewise; a message arrives its transfer time after the later of the two posts;
// a compute action waits for the messages it reads (its F's activation, its B's or I's gradient)
// and for nothing else. No rank ever waits at a batch.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/diagnostic.h"
#include "compiler/simulate.h"

namespace ppc {

namespace {

constexpr double kUnposted = -1;

struct Message {
  double send_posted = kUnposted, recv_posted = kUnposted;
  double transfer = 0;
  double arrival() const { return std::max(send_posted, recv_posted) + transfer; }
  bool complete() const { return send_posted >= 0 && recv_posted >= 0; }
};

}  // namespace

Execution execute_eager(const Plan& plan, const ExecCosts& costs, bool record_times,
                        const EagerOptions& options) {
  PPC_INTERNAL_ASSERT(plan.is_lowered(), "execute_eager needs a lowered plan");
  const int pp = plan.pp();
  const size_t mbs = static_cast<size_t>(plan.microbatches);
  const size_t ppu = static_cast<size_t>(pp);
  // One message per (receiving stage, microbatch, direction): index (stage * mbs + mb) * 2 + dir,
  // dir 0 for an activation (F), 1 for a gradient (B).
  std::vector<Message> messages(static_cast<size_t>(plan.num_stages()) * mbs * 2);
  auto index = [&](int receiving_stage, int mb, bool gradient) {
    return (static_cast<size_t>(receiving_stage) * mbs + static_cast<size_t>(mb)) * 2 +
           (gradient ? 1 : 0);
  };
  // The message that a SEND or RECV carries.
  auto message_of = [&](const Action& a) -> size_t {
    const int receiver = is_recv(a.kind)        ? a.stage
                         : peer_is_next(a.kind) ? plan.next_stage(a.stage)
                                                : plan.prev_stage(a.stage);
    return index(receiver, a.microbatch, flow_of(a.kind) == Flow::Backward);
  };
  // Whether a stage's rank receives its input (F) or its output's gradient (B, I) from another.
  auto remote_input = [&](int s, bool gradient) {
    const int peer = gradient ? plan.next_stage(s) : plan.prev_stage(s);
    return peer >= 0 && plan.rank_of(peer) != plan.rank_of(s);
  };

  Execution ex;
  ex.end.assign(ppu, 0.0);
  ex.busy.assign(ppu, 0.0);
  ex.first_start.assign(ppu, 0.0);
  ex.last_end.assign(ppu, 0.0);
  if (record_times) {
    ex.times.resize(ppu);
    for (size_t r = 0; r < ppu; ++r) ex.times[r].assign(plan.lowered[r].size(), Interval{});
  }
  std::vector<double> now(ppu, 0.0);
  if (!options.start.empty()) {
    PPC_INTERNAL_ASSERT(options.start.size() == ppu, "execute_eager: a start per rank");
    now = options.start;
  }
  auto post_cost = [&](size_t r) {
    return options.post.empty()       ? 0.0
           : options.post.size() == 1 ? options.post[0]
                                      : options.post[r];
  };
  std::vector<size_t> pc(ppu, 0);
  std::vector<bool> started(ppu, false);
  // Per rank: the comm actions it posted, for their completion times at the end.
  std::vector<std::vector<std::pair<size_t, size_t>>> posted(ppu);  // (action, message)

  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t r = 0; r < ppu; ++r) {
      const auto& order = plan.lowered[r];
      while (pc[r] < order.size()) {
        const Action& a = order[pc[r]];
        if (is_comm(a.kind)) {
          Message& m = messages[message_of(a)];
          const double posting = now[r];
          now[r] += post_cost(r);  // the op is out once posted
          if (is_send(a.kind)) {
            m.send_posted = now[r];
            if (costs.transfer) m.transfer = costs.transfer(a);
            ++ex.sends;
          } else {
            m.recv_posted = now[r];
          }
          if (pc[r] == 0 || !is_comm(order[pc[r] - 1].kind)) ++ex.batches;
          posted[r].emplace_back(pc[r], message_of(a));
          if (record_times) ex.times[r][pc[r]].start = posting;
          ++pc[r];
          progress = true;
          continue;
        }
        // A compute action: when every message it reads has arrived.
        double ready = now[r];
        bool waiting = false;
        for_each_part(a, [&](const Action& p) {
          const Flow input = input_of(p.kind);
          const bool gradient = input == Flow::Backward;
          if (input == Flow::None || !remote_input(p.stage, gradient)) return;
          const Message& m = messages[index(p.stage, p.microbatch, gradient)];
          if (!m.complete())
            waiting = true;
          else
            ready = std::max(ready, m.arrival());
        });
        if (waiting) break;
        const double cost = costs.compute ? costs.compute(a, static_cast<int>(r)) : 0.0;
        const double end = ready + cost;
        if (!started[r]) ex.first_start[r] = ready;
        started[r] = true;
        ex.last_end[r] = end;
        ex.busy[r] += cost;
        if (record_times) ex.times[r][pc[r]] = Interval{ready, end};
        if (costs.on_compute) costs.on_compute(static_cast<int>(r), a, ready, end);
        now[r] = end;
        ++pc[r];
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < ppu; ++r) {
    if (pc[r] < plan.lowered[r].size()) {
      ex.errors.push_back(
          fmt::format("rank {} waits for ever at action {} ({}) under the eager message model", r,
                      pc[r], to_string(plan.lowered[r][pc[r]])));
      continue;
    }
    double end = now[r];
    for (const auto& [i, k] : posted[r]) {
      const Message& m = messages[k];
      const double done = m.arrival();
      if (record_times) {
        const Action& a = plan.lowered[r][i];
        ex.times[r][i].end = std::max(done, is_send(a.kind) ? m.send_posted : m.recv_posted);
      }
      end = std::max(end, done);  // the step waits for its sends to complete
    }
    ex.end[r] = end;
  }
  return ex;
}

}  // namespace ppc
