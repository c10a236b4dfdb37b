// What each action of a plan depends on, shared by lowering, verification and simulation, as the
// rows of kKinds (action_kinds.h) say it:
//
// A compute action needs:
//   F(s, mb):    the activation of prev(s) for mb: F(prev, mb) if prev(s) is on the same rank,
//                else RECV_F(s, mb) on this rank. Nothing for the first stage of a copy.
//   B/I(s, mb):  F(s, mb) (its saved activations, and the loss on the last stage) and the output
//                gradient: B/I(next, mb) if next(s) is on the same rank, else RECV_B(s, mb).
//   W(s, mb):    I(s, mb).
// A send needs what it sends: SEND_F(s, mb) needs F(s, mb); SEND_B(s, mb) needs B/I(s, mb).
// A receive needs nothing local; it is matched by SEND_F(prev, mb) / SEND_B(next, mb).
//
// EventTable records, per (event, stage, microbatch), a time (round, position or simulated
// time) at which it happened; kNever if it has not.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "compiler/action.h"
#include "compiler/plan.h"

namespace ppc {

// The event an action (or part of an OverlapFB) completes.
constexpr Event event_of(ActionKind k) {
  return kHot[static_cast<size_t>(k)].event;
}

const char* event_description(Event e);  // "forward", "input-gradient backward", ...

struct Need {
  Event event;
  int32_t stage;
  int32_t microbatch;
};

// Calls fn(Need) for each dependency of a plain (non-overlap) action, as its row of kKinds says:
// the event of its own (stage, microbatch) it needs first, then the output of the neighbouring
// stage it consumes (that stage's event when it is on the same rank, else the RECV).
template <class Fn>
void for_each_need(const Plan& plan, const Action& a, Fn&& fn) {
  const int s = a.stage, mb = a.microbatch;
  // The kind's row as constants (this runs for every action of every replay).
  visit_kind(a.kind, [&](auto kind) {
    constexpr KindHot k = kHot[static_cast<size_t>(decltype(kind)::value)];
    if constexpr (k.after != Event::None) fn(Need{k.after, s, mb});
    if constexpr (k.input != Flow::None) {
      constexpr FlowInfo in = flow_info(k.input);
      const int from = in.to_next ? plan.prev_stage(s) : plan.next_stage(s);  // where it comes from
      if (from < 0) return;
      if (plan.rank_of(from) == plan.rank_of(s))
        fn(Need{in.local, from, mb});
      else
        fn(Need{in.received, s, mb});
    }
  });
}

// The stage and kind of the matching communication action, and the rank it lives on.
struct CommMatch {
  ActionKind kind;
  int32_t stage;
  int32_t rank;
};
// For SEND_F(s) -> RECV_F(next(s)); RECV_F(s) -> SEND_F(prev(s)); SEND_B(s) -> RECV_B(prev(s));
// RECV_B(s) -> SEND_B(next(s)). stage is -1 when there is no such stage (or `a` is no SEND or
// RECV).
inline CommMatch comm_match(const Plan& plan, const Action& a) {
  if (!is_comm(a.kind)) return CommMatch{a.kind, -1, -1};
  const int other = peer_is_next(a.kind) ? plan.next_stage(a.stage) : plan.prev_stage(a.stage);
  return CommMatch{match_of(a.kind), other, other >= 0 ? plan.rank_of(other) : -1};
}

// Does F(s) send to another rank / does B/I(s) send to another rank?
inline bool forward_crosses_ranks(const Plan& plan, int s) {
  int n = plan.next_stage(s);
  return n >= 0 && plan.rank_of(n) != plan.rank_of(s);
}
inline bool backward_crosses_ranks(const Plan& plan, int s) {
  int p = plan.prev_stage(s);
  return p >= 0 && plan.rank_of(p) != plan.rank_of(s);
}

// A value per (event, stage, microbatch) for the events [First, First + Count).
template <class T, int First = 0, int Count = kNumEvents>
class EventTableOf {
 public:
  static constexpr T kNever = std::numeric_limits<T>::max();

  EventTableOf(int num_stages, int microbatches)
      : stages_(num_stages),
        mbs_(microbatches),
        times_(static_cast<size_t>(Count) * num_stages * microbatches, kNever) {}

  T& at(Event e, int stage, int mb) { return times_[index(e, stage, mb)]; }
  T at(Event e, int stage, int mb) const { return times_[index(e, stage, mb)]; }
  T at(const Need& n) const { return at(n.event, n.stage, n.microbatch); }
  bool happened(const Need& n) const { return at(n) != kNever; }

 private:
  size_t index(Event e, int stage, int mb) const {
    return (static_cast<size_t>(static_cast<int>(e) - First) * stages_ +
            static_cast<size_t>(stage)) *
               mbs_ +
           static_cast<size_t>(mb);
  }
  int stages_, mbs_;
  std::vector<T> times_;
};

// Times (or positions) of every event.
using EventTable = EventTableOf<int32_t>;
// Whether each event happened. One byte each, but not a uint8_t: a store through a character
// type may alias any object, so after every flag set the compiler would reload whatever the
// passes that set millions of them keep in registers.
class EventFlags {
 public:
  EventFlags(int num_stages, int microbatches)
      : stages_(num_stages),
        mbs_(microbatches),
        flags_(static_cast<size_t>(kNumEvents) * num_stages * microbatches, Flag::No) {}

  bool happened(Event e, int stage, int mb) const {
    return flags_[index(e, stage, mb)] == Flag::Yes;
  }
  bool happened(const Need& n) const { return happened(n.event, n.stage, n.microbatch); }
  void set(Event e, int stage, int mb) { flags_[index(e, stage, mb)] = Flag::Yes; }

 private:
  enum class Flag : uint8_t { No, Yes };
  size_t index(Event e, int stage, int mb) const {
    return (static_cast<size_t>(e) * stages_ + static_cast<size_t>(stage)) * mbs_ +
           static_cast<size_t>(mb);
  }
  int stages_, mbs_;
  std::vector<Flag> flags_;
};
// Can compute action `a` start, every input it needs having happened per `ev`? The backward part
// of an OverlapFB may use what its forward part produces: that part runs first.
inline bool inputs_ready(const Plan& plan, const EventFlags& ev, const Action& a) {
  auto ready = [&](const Action& part, const Action* with) {
    bool ok = true;
    for_each_need(plan, part, [&](const Need& n) {
      if (ev.happened(n)) return;
      if (with && n.event == Event::F && n.stage == with->stage && n.microbatch == with->microbatch)
        return;
      ok = false;
    });
    return ok;
  };
  if (is_compound(a.kind)) {
    const Action f = a.forward_part();
    return ready(f, nullptr) && ready(a.backward_part(), &f);
  }
  return ready(a, nullptr);
}

// Positions of the communication events only (RecvF, RecvB, SendF, SendB).
using CommPositions = EventTableOf<int32_t, static_cast<int>(Event::RecvF), 4>;

}  // namespace ppc
