// pprun --trace: the Chrome trace of the real execution, in the format ppcompile --emit trace
// writes for a simulation (docs/trace-format.md, compiler/trace_writer.h). No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "compiler/plan.h"
#include "runtime/output/report.h"

namespace pprt {

// The trace of the last step every rank kept: each action at its measured time (microseconds
// since the first rank began the step), its wait for a received input (compute) or the moment it
// was seen complete (comm) in its args, in-flight activations as the counter.
std::string chrome_trace(const ppc::Plan& plan, const std::vector<RankReport>& ranks);

}  // namespace pprt
