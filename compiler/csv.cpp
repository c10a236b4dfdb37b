// PyTorch's CSV schedule format: one row per rank, one action per cell.
#include "compiler/csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>

#include "compiler/block_writer.h"
#include "compiler/dependencies.h"
#include "compiler/diagnostic.h"

namespace ppc {

void emit_csv(const Plan& plan, std::ostream& os, bool compute_only) {
  const auto& orders = compute_only ? plan.compute : plan.order();
  BlockWriter out(os);
  for (const auto& rank : orders) {
    for (size_t i = 0; i < rank.size(); ++i) {
      if (i) out.put(',');
      out.put(rank[i]);
    }
    out.put('\n');
  }
}

namespace {

struct Cell {
  std::string text;
  int column;  // 1-based column of the cell's first character
};

// Splits one CSV line into cells (RFC 4180 quoting, as Python's csv module writes it).
std::vector<Cell> split_csv_line(std::string_view line, const SourceLocation& where) {
  std::vector<Cell> cells;
  size_t i = 0;
  while (true) {
    Cell c{"", static_cast<int>(i) + 1};
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) {
          SourceLocation at = where;
          at.column = c.column;
          throw UserError("unterminated quoted cell", at);
        }
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            c.text += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        c.text += line[i++];
      }
      if (i < line.size() && line[i] != ',') {
        SourceLocation at = where;
        at.column = static_cast<int>(i) + 1;
        throw UserError("expected ',' after a quoted cell", at);
      }
    } else {
      while (i < line.size() && line[i] != ',') c.text += line[i++];
    }
    cells.push_back(std::move(c));
    if (i >= line.size()) break;
    ++i;  // the comma
  }
  return cells;
}

// torch's cells for what a runtime does around the pipeline's compute, `<stage>UNSHARD`,
// `<stage>RESHARD` (FSDP: gather a stage's sharded parameters, free them again) and
// `<stage>REDUCE_GRAD` (reduce a stage's gradients across data-parallel replicas once its last
// backward ran), which its lowering adds. The stage, or nullopt if `t` is none of them; throws on
// one of them with something after the keyword (torch writes none), at `column` of `where`'s line.
std::optional<int> runtime_cell_stage(std::string_view t, const SourceLocation& where, int column) {
  size_t p = 0;
  while (p < t.size() && t[p] >= '0' && t[p] <= '9') ++p;
  if (p == 0 || p > 7) return std::nullopt;
  const std::string_view rest = t.substr(p);
  for (std::string_view keyword : {"UNSHARD", "RESHARD", "REDUCE_GRAD"}) {
    if (!rest.starts_with(keyword)) continue;
    if (rest.size() != keyword.size()) {
      SourceLocation at = where;
      at.column = column;
      throw UserError(fmt::format("'{}': {} takes a stage only (e.g. '0{}')", t, keyword, keyword),
                      at);
    }
    return std::stoi(std::string(t.substr(0, p)));
  }
  return std::nullopt;
}

}  // namespace

Plan read_csv(std::string_view text, const CsvImportOptions& opts) {
  struct Located {
    Action action;
    int line, column;
    std::string_view source_line;  // into `text`: a copy per cell made memory quadratic in a row
  };
  struct RuntimeCell {  // UNSHARD / RESHARD / REDUCE_GRAD: checked, then dropped
    int stage, line, column;
    std::string_view source_line;
  };
  std::vector<std::vector<Located>> rows;
  std::vector<std::vector<RuntimeCell>> runtime_cells;
  int line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no;
    const bool last = end >= text.size();
    if (!(last && line.empty())) {
      SourceLocation where{opts.input_name, line_no, 0, std::string(line)};
      std::vector<Located> row;
      std::vector<RuntimeCell> runtime_row;
      for (const Cell& c : split_csv_line(line, where)) {
        std::string_view t = c.text;
        while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
        while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
        if (t.empty()) continue;
        if (auto stage = runtime_cell_stage(t, where, c.column)) {
          runtime_row.push_back({*stage, line_no, c.column, line});
          continue;
        }
        std::string err;
        auto a = parse_action(t, &err);
        if (!a) {
          SourceLocation at = where;
          at.column = c.column;
          throw UserError(fmt::format("'{}': {}", t, err), at);
        }
        row.push_back({*a, line_no, c.column, line});
      }
      rows.push_back(std::move(row));
      runtime_cells.push_back(std::move(runtime_row));
    }
    if (last) break;
    start = end + 1;
  }
  SourceLocation file{opts.input_name, 0, 0, ""};
  if (rows.empty()) throw UserError("the CSV has no rows (one row per rank expected)", file);
  const int pp = static_cast<int>(rows.size());

  // Infer stage -> rank, the stage count and the microbatch count.
  std::map<int, int> stage_rank;
  int max_stage = -1, max_mb = -1;
  bool has_comms = false;
  for (int r = 0; r < pp; ++r) {
    for (const Located& l : rows[static_cast<size_t>(r)]) {
      auto note = [&](int s, int mb) {
        if (s > 1000000 || mb > 10000000) {
          throw UserError(
              fmt::format("stage {} / microbatch {} is too large", s, mb),
              SourceLocation{opts.input_name, l.line, l.column, std::string(l.source_line)});
        }
        auto [it, fresh] = stage_rank.emplace(s, r);
        if (!fresh && it->second != r)
          throw UserError(
              fmt::format("stage {} appears on rank {} and on rank {}", s, it->second, r),
              SourceLocation{opts.input_name, l.line, l.column, std::string(l.source_line)});
        max_stage = std::max(max_stage, s);
        max_mb = std::max(max_mb, mb);
      };
      const Action& a = l.action;
      if (is_comm(a.kind)) {
        has_comms = true;
        max_stage = std::max(max_stage, a.stage);
        max_mb = std::max(max_mb, a.microbatch);
        auto [it, fresh] = stage_rank.emplace(a.stage, r);
        if (!fresh && it->second != r)
          throw UserError(
              fmt::format("stage {} appears on rank {} and on rank {}", a.stage, it->second, r),
              SourceLocation{opts.input_name, l.line, l.column, std::string(l.source_line)});
      } else {
        for_each_part(a, [&](const Action& p) { note(p.stage, p.microbatch); });
      }
    }
  }
  if (max_stage < 0) throw UserError("the CSV holds no actions", file);
  const int num_stages = max_stage + 1;
  // A layout of half the stages fits a DualPipe plan (two copies); checked once placement is known.
  if (opts.layout && opts.layout->num_stages() != num_stages &&
      2 * opts.layout->num_stages() != num_stages)
    throw UserError(fmt::format("the CSV uses {} stages but the layout has {}", num_stages,
                                opts.layout->num_stages()),
                    file);
  if (num_stages % pp != 0)
    throw UserError(
        fmt::format(
            "the CSV uses {} stages on {} ranks (rows); the stage count must be a multiple of "
            "the rank count",
            num_stages, pp),
        file);
  for (int s = 0; s < num_stages; ++s)
    if (!stage_rank.count(s))
      throw UserError(fmt::format("stage {} never appears in the CSV", s), file);
  // UNSHARD, RESHARD and REDUCE_GRAD act on the row's own stages (torch's runtime looks the stage
  // up among its rank's). ppcompile's plans have nothing for them to do: pprun keeps every
  // parameter of its stages whole, and reduces the gradients of shared and data-parallel
  // parameters itself once a stage's last backward ran (docs/pytorch.md). They are dropped.
  for (int r = 0; r < pp; ++r)
    for (const RuntimeCell& c : runtime_cells[static_cast<size_t>(r)]) {
      const SourceLocation at{opts.input_name, c.line, c.column, std::string(c.source_line)};
      auto it = stage_rank.find(c.stage);
      if (it == stage_rank.end())
        throw UserError(fmt::format("stage {} does not exist: the CSV's stages are 0-{}", c.stage,
                                    num_stages - 1),
                        at);
      if (it->second != r)
        throw UserError(fmt::format("stage {} is on rank {}, not on rank {} (this row)", c.stage,
                                    it->second, r),
                        at);
    }

  // Loop or V placement?
  Placement placement;
  bool found = false;
  for (PlacementStyle style : {PlacementStyle::Loop, PlacementStyle::V}) {
    if (style == PlacementStyle::V && num_stages != 2 * pp) continue;
    Placement p = make_placement(num_stages, pp, style);
    bool same = true;
    for (int s = 0; s < num_stages && same; ++s)
      same = p.stage_rank[static_cast<size_t>(s)] == stage_rank[s];
    if (same) {
      placement = std::move(p);
      found = true;
      break;
    }
  }
  if (!found) {
    std::string mapping;
    for (int s = 0; s < num_stages && s < 16; ++s)
      mapping += fmt::format("{}{}->{}", s ? ", " : "", s, stage_rank[s]);
    throw UserError(
        fmt::format(
            "the stage-to-rank mapping ({}) is neither loop placement (stage s on rank s mod {}) "
            "nor V placement",
            mapping, pp),
        file);
  }

  // DualPipe: V placement whose two halves are model copies that no microbatch crosses (copy 0
  // takes microbatches [0, ceil(m/2)) through stages [0, pp), copy 1 the rest; see plan.h).
  int copies = 1;
  if (placement.style == PlacementStyle::V) {
    const int first_of_copy1 = (max_mb + 2) / 2;
    bool split = true;
    for (const auto& row : rows)
      for (const Located& l : row) {
        auto check = [&](int s, int mb) { split = split && (s >= pp) == (mb >= first_of_copy1); };
        for_each_part(l.action, [&](const Action& p) { check(p.stage, p.microbatch); });
      }
    if (split) copies = 2;
  }
  if (opts.layout && opts.layout->num_stages() * copies != num_stages)
    throw UserError(fmt::format("the CSV uses {} stages but the layout has {}", num_stages,
                                opts.layout->num_stages()),
                    file);

  Plan plan;
  plan.copies = copies;
  plan.layout = opts.layout ? *opts.layout : generic_layout(num_stages / copies);
  plan.has_model = opts.layout.has_value() && opts.has_model;
  plan.placement = std::move(placement);
  plan.schedule = opts.schedule;
  plan.microbatches = max_mb + 1;
  plan.compute.assign(static_cast<size_t>(pp), {});
  if (has_comms) plan.lowered.assign(static_cast<size_t>(pp), {});
  for (int r = 0; r < pp; ++r) {
    for (const Located& l : rows[static_cast<size_t>(r)]) {
      Action a = l.action;
      if (is_comm(a.kind)) {
        const CommMatch m = comm_match(plan, a);
        a.peer = m.rank;
      } else {
        plan.compute[static_cast<size_t>(r)].push_back(a);
      }
      if (has_comms) plan.lowered[static_cast<size_t>(r)].push_back(a);
    }
  }
  if (opts.pp && *opts.pp != plan.pp())
    throw UserError(fmt::format("--pp {} disagrees with the CSV, which has {} rows (ranks)",
                                *opts.pp, plan.pp()));
  if (opts.vpp && *opts.vpp != plan.vpp())
    throw UserError(fmt::format("--vpp {} disagrees with the CSV, which has {} stages per rank",
                                *opts.vpp, plan.vpp()));
  if (opts.microbatches && *opts.microbatches != plan.microbatches)
    throw UserError(fmt::format("--microbatches {} disagrees with the CSV, which uses {}",
                                *opts.microbatches, plan.microbatches));
  return plan;
}

}  // namespace ppc
