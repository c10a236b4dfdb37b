// The terminal table: time steps as rows, ranks as columns.
//
// The default (no color, not compact) output is pinned by the golden files. Color and compact
// mode are for terminals: colors by kind, idle cells as a dim dot, and in compact mode one letter
// per action (plus the chunk digit when ranks hold several stages) and a legend line.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <ostream>

#include "compiler/compute_steps.h"
#include "compiler/emit_text.h"

namespace ppc {

namespace {

// The kind's ANSI color ("" for SEND/RECV) and its letter in compact mode ('X' for an overlapped
// forward/backward): its row of kKinds.
const char* color_of(ActionKind k) {
  return kind_info(k).ansi;
}
constexpr const char* kReset = "\x1b[0m";
constexpr const char* kDim = "\x1b[2m";

char compact_letter(ActionKind k) {
  return kind_info(k).letter;
}

// The chunk as one character: 0-9, then a-z, then '+'.
char chunk_char(int c) {
  if (c < 10) return static_cast<char>('0' + c);
  if (c < 36) return static_cast<char>('a' + c - 10);
  return '+';
}

// The text of a cell at `out` (room for kMaxActionText characters); returns its length.
size_t cell_text(const Plan& plan, const Action& a, bool compact, char* out) {
  if (!compact) return static_cast<size_t>(format_action(a, out) - out);
  out[0] = compact_letter(a.kind);
  if (plan.vpp() == 1) return 1;
  out[1] = chunk_char(plan.placement.stage_chunk[static_cast<size_t>(a.stage)]);
  return 2;
}

struct Grid {
  int32_t num_steps = 0;
  int pp = 0;
  std::vector<int32_t> cells;  // cells[t * pp + r] = index into plan.compute[r], or -1
  int32_t at(int32_t t, int r) const { return cells[static_cast<size_t>(t) * pp + r]; }
};

Grid make_grid(const Plan& plan) {
  const int pp = plan.pp();
  const auto steps = compute_steps(plan);
  Grid g;
  g.pp = pp;
  for (const auto& r : steps)
    if (!r.empty()) g.num_steps = std::max(g.num_steps, r.back() + 1);
  g.cells.assign(static_cast<size_t>(g.num_steps) * static_cast<size_t>(pp), -1);
  for (int r = 0; r < pp; ++r) {
    const auto& st = steps[static_cast<size_t>(r)];
    for (size_t i = 0; i < st.size(); ++i)
      g.cells[static_cast<size_t>(st[i]) * pp + static_cast<size_t>(r)] = static_cast<int32_t>(i);
  }
  return g;
}

// The length of cell_text(plan, a, compact, ...).
size_t cell_size(const Plan& plan, const Action& a, bool compact) {
  if (!compact) return action_text_size(a);
  return plan.vpp() == 1 ? 1 : 2;
}

std::vector<size_t> column_widths(const Plan& plan, bool compact) {
  std::vector<size_t> width(static_cast<size_t>(plan.pp()));
  for (int r = 0; r < plan.pp(); ++r) {
    size_t& w = width[static_cast<size_t>(r)];
    w = compact ? fmt::formatted_size("{}", r) : fmt::formatted_size("Rank {}", r);
    for (const Action& a : plan.compute[static_cast<size_t>(r)])
      w = std::max(w, cell_size(plan, a, compact));
  }
  return width;
}

}  // namespace

int emit_table_rows(const Plan& plan, std::ostream& os, const TableOptions& opts) {
  const int pp = plan.pp();
  const Grid grid = make_grid(plan);
  const int32_t num_steps = grid.num_steps;
  const size_t label_width = fmt::formatted_size("Step {}", std::max(0, num_steps - 1));
  const std::string sep = " ";

  bool compact = opts.compact;
  std::vector<size_t> width = column_widths(plan, compact);
  if (!compact && opts.max_width > 0) {  // too wide for the terminal: compact
    size_t total = label_width + 2;
    for (size_t w : width) total += w + sep.size();
    if (total > static_cast<size_t>(opts.max_width)) {
      compact = true;
      width = column_widths(plan, true);
    }
  }

  std::string line(label_width + 2, ' ');
  for (int r = 0; r < pp; ++r) {
    if (r) line += sep;
    line += fmt::format("{:<{}}", compact ? fmt::format("{}", r) : fmt::format("Rank {}", r),
                        width[static_cast<size_t>(r)]);
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  os << line << '\n';
  const int digits = static_cast<int>(fmt::formatted_size("{}", std::max(0, num_steps - 1)));
  std::array<bool, kNumActionKinds> seen{};
  // The rows go into one buffer sized for the longest line each (label, cells with their
  // separators and colors, newline), plus the room format_action may write past a cell's end.
  const size_t cell_extra = opts.color ? 16 : 0;  // a color and its reset, or a dim dot
  size_t line_max = label_width + 3;              // "Step N: " and the newline
  for (size_t w : width) line_max += sep.size() + w + cell_extra;
  std::string rows(line_max * static_cast<size_t>(num_steps) + kMaxActionText, '\0');
  char* p = rows.data();
  auto put = [&p](std::string_view s) { p = std::copy(s.begin(), s.end(), p); };
  for (int32_t t = 0; t < num_steps; ++t) {
    p = fmt::format_to(p, "Step {:0{}}: ", t, digits);
    size_t trailing = 0;  // spaces of padding, only written before a later non-empty cell
    for (int r = 0; r < pp; ++r) {
      if (r) trailing += sep.size();
      const int32_t i = grid.at(t, r);
      const size_t w = width[static_cast<size_t>(r)];
      if (i < 0) {
        if (opts.color) {  // idle: a dim dot, so that gaps read as gaps
          p = std::fill_n(p, trailing, ' ');
          put(kDim);
          put("·");
          put(kReset);
          trailing = w - 1;
        } else {
          trailing += w;
        }
        continue;
      }
      const Action& a = plan.compute[static_cast<size_t>(r)][static_cast<size_t>(i)];
      seen[static_cast<size_t>(a.kind)] = true;
      p = std::fill_n(p, trailing, ' ');
      if (opts.color) put(color_of(a.kind));
      const size_t n = cell_text(plan, a, compact, p);
      p += n;
      if (opts.color) put(kReset);
      trailing = w - n;
    }
    *p++ = '\n';
  }
  os.write(rows.data(), p - rows.data());

  if (compact || opts.color) {  // a legend: what the letters / colors mean
    std::string legend = "Legend:";
    for (const KindInfo& k : kKinds) {
      if (!is_compute(k.kind) || !seen[static_cast<size_t>(k.kind)]) continue;
      const std::string sym = compact ? std::string(1, k.letter) : k.name;
      legend += " ";
      legend += opts.color ? std::string(k.ansi) + sym + kReset : sym;
      legend += fmt::format(" {},", k.legend);
    }
    if (legend.back() == ',') legend.pop_back();
    if (compact && plan.vpp() > 1) legend += "; the digit is the chunk (the rank's local stage)";
    if (opts.color) legend += fmt::format("; {}·{} idle", kDim, kReset);
    if (compact && !opts.compact) legend += " (compact: the full table is wider than the terminal)";
    os << legend << '\n';
  }
  return num_steps;
}

void emit_table_summary(const Plan& plan, const VerifyReport& report, int num_steps,
                        std::ostream& os) {
  const int pp = plan.pp();
  size_t sends = 0;
  for (const auto& r : plan.lowered)
    for (const Action& a : r) sends += is_send(a.kind);
  std::string peaks;
  for (int p : report.peak_inflight) peaks += fmt::format(" {}", p);
  os << fmt::format("{} | pp {} | vpp {} | {} microbatch{} | {} steps | {} compute actions",
                    plan.schedule, pp, plan.vpp(), plan.microbatches,
                    plan.microbatches == 1 ? "" : "es", num_steps, report.compute_actions);
  if (plan.is_lowered())
    os << fmt::format(" | {} send/recv pairs in {} batches", sends, report.batches);
  os << fmt::format(" | peak in-flight per rank:{} | {}\n", peaks,
                    report.ok() ? (report.checked_lowered ? "verified: deadlock-free" : "verified")
                                : "NOT VALID");
}

void emit_table(const Plan& plan, const VerifyReport& report, std::ostream& os,
                const TableOptions& opts) {
  emit_table_summary(plan, report, emit_table_rows(plan, os, opts), os);
}

}  // namespace ppc
