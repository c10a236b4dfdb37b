// A mistake in what the user gave pprun, located at a flag ("--data"), a file or "environment":
// ppc::UserError, printed "pprun: error: WHERE: WHAT", exit code 2.
#pragma once

#include <string>

#include "compiler/diagnostic.h"

namespace pprt {

[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw ppc::UserError(what, ppc::input_location(where));
}

}  // namespace pprt
