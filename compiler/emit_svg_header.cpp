// The timeline SVG's header (svg_timeline.h): XML, styles, markers, title, legend and time axis.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "compiler/svg_timeline.h"

namespace ppc::svg {

namespace {

// Width of the sans text (generous).
double text_width(std::string_view s, double font) {
  return 0.58 * font * static_cast<double>(s.size());
}

// A tick step of 1, 2 or 5 times a power of ten giving at least `min_px` between ticks.
double tick_step(double scale, double min_px) {
  double raw = min_px / scale;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

}  // namespace

void Timeline::legend_items() {
  for (ActionKind k : viz::kComputeKinds) {
    if (!present_[static_cast<size_t>(k)]) continue;
    legend_.push_back(
        {fmt::format("<rect class=\"{} c0\" width=\"14\" height=\"12\"/>", viz::kind_class(k)),
         fmt::format("{} {}", kind_name(k), viz::kind_description(k))});
  }
  if (plan_.vpp() > 1 && !aggregated_) {
    std::string sw;
    const int n = std::min(plan_.vpp(), 7);
    for (int c = 0; c < n; ++c)
      sw += fmt::format("<rect class=\"F c{}\" x=\"{}\" width=\"{}\" height=\"12\"/>",
                        c * (plan_.vpp() - 1) / std::max(n - 1, 1), viz::number(c * 28.0 / n, 2),
                        viz::number(28.0 / n, 2));
    legend_.push_back({sw, fmt::format("chunk 0..{} (lighter = later)", plan_.vpp() - 1), 28});
  }
  legend_.push_back({"<rect class=\"idle\" width=\"14\" height=\"12\"/>", "idle"});
  if (wraps_) {
    legend_.push_back(
        {fmt::format("<g class=\"ar f wrap\"><path d=\"M1 6H12\" marker-end=\"url(#{}-af)\"/></g>",
                     id_),
         fmt::format("around the ring: rank {} ↔ rank 0", pp_ - 1)});
  }
  if (draw_arrows_) {
    legend_.push_back(
        {fmt::format("<path class=\"ar f\" d=\"M1 6H12\" marker-end=\"url(#{}-af)\"/>", id_),
         "activation SEND → RECV"});
    legend_.push_back(
        {fmt::format("<path class=\"ar b\" d=\"M1 6H12\" marker-end=\"url(#{}-ab)\"/>", id_),
         "gradient SEND → RECV"});
  }
  legend_.push_back({"<circle class=\"pk\" cx=\"7\" cy=\"6\" r=\"3\"/>", "peak memory"});
  double x = kLeft;
  legend_rows_ = 1;
  for (auto& item : legend_) {
    const double w = item.swatch_w + 6 + text_width(item.text, 11) + 18;
    if (x + w > width_ - 10 && x > kLeft) {
      x = kLeft;
      ++legend_rows_;
    }
    item_x_.push_back(x);
    item_row_.push_back(legend_rows_ - 1);
    x += w;
  }
}

void Timeline::header(Buf& b) {
  if (opts_.xml_declaration) put(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  put(b,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{7}\" class=\"ppc-timeline\" width=\"{0}\" "
      "height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" data-schedule=\"{2}\" data-pp=\"{3}\" data-vpp=\"{4}\" "
      "data-microbatches=\"{5}\" "
      "data-aggregated=\"{6}\">\n",
      viz::number(width_, 1), viz::number(height_, 1), viz::escaped(plan_.schedule), pp_,
      plan_.vpp(), plan_.microbatches, aggregated_ ? "true" : "false", id_);
  styles(b);
  put(b,
      "<defs>"
      "<marker id=\"{0}-af\" viewBox=\"0 0 8 8\" refX=\"7\" refY=\"4\" markerWidth=\"6\" "
      "markerHeight=\"6\" "
      "orient=\"auto\"><path d=\"M0,0L8,4L0,8z\" fill=\"{1}\"/></marker>"
      "<marker id=\"{0}-ab\" viewBox=\"0 0 8 8\" refX=\"7\" refY=\"4\" markerWidth=\"6\" "
      "markerHeight=\"6\" "
      "orient=\"auto\"><path d=\"M0,0L8,4L0,8z\" fill=\"{2}\"/></marker>"
      "</defs>\n",
      id_, viz::hex(viz::kind_rgb(ActionKind::SendF)), viz::hex(viz::kind_rgb(ActionKind::SendB)));
  put(b, "<rect class=\"bg\" width=\"100%\" height=\"100%\"/>\n");

  // Title.
  std::string line1 = fmt::format("{} · pp {} · vpp {} · {} microbatches", plan_.schedule, pp_,
                                  plan_.vpp(), plan_.microbatches);
  if (plan_.copies > 1) line1 += fmt::format(" · {} model copies", plan_.copies);
  std::string model = plan_.has_model ? "layout " + plan_.layout.source
                                      : fmt::format("{} generic stages", plan_.layout.num_stages());
  const size_t max_chars =
      static_cast<size_t>(std::max(20.0, (width_ - 2 * kLeft) / (0.62 * 12) - 80));
  if (model.size() > max_chars) model = model.substr(0, max_chars) + "…";
  std::string line2 = fmt::format(
      "makespan {} · bubble {:.1f} % · {} · {} ({} stages, {} placement)",
      viz::number(sim_.makespan), 100.0 * sim_.bubble, sim_.unit ? "unit costs" : opts_.costs,
      model, plan_.num_stages(), placement_name(plan_.placement.style));
  put(b, "<g class=\"title\"><text class=\"t1\" x=\"{}\" y=\"24\">", kLeft);
  put_escaped(b, line1);
  put(b, "</text><text class=\"t2\" x=\"{}\" y=\"44\">", kLeft);
  put_escaped(b, line2);
  put(b, "</text></g>\n");

  // Legend and notes.
  put(b, "<g class=\"legend\">");
  for (size_t i = 0; i < legend_.size(); ++i) {
    const double y = legend_y_ + item_row_[i] * 22;
    put(b, "<g transform=\"translate({},{})\">{}<text x=\"{}\" y=\"10\">",
        viz::number(item_x_[i], 1), viz::number(y, 1), legend_[i].swatch, legend_[i].swatch_w + 6);
    put_escaped(b, legend_[i].text);
    put(b, "</text></g>");
  }
  for (size_t i = 0; i < notes_.size(); ++i) {
    put(b, "<text class=\"note\" x=\"{}\" y=\"{}\">note: ", kLeft,
        viz::number(legend_y_ + legend_rows_ * 22 + i * 15 + 6, 1));
    put_escaped(b, notes_[i]);
    put(b, "</text>");
  }
  put(b, "</g>\n");

  // Time axis: grid lines through the lanes, labels above them and below the memory plots.
  const double step = tick_step(scale_, 70);
  put(b, "<g class=\"axis\">");
  const double lanes_bottom = lane_y(pp_ - 1) + lane_h_;
  const double mem_bottom = mem_top(pp_ - 1) + mem_h_;
  for (int i = 0;; ++i) {
    const double t = i * step;
    if (t > t_max_ + 1e-9) break;
    const double x = x_of(t);
    put(b, "<path class=\"grid\" d=\"M{0} {1}V{2}M{0} {3}V{4}\"/>", viz::number(x, 1),
        viz::number(axis_top_ + 3, 1), viz::number(lanes_bottom + 2, 1), viz::number(mem_y_, 1),
        viz::number(mem_bottom, 1));
    put(b, "<text x=\"{0}\" y=\"{1}\">{2}</text><text x=\"{0}\" y=\"{3}\">{2}</text>",
        viz::number(x, 1), viz::number(axis_top_, 1), viz::number(t),
        viz::number(mem_bottom + 13, 1));
  }
  put(b, "<text class=\"unit\" x=\"{}\" y=\"{}\">time ({})</text>", viz::number(kLeft + time_w_, 1),
      viz::number(axis_y_ + 14, 1),
      sim_.unit ? "unit costs: F = 1, B = 2, I = W = 1 per stage" : "cost model units");
  put(b, "</g>\n");
}

void Timeline::styles(Buf& b) {
  put(b,
      "<style>\n"
      "#{0}{{font-family:'DejaVu Sans',Verdana,Arial,sans-serif;font-size:11px}}\n"
      "#{0} .bg{{fill:#fff}}\n"
      "#{0} .t1{{font-size:17px;font-weight:bold;fill:#222}}\n"
      "#{0} .t2{{font-size:12px;fill:#444}}\n"
      "#{0} .note{{font-size:11px;fill:#8a5a00}}\n"
      "#{0} .legend text{{fill:#333}}\n"
      "#{0} .axis text{{fill:#666;font-size:10px;text-anchor:middle}}\n"
      "#{0} .axis .unit{{text-anchor:end;font-style:italic}}\n"
      "#{0} .grid{{stroke:#e4e4e4;stroke-width:1}}\n"
      "#{0} .idle{{fill:#f3f3f3}}\n"
      "#{0} .rl{{fill:#333;text-anchor:end;dominant-baseline:central{4}}}\n"
      "#{0} .rs{{fill:#777;font-size:10px;dominant-baseline:central}}\n"
      "#{0} .a{{stroke:#fff;stroke-width:{1}}}\n"
      "#{0} .l{{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;text-anchor:middle;"
      "dominant-baseline:central;pointer-events:none}}\n"
      "#{0} .ld{{fill:#1a1a1a}} #{0} .ll{{fill:#fff}}\n"
      "#{0} .ar{{fill:none;stroke-width:1.1;opacity:.75}}\n"
      "#{0} .ar.f{{stroke:{2}}} #{0} .ar.b{{stroke:{3}}}\n"
      "#{0} .ar.wrap{{stroke-dasharray:3 2}}\n"
      "#{0} .ar:hover{{opacity:1;stroke-width:2}}\n"
      "#{0} .mem{{fill:#c9d7e8;stroke:#4e79a7;stroke-width:1}}\n"
      "#{0} .mbg{{fill:#fafafa;stroke:#e4e4e4}}\n"
      "#{0} .pk{{fill:#d62728;stroke:#fff;stroke-width:1}}\n"
      "#{0} .pkt{{fill:#d62728;font-size:10px;dominant-baseline:central}}\n"
      "#{0} .mt{{fill:#333;font-size:12px;font-weight:bold}}\n",
      id_, mean_box_px() >= 4 ? "0.6" : "0", viz::hex(viz::kind_rgb(ActionKind::SendF)),
      viz::hex(viz::kind_rgb(ActionKind::SendB)), pp_ > 32 ? ";font-size:9px" : "");
  // Fills per kind and chunk.
  const int vpp = std::max(plan_.vpp(), 1);
  for (ActionKind k : viz::kComputeKinds)
    for (int c = 0; c < vpp; ++c)
      put(b, "#{} .{}.c{}{{fill:{}}}\n", id_, viz::kind_class(k), c,
          viz::hex(viz::shade(viz::kind_rgb(k), c, vpp)));
  put(b, "</style>\n");
}

double Timeline::mean_box_px() const {
  double sum = 0;
  for (double v : sim_.busy) sum += v;
  return boxes_ ? sum / static_cast<double>(boxes_) * scale_ : 0;
}

}  // namespace ppc::svg
