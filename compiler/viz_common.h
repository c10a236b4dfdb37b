// What the visual emitters share (timeline SVG, dependency graph, HTML page, colored table):
// one palette, chunk shading, XML escaping and the pairing of each SEND with its RECV.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/action.h"
#include "compiler/dependencies.h"
#include "compiler/plan.h"

namespace ppc::viz {

// The color of a kind (its row of kKinds, action_kinds.h).
struct Rgb {
  uint8_t r, g, b;
};

inline Rgb kind_rgb(ActionKind k) {
  const uint32_t c = kind_info(k).rgb;
  return {static_cast<uint8_t>(c >> 16), static_cast<uint8_t>(c >> 8), static_cast<uint8_t>(c)};
}

// Short class / legend name of a kind: "F", "B", "I", "W", "X" (overlap), "SF", "RF", "SB", "RB".
inline const char* kind_class(ActionKind k) {
  return kind_info(k).short_name;
}

inline const char* kind_description(ActionKind k) {
  return kind_info(k).description;
}

// The compute kinds (compound ones included) in legend order: the table's.
inline constexpr auto kComputeKinds = [] {
  std::array<ActionKind, kNumActionKinds - std::popcount(kCommKinds)> out{};
  size_t n = 0;
  for (const KindInfo& k : kKinds)
    if (is_compute(k.kind)) out[n++] = k.kind;
  return out;
}();

// Virtual chunk c of vpp: chunk 0 in the full color, later chunks lighter (mixed with white, up
// to 55 %), so that the chunks of one rank stay the same hue but can be told apart.
inline Rgb shade(Rgb c, int chunk, int vpp) {
  if (vpp <= 1 || chunk <= 0) return c;
  const double t = 0.55 * std::min(chunk, vpp - 1) / (vpp - 1);
  auto mix = [t](uint8_t v) { return static_cast<uint8_t>(v + (255 - v) * t + 0.5); };
  return {mix(c.r), mix(c.g), mix(c.b)};
}

inline std::string hex(Rgb c) {
  return fmt::format("#{:02x}{:02x}{:02x}", c.r, c.g, c.b);
}

// Dark text on light fills, white text on dark ones (relative luminance, sRGB approximation).
inline bool is_light(Rgb c) {
  return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b > 150;
}

// The chunk that colors an action: the (forward part's) stage's chunk on its rank.
inline int chunk_of(const Plan& plan, const Action& a) {
  return plan.placement.stage_chunk[static_cast<size_t>(a.stage)];
}

// Escapes text for XML / HTML content and attribute values.
inline void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
}
inline std::string escaped(std::string_view s) {
  std::string out;
  append_escaped(out, s);
  return out;
}

// A number for humans: up to `digits` decimals, trailing zeros dropped ("3", "2.5", "0.125").
inline std::string number(double v, int digits = 3) {
  std::string s = fmt::format("{:.{}f}", v, digits);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

// One transfer: a SEND on one rank and the RECV that matches it on another (indices into
// plan.lowered).
struct Transfer {
  int32_t send_rank, send_index;
  int32_t recv_rank, recv_index;
};

// Every SEND of a lowered, verified plan with its RECV, in rank order then action order.
inline std::vector<Transfer> transfers(const Plan& plan) {
  std::vector<Transfer> out;
  if (!plan.is_lowered()) return out;
  EventTable pos(plan.num_stages(), plan.microbatches);
  for (int r = 0; r < plan.pp(); ++r) {
    const auto& acts = plan.lowered[static_cast<size_t>(r)];
    for (size_t i = 0; i < acts.size(); ++i)
      if (is_recv(acts[i].kind))
        pos.at(event_of(acts[i].kind), acts[i].stage, acts[i].microbatch) = static_cast<int32_t>(i);
  }
  for (int r = 0; r < plan.pp(); ++r) {
    const auto& acts = plan.lowered[static_cast<size_t>(r)];
    for (size_t i = 0; i < acts.size(); ++i) {
      if (!is_send(acts[i].kind)) continue;
      const CommMatch m = comm_match(plan, acts[i]);
      if (m.stage < 0) continue;
      const int32_t j = pos.at(event_of(m.kind), m.stage, acts[i].microbatch);
      if (j == EventTable::kNever) continue;
      out.push_back(Transfer{r, static_cast<int32_t>(i), m.rank, j});
    }
  }
  return out;
}

// Formats a memory amount: activation units under unit costs, bytes (KiB, MiB, GiB) otherwise.
inline std::string memory_text(double v, bool unit) {
  if (unit) return number(v, 2);
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return number(v, u == 0 ? 0 : 2) + " " + units[u];
}

}  // namespace ppc::viz
