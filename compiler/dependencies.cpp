#include "compiler/dependencies.h"

namespace ppc {

const char* event_description(Event e) {
  switch (e) {
    case Event::F:
      return "forward";
    case Event::BI:
      return "backward";
    case Event::W:
      return "weight-gradient backward";
    case Event::RecvF:
      return "receive of the activation";
    case Event::RecvB:
      return "receive of the gradient";
    case Event::SendF:
      return "send of the activation";
    case Event::SendB:
      return "send of the gradient";
    case Event::None:
      break;
  }
  return "?";
}

}  // namespace ppc
