// The layout parser: --layout STR (parse_layout) and --layout-file FILE (its text path), then
// what ppcompile does next with a parsed layout (the model rules, placement).
#include <fmt/format.h>

#include <optional>

#include "compiler/layout.h"
#include "fuzz/fuzz_target.h"

namespace {

// A parsed layout's `source` (for a file: the text without comments, its lines joined) parses
// again to the same stages (docs/layout-language.md).
void check_source_reparses(const ppc::Layout& layout) {
  ppfuzz::must_succeed("re-parsing the layout's source", [&] {
    const ppc::Layout again = ppc::parse_layout(layout.source);
    ppfuzz::expect(again == layout,
                   fmt::format("'{}' parses to {} stages, its source to {}", layout.source,
                               layout.num_stages(), again.num_stages()));
  });
}

void check_next_steps(const ppc::Layout& layout) {
  ppfuzz::accepted([&] {
    ppc::check_model(layout);
    return 0;
  });
  for (int pp : {1, 2, 3})
    ppfuzz::accepted(
        [&] { return ppc::place_layout(layout, pp, std::nullopt, ppc::PlacementStyle::Loop); });
  ppfuzz::accepted(
      [&] { return ppc::place_layout(layout, 2, std::nullopt, ppc::PlacementStyle::V); });
}

// The checks after a successful parse. Layouts that expand to hundreds of thousands of stages
// (a dozen bytes of input) take most of the fuzzer's time; they get the checks once per input,
// on the file path only, and the re-parse only up to kFullChecks layers and stages.
constexpr size_t kFullChecks = 20'000;

size_t expanded_size(const ppc::Layout& layout) {
  size_t n = layout.stages.size();
  for (const auto& s : layout.stages) n += s.size();
  return n;
}

}  // namespace

PP_FUZZ_TARGET(layout) {
  if (auto layout = ppfuzz::accepted([&] { return ppc::parse_layout(input); })) {
    if (expanded_size(*layout) <= kFullChecks) {
      check_source_reparses(*layout);
      check_next_steps(*layout);
    }
  }
  if (auto layout =
          ppfuzz::accepted([&] { return ppc::parse_layout_file_text(input, "fuzz.layout"); })) {
    if (expanded_size(*layout) <= kFullChecks) check_source_reparses(*layout);
    check_next_steps(*layout);
  }
}
