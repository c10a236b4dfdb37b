// The unit of a plan: one action a rank performs.
//
// Text notation is identical to torch.distributed.pipelining's _Action, so plans round-trip with
// PyTorch: "0F1" (stage 0, forward, microbatch 1), "3I0", "2W4", "1B2", "2SEND_B0", "3RECV_F1",
// "(0F3;3B1)OVERLAP_F_B". Communication actions name the stage that sends or receives; the peer
// rank is not part of the text (it follows from the placement) but is stored in the action.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/action_kinds.h"

namespace ppc {

struct Action {
  ActionKind kind = ActionKind::F;
  // For OverlapFB: kind of the backward part (B or I); otherwise unused (F).
  ActionKind sub_kind = ActionKind::F;
  int16_t peer = -1;       // communication: the other rank (pp is at most 4096); -1 otherwise
  int32_t stage = 0;       // OverlapFB: the forward part's stage
  int32_t microbatch = 0;  // OverlapFB: the forward part's microbatch
  int32_t stage2 = -1;     // OverlapFB: the backward part's stage
  int32_t microbatch2 = -1;

  static Action compute(ActionKind k, int stage, int mb) {
    return Action{k, ActionKind::F, -1, stage, mb, -1, -1};
  }
  static Action comm(ActionKind k, int stage, int mb, int peer) {
    return Action{k, ActionKind::F, static_cast<int16_t>(peer), stage, mb, -1, -1};
  }
  static Action overlap(int f_stage, int f_mb, ActionKind b_kind, int b_stage, int b_mb) {
    return Action{ActionKind::OverlapFB, b_kind, -1, f_stage, f_mb, b_stage, b_mb};
  }

  // The forward and backward parts of an OverlapFB as plain actions.
  Action forward_part() const { return compute(ActionKind::F, stage, microbatch); }
  Action backward_part() const { return compute(sub_kind, stage2, microbatch2); }

  bool operator==(const Action& o) const = default;
};
static_assert(sizeof(Action) == 20, "plans hold millions of actions: keep Action small");

// Calls fn(part) for each plain part of a compute action: the forward then the backward part of
// an OverlapFB, else the action itself.
template <class Fn>
void for_each_part(const Action& a, Fn&& fn) {
  if (is_compound(a.kind)) {
    fn(a.forward_part());
    fn(a.backward_part());
  } else {
    fn(a);
  }
}

// The B or I compute action `a` runs (an OVERLAP_F_B's backward part), if any.
inline std::optional<Action> backward_run(const Action& a) {
  const Action b = a.kind == ActionKind::OverlapFB ? a.backward_part() : a;
  if (b.kind != ActionKind::B && b.kind != ActionKind::I) return std::nullopt;
  return b;
}

// Whether compute action `a` runs an F (an OVERLAP_F_B's forward part) whose own B or I (same
// stage and microbatch) is `next`'s, the rank's next compute action: offloading keeps that F's
// activations on the device (the round trip would free nothing). pprun's offloading
// (runtime/train/slot_offload.h) and the simulator's memory follow this one rule.
inline bool own_backward_next(const Action& a, const Action& next) {
  if (a.kind != ActionKind::F && a.kind != ActionKind::OverlapFB) return false;
  const std::optional<Action> b = backward_run(next);
  return b && b->stage == a.stage && b->microbatch == a.microbatch;
}

// PyTorch notation. The peer is not printed.
std::string to_string(const Action& a);
void append_to(std::string& out, const Action& a);

// The longest notation of an action: "(<int>F<int>;<int>B<int>)OVERLAP_F_B" with 11-character ints.
inline constexpr size_t kMaxActionText = 64;
// Writes the notation of `a` at `out`, which has room for kMaxActionText characters, and returns
// the end. For emitters that write millions of actions without a string each.
char* format_action(const Action& a, char* out);
// The length of the notation of `a` (what format_action writes), without writing it.
size_t action_text_size(const Action& a);

// Parses PyTorch notation. Returns nullopt and sets `error` (a message without location) on
// malformed text. The peer of a communication action is left at -1: resolve it with a placement.
std::optional<Action> parse_action(std::string_view text, std::string* error);

struct ActionHash {
  size_t operator()(const Action& a) const noexcept;
};

}  // namespace ppc
