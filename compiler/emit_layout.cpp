#include <fmt/format.h>

#include <ostream>

#include "compiler/emit_text.h"

namespace ppc {

void emit_layout(const Plan& plan, std::ostream& os) {
  for (int s = 0; s < plan.num_stages(); ++s) {
    const auto& layers = plan.layout.stages[static_cast<size_t>(plan.layout_stage(s))];
    os << fmt::format("stage {} rank {} chunk {}: {}\n", s, plan.rank_of(s),
                      plan.placement.stage_chunk[static_cast<size_t>(s)], stage_symbols(layers));
  }
}

}  // namespace ppc
