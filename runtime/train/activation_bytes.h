// Measured activation memory (issue 42): the bytes a rank's microbatches hold between their
// forward and their backward (F to B, F to I, and I to W), as the CPU allocator handed them out.
//
// An AllocationMeter counts the bytes that the CPU allocator gives the thread that holds it open
// (Scope) and that are still alive, wherever they are freed: a counting allocator
// (c10::SetCPUAllocator) wraps LibTorch's CPU allocator once per process and passes every other
// thread's allocations through untouched. The executor reads it around each compute action:
// what an F leaves alive is what its microbatch keeps until its B (its graph's saved tensors and
// its output), and an I adds what it leaves for the W (ActivationBytes).
//
// A PartBytes counts one compute part alone while another part runs on another thread (an
// OVERLAP_F_B's forward and backward, overlap.h): what its own thread allocated and left alive,
// less what its thread freed of older blocks; the global count mixes both parts.
//
// Device memory (a GPU's) is the device allocator's: not counted here.
//
// Included only by LibTorch translation units.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace pprt {

class AllocationMeter {
 public:
  AllocationMeter();
  // Bytes allocated on the CPU by the threads while they held a Scope of this meter, not freed.
  int64_t live() const { return counter_->load(std::memory_order_relaxed); }

  // Counts the calling thread's allocations while it lives.
  class Scope {
   public:
    explicit Scope(AllocationMeter& meter);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::shared_ptr<std::atomic<int64_t>> previous_;
  };

  // While alive, the calling thread's allocations are not counted (an offload's host copies).
  class Paused {
   public:
    Paused();
    ~Paused();
    Paused(const Paused&) = delete;
    Paused& operator=(const Paused&) = delete;

   private:
    std::shared_ptr<std::atomic<int64_t>> previous_;
  };

 private:
  std::shared_ptr<std::atomic<int64_t>> counter_;
};

// What the calling thread's work leaves alive from its construction on (the thread must hold a
// Scope, whose blocks alone are counted): the bytes the CPU allocator gave this thread since and
// still alive, less the bytes of older blocks this thread freed since. In one thread's program
// order this is the Scope's meter's growth over the same stretch; another thread's allocations
// and frees meanwhile do not count. One per thread at a time.
class PartBytes {
 public:
  PartBytes();
  ~PartBytes();
  PartBytes(const PartBytes&) = delete;
  PartBytes& operator=(const PartBytes&) = delete;
  int64_t left() const;

  struct Tally {
    std::atomic<int64_t> alive{0}, freed_older{0};
  };

 private:
  std::shared_ptr<Tally> tally_, previous_;
};

// The bytes held per (local stage, microbatch) slot and their sum over a step, with its peak.
class ActivationBytes {
 public:
  void start(size_t slots);              // a step: nothing held
  void add(size_t slot, int64_t bytes);  // what an F or an I left alive
  void release(size_t slot);             // a B or a W: the slot holds nothing
  int64_t held() const { return total_; }
  int64_t peak() const { return peak_; }  // of held() since start()

 private:
  std::vector<int64_t> slots_;
  int64_t total_ = 0, peak_ = 0;
};

}  // namespace pprt
