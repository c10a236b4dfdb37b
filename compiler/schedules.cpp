#include <algorithm>
#include <cctype>

#include "compiler/schedule.h"
#include "compiler/synthesize.h"

namespace ppc {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::vector<ScheduleInfo> make_table() {
  std::vector<ScheduleInfo> t;
  t.push_back({"GPipe",
               {"ScheduleGPipe"},
               "all forwards, then all backwards (one stage per rank)",
               VppRule::One,
               PlacementStyle::Loop,
               1,
               generate_gpipe});
  t.push_back({"1F1B",
               {"Schedule1F1B", "OneFOneB"},
               "pp-1-r warm-up forwards, then one forward / one backward (one stage per rank)",
               VppRule::One,
               PlacementStyle::Loop,
               1,
               generate_1f1b});
  t.push_back({"Interleaved1F1B",
               {"ScheduleInterleaved1F1B", "Interleaved", "VirtualPipeline"},
               "Megatron's virtual pipeline: 1F1B over several stages per rank, depth first",
               VppRule::Any,
               PlacementStyle::Loop,
               1,
               generate_interleaved_1f1b});
  t.push_back({"LoopedBFS",
               {"ScheduleLoopedBFS", "BFS"},
               "breadth first: every microbatch through one local stage before the next",
               VppRule::Any,
               PlacementStyle::Loop,
               1,
               generate_looped_bfs});
  t.push_back(
      {"ZB-H1",
       {"ZBH1"},
       "zero bubble, 1F1B's memory: backward split into I and W, W delayed into the bubbles "
       "(one stage per rank)",
       VppRule::One,
       PlacementStyle::Loop,
       1,
       generate_interleaved_zero_bubble});
  t.push_back(
      {"ZB-H2",
       {"ZBH2"},
       "zero bubble with up to 2pp-1 in-flight microbatches: more warm-up forwards, W at the end "
       "(one stage per rank)",
       VppRule::One,
       PlacementStyle::Loop,
       1,
       generate_zb_h2});
  t.push_back({"InterleavedZeroBubble",
               {"ScheduleInterleavedZeroBubble", "ZB1P"},
               "PyTorch's ZB1P: Interleaved1F1B with the backward split into I and W",
               VppRule::Any,
               PlacementStyle::Loop,
               1,
               generate_interleaved_zero_bubble});
  t.push_back({"ZBVZeroBubble",
               {"ScheduleZBVZeroBubble", "ZBV", "ZB-V"},
               "zero bubble on a V: rank r holds stages r and 2pp-1-r",
               VppRule::Two,
               PlacementStyle::V,
               1,
               generate_zbv});
  t.push_back({"DualPipeV",
               {"ScheduleDualPipeV"},
               "DualPipe folded onto a V: overlapped forward/backward pairs (OVERLAP_F_B)",
               VppRule::Two,
               PlacementStyle::V,
               1,
               generate_dualpipe_v});
  t.push_back(
      {"DualPipe",
       {"DeepSeekDualPipe"},
       "DeepSeek-V3's bidirectional pipeline: two model copies fed from both ends (even pp)",
       VppRule::One,
       PlacementStyle::V,
       2,
       generate_dualpipe,
       check_dualpipe});
  t.push_back({"Combined1F1B",
               {"Combined1F1BOverlap", "MegatronCombined1F1B"},
               "Megatron's combined 1F1B: 1F1B whose steady state pairs one microbatch's F with "
               "another's B (OVERLAP_F_B)",
               VppRule::One,
               PlacementStyle::Loop,
               1,
               generate_combined_1f1b});
  t.push_back({kAuto,
               {"Synthesized", "Synthesize"},
               "synthesized for the costs and the memory limit: list scheduling over priorities "
               "and placements (loop, V), the best simulated order (docs/schedules.md)",
               VppRule::Any,
               PlacementStyle::Loop,
               1,
               nullptr,
               nullptr,
               compile_auto,
               "loop, v"});
  return t;
}

}  // namespace

const std::vector<ScheduleInfo>& all_schedules() {
  static const std::vector<ScheduleInfo> table = make_table();
  return table;
}

const ScheduleInfo* find_schedule(std::string_view name) {
  for (const auto& s : all_schedules()) {
    if (iequals(s.name, name)) return &s;
    for (const auto& a : s.aliases)
      if (iequals(a, name)) return &s;
  }
  return nullptr;
}

std::string schedule_names() {
  std::string out;
  for (const auto& s : all_schedules()) {
    if (!out.empty()) out += ", ";
    out += s.name;
  }
  return out;
}

}  // namespace ppc
