#include "runtime/launch/process_setup.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <malloc.h>
#include <signal.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "compiler/diagnostic.h"
#include "runtime/fail.h"
#include "runtime/transport/transport.h"

namespace pprt {

void check_device(const std::string& device) {
  if (device == "cpu") return;
  if (device != "cuda")
    fail("--device", fmt::format("unknown device '{}' (expected cpu or cuda)", device));
  if (!at::hasCUDA())
    fail("--device", fmt::format("cuda: this LibTorch ({}) was built without CUDA; use a CUDA "
                                 "build of LibTorch, or --device cpu",
                                 TORCH_VERSION));
  if (!nccl_available())
    fail("--device",
         "cuda: this pprun was built without the NCCL transport (CMake found no CUDA toolkit or "
         "NCCL)");
  if (at::detail::getCUDAHooks().getNumGPUs() < 1)
    fail("--device", "cuda: no CUDA device is visible");
}

int cuda_device_count() {
  return at::hasCUDA() ? static_cast<int>(at::detail::getCUDAHooks().getNumGPUs()) : 0;
}

int gpu_for_local_rank(int local_rank, int device_count) {
  if (device_count < 1) fail("--device", "cuda: no CUDA device is visible");
  if (local_rank < 0)
    fail("environment", fmt::format("LOCAL_RANK must not be negative (got {})", local_rank));
  return local_rank % device_count;
}

GpuPlacement place_on_gpu(int rank, int local_rank, int local_world, int device_count,
                          bool all_local, const std::function<const char*(const char*)>& getenv) {
  GpuPlacement p;
  p.device = gpu_for_local_rank(local_rank, device_count);
  const char* share = getenv(kShareGpuVariable);
  if (share && std::strcmp(share, "0") != 0 && std::strcmp(share, "1") != 0 &&
      std::strcmp(share, "") != 0)
    fail("environment", fmt::format("{} must be 0 or 1 (got '{}')", kShareGpuVariable, share));
  p.shared = share && std::strcmp(share, "1") == 0;
  // NCCL connects a communicator's rings and trees at its first collective unless told to at its
  // creation: a first all-reduce in the middle of a step (data parallelism's buckets) would then
  // connect while transfers are in flight, and connecting waits for the device (docs/gpu.md).
  if (!getenv("NCCL_RUNTIME_CONNECT")) p.env.emplace_back("NCCL_RUNTIME_CONNECT", "0");
  if (!p.shared) {
    if (local_world > device_count)
      fail(
          "--device",
          fmt::format("cuda: {} ranks on this machine but {} visible GPU{}: NCCL refuses two ranks "
                      "of one communicator on one GPU; give each rank a GPU of its own (or, for "
                      "correctness tests only, never for timing: {}=1, docs/gpu.md)",
                      local_world, device_count, device_count == 1 ? "" : "s", kShareGpuVariable));
    return p;
  }
  if (!all_local)
    fail("environment", fmt::format("{}=1 is a test mode for ranks on one machine; these ranks "
                                    "meet at a remote rendezvous (MASTER_ADDR)",
                                    kShareGpuVariable));
  p.env.emplace_back("NCCL_HOSTID", fmt::format("pprun-test-share-gpu-rank{}", rank));
  if (!getenv("NCCL_SOCKET_IFNAME")) p.env.emplace_back("NCCL_SOCKET_IFNAME", "lo");
  if (!getenv("NCCL_IB_DISABLE")) p.env.emplace_back("NCCL_IB_DISABLE", "1");
  p.banner = fmt::format(
      "{}: TEST MODE ({}=1): rank {} on GPU {} shared with the other ranks, which NCCL takes "
      "for separate hosts (NCCL_HOSTID); unsupported by NVIDIA; for correctness tests only, never "
      "for timing",
      program_name(), kShareGpuVariable, rank, p.device);
  return p;
}

int prepare_gpu(int rank, int local_rank, int local_world, bool all_local) {
  const GpuPlacement p = place_on_gpu(rank, local_rank, local_world, cuda_device_count(), all_local,
                                      [](const char* name) { return std::getenv(name); });
  for (const auto& [name, value] : p.env) setenv(name.c_str(), value.c_str(), 1);
  if (!p.banner.empty()) std::fprintf(stderr, "%s\n", p.banner.c_str());
  return p.device;
}

void report_broken_pipes() {
  signal(SIGPIPE, SIG_IGN);
}

namespace {

template <class Fn>
Fn find_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

// The BLAS library LibTorch calls, found at run time: PyTorch's x86 wheels link MKL into
// libtorch_cpu (its GNU OpenMP threading layer); Debian's and ARM builds call OpenBLAS.
std::string blas_name() {
  if (find_symbol<int (*)()>("mkl_get_max_threads")) return "MKL";
  if (find_symbol<int (*)()>("openblas_get_num_threads")) return "OpenBLAS";
  return "";
}

int blas_threads() {
  if (const auto get = find_symbol<int (*)()>("mkl_get_max_threads")) return get();
  if (const auto get = find_symbol<int (*)()>("openblas_get_num_threads")) return get();
  return -1;
}

void keep_freed_memory() {
  // glibc returns a freed block of 128 KiB or more (the size of most activations) to the kernel,
  // and the next step's tensor of the same size faults its pages in again, zeroed: about 10,000
  // page faults per microbatch on a small model. Keep freed memory in the heap for reuse instead.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

std::string thread_pools() {
  const int blas = blas_threads();
  return fmt::format("OpenMP {}{}", at::get_num_threads(),
                     blas < 0 ? "" : fmt::format(", {} {}", blas_name(), blas));
}

void set_threads(int threads) {
  threads = std::max(1, threads);
  // LibTorch's OpenMP pool, and with MKL (PyTorch's x86 wheels) MKL's count for this thread
  // (mkl_set_num_threads_local), which is the thread that computes: the autograd engine runs CPU
  // backward passes on the caller's thread. blas_threads() reads it back for the banner.
  at::set_num_threads(threads);
  // A LibTorch on OpenBLAS (pthreads build; Debian's, ARM builds) keeps OpenBLAS's own pool sized
  // by the cores of the machine: with several ranks per machine that oversubscribes the cores
  // (2 ranks x 2 BLAS threads on 2 cores). Limit it too, found at run time.
  if (const auto set = find_symbol<void (*)(int)>("openblas_set_num_threads")) set(threads);
  try {
    at::set_num_interop_threads(1);
  } catch (const std::exception&) {  // already set (several ranks in one process)
  }
}

}  // namespace pprt
