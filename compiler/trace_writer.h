// The trace format of docs/trace-format.md (Chrome trace / Perfetto JSON), for a simulated run
// (ppcompile --emit trace: emit_trace) and for a measured one (pprun --trace): process = rank,
// thread 0 = compute, thread 1 = comm, an "X" slice per lowered action, a flow ("s" -> "f") per
// SEND/RECV pair, each rank's activation memory as a counter. The callers say where each slice
// is shown; this writes the events.
//
// Ops of one communication batch all start when the batch is posted, so their slices nest on the
// comm thread. A flow event binds to the innermost slice open at its timestamp; to bind each flow
// to its own op, op k of a batch (longest first) is shown starting k * kNestStepUs later and ending
// (n - k) * kNestStepUs later than it did, and its flow event sits inside [start, start + step):
// a shift of nanoseconds, invisible at trace scale (nest_comm_slices).
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "compiler/action.h"
#include "compiler/plan.h"

namespace ppc {

inline constexpr double kNestStepUs = 0.01;

// Where an action's slice is shown, in microseconds.
struct TraceSlice {
  double ts = 0, dur = 0;
  double wait_us = -1;  // measured compute: time it waited for a received input (written if > 0)
  double done_us = -1;  // measured comm: when the op was seen complete (written if >= 0)
};

struct TraceCounter {
  double ts = 0;  // microseconds
  double value = 0;
};

// A slice on one of a rank's further threads: its name, category, time (microseconds) and the
// members of its args object (JSON text without the braces, "" for none).
struct TraceExtraSlice {
  std::string name, cat;
  double ts = 0, dur = 0;
  std::string args;
};

// A further thread of a rank (tid 2, 3, ... in order: pprun's all-to-alls, docs/trace-format.md),
// named, with its slices (which the caller nests properly).
struct TraceThread {
  std::string name;
  std::vector<TraceExtraSlice> slices;
};

// One rank's part: a slice per action of its lowered order (none: the rank is only named), the
// points of its activation memory counter and any further threads.
struct TraceRank {
  std::vector<TraceSlice> slices;
  std::vector<TraceCounter> memory;
  std::vector<TraceThread> threads;
};

struct TraceInfo {
  const char* generator = "ppcompile";      // otherData.generator: "ppcompile" or "pprun"
  const char* costs = "unit";               // otherData.costs: "unit", "model" or "measured"
  const char* memory_unit = "activations";  // the counter's argument: "activations" or "bytes"
  double makespan = 0, bubble = 0, us_per_unit = 1;
  int step = 0;  // measured: the step traced (1-based), in otherData and every slice; 0: none
};

// How the batches of a rank's comm ops are laid out. Simulated: a batch is shown no earlier than
// the previous one's slices end. Measured: an op seen complete only late (a send is waited for at
// the end of the step) is shown ending before the next batch is posted.
enum class CommNesting : uint8_t { AfterPreviousBatch, BeforeNextBatch };

// Fills the slices of the comm ops of `acts` (a rank's lowered order) from each op's start (the
// batch's post: its first op's start) and end, in microseconds (the slices of compute actions
// are left as they are). `step_end`: BeforeNextBatch's limit for the last batch.
void nest_comm_slices(const std::vector<Action>& acts, std::span<const double> start,
                      std::span<const double> end, CommNesting nesting, double step_end,
                      std::vector<TraceSlice>& slices);

// Writes the trace of `plan` (lowered) with `ranks[r]` for rank r; flows join every SEND with its
// RECV (viz::transfers) when both ranks have slices.
void write_trace(const Plan& plan, const std::vector<TraceRank>& ranks, const TraceInfo& info,
                 std::ostream& os);

}  // namespace ppc
