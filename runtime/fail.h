// A mistake in what the user gave the program, located at a flag ("--data"), a file or
// "environment": ppc::UserError, printed "PROGRAM: error: WHERE: WHAT", exit code 2. PROGRAM is
// program_name(): "pprun", or the file name of a program of the library (pprt::main).
#pragma once

#include <string>
#include <utility>

#include "compiler/diagnostic.h"

namespace pprt {

[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw ppc::UserError(what, ppc::input_location(where));
}

namespace detail {
inline std::string& program_name_slot() {
  static std::string name = "pprun";
  return name;
}
}  // namespace detail

// The name the process's status and error lines start with ("pprun: done: ..."). The one
// process-wide value of the runtime: main_of (runtime/launch/cli.h) sets it once, from pprun's
// name or argv[0]'s file name, before any thread starts; everything else only reads it.
inline const std::string& program_name() {
  return detail::program_name_slot();
}
inline void set_program_name(std::string name) {
  detail::program_name_slot() = std::move(name);
}

}  // namespace pprt
