#include "compiler/lengths.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "compiler/diagnostic.h"
#include "compiler/read_file.h"

namespace ppc {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& input, const std::string& path, const std::string& what) {
  throw UserError(path + ": " + what, input_location(input));
}

double positive(const json& v, const std::string& input, const std::string& path) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
    fail(input, path, fmt::format("expected a positive number, got {}", v.dump()));
  return v.get<double>();
}

// c0 + c1 x + c2 x^2 in x = T / T0 (lengths.h says which curve).
struct Curve {
  double c0 = 0, c1 = 0, c2 = 0;
  double at(double x) const { return std::max(0.0, c0 + c1 * x + c2 * x * x); }
};

// The curve through points (x[k], v[k]); x[0] == 1 is the file's own length. `quadratic` is the
// share of v[0] that grows with x^2 when there is no other point.
Curve fit(const std::vector<double>& x, const std::vector<double>& v, double quadratic) {
  Curve c;
  const size_t n = x.size();
  if (n == 1) {
    c.c1 = v[0] * (1 - quadratic);
    c.c2 = v[0] * quadratic;
  } else if (n == 2) {  // p x + q x^2 through both
    const double det = x[0] * x[1] * (x[1] - x[0]);
    c.c1 = (v[0] * x[1] * x[1] - v[1] * x[0] * x[0]) / det;
    c.c2 = (x[0] * v[1] - x[1] * v[0]) / det;
  } else {  // least squares: the normal equations of (1, x, x^2), by Gaussian elimination
    std::array<std::array<double, 4>, 3> a{};
    for (size_t k = 0; k < n; ++k) {
      const std::array<double, 3> row{1.0, x[k], x[k] * x[k]};
      for (size_t i = 0; i < 3; ++i) {
        for (size_t j = 0; j < 3; ++j) a[i][j] += row[i] * row[j];
        a[i][3] += row[i] * v[k];
      }
    }
    for (size_t col = 0; col < 3; ++col) {
      size_t pivot = col;
      for (size_t r = col + 1; r < 3; ++r)
        if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
      std::swap(a[col], a[pivot]);
      for (size_t r = 0; r < 3; ++r) {
        if (r == col || a[col][col] == 0) continue;
        const double f = a[r][col] / a[col][col];
        for (size_t j = col; j < 4; ++j) a[r][j] -= f * a[col][j];
      }
    }
    c.c0 = a[0][3] / a[0][0];
    c.c1 = a[1][3] / a[1][1];
    c.c2 = a[2][3] / a[2][2];
  }
  return c;
}

}  // namespace

std::shared_ptr<const LengthModel> parse_length_model(std::string_view text,
                                                      const std::string& input_name) {
  json top = json::parse(text);  // parse_cost_model has read it already
  if (!top.contains("lengths")) return nullptr;
  const json l = top["lengths"];
  top.erase("lengths");
  const std::string& in = input_name;
  if (!l.is_object())
    fail(in, "lengths", "expected an object with seq_len, attention and measured");
  for (auto it = l.begin(); it != l.end(); ++it)
    if (it.key() != "seq_len" && it.key() != "attention" && it.key() != "measured")
      fail(in, "lengths." + it.key(), "unknown field (known: seq_len, attention, measured)");
  auto lm = std::make_shared<LengthModel>();
  if (l.contains("seq_len")) lm->seq_len = positive(l["seq_len"], in, "lengths.seq_len");
  if (l.contains("attention")) {
    const json& a = l["attention"];
    if (!a.is_number() || !(a.get<double>() >= 0 && a.get<double>() <= 1))
      fail(in, "lengths.attention",
           fmt::format("expected a number between 0 and 1, got {}", a.dump()));
    lm->attention = a.get<double>();
  }
  if (l.contains("measured")) {
    const json& m = l["measured"];
    if (!m.is_array()) fail(in, "lengths.measured", "expected an array of entries");
    if (!lm->seq_len && !m.empty())
      fail(in, "lengths.measured",
           "entries at other lengths need the length of the file's own: add lengths.seq_len");
    for (size_t k = 0; k < m.size(); ++k) {
      const std::string path = fmt::format("lengths.measured[{}]", k);
      const json& e = m[k];
      if (!e.is_object()) fail(in, path, "expected an object with seq_len and layers or stages");
      for (auto it = e.begin(); it != e.end(); ++it)
        if (it.key() != "seq_len" && it.key() != "layers" && it.key() != "stage" &&
            it.key() != "stages" && it.key() != "boundaries" && it.key() != "layout" &&
            it.key() != "comment")
          fail(in, path + "." + it.key(),
               "unknown field (known: seq_len, layers, stage, stages, boundaries, layout)");
      if (!e.contains("seq_len")) fail(in, path, "missing field 'seq_len'");
      LengthModel::Point p;
      p.seq_len = positive(e["seq_len"], in, path + ".seq_len");
      if (p.seq_len == *lm->seq_len)
        fail(in, path + ".seq_len",
             fmt::format("{:g} is lengths.seq_len, the length of the file's own entries",
                         p.seq_len));
      for (const auto& q : lm->measured)
        if (q.seq_len == p.seq_len)
          fail(in, path + ".seq_len", fmt::format("{:g} is measured twice", p.seq_len));
      json costs = top;  // the file, with this entry's costs in place of its own
      for (auto it = e.begin(); it != e.end(); ++it)
        if (it.key() != "seq_len") costs[it.key()] = it.value();
      p.costs = parse_cost_model(costs.dump(), in + ": " + path);
      lm->measured.push_back(std::move(p));
    }
    std::sort(lm->measured.begin(), lm->measured.end(),
              [](const auto& a, const auto& b) { return a.seq_len < b.seq_len; });
  }
  return lm;
}

std::vector<long long> parse_lengths(std::string_view text, const std::string& input_name,
                                     int microbatches) {
  std::vector<long long> out;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front())))
      line.remove_prefix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    if (line.empty()) continue;
    long long v = 0;
    bool ok = line.size() <= 12;
    for (char c : line) ok = ok && c >= '0' && c <= '9';
    if (ok) {
      for (char c : line) v = 10 * v + (c - '0');
      ok = v > 0;
    }
    if (!ok)
      throw UserError(
          fmt::format("expected a positive integer length (tokens, at most 12 digits), got \"{}\"",
                      printable(std::string(line))),
          SourceLocation{input_name, line_no, 0, ""});
    out.push_back(v);
  }
  if (out.size() != static_cast<size_t>(microbatches))
    throw UserError(fmt::format("holds {} length{}, but the plan has {} microbatches (one "
                                "length per microbatch, in data order)",
                                out.size(), out.size() == 1 ? "" : "s", microbatches),
                    input_location(input_name));
  return out;
}

std::vector<long long> read_lengths(const std::string& path, int microbatches) {
  return parse_lengths(read_file(path), path, microbatches);
}

LengthCosts::LengthCosts(const Plan& plan, const CostModel& model) {
  const auto& lengths = model.microbatch_lengths;
  PPC_INTERNAL_ASSERT(lengths.size() == static_cast<size_t>(plan.microbatches),
                      "LengthCosts needs one length per microbatch");
  const LengthModel* lm = model.length_model.get();
  if (lm && lm->seq_len) {
    reference_ = *lm->seq_len;
  } else {
    double sum = 0;
    for (long long t : lengths) sum += static_cast<double>(t);
    reference_ = sum / static_cast<double>(lengths.size());
  }
  // The points: the file's own costs at x = 1, then each measured length.
  std::vector<double> xs{1.0};
  std::vector<std::vector<StageCost>> points{stage_costs(plan, model)};
  if (lm)
    for (const auto& p : lm->measured) {
      xs.push_back(p.seq_len / reference_);
      points.push_back(stage_costs(plan, p.costs));
    }
  const double a = lm ? lm->attention : 0.0;
  const size_t S = points[0].size();
  constexpr std::array<double StageCost::*, 5> kFields{&StageCost::f, &StageCost::b, &StageCost::i,
                                                       &StageCost::w, &StageCost::activation};
  std::vector<std::array<Curve, 5>> curves(S);
  std::vector<double> v(xs.size());
  for (size_t s = 0; s < S; ++s)
    for (size_t k = 0; k < kFields.size(); ++k) {
      for (size_t p = 0; p < xs.size(); ++p) v[p] = points[p][s].*kFields[k];
      curves[s][k] = fit(xs, v, kFields[k] == &StageCost::activation ? 0.0 : a);
    }
  std::map<long long, int> index;
  for (long long t : lengths) index.emplace(t, 0);
  for (auto& [t, idx] : index) {
    idx = static_cast<int>(at_.size());
    const double x = static_cast<double>(t) / reference_;
    std::vector<StageCost> row = points[0];  // params and optimizer as they are
    for (size_t s = 0; s < S; ++s)
      for (size_t k = 0; k < kFields.size(); ++k) row[s].*kFields[k] = curves[s][k].at(x);
    at_.push_back(std::move(row));
  }
  for (long long t : lengths) {
    of_data_.push_back(index.at(t));
    data_scale_.push_back(static_cast<double>(t) / reference_);
  }
  assign(plan.microbatch_order);
}

void LengthCosts::assign(const std::vector<int>& order) {
  if (order.empty()) {
    of_mb_ = of_data_;
    scale_ = data_scale_;
    return;
  }
  of_mb_.resize(order.size());
  scale_.resize(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    of_mb_[k] = of_data_[static_cast<size_t>(order[k])];
    scale_[k] = data_scale_[static_cast<size_t>(order[k])];
  }
}

double LengthCosts::action_cost(const Action& a, const CostModel& model) const {
  if (!is_compound(a.kind)) return cost(a.stage, a.microbatch).time(a.kind);
  const Action fp = a.forward_part(), bp = a.backward_part();
  const StageCost &f = cost(fp.stage, fp.microbatch), &b = cost(bp.stage, bp.microbatch);
  return overlapped_time(f.f, f.all_to_all_f, b.time(bp.kind), b.all_to_all(bp.kind),
                         model.overlap);
}

std::string describe_lengths(const Plan& plan, const CostModel& model) {
  const auto& l = model.microbatch_lengths;
  if (l.empty()) return "";
  const auto [lo, hi] = std::minmax_element(l.begin(), l.end());
  double sum = 0;
  for (long long t : l) sum += static_cast<double>(t);
  const LengthModel* lm = model.length_model.get();
  const double mean = sum / static_cast<double>(l.size());
  std::string ref = lm && lm->seq_len ? fmt::format("costs at {:g}", *lm->seq_len)
                                      : fmt::format("costs at the mean");
  if (lm && !lm->measured.empty())
    ref += fmt::format(" and {} more length{}", lm->measured.size(),
                       lm->measured.size() == 1 ? "" : "s");
  bool data_order = true;
  for (size_t k = 0; k < plan.microbatch_order.size(); ++k)
    data_order &= plan.microbatch_order[k] == static_cast<int>(k);
  return fmt::format("{} microbatches of {} .. {} tokens (mean {:g}; {}); {}", l.size(), *lo, *hi,
                     mean, ref, data_order ? "data order" : "ordered by length");
}

}  // namespace ppc
