// The timeline SVG's drawing (emit_svg, visualization.h), shared by its two files: emit_svg.cpp
// (geometry, lanes, arrows, memory plots) and emit_svg_header.cpp (styles, title, legend, axis).
#pragma once

#include <fmt/format.h>

#include <array>
#include <iosfwd>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/simulate.h"
#include "compiler/visualization.h"
#include "compiler/viz_common.h"

namespace ppc::svg {

constexpr double kLeft = 64;  // rank labels

using Buf = fmt::memory_buffer;

template <class... Args>
void put(Buf& b, fmt::format_string<Args...> f, Args&&... args) {
  fmt::format_to(std::back_inserter(b), f, std::forward<Args>(args)...);
}
inline void put_escaped(Buf& b, std::string_view s) {
  std::string e = viz::escaped(s);
  b.append(e.data(), e.data() + e.size());
}

class Timeline {
 public:
  Timeline(const Plan& plan, const Simulation& sim, const TimelineOptions& opts)
      : plan_(plan),
        sim_(sim),
        opts_(opts),
        pp_(plan.pp()),
        id_(opts.id_prefix),
        bytes_(!sim.unit && opts.memory_in_bytes) {}

  void write(std::ostream& os);

 private:
  // --- geometry (emit_svg.cpp) ----------------------------------------------------------------
  void measure();

  double x_of(double t) const { return kLeft + t * scale_; }
  double lane_y(int r) const { return lanes_y_ + r * (lane_h_ + lane_gap_); }
  double mem_top(int r) const { return mem_y_ + r * (mem_h_ + mem_gap_); }

  // --- legend (emit_svg_header.cpp) -----------------------------------------------------------
  struct LegendItem {
    std::string swatch;  // SVG drawn at (0,0), `swatch_w` x 12
    std::string text;
    double swatch_w = 14;
  };
  void legend_items();

  // --- header: XML, styles, markers, title, legend, axis (emit_svg_header.cpp) ----------------
  void header(Buf& b);
  void styles(Buf& b);
  double mean_box_px() const;

  // --- lanes, arrows, memory (emit_svg.cpp) ---------------------------------------------------
  void lanes(Buf& b);
  void detailed_lane(Buf& b, int r, double y);
  void tooltip(Buf& b, const Action& a, int r, int chunk, const Interval& iv);
  // Per pixel column, the time spent in each kind, stacked F, X, B, I, W from the top.
  void aggregated_lane(Buf& b, int r, double y);
  void arrows(Buf& b);
  void memory(Buf& b);

  const Plan& plan_;
  const Simulation& sim_;
  const TimelineOptions& opts_;
  const int pp_;
  const std::string id_;
  const bool bytes_;  // memory in bytes, else in counts

  std::array<bool, kNumActionKinds> present_{};
  size_t boxes_ = 0;
  size_t stage_digits_ = 1, mb_digits_ = 1;  // of the largest stage / microbatch number
  double t_max_ = 1, time_w_ = 0, scale_ = 1, width_ = 0, height_ = 0;
  bool aggregated_ = false, draw_arrows_ = false, wraps_ = false;
  std::vector<viz::Transfer> transfers_;
  std::vector<std::string> notes_;
  std::vector<LegendItem> legend_;
  std::vector<double> item_x_;
  std::vector<int> item_row_;
  int legend_rows_ = 1;
  double lane_h_ = 30, lane_gap_ = 4, mem_h_ = 30, mem_gap_ = 6;
  double legend_y_ = 0, axis_top_ = 0, lanes_y_ = 0, axis_y_ = 0, mem_title_y_ = 0, mem_y_ = 0;
};

}  // namespace ppc::svg
