// What a pprun process sets up before it trains: the device check, its thread pools and its heap.
// The interface has no LibTorch type.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace pprt {

// Throws ppc::UserError if `device` cannot be used by this build: "cuda" with a LibTorch built
// without CUDA, without the NCCL transport, or with no visible GPU.
void check_device(const std::string& device);

// The CUDA devices this process sees (0 in a build or LibTorch without CUDA).
int cuda_device_count();

// The GPU of a rank: its local rank (its place among the ranks on its machine) modulo the visible
// devices, so that the ranks of one machine spread over its GPUs. Throws ppc::UserError when no
// device is visible or `local_rank` is negative.
int gpu_for_local_rank(int local_rank, int device_count);

// The variable that turns on the test mode in which several ranks share one GPU.
inline constexpr const char* kShareGpuVariable = "PPRUN_TEST_SHARE_GPU";

// Where a rank runs on the GPUs of its machine, and what it must set before NCCL starts.
struct GpuPlacement {
  int device = 0;       // gpu_for_local_rank()
  bool shared = false;  // the test mode is on (PPRUN_TEST_SHARE_GPU=1)
  // Variables to set in this process before the NCCL communicator is made: NCCL_RUNTIME_CONNECT=0
  // (connections made when a communicator is created, not at its first collective) unless the
  // user set it, and the test mode's.
  std::vector<std::pair<std::string, std::string>> env;
  std::string banner;  // the test mode's warning, printed by every rank; "" outside it
};

// Places rank `rank` (local rank `local_rank` of `local_world` on this machine; 0 = unknown) on
// `device_count` GPUs. NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
// detected"): with more local ranks than GPUs this throws ppc::UserError naming the test mode,
// unless PPRUN_TEST_SHARE_GPU=1 (read through `getenv`). In that mode, for correctness tests on a
// one-GPU machine only (unsupported by NVIDIA; never for timing), each rank gets its own
// NCCL_HOSTID, so that NCCL takes the ranks for separate hosts and connects them through its
// network transport over the loopback interface (NCCL_SOCKET_IFNAME=lo and NCCL_IB_DISABLE=1
// unless already set). The mode is refused when the ranks are not all on this machine
// (`all_local` false) and for any value other than 0 or 1.
GpuPlacement place_on_gpu(int rank, int local_rank, int local_world, int device_count,
                          bool all_local, const std::function<const char*(const char*)>& getenv);

// place_on_gpu() for this process (its environment, its devices): sets the placement's variables
// (setenv), prints its banner on stderr and returns the device.
int prepare_gpu(int rank, int local_rank, int local_world, bool all_local);

// Sets this process's intra-op threads: LibTorch's OpenMP pool, MKL's count on the calling thread
// and, when LibTorch calls OpenBLAS, OpenBLAS's own pool (and one inter-op thread).
void set_threads(int threads);

// Keeps memory freed by LibTorch in this process's heap for reuse (rather than unmapped and
// faulted in again at the next step).
void keep_freed_memory();

// A rank's writes to a peer that has died (Gloo's sockets) fail with EPIPE, which the transport
// reports and the failure diagnosis names ("lost rank N"), instead of SIGPIPE ending this rank
// without a word.
void report_broken_pipes();

// The BLAS library LibTorch calls ("MKL", "OpenBLAS"), or "" when neither is loaded.
std::string blas_name();

// That library's thread count on the calling thread, or -1 when neither is loaded.
int blas_threads();

// This process's thread pools and their sizes, e.g. "OpenMP 1, MKL 1".
std::string thread_pools();

}  // namespace pprt
