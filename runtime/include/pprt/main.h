// pprt::main: a training program for a model of your own, with everything pprun does
// (docs/library.md). Its flags are pprun's (docs/pprun.md) but those that size pprun's own model:
// --plan, --reference, --steps, --data, --dp, --save/--resume, --device, --metrics, ...; it runs
// under every launcher pprun runs under: alone it starts one process per rank on this machine
// (each runs this same program again), under torchrun or SLURM it is one rank.
//
//     int main(int argc, char** argv) { return pprt::main(argc, argv, my_model()); }
#pragma once

#include "pprt/pprt.h"

namespace pprt {

// Parses the command line, then trains `model` (or, with --reference, its unpipelined run) and
// returns the process exit code: 0; 2 for bad input (one line on stderr naming where: a flag, a
// file, a stage and layer of the model); 1 for a failed run. Messages start with the program's
// file name.
int main(int argc, char** argv, Model model);

}  // namespace pprt
