#include <algorithm>
#include <cctype>

#include "compiler/schedule.h"

namespace ppc {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::vector<ScheduleInfo> make_table() {
  std::vector<ScheduleInfo> t;
  t.push_back({"GPipe", {"ScheduleGPipe"}, "all forwards, then all backwards (one stage per rank)",
               VppRule::One, PlacementStyle::Loop, 1, generate_gpipe});
  t.push_back({"1F1B", {"Schedule1F1B", "OneFOneB"},
               "pp-1-r warm-up forwards, then one forward / one backward (one stage per rank)",
               VppRule::One, PlacementStyle::Loop, 1, generate_1f1b});
  t.push_back({"Interleaved1F1B", {"ScheduleInterleaved1F1B", "Interleaved", "VirtualPipeline"},
               "Megatron's virtual pipeline: 1F1B over several stages per rank, depth first",
               VppRule::Any, PlacementStyle::Loop, 1, generate_interleaved_1f1b});
  t.push_back({"LoopedBFS", {"ScheduleLoopedBFS", "BFS"},
               "breadth first: every microbatch through one local stage before the next",
               VppRule::Any, PlacementStyle::Loop, 1, generate_looped_bfs});
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
