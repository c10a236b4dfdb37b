// pprt::main: a training program for a model of your own, with everything pprun does
// (docs/library.md). Its flags are pprun's (docs/pprun.md): --plan, --reference, --steps, --data,
// --dp, --save/--resume, --export, --device, --dtype, --metrics, --profile, ...; a Family adds its
// own options (pprun's --hidden, --config, ...) and, where it reads Hugging Face directories,
// --init-from. It runs under every launcher pprun runs under: alone it starts one process per rank
// on this machine (each runs this same program again), under torchrun or SLURM it is one rank.
// pprun itself is this call with its own family (tools/pprun/main.cpp).
//
//     int main(int argc, char** argv) { return pprt::main(argc, argv, my_model()); }
#pragma once

#include "pprt/family.h"
#include "pprt/pprt.h"

namespace pprt {

// Parses the command line, then trains the model (or, with --reference, its unpipelined run) and
// returns the process exit code: 0; 2 for bad input (one line on stderr naming where: a flag, a
// file, a stage and layer of the model); 1 for a failed run. Messages start with the program's
// file name.
int main(int argc, char** argv, Family family);
// A model whose sizes are its code's (only --vocab and --seq-len configure it).
int main(int argc, char** argv, Model model);

}  // namespace pprt
