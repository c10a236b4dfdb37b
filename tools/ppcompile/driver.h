// ppcompile's compile pipeline for one plan: the model (or an imported plan), compiled for the
// schedule, verified, lowered and emitted.
#pragma once

#include "tools/ppcompile/options.h"

namespace ppcompile {

// Returns the exit code.
int compile_and_emit(const Options& o);

}  // namespace ppcompile
