// The action kinds, described once: one row per kind in kKinds (its name, its role, what it
// depends on, the data it produces or carries, the memory it holds or frees, its unit cost and how
// emitters show it), which the passes read instead of switching on the kind.
//
// A new kind is a value of ActionKind, its row here and what only code can say: the schedules that
// make it, its time in the cost model (StageCost::time, cost_model.h), what the verifier counts
// for it (verify.cpp's check 2) and what the runtime runs for it. The rows are in the enum's
// order, plain kinds first and compound ones (made of plain parts, Action::sub_kind) last.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace ppc {

enum class ActionKind : uint8_t {
  F,          // forward
  B,          // full backward (input and weight gradients)
  I,          // backward, input gradient only
  W,          // backward, weight gradient only
  SendF,      // send a forward activation to the next stage
  RecvF,      // receive a forward activation from the previous stage
  SendB,      // send an input gradient to the previous stage
  RecvB,      // receive an output gradient from the next stage
  OverlapFB,  // a forward and a backward run together (DualPipe); see Action::sub_kind
};

inline constexpr int kNumActionKinds = 9;

// What has happened to a (stage, microbatch): the event an action completes, and the events
// actions wait for (dependencies.h). None: no event (a compound action's parts complete theirs).
enum class Event : uint8_t { F, BI, W, RecvF, RecvB, SendF, SendB, None };
inline constexpr int kNumEvents = 7;  // the events but None

// What an action is.
enum class Role : uint8_t {
  Compute,   // runs a part of the model on one (stage, microbatch)
  Send,      // sends a tensor to the rank of a neighbouring stage
  Recv,      // receives one from it
  Compound,  // compute parts run together: OVERLAP_F_B, a forward and a backward
};

// The way data moves between the stages of a model copy.
enum class Flow : uint8_t {
  None,
  Forward,   // an activation, from a stage to the next
  Backward,  // a gradient, from a stage to the previous
};

// The activation memory of its (stage, microbatch) that a compute action takes or gives back:
// the simulator's memory timeline and the verifier's in-flight count.
enum class Memory : uint8_t {
  None,
  Holds,        // keeps the stage's activations from its start until a backward frees them (F)
  Frees,        // frees them all at its end (B)
  FreesInput,   // frees them at its end, but the part the weight gradient still needs (I; that
                // part is CostModel::weight_grad_memory of them)
  FreesWeight,  // frees that part at its end (W)
};

struct KindInfo {
  ActionKind kind;
  const char* name;  // PyTorch's notation: "F", "SEND_F", "OVERLAP_F_B"
  Role role;
  // Its dependencies, as dependencies.h's for_each_need reads them, for stage s and microbatch mb:
  Event event;  // the event it completes
  Event after;  // an event of (s, mb) itself that it needs first: B and I need F, W needs B or I,
                // a SEND what it sends
  Flow input;   // the neighbour's output it consumes (flow_info: from which stage, and what it
                // waits for when that stage is on this rank or on another)
  // What it produces (compute) or carries (SEND and RECV): lowering sends a compute's output to the
  // rank of the stage that consumes it.
  Flow flow;
  Memory memory;
  double unit_cost;  // its time under unit costs (a compound action: the sum of its parts')
  // How emitters show it.
  char letter;              // the compact table's letter ('?' for SEND and RECV: never shown)
  const char* short_name;   // SVG and HTML class, legend key
  const char* legend;       // the table's legend ("" for SEND and RECV)
  const char* description;  // SVG and HTML legend
  uint32_t rgb;             // colour (Tableau 10: tells the kinds apart for most colour-blind
                            // readers too); SEND and RECV take the colour of what they carry
  const char* ansi;         // the terminal table's colour ("" for SEND and RECV)
  int8_t stack;             // SVG's aggregated view: stacking order of the compute kinds, or -1
};

inline constexpr KindInfo kKinds[kNumActionKinds] = {
    {.kind = ActionKind::F,
     .name = "F",
     .role = Role::Compute,
     .event = Event::F,
     .after = Event::None,
     .input = Flow::Forward,
     .flow = Flow::Forward,
     .memory = Memory::Holds,
     .unit_cost = 1,
     .letter = 'F',
     .short_name = "F",
     .legend = "forward",
     .description = "forward",
     .rgb = 0x4E79A7,  // blue
     .ansi = "\x1b[34m",
     .stack = 0},
    {.kind = ActionKind::B,
     .name = "B",
     .role = Role::Compute,
     .event = Event::BI,
     .after = Event::F,
     .input = Flow::Backward,
     .flow = Flow::Backward,
     .memory = Memory::Frees,
     .unit_cost = 2,
     .letter = 'B',
     .short_name = "B",
     .legend = "backward",
     .description = "backward",
     .rgb = 0x59A14F,  // green
     .ansi = "\x1b[32m",
     .stack = 2},
    {.kind = ActionKind::I,
     .name = "I",
     .role = Role::Compute,
     .event = Event::BI,
     .after = Event::F,
     .input = Flow::Backward,
     .flow = Flow::Backward,
     .memory = Memory::FreesInput,
     .unit_cost = 1,
     .letter = 'I',
     .short_name = "I",
     .legend = "input-grad backward",
     .description = "backward (input grad)",
     .rgb = 0xF28E2B,     // orange
     .ansi = "\x1b[33m",  // yellow
     .stack = 3},
    {.kind = ActionKind::W,
     .name = "W",
     .role = Role::Compute,
     .event = Event::W,
     .after = Event::BI,
     .input = Flow::None,
     .flow = Flow::None,
     .memory = Memory::FreesWeight,
     .unit_cost = 1,
     .letter = 'W',
     .short_name = "W",
     .legend = "weight-grad backward",
     .description = "backward (weight grad)",
     .rgb = 0xB07AA1,  // purple
     .ansi = "\x1b[35m",
     .stack = 4},
    {.kind = ActionKind::SendF,
     .name = "SEND_F",
     .role = Role::Send,
     .event = Event::SendF,
     .after = Event::F,
     .input = Flow::None,
     .flow = Flow::Forward,
     .memory = Memory::None,
     .unit_cost = 0,
     .letter = '?',
     .short_name = "SF",
     .legend = "",
     .description = "activation transfer",
     .rgb = 0x2B4C7E,  // dark blue: activations
     .ansi = "",
     .stack = -1},
    {.kind = ActionKind::RecvF,
     .name = "RECV_F",
     .role = Role::Recv,
     .event = Event::RecvF,
     .after = Event::None,
     .input = Flow::None,
     .flow = Flow::Forward,
     .memory = Memory::None,
     .unit_cost = 0,
     .letter = '?',
     .short_name = "RF",
     .legend = "",
     .description = "activation transfer",
     .rgb = 0x2B4C7E,
     .ansi = "",
     .stack = -1},
    {.kind = ActionKind::SendB,
     .name = "SEND_B",
     .role = Role::Send,
     .event = Event::SendB,
     .after = Event::BI,
     .input = Flow::None,
     .flow = Flow::Backward,
     .memory = Memory::None,
     .unit_cost = 0,
     .letter = '?',
     .short_name = "SB",
     .legend = "",
     .description = "gradient transfer",
     .rgb = 0x8C2D19,  // dark red: gradients
     .ansi = "",
     .stack = -1},
    {.kind = ActionKind::RecvB,
     .name = "RECV_B",
     .role = Role::Recv,
     .event = Event::RecvB,
     .after = Event::None,
     .input = Flow::None,
     .flow = Flow::Backward,
     .memory = Memory::None,
     .unit_cost = 0,
     .letter = '?',
     .short_name = "RB",
     .legend = "",
     .description = "gradient transfer",
     .rgb = 0x8C2D19,
     .ansi = "",
     .stack = -1},
    {.kind = ActionKind::OverlapFB,
     .name = "OVERLAP_F_B",
     .role = Role::Compound,
     .event = Event::None,
     .after = Event::None,
     .input = Flow::None,
     .flow = Flow::None,
     .memory = Memory::None,
     .unit_cost = 0,  // its parts'
     .letter = 'X',
     .short_name = "X",
     .legend = "overlapped F+B",
     .description = "overlapped F + B",
     .rgb = 0xEDC948,       // gold
     .ansi = "\x1b[1;33m",  // bold yellow
     .stack = 1},
};

// The way a flow goes: the SEND and RECV that carry it between ranks, and what a stage that
// consumes it waits for.
struct FlowInfo {
  ActionKind send, recv;
  bool to_next;      // from a stage to the next one (else to the previous one)
  Event local;       // a consumer on the producer's rank waits for the producer's event
  Event received;    // a consumer on another rank waits for its RECV
  const char* what;  // "activation", "gradient"
};

inline constexpr FlowInfo kFlows[] = {
    {ActionKind::F, ActionKind::F, false, Event::None, Event::None, ""},  // Flow::None
    {ActionKind::SendF, ActionKind::RecvF, true, Event::F, Event::RecvF, "activation"},
    {ActionKind::SendB, ActionKind::RecvB, false, Event::BI, Event::RecvB, "gradient"},
};

constexpr const KindInfo& kind_info(ActionKind k) {
  return kKinds[static_cast<size_t>(k)];
}
constexpr const FlowInfo& flow_info(Flow f) {
  return kFlows[static_cast<size_t>(f)];
}

// The fields the passes read for every action of every replay, copied from kKinds into a few
// bytes a kind (a row of kKinds is large), and the counterpart of each SEND and RECV.
struct KindHot {
  Event event, after;
  Flow input, flow;
  ActionKind match;  // SEND <-> RECV of the same flow; the kind itself for the others
};
inline constexpr std::array<KindHot, kNumActionKinds> kHot = [] {
  std::array<KindHot, kNumActionKinds> out{};
  for (const KindInfo& k : kKinds) {
    const FlowInfo& f = flow_info(k.flow);
    const ActionKind match = k.role == Role::Send ? f.recv : k.role == Role::Recv ? f.send : k.kind;
    out[static_cast<size_t>(k.kind)] = {k.event, k.after, k.input, k.flow, match};
  }
  return out;
}();
constexpr Event after_of(ActionKind k) {
  return kHot[static_cast<size_t>(k)].after;
}
constexpr Flow input_of(ActionKind k) {
  return kHot[static_cast<size_t>(k)].input;
}
constexpr Flow flow_of(ActionKind k) {
  return kHot[static_cast<size_t>(k)].flow;
}
constexpr ActionKind match_of(ActionKind k) {
  return kHot[static_cast<size_t>(k)].match;
}

// Calls f(std::integral_constant<ActionKind, K>{}) for the kind k = K, so that f may read K's row
// as constants (`if constexpr`) and compile to what one case of a switch on the kind would: for
// the passes that run per action over millions of them.
template <class F>
constexpr void visit_kind(ActionKind k, F&& f) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (void)((k == static_cast<ActionKind>(I)
                ? (f(std::integral_constant<ActionKind, static_cast<ActionKind>(I)>{}), true)
                : false) ||
           ...);
  }
  (std::make_index_sequence<kNumActionKinds>{});
}
inline constexpr std::array<double, kNumActionKinds> kUnitCost = [] {
  std::array<double, kNumActionKinds> out{};
  for (const KindInfo& k : kKinds) out[static_cast<size_t>(k.kind)] = k.unit_cost;
  return out;
}();
constexpr double unit_cost_of(ActionKind k) {
  return kUnitCost[static_cast<size_t>(k)];
}

// The kinds a predicate holds for, one bit each: the predicates below test a bit (they run per
// action in every pass, over millions of actions).
static_assert(kNumActionKinds <= 32, "kinds_where keeps one bit per kind in a uint32_t");
template <class Pred>
constexpr uint32_t kinds_where(Pred pred) {
  uint32_t bits = 0;
  for (const KindInfo& k : kKinds)
    if (pred(k)) bits |= uint32_t{1} << static_cast<unsigned>(k.kind);
  return bits;
}
constexpr bool has_kind(uint32_t kinds, ActionKind k) {
  return (kinds >> static_cast<unsigned>(k)) & 1;
}

inline constexpr uint32_t kSendKinds =
    kinds_where([](const KindInfo& k) { return k.role == Role::Send; });
inline constexpr uint32_t kRecvKinds =
    kinds_where([](const KindInfo& k) { return k.role == Role::Recv; });
inline constexpr uint32_t kCommKinds = kSendKinds | kRecvKinds;
inline constexpr uint32_t kCompoundKinds =
    kinds_where([](const KindInfo& k) { return k.role == Role::Compound; });
// SEND and RECV whose peer holds the next stage: a SEND of a flow to the next stage, a RECV of a
// flow from it.
inline constexpr uint32_t kToNextKinds = kinds_where([](const KindInfo& k) {
  return (k.role == Role::Send || k.role == Role::Recv) &&
         (k.role == Role::Send) == flow_info(k.flow).to_next;
});
// B and I: they consume the output gradient and produce the input gradient.
inline constexpr uint32_t kBackwardInputKinds =
    kinds_where([](const KindInfo& k) { return k.event == Event::BI; });

constexpr const char* kind_name(ActionKind k) {
  return kind_info(k).name;  // "F", "SEND_F", "OVERLAP_F_B", ...
}
constexpr bool is_comm(ActionKind k) {
  return has_kind(kCommKinds, k);
}
constexpr bool is_compute(ActionKind k) {
  return !is_comm(k);
}
constexpr bool is_send(ActionKind k) {
  return has_kind(kSendKinds, k);
}
constexpr bool is_recv(ActionKind k) {
  return has_kind(kRecvKinds, k);
}
constexpr bool is_compound(ActionKind k) {
  return has_kind(kCompoundKinds, k);
}
constexpr bool is_backward_input(ActionKind k) {
  return has_kind(kBackwardInputKinds, k);
}
// A SEND or RECV whose peer holds the next stage (else the previous one).
constexpr bool peer_is_next(ActionKind k) {
  return has_kind(kToNextKinds, k);
}
// +1 for a compute kind that puts its (stage, microbatch) in flight (its activations held), -1 for
// one that ends that (its input gradient computed), else 0.
inline constexpr std::array<int8_t, kNumActionKinds> kInflightChange = [] {
  std::array<int8_t, kNumActionKinds> out{};
  for (const KindInfo& k : kKinds)
    out[static_cast<size_t>(k.kind)] = k.memory == Memory::Holds ? 1
                                       : k.memory == Memory::Frees || k.memory == Memory::FreesInput
                                           ? -1
                                           : 0;
  return out;
}();
constexpr int inflight_change(ActionKind k) {
  return kInflightChange[static_cast<size_t>(k)];
}

// The table's shape: a row per kind in the enum's order, plain kinds before compound ones, a
// SEND and a RECV for each flow.
constexpr bool kinds_table_ok() {
  bool compound_seen = false;
  for (int i = 0; i < kNumActionKinds; ++i) {
    const KindInfo& k = kKinds[i];
    if (static_cast<int>(k.kind) != i) return false;
    if (compound_seen && k.role != Role::Compound) return false;
    compound_seen |= k.role == Role::Compound;
  }
  for (Flow f : {Flow::Forward, Flow::Backward})
    if (kind_info(flow_info(f).send).role != Role::Send ||
        kind_info(flow_info(f).recv).role != Role::Recv || kind_info(flow_info(f).send).flow != f ||
        kind_info(flow_info(f).recv).flow != f)
      return false;
  return true;
}
static_assert(kinds_table_ok(), "kKinds: one row per ActionKind in order, compound kinds last");

// The plain kinds (every kind but the compound ones), which index per-kind counts.
inline constexpr int kNumPlainKinds = [] {
  int n = 0;
  for (const KindInfo& k : kKinds) n += k.role != Role::Compound;
  return n;
}();

}  // namespace ppc
