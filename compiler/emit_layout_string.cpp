// --emit layout-string: a layout as one line of Megatron-LM's layout syntax, compressed.
//
// Each stage is written with runs of a layer as "t*N" (N >= 3; "tt" for two), stages are joined
// by '|'. Then runs of a repeated sequence of whole stages become a group "(tt|)*29" (or "|*N" for
// empty stages); a dynamic program over the stage sequence picks the groups that make the text
// shortest. Groups are never nested and hold only whole stages each ending with '|', so every
// repetition closes its stages: Megatron-LM's textual rewriting and parse_layout() both read the
// text back to exactly the same stages. A comma follows a count when a layer symbol or a group
// comes next ("(tt|)*29,m|L"), as in hand-written layouts; commas change nothing.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/diagnostic.h"
#include "compiler/emit_text.h"
#include "compiler/layout.h"

namespace ppc {

namespace {

std::string stage_text(const std::vector<LayerKind>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j < layers.size() && layers[j] == layers[i]) ++j;
    const size_t run = j - i;
    const char c = layer_symbol(layers[i]);
    if (run >= 3)
      out += fmt::format("{}*{}", c, run);
    else
      out.append(run, c);
    i = j;
  }
  return out;
}

size_t digits(size_t n) {
  size_t d = 1;
  while (n >= 10) {
    n /= 10;
    ++d;
  }
  return d;
}

// One choice of the dynamic program at a unit: write it as is (period 0), or as `count`
// repetitions of the `period` units from here.
struct Choice {
  size_t length = 0;  // of the text from this unit to the end
  size_t period = 0;
  size_t count = 0;
};

// Inserts the cosmetic commas: after a count followed by a layer symbol or '('.
std::string with_commas(const std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    const bool digit = s[i] >= '0' && s[i] <= '9';
    if (digit && i + 1 < s.size()) {
      const char next = s[i + 1];
      if (is_layer_symbol(next) || next == '(') out += ',';  // E, t, m, L or a model's own
    }
  }
  return out;
}

}  // namespace

std::string layout_string(const Layout& layout) {
  const size_t U = layout.stages.size();
  PPC_INTERNAL_ASSERT(U > 0, "layout_string of a layout with no stages");
  // Units: each stage's text with the '|' that ends it (the last stage has none).
  std::vector<std::string> unit(U);
  std::vector<int> id(U);
  std::unordered_map<std::string, int> ids;
  for (size_t j = 0; j < U; ++j) {
    unit[j] = stage_text(layout.stages[j]) + (j + 1 < U ? "|" : "");
    id[j] = ids.emplace(unit[j], static_cast<int>(ids.size())).first->second;
  }
  if (U == 1 && unit[0].empty())
    throw UserError("a layout of one empty stage has no text in the layout language");
  // Units [0, U-1) end with '|' and may be grouped; the last may not (its repetitions would merge).
  const size_t groupable = U - 1;
  // Periods up to K, bounded so that the work stays about linear for huge layouts.
  const size_t K =
      std::min(groupable / 2, std::max<size_t>(8, static_cast<size_t>(4'000'000) / (U + 1)));
  std::vector<size_t> prefix(U + 1, 0);  // text length of units [0, j)
  for (size_t j = 0; j < U; ++j) prefix[j + 1] = prefix[j] + unit[j].size();

  std::vector<Choice> best(U + 1);
  best[U] = Choice{0, 0, 0};
  // run[k]: how many consecutive positions from the current i (within the groupable units) have
  // id[p] == id[p + k]; updated as i moves down.
  std::vector<size_t> run(K + 1, 0);
  for (size_t i = U; i-- > 0;) {
    for (size_t k = 1; k <= K; ++k)
      run[k] = (i + k < groupable && id[i] == id[i + k]) ? run[k] + 1 : 0;
    Choice c{unit[i].size() + best[i + 1].length, 0, 0};
    for (size_t k = 1; k <= K && i + 2 * k <= groupable; ++k) {
      const size_t most = std::min(1 + run[k] / k, (groupable - i) / k);
      if (most < 2) continue;
      const size_t body = prefix[i + k] - prefix[i];
      const bool empty_stage = k == 1 && unit[i] == "|";
      // The longest run, and a few shorter ones (a shorter group can leave a better tail).
      for (size_t n = most; n >= 2 && n + 4 > most; --n) {
        const size_t len = (empty_stage ? 1 : body + 2) + 1 + digits(n) + best[i + k * n].length;
        if (len < c.length) c = Choice{len, k, n};
      }
    }
    best[i] = c;
  }
  std::string out;
  out.reserve(best[0].length);
  for (size_t i = 0; i < U;) {
    const Choice& c = best[i];
    if (c.period == 0) {
      out += unit[i];
      ++i;
      continue;
    }
    if (c.period == 1 && unit[i] == "|") {
      // "L||*5" reads better as "L|*6": the '|' that ended the stage before joins the run.
      const bool join = !out.empty() && out.back() == '|';
      if (join) out.pop_back();
      out += fmt::format("|*{}", c.count + join);
    } else {
      out += '(';
      for (size_t j = i; j < i + c.period; ++j) out += unit[j];
      out += fmt::format(")*{}", c.count);
    }
    i += c.period * c.count;
  }
  return with_commas(out);
}

void emit_layout_string(const Plan& plan, std::ostream& os) {
  if (!plan.has_model)
    throw UserError(
        "--emit layout-string needs a model (--layout or --layout-file): generic stages have no "
        "layers to write",
        input_location("--emit"));
  os << layout_string(plan.layout) << '\n';
}

}  // namespace ppc
