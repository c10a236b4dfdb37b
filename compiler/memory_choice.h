// Auto's choice of memory modes (issue 42): under --memory-limit, with no --recompute or
// --offload given, which stages keep everything, drop part (selective), keep only their inputs
// (full) or offload, chosen together with the order (docs/schedules.md, "Memory modes").
#pragma once

#include "compiler/synthesize.h"

namespace ppc {

// synthesize(opts) when there is no memory limit or opts.memory is given. Otherwise the order
// with every stage keeping everything if it fits and is as short as without the limit; else
// that one and candidates whose modes let each stage hold
// the microbatches a pipeline keeps in flight there (several multiples of S - s over the stages
// per rank, each stage taking the cheapest mode in time that its rank's budget allows, the cheap
// ones first), each synthesized, the shortest that fits winning (the first that fits on a tie).
// Offload is a candidate mode only when the cost model gives host_bandwidth. The result's plan
// records the modes (Plan::memory). When no mode lets one microbatch fit on some rank: a
// UserError naming --memory-limit that says the smallest limit that works.
SynthesisResult synthesize_choosing_memory(const SynthesisOptions& opts);

}  // namespace ppc
