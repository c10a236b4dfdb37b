// One self-contained HTML page for a comparison (or a single plan): the comparison table, each
// schedule's timeline (inline SVG, one shared time scale), and each schedule's stats. No network:
// inline CSS, inline SVG and a few lines of inline script. The page is well-formed XML too
// (XHTML syntax), so tests can parse it with an XML parser.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <ostream>
#include <sstream>

#include "compiler/compare.h"
#include "compiler/cost_model.h"
#include "compiler/emit_text.h"
#include "compiler/verify_and_lower.h"
#include "compiler/visualization.h"
#include "compiler/viz_common.h"

namespace ppc {

namespace {

constexpr const char* kStyle = R"(
body{font-family:'DejaVu Sans',Verdana,Arial,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:0 0 6px} .sub{color:#555;margin:0 0 12px}
table{border-collapse:collapse;font-size:13px}
th,td{padding:4px 10px;border-bottom:1px solid #e4e4e4;text-align:right;white-space:nowrap}
th{background:#f4f4f4;position:sticky;top:0} td.l,th.l{text-align:left} td.n{white-space:normal;min-width:240px}
tr.best td{font-weight:bold} tr.nofit td{color:#a33} tr:hover td{background:#f7f9fc;cursor:pointer}
.bar{display:inline-block;height:9px;background:#4e79a7;margin-right:6px;vertical-align:middle}
.timelines{display:grid;grid-template-columns:repeat(auto-fit,minmax(640px,1fr));gap:16px}
.timelines.stacked{grid-template-columns:1fr}
.card{border:1px solid #ddd;border-radius:6px;padding:10px;overflow-x:auto}
.card svg{width:100%;height:auto;display:block}
pre{background:#f7f7f7;padding:10px;border-radius:4px;font-size:12px;overflow-x:auto}
button{font-size:12px;margin-left:12px} .note{color:#8a5a00;font-size:12px}
details{margin:6px 0} summary{cursor:pointer;font-weight:bold}
)";

constexpr const char* kScript = R"(
//<![CDATA[
document.getElementById('layout-toggle').addEventListener('click', function () {
  var t = document.getElementById('timelines');
  t.classList.toggle('stacked');
  this.textContent = t.classList.contains('stacked') ? 'side by side' : 'stacked';
});
document.querySelectorAll('tr[data-target]').forEach(function (tr) {
  tr.addEventListener('click', function () {
    document.getElementById(tr.getAttribute('data-target')).scrollIntoView({behavior: 'smooth'});
  });
});
//]]>
)";

using Buf = fmt::memory_buffer;

template <class... Args>
void put(Buf& b, fmt::format_string<Args...> f, Args&&... args) {
  fmt::format_to(std::back_inserter(b), f, std::forward<Args>(args)...);
}
void put_text(Buf& b, std::string_view s) {
  const std::string e = viz::escaped(s);
  b.append(e.data(), e.data() + e.size());
}

std::string row_name(const CompareRow& row) {
  return row.vpp > 1 ? fmt::format("{} (vpp {})", row.schedule, row.vpp) : row.schedule;
}

void comparison_table(Buf& b, const Comparison& cmp, const CompareOptions& opts, bool counts) {
  const bool volume = !opts.cost.unit && opts.cost.message_bytes > 0;
  const double best = cmp.rows.empty() ? 0 : cmp.rows.front().sim.makespan;
  double worst = 0;
  for (const auto& r : cmp.rows) worst = std::max(worst, r.sim.makespan);
  put(b,
      "<table id=\"comparison\"><thead><tr><th>#</th><th class=\"l\">schedule</th><th>vpp</th>"
      "<th class=\"l\">placement</th><th class=\"l\">makespan</th><th>vs best</th><th>bubble</th>"
      "<th>peak memory (rank)</th>{}<th>{}</th><th class=\"l\">notes</th></tr></thead><tbody>\n",
      opts.memory_limit ? "<th>fits</th>" : "", volume ? "comm volume" : "messages");
  for (size_t i = 0; i < cmp.rows.size(); ++i) {
    const CompareRow& r = cmp.rows[i];
    const double bar = worst > 0 ? 120.0 * r.sim.makespan / worst : 0;
    put(b, "<tr class=\"{}\" data-target=\"plan-{}\"><td>{}</td><td class=\"l\">",
        i == 0   ? "best"
        : r.fits ? ""
                 : "nofit",
        i, i + 1);
    put_text(b, r.schedule);
    put(b,
        "</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\"><span class=\"bar\" "
        "style=\"width:{}px\"></span>{}"
        "</td><td>{}</td><td>{:.1f} %</td><td>{} ({})</td>",
        r.vpp, placement_name(r.placement), viz::number(bar, 1), viz::number(r.sim.makespan),
        best > 0 ? fmt::format("{:.2f}x", r.sim.makespan / best) : "-", 100.0 * r.sim.bubble,
        viz::escaped(viz::memory_text(r.peak_memory, counts)), r.peak_rank);
    if (opts.memory_limit) put(b, "<td>{}</td>", r.fits ? "yes" : "no");
    put(b, "<td>{}</td><td class=\"l n\">",
        volume ? viz::escaped(viz::memory_text(r.comm_bytes, false))
               : fmt::format("{}", r.sim.messages));
    put_text(b, r.layout_note);
    put(b, "</td></tr>\n");
  }
  put(b, "</tbody></table>\n");
  if (!cmp.skipped.empty()) {
    put(b, "<h3 style=\"margin-top:14px\">Not compared</h3><ul>\n");
    for (const Skipped& s : cmp.skipped) {
      put(b, "<li><b>");
      put_text(b, s.schedule);
      put(b, "</b>: ");
      put_text(b, s.reason);
      put(b, "</li>\n");
    }
    put(b, "</ul>\n");
  }
}

}  // namespace

void emit_html(const Comparison& cmp, const CompareOptions& opts, std::ostream& os,
               const TimelineOptions& timeline) {
  Buf b;
  const bool bytes = !opts.cost.unit && opts.cost.memory_in_bytes;
  const std::string model = opts.has_model
                                ? "layout " + opts.layout.source
                                : fmt::format("{} generic stages", opts.layout.num_stages());
  const std::string heading =
      fmt::format("{} · pp {} · {} microbatches", model, opts.pp, opts.microbatches);
  put(b,
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta "
      "charset=\"utf-8\"/>\n"
      "<meta name=\"generator\" content=\"ppcompile\"/>\n<title>ppcompile: ");
  put_text(b, heading);
  put(b,
      "</title>\n<style>{}</style>\n</head>\n<body>\n<h1>Pipeline schedules</h1>\n<p "
      "class=\"sub\">",
      kStyle);
  put_text(b, heading);
  // --compare runs unit costs per layer (merged stages cost more); a single plan, per stage.
  const bool per_stage = opts.cost.unit && (cmp.rows.empty() || cmp.rows.front().sim.unit);
  const std::string costs =
      per_stage        ? "unit costs (per stage F = 1, B = 2, I = W = 1; communication free)"
      : opts.cost.unit ? "unit costs per layer (F = I = W = 1, B = 2; communication free)"
                       : describe(opts.cost);
  put(b, " · ");
  put_text(b, costs);
  if (opts.memory_limit)
    put(b, " · memory limit {}", viz::escaped(viz::memory_text(*opts.memory_limit, !bytes)));
  put(b, "</p>\n");

  put(b, "<h2>Comparison</h2>\n");
  if (cmp.rows.empty())
    put(b, "<p>No schedule can run this model at this pipeline size.</p>\n");
  else
    comparison_table(b, cmp, opts, !bytes);

  // Timelines on one time scale, so that their lengths compare.
  double t_max = 0, m_max = 0;
  for (const auto& r : cmp.rows) {
    t_max = std::max(t_max, r.sim.makespan);
    m_max = std::max(m_max, r.peak_memory);
  }
  if (!cmp.rows.empty()) {
    put(b,
        "<h2>Timelines<button id=\"layout-toggle\" type=\"button\">stacked</button></h2>\n"
        "<p class=\"sub\">One time scale for all (0 to {}) and one memory scale. Hover a box for "
        "its action.</p>\n"
        "<div id=\"timelines\" class=\"timelines\">\n",
        viz::number(t_max));
    for (size_t i = 0; i < cmp.rows.size(); ++i) {
      const CompareRow& r = cmp.rows[i];
      put(b, "<section class=\"card\" id=\"plan-{}\"><h3>#{} ", i, i + 1);
      put_text(b, row_name(r));
      put(b, "</h3>\n");
      TimelineOptions t = timeline;
      t.time_max = t_max;
      t.memory_max = m_max;
      if (cmp.rows.size() > 1) t.max_width = std::min(t.max_width, 1000.0);  // two side by side
      t.id_prefix = fmt::format("plan{}", i);
      t.xml_declaration = false;
      if (opts.cost.unit) t.costs = "unit costs per layer";
      t.memory_in_bytes = bytes;
      std::ostringstream svg;
      emit_svg(r.plan, r.sim, svg, t);
      const std::string s = svg.str();
      b.append(s.data(), s.data() + s.size());
      put(b, "</section>\n");
    }
    put(b, "</div>\n");

    put(b, "<h2>Stats</h2>\n");
    for (size_t i = 0; i < cmp.rows.size(); ++i) {
      const CompareRow& r = cmp.rows[i];
      put(b, "<details{}><summary>#{} ", i == 0 ? " open=\"open\"" : "", i + 1);
      put_text(b, row_name(r));
      if (!r.layout_note.empty()) {
        put(b, " <span class=\"note\">(");
        put_text(b, r.layout_note);
        put(b, ")</span>");
      }
      put(b, "</summary><pre>");
      std::ostringstream stats;
      emit_stats(r.plan, r.report, r.sim, stats);
      put_text(b, stats.str());
      put(b, "</pre></details>\n");
    }
  }
  put(b,
      "<p class=\"sub\">Made by ppcompile --emit html. Self-contained: no network needed.</p>\n");
  if (!cmp.rows.empty()) put(b, "<script>{}</script>\n", kScript);
  put(b, "</body>\n</html>\n");
  os.write(b.data(), static_cast<std::streamsize>(b.size()));
}

void emit_plan_html(VerifiedPlan checked, const CostModel& cost, std::ostream& os,
                    const TimelineOptions& timeline) {
  CompareOptions co;
  co.layout = checked.plan.layout;
  co.has_model = checked.plan.has_model;
  co.pp = checked.plan.pp();
  co.microbatches = checked.plan.microbatches;
  co.cost = cost;
  Comparison cmp;
  cmp.rows.push_back(compare_row(std::move(checked), std::nullopt));
  emit_html(cmp, co, os, timeline);
}

}  // namespace ppc
