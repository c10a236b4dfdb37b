// --list-schedules: every schedule ppcompile knows, one line each.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/emit_text.h"
#include "compiler/layout.h"
#include "compiler/schedule.h"

namespace ppc {

void emit_schedule_list(std::ostream& os) {
  size_t width = 17;
  for (const auto& s : all_schedules()) width = std::max(width, s.name.size());
  os << fmt::format("{:<{}} {:<9} {:<10} {}\n", "schedule", width, "vpp", "placement",
                    "description");
  for (const auto& s : all_schedules()) {
    const char* vpp = s.vpp_rule == VppRule::One ? "1" : s.vpp_rule == VppRule::Two ? "2" : "any";
    std::string aliases;
    for (const auto& a : s.aliases) aliases += (aliases.empty() ? "" : ", ") + a;
    os << fmt::format("{:<{}} {:<9} {:<10} {}{}\n", s.name, width, vpp,
                      s.placements ? s.placements : placement_name(s.placement), s.summary,
                      aliases.empty() ? "" : " (also: " + aliases + ")");
  }
}

}  // namespace ppc
