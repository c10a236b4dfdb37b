// The IR as text after each pass of the compile pipeline, for `ppcompile --dump-after PASS`
// (docs/ppcompile.md): the parsed layout, the placed and the ordered plan, the verifier's report,
// the simulation. For reading while debugging; --emit json is the format to read back.
#pragma once

#include <iosfwd>

namespace ppc {

struct Layout;
struct Plan;
struct VerifyReport;
struct Simulation;

// "layout Et|tt|tL: 3 stages", then one line per stage: "  stage 0: E t".
void dump_layout(const Layout& layout, std::ostream& os);

// One line of what the plan is (schedule, pp, vpp, microbatches, copies, placement, which order
// it holds), one per stage ("  stage 3: rank 1 chunk 1"), then each rank's order, the lowered one
// once the plan has one: "  rank 0: 0F0 0F1 0B0 ...".
void dump_plan(const Plan& plan, std::ostream& os);

// Valid or not, the counts, the peaks in flight per rank, and every error.
void dump_report(const VerifyReport& report, std::ostream& os);

// The makespan and bubbles, then each rank's busy time, span and peak memory.
void dump_simulation(const Simulation& sim, std::ostream& os);

}  // namespace ppc
