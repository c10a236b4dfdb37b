// --schedule Auto's improvement passes (synthesize.cpp runs them on its best candidates): Ws moved
// out of the tails that outlast the pace-setting rank and into the waits of the rank that ends
// last, and split backwards joined into Bs where a whole backward is shorter, each change kept
// only if the simulated plan gets shorter.
#pragma once

#include "compiler/synthesize.h"
#include "compiler/synthesize_search.h"

namespace ppc::synthesis {

// The Ws of `s` moved (move_w_tails, then fill_waits), and split backwards joined where a B is
// shorter (join_backwards), until none makes it shorter. `scored` counts the orders simulated.
Scored improve(Scored s, const SynthesisOptions& opts, int& scored);

}  // namespace ppc::synthesis
