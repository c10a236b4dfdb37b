// The counting CPU allocator and the activation bytes' bookkeeping (activation_bytes.h).
#include "runtime/train/activation_bytes.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace pprt {

namespace {

using Counter = std::shared_ptr<std::atomic<int64_t>>;

thread_local Counter current;  // the open Scope's meter on this thread, if any
using Tally = std::shared_ptr<PartBytes::Tally>;
thread_local Tally current_part;  // the open PartBytes on this thread, if any

// A counted block: its size, its meter, and the allocator that made it.
struct Block {
  size_t bytes = 0;
  Counter counter;
  c10::DeleterFnPtr free = nullptr;
  Tally part;  // the PartBytes open when it was allocated, if any
};

std::mutex& blocks_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<void*, Block>& blocks() {
  static auto* b = new std::unordered_map<void*, Block>();  // outlives every tensor
  return *b;
}

void counted_free(void* ptr) {
  Block b;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    auto it = blocks().find(ptr);
    if (it == blocks().end()) return;  // cannot happen: only counted blocks get this deleter
    b = std::move(it->second);
    blocks().erase(it);
  }
  const auto bytes = static_cast<int64_t>(b.bytes);
  b.counter->fetch_sub(bytes, std::memory_order_relaxed);
  if (b.part) b.part->alive.fetch_sub(bytes, std::memory_order_relaxed);
  if (current_part && current_part != b.part)
    current_part->freed_older.fetch_add(bytes, std::memory_order_relaxed);
  b.free(ptr);
}

// LibTorch's CPU allocator, with the blocks of threads inside a Scope counted. A block's data
// pointer stays its context (what raw_allocate needs), its deleter ours, which frees it through
// the wrapped allocator's.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr p = base_->allocate(n);
    const Counter& c = current;
    c10::DeleterFnPtr free = base_->raw_deleter();
    // Only blocks that are their own context and have a plain deleter can be wrapped.
    if (!c || n == 0 || !free || p.get() != p.get_context() || p.get_deleter() != free) return p;
    void* data = p.get();
    const c10::Device device = p.device();
    {
      std::lock_guard<std::mutex> lock(blocks_mutex());
      blocks()[data] = Block{n, c, free, current_part};
    }
    c->fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    if (current_part)
      current_part->alive.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    p.release_context();
    return c10::DataPtr(data, data, &counted_free, device);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
};

void install_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    static CountingAllocator* counting = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(counting, /*priority=*/100);
  });
}

}  // namespace

AllocationMeter::AllocationMeter() : counter_(std::make_shared<std::atomic<int64_t>>(0)) {
  install_once();
}

AllocationMeter::Scope::Scope(AllocationMeter& meter) : previous_(std::move(current)) {
  current = meter.counter_;
}

AllocationMeter::Scope::~Scope() {
  current = std::move(previous_);
}

PartBytes::PartBytes() : tally_(std::make_shared<Tally>()), previous_(std::move(current_part)) {
  current_part = tally_;
}

PartBytes::~PartBytes() {
  current_part = std::move(previous_);
}

int64_t PartBytes::left() const {
  return tally_->alive.load(std::memory_order_relaxed) -
         tally_->freed_older.load(std::memory_order_relaxed);
}

AllocationMeter::Paused::Paused() : previous_(std::move(current)) {
  current = nullptr;
}

AllocationMeter::Paused::~Paused() {
  current = std::move(previous_);
}

void ActivationBytes::start(size_t slots) {
  slots_.assign(slots, 0);
  total_ = peak_ = 0;
}

void ActivationBytes::add(size_t slot, int64_t bytes) {
  if (slot >= slots_.size()) slots_.resize(slot + 1, 0);
  const int64_t before = slots_[slot];
  slots_[slot] = std::max<int64_t>(0, before + bytes);
  total_ += slots_[slot] - before;
  peak_ = std::max(peak_, total_);
}

void ActivationBytes::release(size_t slot) {
  if (slot >= slots_.size()) return;
  total_ -= slots_[slot];
  slots_[slot] = 0;
}

}  // namespace pprt
