// pprun: trains pprun's own model family (runtime/models/llama/builtin.h) by replaying a compiled
// plan (ppcompile --emit json), one process per rank. Thin: the same entry point as any program of
// the library (pprt::main, pprt/main.h), given the built-in family.
#include "runtime/launch/cli.h"

int main(int argc, char** argv) {
  return pprt::main_of(argc, argv, pprt::builtin_source(), "pprun");
}
