// pprun's command line, as a library: the flags (docs/pprun.md) into RunOptions, and the run with
// its errors turned into messages and exit codes. tools/pprun/main.cpp is these two calls; a user's
// program gets the same through pprt::main (pprt/main.h). No LibTorch.
#pragma once

#include <optional>

#include "runtime/launch/run.h"

namespace pprt {

// Parses the command line into `o` (which holds the defaults and the model's source). Returns the
// exit code to stop with (0 after --help; 2 after a bad flag, with one line on stderr naming it),
// or nullopt to go on. Sets o.exe (this program, which spawned ranks run again) and o.args.
std::optional<int> parse_command_line(int argc, char** argv, const char* program, RunOptions& o);

// Runs `o` (run.h: run) and returns the process exit code: 0, 2 for bad input (one line on
// stderr: "PROGRAM: [rank R: ]error: WHERE: MESSAGE"), 1 for a failed run.
int run_command_line(const RunOptions& o, const char* program);

// Both: the whole of a training program, pprt::main's (pprt/main.h: pprun's among them), for the
// models of `family`. `program` names it in messages (null: argv[0]'s file name). The family's
// options (pprt::Family::option) are flags of the group "model", --init-from only for a family
// that reads Hugging Face directories.
int main_of(int argc, char** argv, Family family, const char* program = nullptr);

}  // namespace pprt
