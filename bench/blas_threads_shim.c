// Diagnosis only (bench/vs_python.sh --blas-shim): what pprun would gain if its thread setup also
// limited OpenBLAS, without changing pprun. Preloaded, it wraps at::set_num_threads(int), which
// pprun calls with --threads (default: cores / ranks) and LibTorch calls again when its threads
// start: it calls LibTorch's, then openblas_set_num_threads with the same count, found with dlsym
// (no link-time dependency on OpenBLAS), and says so on stderr. No environment variable is set.
//
//   cc -O2 -shared -fPIC bench/blas_threads_shim.c -o blas_threads_shim.so -ldl
//   LD_PRELOAD=$PWD/blas_threads_shim.so build/tools/pprun/pprun --plan plan.json ...
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

// at::set_num_threads(int), mangled.
void _ZN2at15set_num_threadsEi(int n) {
  void (*real)(int) = (void (*)(int))dlsym(RTLD_NEXT, "_ZN2at15set_num_threadsEi");
  if (real) real(n);
  void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
  const int before = get ? get() : -1;
  if (set) set(n);
  fprintf(stderr, "blas_threads_shim: at::set_num_threads(%d); OpenBLAS threads %d -> %d\n", n,
          before, get ? get() : -1);
}
