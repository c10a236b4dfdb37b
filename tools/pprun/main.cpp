// pprun: trains a model by replaying a compiled plan (ppcompile --emit json), one process per
// rank. Thin: the flags and the run are the library's (runtime/launch/cli.h).
#include "runtime/launch/cli.h"

int main(int argc, char** argv) {
  pprt::RunOptions o;
  if (auto stop = pprt::parse_command_line(argc, argv, "pprun", o)) return *stop;
  return pprt::run_command_line(o, "pprun");
}
