// pprun: trains pprun's own model family (runtime/models/llama/family.h) by replaying a compiled
// plan (ppcompile --emit json), one process per rank. Thin: a program of the library like any
// other (pprt::main, pprt/main.h), given its family.
#include <pprt/main.h>

#include "runtime/models/llama/family.h"

int main(int argc, char** argv) {
  return pprt::main(argc, argv, pprt::llama_family());
}
