#include "runtime/train/slot_offload.h"

#include "runtime/train/activation_bytes.h"

namespace pprt {

using ppc::Action;

SlotOffload::SlotOffload(bool on, const c10::Device& device, size_t slots, bool host_copy,
                         const std::vector<Action>& actions, SlotOf slot_of)
    : actions_(actions), slot_of_(std::move(slot_of)) {
  if (on) offloader_ = std::make_unique<Offloader>(device, slots, host_copy);
}

void SlotOffload::aim(std::optional<Offloader::Target>& target, size_t slot) {
  if (offloader_) target.emplace(offloader_.get(), slot);
}

int64_t SlotOffload::offload(size_t slot) {
  if (!offloader_) return 0;
  if (const size_t next = next_compute(current_);
      next < actions_.size() && ppc::own_backward_next(actions_[current_], actions_[next]))
    return 0;
  const AllocationMeter::Paused host;  // to the host, which holds no activation bytes
  return offloader_->offload(slot);
}

void SlotOffload::prefetch_after(size_t index, AllocationMeter& allocated, ActivationBytes& held) {
  if (!offloader_) return;
  offloader_->poll();
  current_ = index;
  // Its own: on the host still only where no earlier action prefetched it (nothing does before
  // a rank's first compute action), else a no-op.
  if (const std::optional<size_t> own = backward_slot(index)) bring_back(*own, allocated, held);
  if (const std::optional<size_t> next = backward_slot(next_compute(index)))
    bring_back(*next, allocated, held);
}

std::optional<size_t> SlotOffload::backward_slot(size_t index) const {
  if (index >= actions_.size()) return std::nullopt;
  const std::optional<Action> b = ppc::backward_run(actions_[index]);
  if (!b) return std::nullopt;
  return slot_of_(b->stage, b->microbatch);
}

size_t SlotOffload::next_compute(size_t index) const {
  size_t j = index + 1;
  while (j < actions_.size() && ppc::is_comm(actions_[j].kind)) ++j;
  return j;
}

void SlotOffload::bring_back(size_t slot, AllocationMeter& allocated, ActivationBytes& held) {
  const int64_t live = allocated.live();
  offloader_->prefetch(slot);
  held.add(slot, allocated.live() - live);
}

void SlotOffload::release(size_t slot) {
  if (offloader_) offloader_->release(slot);
}

}  // namespace pprt
