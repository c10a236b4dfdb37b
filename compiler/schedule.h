// The table of schedules (schedules.cpp), one row each. A named schedule's generator, given the
// placement and the microbatch count, produces the compute order of every rank (F, B, I, W,
// OverlapFB; no communication); each lives in its own file under compiler/schedules/. Auto's row
// synthesizes a whole plan from the costs and the memory limit instead (synthesize.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/action.h"
#include "compiler/layout.h"
#include "compiler/plan.h"

namespace ppc {

struct CompileOptions;  // compile.h

using RankOrders = std::vector<std::vector<Action>>;

struct ScheduleParams {
  int pp = 1;
  int vpp = 1;  // stages per rank
  int microbatches = 1;
  const Placement* placement = nullptr;
};

// How many stages per rank a schedule takes.
enum class VppRule : uint8_t {
  One,  // exactly one stage per rank (1F1B, GPipe, ZB-H1, ZB-H2, Combined1F1B)
  Any,  // any number (Interleaved1F1B, LoopedBFS, InterleavedZeroBubble)
  Two,  // exactly two (ZBV, DualPipeV)
};

struct ScheduleInfo {
  std::string name;                  // canonical, e.g. "Interleaved1F1B"
  std::vector<std::string> aliases;  // e.g. "ScheduleInterleaved1F1B"
  std::string summary;               // one line for --list-schedules
  VppRule vpp_rule = VppRule::One;
  PlacementStyle placement = PlacementStyle::Loop;
  int copies = 1;  // 2 for DualPipe
  // The compute order on a placement; null for a synthesized schedule.
  RankOrders (*generate)(const ScheduleParams&) = nullptr;
  // Throws UserError for a configuration the schedule cannot run (e.g. DualPipe with odd pp);
  // null = every configuration that passes the vpp rule.
  void (*check)(const ScheduleParams&) = nullptr;
  // A schedule whose order depends on the costs and the memory limit (Auto): the whole compute
  // plan from the compile options, placed as it finds best (`placement` is the one it starts
  // from); null for the others. --balance cannot re-split the layers for it (its order changes
  // with the split), and --emit stats shows how far its plan is from the lower bound.
  Plan (*synthesize)(const CompileOptions&) = nullptr;
  // --list-schedules' placement column, for a schedule that places its stages as it finds best
  // (Auto: "loop, v"); null: `placement`'s name.
  const char* placements = nullptr;
};

// All schedules, in the order --list-schedules prints them: the named ones, then Auto.
const std::vector<ScheduleInfo>& all_schedules();

// Case-insensitive lookup by name or alias; nullptr if unknown.
const ScheduleInfo* find_schedule(std::string_view name);

// Comma-separated canonical names, for error messages.
std::string schedule_names();

// Generators (one file each under compiler/schedules/).
RankOrders generate_gpipe(const ScheduleParams& p);
RankOrders generate_1f1b(const ScheduleParams& p);
RankOrders generate_interleaved_1f1b(const ScheduleParams& p);
RankOrders generate_looped_bfs(const ScheduleParams& p);
RankOrders generate_interleaved_zero_bubble(const ScheduleParams& p);  // also ZB-H1 (vpp 1)
RankOrders generate_zb_h2(const ScheduleParams& p);
RankOrders generate_zbv(const ScheduleParams& p);
RankOrders generate_dualpipe_v(const ScheduleParams& p);
RankOrders generate_dualpipe(const ScheduleParams& p);
RankOrders generate_combined_1f1b(const ScheduleParams& p);
void check_dualpipe(const ScheduleParams& p);

}  // namespace ppc
