// ppcompile's compile pipeline for one plan, its passes in order (driver.cpp): parse, place,
// generate, lower, verify, simulate, emit.
#pragma once

#include <string>
#include <vector>

#include "tools/ppcompile/options.h"

namespace ppcompile {

// The passes --dump-after may name, in the order they run.
inline const std::vector<std::string> kPasses = {"parse", "place",  "generate",
                                                 "lower", "verify", "simulate"};

// Compiles the plan the flags describe (or reads it) and emits it. Returns the exit code.
int compile_and_emit(const Options& o);

}  // namespace ppcompile
