// An arena for large blocks in transparent huge pages (see big_pages.cpp for why ppcompile
// allocates its large arrays here).
//
// One region of address space (no memory until used) is reserved on the first allocation and
// marked madvise(MADV_HUGEPAGE): the kernel backs each 2 MiB of it with one page where it can, so
// writing a fresh array costs one page fault per 2 MiB instead of one per 4 KiB. Blocks are cut
// from the top of the used part or from freed ranges (first fit in address order; freed neighbours
// merge, and a freed range at the top lowers it), so memory stays what the live blocks need.
// Thread-safe. Memory is never returned to the system: this serves one short-lived process.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace ppc {

class HugePageArena {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kGrain = 64;     // block sizes and offsets are multiples of this
  static constexpr size_t kHeader = 16;    // before each block: its size (16-byte alignment)
  static constexpr size_t kMaxFree = 512;  // free ranges kept; beyond, the smallest is dropped

  // `reserve`: the address space to reserve, a multiple of kHugePage.
  explicit constexpr HugePageArena(size_t reserve) : reserve_(reserve) {}
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // A block of at least n bytes, 16-byte aligned; nullptr when the arena cannot serve it (the
  // region could not be reserved, or it is full): the caller then uses malloc.
  void* allocate(size_t n) {
    if (n > reserve_) return nullptr;
    const size_t size = (n + kHeader + kGrain - 1) / kGrain * kGrain;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!tried_ && !start()) return nullptr;
    if (base() == nullptr) return nullptr;
    size_t offset = take_free(size);
    if (offset == kNone) {
      if (size > reserve_ - top_) return nullptr;
      offset = top_;
      top_ += size;
    }
    char* block = base() + offset;
    *reinterpret_cast<size_t*>(block) = size;
    return block + kHeader;
  }

  // Was p allocated here? Cheap and lock-free: every delete of the process asks.
  bool owns(const void* p) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = base_.load(std::memory_order_acquire);
    return b != 0 && a >= b && a - b < reserve_;
  }

  // p must come from allocate().
  void release(void* p) {
    char* block = static_cast<char*>(p) - kHeader;
    const size_t size = *reinterpret_cast<const size_t*>(block);
    std::lock_guard<std::mutex> lock(mutex_);
    give_back(static_cast<size_t>(block - base()), size);
  }

  // For tests: the end of the used part, and the number of free ranges below it.
  size_t top() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return top_;
  }
  size_t free_ranges() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return free_count_;
  }

 private:
  static constexpr size_t kNone = ~size_t{0};
  struct Range {
    size_t offset, size;
  };

  bool start() {
    tried_ = true;  // one try
    void* p = mmap(nullptr, reserve_ + kHugePage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    // Start on a huge-page boundary so that every 2 MiB of the arena can be one page.
    const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
    const uintptr_t aligned = (addr + kHugePage - 1) / kHugePage * kHugePage;
    madvise(reinterpret_cast<void*>(aligned), reserve_, MADV_HUGEPAGE);  // a hint only
    base_.store(aligned, std::memory_order_release);
    return true;
  }
  char* base() const { return reinterpret_cast<char*>(base_.load(std::memory_order_relaxed)); }

  void erase(size_t i) {
    std::copy(free_ + i + 1, free_ + free_count_, free_ + i);
    --free_count_;
  }

  // First fit among the free ranges; kNone if none is large enough.
  size_t take_free(size_t size) {
    for (size_t i = 0; i < free_count_; ++i) {
      Range& r = free_[i];
      if (r.size < size) continue;
      const size_t offset = r.offset;
      r.offset += size;
      r.size -= size;
      if (r.size == 0) erase(i);
      return offset;
    }
    return kNone;
  }

  // Returns [offset, offset + size) to the free ranges, merged with its neighbours; a range that
  // ends at the top lowers the top instead.
  void give_back(size_t offset, size_t size) {
    size_t i = 0;
    while (i < free_count_ && free_[i].offset < offset) ++i;
    if (i > 0 && free_[i - 1].offset + free_[i - 1].size == offset) {  // merge with the previous
      --i;
      offset = free_[i].offset;
      size += free_[i].size;
      erase(i);
    }
    if (i < free_count_ && offset + size == free_[i].offset) {  // and with the next
      size += free_[i].size;
      erase(i);
    }
    if (offset + size == top_) {
      top_ = offset;
      return;
    }
    if (free_count_ == kMaxFree) {  // full: drop the smallest range (its space stays unused)
      size_t smallest = 0;
      for (size_t k = 1; k < free_count_; ++k)
        if (free_[k].size < free_[smallest].size) smallest = k;
      if (free_[smallest].size >= size) return;
      erase(smallest);
      i = 0;
      while (i < free_count_ && free_[i].offset < offset) ++i;
    }
    std::copy_backward(free_ + i, free_ + free_count_, free_ + free_count_ + 1);
    free_[i] = Range{offset, size};
    ++free_count_;
  }

  const size_t reserve_;
  mutable std::mutex mutex_;
  bool tried_ = false;
  std::atomic<uintptr_t> base_{0};  // 0 until the region is reserved
  size_t top_ = 0;                  // offsets below it are allocated or free ranges
  Range free_[kMaxFree]{};
  size_t free_count_ = 0;
};

}  // namespace ppc
