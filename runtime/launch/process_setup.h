// What a pprun process sets up before it trains: the device check, its thread pools and its heap.
// The interface has no LibTorch type.
#pragma once

#include <string>

namespace pprt {

// Throws ppc::UserError if `device` cannot be used by this build: "cuda" with a LibTorch built
// without CUDA, without the NCCL transport, or with no visible GPU.
void check_device(const std::string& device);

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
