// The dependency graph in Graphviz: one node per compute action, clustered by rank and kept in
// program order; edges for the data dependencies (dependencies.h): solid
// within a rank, dashed and colored between ranks (each such edge is one SEND->RECV pair).
// dot chooses the vertical order of the rank clusters to reduce crossings: with loop placement
// and vpp > 1 the ring edges (last rank -> rank 0) can make it put a rank out of order; the
// clusters are labelled.
#include <fmt/format.h>

#include <iterator>
#include <ostream>

#include "compiler/visualization.h"
#include "compiler/viz_common.h"

namespace ppc {

namespace {

struct NodeRef {
  int32_t rank = -1, index = -1;  // into plan.compute
};

// The compute action that produces each event: (event F / BI / W, stage, microbatch) -> node.
class Producers {
 public:
  explicit Producers(const Plan& plan)
      : rank_(plan.num_stages(), plan.microbatches), index_(plan.num_stages(), plan.microbatches) {
    for (int r = 0; r < plan.pp(); ++r) {
      const auto& acts = plan.compute[static_cast<size_t>(r)];
      for (size_t i = 0; i < acts.size(); ++i) {
        const Action& a = acts[i];
        if (is_compute(a.kind))
          for_each_part(
              a, [&](const Action& p) { set(event_of(p.kind), p.stage, p.microbatch, r, i); });
      }
    }
  }
  NodeRef of(Event e, int stage, int mb) const {
    if (stage < 0) return {};
    const int32_t r = rank_.at(e, stage, mb);
    if (r == EventTable::kNever) return {};
    return NodeRef{r, index_.at(e, stage, mb)};
  }

 private:
  void set(Event e, int stage, int mb, int r, size_t i) {
    rank_.at(e, stage, mb) = r;
    index_.at(e, stage, mb) = static_cast<int32_t>(i);
  }
  EventTable rank_, index_;
};

}  // namespace

void emit_dot(const Plan& plan, std::ostream& os) {
  fmt::memory_buffer b;
  auto out = std::back_inserter(b);
  const int vpp = std::max(plan.vpp(), 1);
  fmt::format_to(
      out,
      "// ppcompile --emit dot: render with `dot -Tsvg plan.dot -o plan.svg` (or ppcompile --emit "
      "png)\n"
      "digraph plan {{\n"
      "  graph [rankdir=LR, newrank=true, nodesep=0.12, ranksep=0.22, fontname=\"Helvetica\", "
      "fontsize=12, labelloc=t, label=\"{} · pp {} · vpp {} · {} microbatches: dependency graph\\n"
      "dark: data dependency on the rank · pale blue: forward to its backward (saved activations) "
      "· "
      "dashed: SEND → RECV between ranks (blue activation, red gradient) · gray: program "
      "order\"];\n"
      "  node [shape=box, style=\"filled,rounded\", fontname=\"Helvetica\", fontsize=10, "
      "height=0.3, "
      "width=0.45, margin=\"0.04,0.02\", penwidth=0];\n"
      "  edge [arrowsize=0.5];\n",
      viz::escaped(plan.schedule), plan.pp(), plan.vpp(), plan.microbatches);
  auto node_id = [](int r, size_t i) { return fmt::format("a{}_{}", r, i); };

  for (int r = 0; r < plan.pp(); ++r) {
    const auto& acts = plan.compute[static_cast<size_t>(r)];
    fmt::format_to(out,
                   "  subgraph cluster_rank{} {{\n    label=\"rank {}\"; style=\"rounded\"; "
                   "color=\"#bbbbbb\";\n",
                   r, r);
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      const viz::Rgb fill = viz::shade(viz::kind_rgb(a.kind), viz::chunk_of(plan, a), vpp);
      const std::string label = is_compound(a.kind)
                                    ? fmt::format("{}F{}\\n{}{}{}", a.stage, a.microbatch, a.stage2,
                                                  kind_name(a.sub_kind), a.microbatch2)
                                    : to_string(a);
      fmt::format_to(
          out,
          "    {} [label=\"{}\", fillcolor=\"{}\", fontcolor=\"{}\", tooltip=\"{} on rank {}\"];\n",
          node_id(r, i), label, viz::hex(fill), viz::is_light(fill) ? "#1a1a1a" : "#ffffff",
          to_string(a), r);
    }
    // Program order: keeps each rank's actions in a row, left to right.
    for (size_t i = 1; i < acts.size(); ++i)
      fmt::format_to(out, "    {} -> {} [color=\"#cccccc\", weight=20, arrowhead=none];\n",
                     node_id(r, i - 1), node_id(r, i));
    fmt::format_to(out, "  }}\n");
  }

  // Data dependencies. A need on another rank's compute (through a RECV) is a SEND->RECV edge.
  const Producers producers(plan);
  for (int r = 0; r < plan.pp(); ++r) {
    const auto& acts = plan.compute[static_cast<size_t>(r)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& whole = acts[i];
      auto edges_of = [&](const Action& part) {
        for_each_need(plan, part, [&](const Need& n) {
          NodeRef from;
          bool remote = false;
          switch (n.event) {
            case Event::RecvF:
              from = producers.of(Event::F, plan.prev_stage(n.stage), n.microbatch);
              remote = true;
              break;
            case Event::RecvB:
              from = producers.of(Event::BI, plan.next_stage(n.stage), n.microbatch);
              remote = true;
              break;
            default:
              from = producers.of(n.event, n.stage, n.microbatch);
              break;
          }
          if (from.rank < 0 || (from.rank == r && static_cast<size_t>(from.index) == i)) return;
          if (!remote) {
            const bool stash = n.event == Event::F && n.stage == part.stage;  // F -> its own B/I
            fmt::format_to(out, "  {} -> {} [{}];\n",
                           node_id(from.rank, static_cast<size_t>(from.index)), node_id(r, i),
                           stash ? "color=\"#9db4d0\", penwidth=0.8" : "color=\"#333333\"");
            return;
          }
          const bool fwd = n.event == Event::RecvF;
          const int send_stage = fwd ? plan.prev_stage(n.stage) : plan.next_stage(n.stage);
          fmt::format_to(out,
                         "  {} -> {} [style=dashed, color=\"{}\", penwidth=1.2, "
                         "tooltip=\"{}{}{} -> {}{}{}\"];\n",
                         node_id(from.rank, static_cast<size_t>(from.index)), node_id(r, i),
                         viz::hex(viz::kind_rgb(fwd ? ActionKind::SendF : ActionKind::SendB)),
                         send_stage, fwd ? "SEND_F" : "SEND_B", n.microbatch, n.stage,
                         fwd ? "RECV_F" : "RECV_B", n.microbatch);
        });
      };
      for_each_part(whole, edges_of);
    }
  }
  fmt::format_to(out, "}}\n");
  os.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace ppc
