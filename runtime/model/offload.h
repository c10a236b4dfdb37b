// Offloading (issue 42, docs/pprun.md "Activation memory"): what an offloaded layer saves for its
// backward goes to host memory after its stage's F and comes back before the B or I that needs
// it, prefetched when the action before that B or I starts (the plan says which action comes next
// on the rank: no guessing).
//
// The saved tensors are caught as autograd saves them (torch's saved-tensor hooks: the C++
// interface of torch.autograd.graph.saved_tensors_hooks, reached through the autograd engine's
// default hooks, so pprun installs an engine of its own once, before its first backward, the way
// PyTorch's Python engine does; see install_offload_engine). Each tensor storage saved is copied
// whole, once, however many views of it are saved, and comes back with every view's sizes,
// strides and offset: the backward computes on the same layouts, and its results are bit-identical
// to keeping everything. Parameters and a stage's inputs (leaves that require grad) stay where
// they are: they are held elsewhere anyway.
//
// On a GPU (compile-only so far: no GPU was lent when this was written) the copies go to pinned
// host memory and back on a side stream of their own, fenced with events against the compute
// stream: an offload waits for the F's kernels, the device memory is dropped once its copy is
// done (poll()), and a backward that unpacks a tensor waits on the device for its prefetch. On the
// CPU there is no device memory to offload from; tests (pprun --offload-test-host-copy) offload
// with a host-to-host copy, synchronously, for the bookkeeping: the same hooks, slots and timing.
//
// The I/W split: an I unpacks what it needs (bringing it back), and its W reuses what the I
// brought back (the deferred weight work holds those tensors, and the generic split's graph the
// unpacked storages): nothing goes to the host or comes back twice.
//
// Included only by LibTorch translation units.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace pprt {

struct OffloadState;  // offload.cpp

// The offloaded activations of one rank: per slot (a local stage's microbatch), what its F's
// offloaded layers saved for the backward.
class Offloader {
 public:
  // `slots` slots on `device`. `host_copy`: on the CPU, offload with host-to-host copies (tests);
  // otherwise `device` must have device memory (a GPU).
  Offloader(const c10::Device& device, size_t slots, bool host_copy);
  ~Offloader();
  Offloader(const Offloader&) = delete;
  Offloader& operator=(const Offloader&) = delete;

  // After slot `slot`'s F: every storage it saved goes to the host, and the device's references
  // to it are dropped (on a GPU: once the copy is done, at a later poll()). Returns the bytes
  // copied.
  int64_t offload(size_t slot);
  // Before the B or I of slot `slot` (or earlier): starts bringing its storages back (on the CPU
  // at once). A tensor unpacked without a prefetch is brought back then. Returns the bytes.
  int64_t prefetch(size_t slot);
  // After the slot's B or W: it holds nothing any more (what its graph still unpacks lives on
  // with the graph).
  void release(size_t slot);
  // Drops the device memory of offloads whose copies are done (GPU; nothing on the CPU).
  void poll();
  // Bytes offloaded since the offloader was made.
  int64_t offloaded_bytes() const;

  // While alive on this thread, what layers save for the backward inside an OffloadPacking goes
  // to slot `slot` of `offloader` (null: nowhere).
  class Target {
   public:
    Target(Offloader* offloader, size_t slot);
    ~Target();
    Target(const Target&) = delete;
    Target& operator=(const Target&) = delete;

   private:
    OffloadState* previous_;
    size_t previous_slot_;
  };

 private:
  std::unique_ptr<OffloadState> state_;
};

// While alive and `on` (an offloaded layer's forward), the tensors autograd saves on this thread
// go to the current Offloader::Target's slot, if any.
class OffloadPacking {
 public:
  explicit OffloadPacking(bool on);
  ~OffloadPacking();
  OffloadPacking(const OffloadPacking&) = delete;
  OffloadPacking& operator=(const OffloadPacking&) = delete;

 private:
  bool previous_;
};

// Installs pprun's autograd engine (the default one with saved-tensor hooks for OffloadPacking)
// as the process's default engine, once. Called by Offloader's constructor; to take effect for
// every backward it must come before the process's first backward (pprun: before its first step).
void install_offload_engine();

}  // namespace pprt
