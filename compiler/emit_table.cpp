// The terminal table: time steps as rows, ranks as columns.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "compiler/emit.h"
#include "compiler/lower_send_recv.h"

namespace ppc {

namespace {

const char* color_of(ActionKind k) {
  switch (k) {
    case ActionKind::F: return "\x1b[32m";          // green
    case ActionKind::B: return "\x1b[34m";          // blue
    case ActionKind::I: return "\x1b[36m";          // cyan
    case ActionKind::W: return "\x1b[35m";          // magenta
    case ActionKind::OverlapFB: return "\x1b[33m";  // yellow
    default: return "";
  }
}

std::string cell_text(const Action& a, bool compact) {
  if (!compact) return to_string(a);
  if (a.kind == ActionKind::OverlapFB) return "X";
  return kind_name(a.kind);
}

}  // namespace

void emit_table(const Plan& plan, const VerifyReport& report, std::ostream& os, const TableOptions& opts) {
  const int pp = plan.pp();
  const auto steps = compute_steps(plan);
  int32_t num_steps = 0;
  for (const auto& r : steps)
    if (!r.empty()) num_steps = std::max(num_steps, r.back() + 1);

  // grid[t][r] = index into plan.compute[r], or -1.
  std::vector<std::vector<int32_t>> grid(static_cast<size_t>(num_steps), std::vector<int32_t>(static_cast<size_t>(pp), -1));
  std::vector<size_t> width(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    width[static_cast<size_t>(r)] = opts.compact ? fmt::formatted_size("{}", r) : fmt::formatted_size("Rank {}", r);
    const auto& st = steps[static_cast<size_t>(r)];
    for (size_t i = 0; i < st.size(); ++i) {
      grid[static_cast<size_t>(st[i])][static_cast<size_t>(r)] = static_cast<int32_t>(i);
      width[static_cast<size_t>(r)] =
          std::max(width[static_cast<size_t>(r)], cell_text(plan.compute[static_cast<size_t>(r)][i], opts.compact).size());
    }
  }
  const size_t label_width = fmt::formatted_size("Step {}", std::max(0, num_steps - 1));
  const std::string sep = " ";

  std::string line(label_width + 2, ' ');
  for (int r = 0; r < pp; ++r) {
    if (r) line += sep;
    line += fmt::format("{:<{}}", opts.compact ? fmt::format("{}", r) : fmt::format("Rank {}", r),
                        width[static_cast<size_t>(r)]);
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  os << line << '\n';
  const int digits = static_cast<int>(fmt::formatted_size("{}", std::max(0, num_steps - 1)));
  for (int32_t t = 0; t < num_steps; ++t) {
    line = fmt::format("Step {:0{}}: ", t, digits);
    std::string trailing;  // padding is only written before a later non-empty cell
    for (int r = 0; r < pp; ++r) {
      if (r) trailing += sep;
      const int32_t i = grid[static_cast<size_t>(t)][static_cast<size_t>(r)];
      std::string text;
      const Action* a = nullptr;
      if (i >= 0) {
        a = &plan.compute[static_cast<size_t>(r)][static_cast<size_t>(i)];
        text = cell_text(*a, opts.compact);
      }
      if (!text.empty()) {
        line += trailing;
        trailing.clear();
        if (opts.color) line += std::string(color_of(a->kind)) + text + "\x1b[0m";
        else line += text;
      }
      trailing += std::string(width[static_cast<size_t>(r)] - text.size(), ' ');
    }
    os << line << '\n';
  }

  size_t sends = 0;
  for (const auto& r : plan.lowered)
    for (const Action& a : r) sends += is_send(a.kind);
  std::string peaks;
  for (int p : report.peak_inflight) peaks += fmt::format(" {}", p);
  os << fmt::format("{} | pp {} | vpp {} | {} microbatch{} | {} steps | {} compute actions", plan.schedule, pp,
                    plan.vpp(), plan.microbatches, plan.microbatches == 1 ? "" : "es", num_steps,
                    report.compute_actions);
  if (plan.is_lowered()) os << fmt::format(" | {} send/recv pairs in {} batches", sends, report.batches);
  os << fmt::format(" | peak in-flight per rank:{} | {}\n", peaks,
                    report.ok() ? (report.checked_lowered ? "verified: deadlock-free" : "verified") : "NOT VALID");
}

}  // namespace ppc
