#include "compiler/dependencies.h"

namespace ppc {

const char* event_description(Event e) {
  switch (e) {
    case Event::F: return "forward";
    case Event::BI: return "backward";
    case Event::W: return "weight-gradient backward";
    case Event::RecvF: return "receive of the activation";
    case Event::RecvB: return "receive of the gradient";
    case Event::SendF: return "send of the activation";
    case Event::SendB: return "send of the gradient";
  }
  return "?";
}

CommMatch comm_match(const Plan& plan, const Action& a) {
  int other = -1;
  ActionKind kind = a.kind;
  switch (a.kind) {
    case ActionKind::SendF: other = plan.next_stage(a.stage); kind = ActionKind::RecvF; break;
    case ActionKind::RecvF: other = plan.prev_stage(a.stage); kind = ActionKind::SendF; break;
    case ActionKind::SendB: other = plan.prev_stage(a.stage); kind = ActionKind::RecvB; break;
    case ActionKind::RecvB: other = plan.next_stage(a.stage); kind = ActionKind::SendB; break;
    default: break;
  }
  return CommMatch{kind, other, other >= 0 ? plan.rank_of(other) : -1};
}

}  // namespace ppc
