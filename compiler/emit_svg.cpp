// The timeline SVG: one lane per rank, each compute action a box at its simulated time, send->recv
// arrows between lanes, then each rank's activation memory over time. Hand-written SVG: CSS
// classes per kind ("F", "B", "I", "W", "X") and chunk ("c0", "c1", ...), a <title> tooltip and
// data-action / data-rank attributes on every box, data-action / data-to on every arrow.
//
// Plans with more boxes than can be drawn one by one (mean box under kMinBoxPx pixels, or more
// than kMaxBoxes boxes) are drawn aggregated: per pixel column, each lane shows the share of that
// column's time the rank spends in each kind. The title says what was simplified.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ostream>

#include "compiler/svg_timeline.h"

namespace ppc {

namespace svg {

namespace {

constexpr double kMinBoxPx = 1.5;      // below this mean box width, aggregate
constexpr size_t kMaxBoxes = 150'000;  // above this many compute actions, aggregate
constexpr double kRight = 100;         // per-rank idle share / peak memory
constexpr double kMinTimeWidth = 640;  // small plans are stretched to this width
constexpr double kLabelFont = 11;

// Width of `n` characters of the label font (monospace: 0.6 em).
double mono_width(size_t n, double font) {
  return 0.6 * font * static_cast<double>(n);
}

// The aggregated view's stacking order of the compute kinds (their rows' `stack`: F, X, B, I, W
// from the top), and the kind of each place in it.
int group_of(ActionKind k) {
  return kind_info(k).stack;
}
constexpr size_t kGroups = viz::kComputeKinds.size();
constexpr std::array<ActionKind, kGroups> kGroupKind = [] {
  std::array<ActionKind, kGroups> out{};
  for (const KindInfo& k : kKinds)
    if (k.stack >= 0) out[static_cast<size_t>(k.stack)] = k.kind;
  return out;
}();

}  // namespace

void Timeline::write(std::ostream& os) {
  measure();
  Buf body;
  lanes(body);
  if (draw_arrows_) arrows(body);
  memory(body);
  Buf head;
  header(head);
  os.write(head.data(), static_cast<std::streamsize>(head.size()));
  os.write(body.data(), static_cast<std::streamsize>(body.size()));
  os << "</svg>\n";
}

// --- geometry ----------------------------------------------------------------------------------
void Timeline::measure() {
  double min_dur = 0, sum_dur = 0;
  for (int r = 0; r < pp_; ++r) {
    const auto& acts = plan_.lowered[static_cast<size_t>(r)];
    const auto& times = sim_.times[static_cast<size_t>(r)];
    for (size_t i = 0; i < acts.size(); ++i) {
      if (is_comm(acts[i].kind)) continue;
      const double d = times[i].end - times[i].start;
      present_[static_cast<size_t>(acts[i].kind)] = true;
      ++boxes_;
      sum_dur += d;
      if (d > 0 && (min_dur == 0 || d < min_dur)) min_dur = d;
    }
  }
  stage_digits_ = std::to_string(std::max(plan_.num_stages() - 1, 0)).size();
  mb_digits_ = std::to_string(std::max(plan_.microbatches - 1, 0)).size();
  t_max_ = opts_.time_max > 0 ? opts_.time_max : sim_.makespan;
  if (t_max_ <= 0) t_max_ = 1;
  if (min_dur <= 0) min_dur = t_max_;
  // The shortest action gets ~30 px (room for "12F34"), within [kMinTimeWidth, max_width].
  const double max_w = std::max(opts_.max_width, 100.0);
  time_w_ = std::clamp(t_max_ * 30.0 / min_dur, std::min(kMinTimeWidth, max_w), max_w);
  scale_ = time_w_ / t_max_;
  const double mean_px = boxes_ ? sum_dur / static_cast<double>(boxes_) * scale_ : 0;
  aggregated_ = boxes_ > kMaxBoxes || (boxes_ && mean_px < kMinBoxPx);

  transfers_ = viz::transfers(plan_);
  draw_arrows_ = opts_.arrows == Arrows::On || (opts_.arrows == Arrows::Auto && !aggregated_ &&
                                                transfers_.size() <= kAutoArrowLimit);
  if (aggregated_)
    notes_.push_back(fmt::format(
        "aggregated: {} actions at {} px per time unit; each pixel column shows the share of "
        "its time a rank spends in each kind (chunks not shaded); --emit trace has every action",
        boxes_, viz::number(scale_, 3)));
  else if (mean_px < 14)
    notes_.push_back("labels dropped where boxes are too narrow; hover a box for its action");
  if (!transfers_.empty() && !draw_arrows_)
    notes_.push_back(
        fmt::format("{} send → recv arrows not drawn (more than {}); --arrows on draws them",
                    transfers_.size(), kAutoArrowLimit));

  for (const viz::Transfer& t : transfers_)
    wraps_ = wraps_ || (draw_arrows_ && std::abs(t.recv_rank - t.send_rank) > 1);
  lane_h_ = pp_ <= 4 ? 30 : pp_ <= 8 ? 26 : pp_ <= 16 ? 20 : pp_ <= 32 ? 14 : 10;
  lane_gap_ = draw_arrows_ ? std::max(12.0, lane_h_ * 0.6) : (pp_ <= 16 ? 4 : 2);
  mem_h_ = pp_ <= 4 ? 30 : pp_ <= 8 ? 26 : pp_ <= 16 ? 18 : pp_ <= 32 ? 14 : 10;
  mem_gap_ = pp_ <= 16 ? 4 : 2;
  width_ = kLeft + time_w_ + kRight;

  // Title (two lines) and legend rows, then the lanes.
  legend_items();
  double y = 58;
  legend_y_ = y;
  y += legend_rows_ * 22 + static_cast<double>(notes_.size()) * 15 + 24;
  const double pad = wraps_ ? lane_gap_ : 0;  // room for the ring arrows' stubs
  axis_top_ = y - 7;
  lanes_y_ = y + pad;
  y += pad + pp_ * (lane_h_ + lane_gap_) - lane_gap_ + pad;
  axis_y_ = y + 4;
  y += 40;
  mem_title_y_ = y;
  y += 12;
  mem_y_ = y;
  y += pp_ * (mem_h_ + mem_gap_) - mem_gap_;
  height_ = y + 30;
}

// --- lanes -------------------------------------------------------------------------------------
void Timeline::lanes(Buf& b) {
  put(b, "<g class=\"lanes\">\n");
  for (int r = 0; r < pp_; ++r) {
    const double y = lane_y(r);
    put(b, "<text class=\"rl\" x=\"{}\" y=\"{}\">rank {}</text>", kLeft - 8,
        viz::number(y + lane_h_ / 2, 1), r);
    put(b, "<text class=\"rs\" x=\"{}\" y=\"{}\">{:.1f} % idle</text>",
        viz::number(kLeft + time_w_ + 8, 1), viz::number(y + lane_h_ / 2, 1),
        100.0 * sim_.rank_bubble[static_cast<size_t>(r)]);
    put(b, "<rect class=\"idle\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", kLeft,
        viz::number(y, 1), viz::number(sim_.makespan * scale_, 1), lane_h_);
    if (aggregated_)
      aggregated_lane(b, r, y);
    else
      detailed_lane(b, r, y);
  }
  put(b, "</g>\n");
}

void Timeline::detailed_lane(Buf& b, int r, double y) {
  const auto& acts = plan_.lowered[static_cast<size_t>(r)];
  const auto& times = sim_.times[static_cast<size_t>(r)];
  Buf labels;
  const double font = std::min(kLabelFont, lane_h_ * 0.55);
  put(b, "<g data-rank=\"{}\">\n", r);
  for (size_t i = 0; i < acts.size(); ++i) {
    const Action& a = acts[i];
    if (is_comm(a.kind)) continue;
    const double x = x_of(times[i].start);
    const double w = std::max((times[i].end - times[i].start) * scale_, 0.5);
    const int chunk = viz::chunk_of(plan_, a);
    const std::string text = to_string(a);
    put(b,
        "<rect class=\"a {} c{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
        "data-action=\"{}\" "
        "data-rank=\"{}\"><title>",
        viz::kind_class(a.kind), chunk, viz::number(x, 2), viz::number(y, 1), viz::number(w, 2),
        lane_h_, text, r);
    tooltip(b, a, r, chunk, times[i]);
    put(b, "</title></rect>\n");
    if (is_compound(a.kind)) {  // a stripe in the backward part's color
      const Action bp = a.backward_part();
      put(b,
          "<rect class=\"{} c{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" "
          "pointer-events=\"none\"/>\n",
          viz::kind_class(bp.kind), viz::chunk_of(plan_, bp), viz::number(x + 0.5, 2),
          viz::number(y + lane_h_ * 0.72, 1), viz::number(std::max(w - 1, 0.1), 2),
          viz::number(lane_h_ * 0.28, 1));
    }
    // The label: the whole action if the longest such label of the plan fits, else the
    // microbatch if the longest microbatch fits, else nothing: boxes of one width all get the
    // same kind of label, whatever their numbers.
    if (lane_h_ < 12) continue;
    const bool ov = is_compound(a.kind);
    std::string label;
    if (mono_width(ov ? 2 * stage_digits_ + 2 * mb_digits_ + 3 : stage_digits_ + mb_digits_ + 1,
                   font) +
            4 <=
        w)
      label = ov ? fmt::format("{}F{}+{}{}{}", a.stage, a.microbatch, a.stage2,
                               kind_name(a.sub_kind), a.microbatch2)
                 : text;
    else if (mono_width(ov ? 2 * mb_digits_ + 1 : mb_digits_, font) + 3 <= w)
      label = ov ? fmt::format("{}+{}", a.microbatch, a.microbatch2) : std::to_string(a.microbatch);
    else
      continue;
    const bool light = viz::is_light(viz::shade(viz::kind_rgb(a.kind), chunk, plan_.vpp()));
    const double ly = ov ? y + lane_h_ * 0.36 : y + lane_h_ / 2;
    put(labels, "<text class=\"l {}\" x=\"{}\" y=\"{}\" font-size=\"{}\">{}</text>\n",
        light ? "ld" : "ll", viz::number(x + w / 2, 2), viz::number(ly, 1), viz::number(font, 1),
        label);
  }
  b.append(labels.data(), labels.data() + labels.size());
  put(b, "</g>\n");
}

void Timeline::tooltip(Buf& b, const Action& a, int r, int chunk, const Interval& iv) {
  if (is_compound(a.kind))
    put(b,
        "{} · rank {} · forward stage {} microbatch {} with {} stage {} microbatch {} · time {} "
        "to {}",
        to_string(a), r, a.stage, a.microbatch, kind_name(a.sub_kind), a.stage2, a.microbatch2,
        viz::number(iv.start), viz::number(iv.end));
  else
    put(b, "{} · {} · rank {} · stage {} (chunk {}) · microbatch {} · time {} to {}", to_string(a),
        viz::kind_description(a.kind), r, a.stage, chunk, a.microbatch, viz::number(iv.start),
        viz::number(iv.end));
}

void Timeline::aggregated_lane(Buf& b, int r, double y) {
  const auto& acts = plan_.lowered[static_cast<size_t>(r)];
  const auto& times = sim_.times[static_cast<size_t>(r)];
  const size_t cols = static_cast<size_t>(std::ceil(time_w_));
  const double tb = t_max_ / static_cast<double>(cols);
  std::vector<std::array<float, kGroups>> acc(cols, std::array<float, kGroups>{});
  size_t count = 0;
  for (size_t i = 0; i < acts.size(); ++i) {
    const int g = group_of(acts[i].kind);
    if (g < 0) continue;
    ++count;
    const double s = times[i].start, e = times[i].end;
    size_t c0 = std::min(cols - 1, static_cast<size_t>(std::max(0.0, s / tb)));
    for (size_t c = c0; c < cols; ++c) {
      const double lo = std::max(s, static_cast<double>(c) * tb),
                   hi = std::min(e, static_cast<double>(c + 1) * tb);
      if (hi <= lo) break;
      acc[c][static_cast<size_t>(g)] += static_cast<float>(hi - lo);
    }
  }
  put(b,
      "<g data-rank=\"{}\" data-actions=\"{}\"><title>rank {}: {} compute actions, aggregated "
      "per pixel column</title>\n",
      r, count, r, count);
  // Quantize each column's stack to whole pixels, then draw runs of equal columns as one rect.
  std::vector<std::array<uint8_t, kGroups + 1>> edges(cols);
  for (size_t c = 0; c < cols; ++c) {
    double cum = 0;
    edges[c][0] = 0;
    for (size_t g = 0; g < kGroups; ++g) {
      cum += std::min(1.0, acc[c][g] / tb);
      edges[c][g + 1] = static_cast<uint8_t>(std::lround(std::min(1.0, cum) * lane_h_));
    }
  }
  for (size_t g = 0; g < kGroups; ++g) {
    size_t c = 0;
    while (c < cols) {
      const uint8_t top = edges[c][g], bot = edges[c][g + 1];
      size_t e = c + 1;
      while (e < cols && edges[e][g] == top && edges[e][g + 1] == bot) ++e;
      if (bot > top)
        put(b, "<rect class=\"{} c0\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
            viz::kind_class(kGroupKind[g]),
            viz::number(kLeft + static_cast<double>(c) * time_w_ / static_cast<double>(cols), 2),
            viz::number(y + top, 1),
            viz::number(static_cast<double>(e - c) * time_w_ / static_cast<double>(cols), 2),
            bot - top);
      c = e;
    }
  }
  put(b, "\n</g>\n");
}

// --- arrows ------------------------------------------------------------------------------------
void Timeline::arrows(Buf& b) {
  put(b, "<g class=\"arrows\">\n");
  for (const viz::Transfer& tr : transfers_) {
    const Action& send =
        plan_.lowered[static_cast<size_t>(tr.send_rank)][static_cast<size_t>(tr.send_index)];
    const Action& recv =
        plan_.lowered[static_cast<size_t>(tr.recv_rank)][static_cast<size_t>(tr.recv_index)];
    const double t0 =
        sim_.times[static_cast<size_t>(tr.send_rank)][static_cast<size_t>(tr.send_index)].start;
    const double t1 =
        sim_.times[static_cast<size_t>(tr.recv_rank)][static_cast<size_t>(tr.recv_index)].end;
    const bool down = tr.recv_rank > tr.send_rank;
    const double y0 = down ? lane_y(tr.send_rank) + lane_h_ : lane_y(tr.send_rank);
    const double y1 = down ? lane_y(tr.recv_rank) : lane_y(tr.recv_rank) + lane_h_;
    const bool fwd = send.kind == ActionKind::SendF;
    // Activations and gradients crossing at the same time would draw one line: nudge them apart.
    const double nudge = scale_ >= 12 ? (fwd ? -1.5 : 1.5) : 0;
    const double x0 = x_of(t0) + nudge, x1 = x_of(t1) + nudge;
    const char* cls = fwd ? "f" : "b";
    std::string title =
        fmt::format("<title>{} (rank {}, time {}) → {} (rank {}, time {})</title>", to_string(send),
                    tr.send_rank, viz::number(t0), to_string(recv), tr.recv_rank, viz::number(t1));
    if (std::abs(tr.recv_rank - tr.send_rank) <= 1) {
      put(b,
          "<path class=\"ar {}\" d=\"M{} {}L{} {}\" marker-end=\"url(#{}-a{})\" "
          "data-action=\"{}\" data-rank=\"{}\" "
          "data-to=\"{}\" data-to-rank=\"{}\">{}</path>\n",
          cls, viz::number(x0, 2), viz::number(y0, 1), viz::number(x1, 2), viz::number(y1, 1), id_,
          cls, to_string(send), tr.send_rank, to_string(recv), tr.recv_rank, title);
      continue;
    }
    // Around the ring (loop placement: rank pp-1 <-> rank 0): leave the sender's lane away from
    // the lanes, enter the receiver's from outside, as if the lanes were a cylinder.
    const bool leave_down = tr.recv_rank < tr.send_rank;
    const double stub = lane_gap_ * 0.85;
    const double ys = leave_down ? lane_y(tr.send_rank) + lane_h_ : lane_y(tr.send_rank);
    const double yr = leave_down ? lane_y(tr.recv_rank) : lane_y(tr.recv_rank) + lane_h_;
    put(b,
        "<g class=\"ar {0} wrap\" data-action=\"{1}\" data-rank=\"{2}\" data-to=\"{3}\" "
        "data-to-rank=\"{4}\">{5}"
        "<path d=\"M{6} {7}V{8}\" marker-end=\"url(#{9}-a{0})\"/><path d=\"M{10} {11}V{12}\" "
        "marker-end=\"url(#{9}-a{0})\"/></g>\n",
        cls, to_string(send), tr.send_rank, to_string(recv), tr.recv_rank, title,
        viz::number(x0, 2), viz::number(ys, 1), viz::number(leave_down ? ys + stub : ys - stub, 1),
        id_, viz::number(x1, 2), viz::number(leave_down ? yr - stub : yr + stub, 1),
        viz::number(yr, 1));
  }
  put(b, "</g>\n");
}

// --- memory ------------------------------------------------------------------------------------
void Timeline::memory(Buf& b) {
  double top = opts_.memory_max;
  for (double p : sim_.peak_memory) top = std::max(top, p);
  if (top <= 0) top = 1;
  put(b,
      "<g class=\"memory\"><text class=\"mt\" x=\"{}\" y=\"{}\">activation memory per rank ({}; "
      "one scale, 0 to {})</text>\n",
      kLeft, viz::number(mem_title_y_, 1),
      sim_.unit ? "microbatch-stages of activations held"
      : bytes_  ? "bytes held"
                : "activation units held",
      viz::memory_text(top, !bytes_));
  const size_t cols = static_cast<size_t>(std::ceil(time_w_));
  for (int r = 0; r < pp_; ++r) {
    const double y = mem_top(r);
    const auto& pts = sim_.memory[static_cast<size_t>(r)];
    const double peak = sim_.peak_memory[static_cast<size_t>(r)];
    auto ym = [&](double v) { return y + mem_h_ - v / top * (mem_h_ - 2); };
    put(b, "<text class=\"rl\" x=\"{}\" y=\"{}\">rank {}</text>", kLeft - 8,
        viz::number(y + mem_h_ / 2, 1), r);
    put(b, "<rect class=\"mbg\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>", kLeft,
        viz::number(y, 1), viz::number(time_w_, 1), mem_h_);
    // A step plot; with more points than pixel columns, each column's maximum.
    put(b, "<path class=\"mem\" d=\"M{} {}", kLeft, viz::number(y + mem_h_, 1));
    if (pts.size() <= 2 * cols) {
      for (const MemoryPoint& p : pts)
        put(b, "H{}V{}", viz::number(x_of(p.time), 2), viz::number(ym(p.value), 1));
    } else {
      std::vector<double> col(cols, -1);
      double v = 0;
      size_t k = 0;
      const double tb = t_max_ / static_cast<double>(cols);
      for (size_t c = 0; c < cols; ++c) {
        double m = v;  // the value entering the column
        while (k < pts.size() && pts[k].time < static_cast<double>(c + 1) * tb) {
          v = pts[k].value;
          m = std::max(m, v);
          ++k;
        }
        col[c] = m;
      }
      for (size_t c = 0; c < cols; ++c)
        if (c == 0 || col[c] != col[c - 1])
          put(b, "H{}V{}",
              viz::number(kLeft + static_cast<double>(c) * time_w_ / static_cast<double>(cols), 2),
              viz::number(ym(col[c]), 1));
    }
    put(b, "H{}V{}Z\"/>", viz::number(x_of(sim_.makespan), 2), viz::number(y + mem_h_, 1));
    // The peak: a dot where it is first reached, and its value on the right.
    for (const MemoryPoint& p : pts) {
      if (peak <= 0 || p.value < peak) continue;
      put(b,
          "<circle class=\"pk\" cx=\"{}\" cy=\"{}\" r=\"3\"><title>rank {}: peak {} at time "
          "{}</title></circle>",
          viz::number(x_of(p.time), 2), viz::number(ym(p.value), 1), r,
          viz::memory_text(peak, !bytes_), viz::number(p.time));
      break;
    }
    put(b, "<text class=\"pkt\" x=\"{}\" y=\"{}\">peak {}</text>\n",
        viz::number(kLeft + time_w_ + 8, 1), viz::number(y + mem_h_ / 2, 1),
        viz::memory_text(peak, !bytes_));
  }
  put(b, "</g>\n");
}

}  // namespace svg

void emit_svg(const Plan& plan, const Simulation& sim, std::ostream& os,
              const TimelineOptions& opts) {
  PPC_INTERNAL_ASSERT(plan.is_lowered() && sim.times.size() == plan.lowered.size(),
                      "the timeline needs a lowered plan and its simulation");
  svg::Timeline(plan, sim, opts).write(os);
}

}  // namespace ppc
