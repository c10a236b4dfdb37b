#include "compiler/all_to_all.h"

#include <fmt/format.h>

#include <algorithm>

namespace ppc {

namespace {

const char* comm_name(Communicator c) {
  return c == Communicator::Forward ? "forward" : "backward";
}

// Appends the all-to-alls of one plain part (F, B, I or W) of action `index`.
void append_part(const Plan& plan, const std::vector<std::vector<int>>& moe, const Action& p,
                 int index, int part_index, std::vector<AllToAll>& out) {
  const auto& layers = moe[static_cast<size_t>(p.stage)];
  if (layers.empty() || p.kind == ActionKind::W) return;
  AllToAll a;
  a.part = p.kind;
  a.stage = p.stage;
  a.microbatch = p.microbatch;
  a.action = index;
  a.part_index = part_index;
  auto push = [&](AllToAllOp op, bool transposed, bool recompute) {
    a.op = op;
    a.transposed = transposed;
    a.recompute = recompute;
    out.push_back(a);
  };
  if (p.kind == ActionKind::F) {
    a.comm = Communicator::Forward;
    for (int l : layers) {
      a.layer = l;
      push(AllToAllOp::Dispatch, false, false);
      push(AllToAllOp::Combine, false, false);
    }
    return;
  }
  a.comm = Communicator::Backward;
  const bool rerun = plan.memory.mode_of(p.stage, LayerKind::Decoder) == MemoryMode::Full;
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    a.layer = *it;
    if (rerun) {
      push(AllToAllOp::Dispatch, false, true);
      push(AllToAllOp::Combine, false, true);
    }
    push(AllToAllOp::Combine, true, false);
    push(AllToAllOp::Dispatch, true, false);
  }
}

// One rank of an EP group as the group runs: its all-to-alls per communicator, cut into the
// actions that issue them (an OVERLAP_F_B's two communicators run concurrently).
struct Member {
  int rank = 0;
  std::vector<AllToAll> seq;
  std::vector<size_t> by_comm[2];  // positions in seq of each communicator's all-to-alls
  size_t next[2] = {0, 0};         // how many of each communicator's are done

  // The action a communicator's next all-to-all belongs to; -1 when there is none.
  long head_action(int c) const {
    return next[c] < by_comm[c].size() ? seq[by_comm[c][next[c]]].action : -1;
  }
  // The action the rank is in: the earlier of the two heads.
  long current() const {
    long a = head_action(0), b = head_action(1);
    if (a < 0) return b;
    if (b < 0) return a;
    return std::min(a, b);
  }
  // Whether the rank is waiting in communicator c's next all-to-all now.
  bool waits_in(int c) const { return head_action(c) >= 0 && head_action(c) == current(); }
  const AllToAll& head(int c) const { return seq[by_comm[c][next[c]]]; }
};

std::string ranks_text(const std::vector<Member>& g) {
  std::string s;
  for (const Member& m : g) s += (s.empty() ? "" : ", ") + std::to_string(m.rank);
  return s;
}

// Runs a group's all-to-alls (an all-to-all completes once every member waits in it; the orders
// per communicator agree): where some cannot finish, the line that says who waits for what.
std::string deadlock(std::vector<Member>& group, int pipeline_rank) {
  for (bool progress = true; progress;) {
    progress = false;
    for (int c = 0; c < 2; ++c)
      if (std::all_of(group.begin(), group.end(), [&](const Member& m) { return m.waits_in(c); })) {
        for (Member& m : group) ++m.next[c];
        progress = true;
      }
  }
  // Some member waits in communicator c's all-to-all that another has not reached.
  for (int c = 0; c < 2; ++c)
    for (const Member& a : group) {
      if (!a.waits_in(c)) continue;
      for (const Member& b : group) {
        if (b.waits_in(c)) continue;
        const int oc = 1 - c;
        return fmt::format(
            "all-to-all deadlock: EP group of pipeline rank {} (ranks {}): rank {} waits in the {} "
            "all-to-all #{} ({}), which rank {} has not reached: it waits in the {} all-to-all #{} "
            "({}) first",
            pipeline_rank, ranks_text(group), a.rank, comm_name(static_cast<Communicator>(c)),
            a.next[c], describe(a.head(c)), b.rank, comm_name(static_cast<Communicator>(oc)),
            b.next[oc], describe(b.head(oc)));
      }
    }
  return "";
}

// Whether two plans have one skeleton (what the replicas of one job share).
std::string skeleton_difference(const Plan& a, const Plan& b) {
  if (!(a.layout == b.layout)) return "layout";
  if (!(a.placement == b.placement)) return "placement";
  if (a.microbatches != b.microbatches) return "microbatches";
  if (a.copies != b.copies) return "copies";
  if (!(a.expert_parallel == b.expert_parallel)) return "expert_parallel";
  return "";
}

}  // namespace

std::string describe(const AllToAll& a) {
  return fmt::format("{}{}{} of layer {} (stage {}, {} of microbatch {})",
                     a.op == AllToAllOp::Dispatch ? "dispatch" : "combine",
                     a.transposed ? " backward" : "", a.recompute ? " recomputed" : "", a.layer,
                     a.stage, kind_info(a.part).name, a.microbatch);
}

std::vector<std::vector<int>> moe_layers(const Plan& plan) {
  std::vector<std::vector<int>> out(static_cast<size_t>(plan.num_stages()));
  if (!plan.expert_parallel.on() || !plan.has_model) return out;
  std::vector<std::vector<int>> by_layout(plan.layout.stages.size());
  int t = 0;
  for (size_t s = 0; s < plan.layout.stages.size(); ++s)
    for (LayerKind k : plan.layout.stages[s])
      if (k == LayerKind::Decoder) {
        if (t >= plan.expert_parallel.first_dense) by_layout[s].push_back(t);
        ++t;
      }
  for (int s = 0; s < plan.num_stages(); ++s)
    out[static_cast<size_t>(s)] = by_layout[static_cast<size_t>(plan.layout_stage(s))];
  return out;
}

std::vector<AllToAll> all_to_all_sequence(const Plan& plan, int rank,
                                          const std::vector<std::vector<int>>& moe) {
  std::vector<AllToAll> out;
  const auto& order = plan.compute[static_cast<size_t>(rank)];
  for (size_t i = 0; i < order.size(); ++i) {
    int part_index = 0;
    for_each_part(order[i], [&](const Action& p) {
      append_part(plan, moe, p, static_cast<int>(i), part_index++, out);
    });
  }
  return out;
}

int all_to_all_count(const Plan& plan, const std::vector<std::vector<int>>& moe, int stage,
                     ActionKind kind) {
  std::vector<AllToAll> out;
  append_part(plan, moe, Action::compute(kind, stage, 0), 0, 0, out);
  return static_cast<int>(out.size());
}

std::string check_expert_parallel(const Plan& plan) {
  const ExpertParallel& e = plan.expert_parallel;
  if (e.ep < 1) return fmt::format("ep {} is less than 1", e.ep);
  if (e.first_dense < 0) return fmt::format("first_dense {} is negative", e.first_dense);
  if (!e.on()) return "";
  for (const auto& layers : moe_layers(plan))
    if (!layers.empty()) return "";
  const int decoders = plan.has_model ? plan.layout.count(LayerKind::Decoder) : 0;
  return fmt::format(
      "ep {} needs MoE layers, and the plan has none ({} decoder layer{}, the first {} dense)",
      e.ep, decoders, decoders == 1 ? "" : "s", e.first_dense);
}

std::vector<std::string> check_all_to_all_orders(const std::vector<const Plan*>& replicas,
                                                 size_t max_errors) {
  std::vector<std::string> errors;
  if (replicas.empty()) return errors;
  auto error = [&](std::string msg) {
    if (errors.size() < max_errors) errors.push_back(std::move(msg));
  };
  const Plan& first = *replicas[0];
  const int dp = static_cast<int>(replicas.size());
  const int ep = first.expert_parallel.ep;
  if (!first.expert_parallel.on()) return errors;
  if (dp % ep != 0) {
    error(fmt::format("expert parallelism: ep {} does not divide the {} data-parallel replicas", ep,
                      dp));
    return errors;
  }
  for (int d = 1; d < dp; ++d)
    if (std::string diff = skeleton_difference(first, *replicas[static_cast<size_t>(d)]);
        !diff.empty()) {
      error(fmt::format("replica {}'s plan has another {} than replica 0's", d, diff));
      return errors;
    }
  const auto moe = moe_layers(first);
  for (int p = 0; p < first.pp(); ++p)
    for (int g0 = 0; g0 < dp; g0 += ep) {
      std::vector<Member> group(static_cast<size_t>(ep));
      for (int k = 0; k < ep; ++k) {
        Member& m = group[static_cast<size_t>(k)];
        m.rank = p * dp + g0 + k;
        m.seq = all_to_all_sequence(*replicas[static_cast<size_t>(g0 + k)], p, moe);
        for (size_t i = 0; i < m.seq.size(); ++i)
          m.by_comm[static_cast<int>(m.seq[i].comm)].push_back(i);
      }
      // 1. The same all-to-alls in the same order on each communicator.
      bool same = true;
      for (int c = 0; c < 2 && same; ++c)
        for (size_t k = 1; k < group.size() && same; ++k) {
          const Member &a = group[0], &b = group[k];
          const size_t na = a.by_comm[c].size(), nb = b.by_comm[c].size();
          for (size_t i = 0; i < std::max(na, nb); ++i) {
            const AllToAll* x = i < na ? &a.seq[a.by_comm[c][i]] : nullptr;
            const AllToAll* y = i < nb ? &b.seq[b.by_comm[c][i]] : nullptr;
            if (x && y && x->same_collective(*y)) continue;
            auto what = [](const AllToAll* z) { return z ? describe(*z) : std::string("none"); };
            error(fmt::format(
                "all-to-all order: ranks {} and {} (EP group of pipeline rank {}: ranks {}) issue "
                "different {} all-to-alls #{}: rank {} {}, rank {} {}",
                a.rank, b.rank, p, ranks_text(group), comm_name(static_cast<Communicator>(c)), i,
                a.rank, what(x), b.rank, what(y)));
            same = false;
            break;
          }
        }
      if (!same) continue;
      // 2. Run them, the two communicators as each rank's actions interleave them.
      if (std::string why = deadlock(group, p); !why.empty()) error(std::move(why));
    }
  return errors;
}

}  // namespace ppc
