#include "runtime/train/slot_offload.h"

#include "runtime/train/activation_bytes.h"

namespace pprt {

using ppc::Action;
using ppc::ActionKind;

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
  const AllocationMeter::Paused host;  // to the host, which holds no activation bytes
  return offloader_->offload(slot);
}

void SlotOffload::prefetch_after(size_t index, AllocationMeter& allocated, ActivationBytes& held) {
  if (!offloader_) return;
  offloader_->poll();
  size_t j = index + 1;
  while (j < actions_.size() && ppc::is_comm(actions_[j].kind)) ++j;
  if (j == actions_.size()) return;
  const Action next =
      actions_[j].kind == ActionKind::OverlapFB ? actions_[j].backward_part() : actions_[j];
  if (next.kind != ActionKind::B && next.kind != ActionKind::I) return;
  const size_t slot = slot_of_(next.stage, next.microbatch);
  const int64_t live = allocated.live();
  offloader_->prefetch(slot);
  held.add(slot, allocated.live() - live);
}

void SlotOffload::release(size_t slot) {
  if (offloader_) offloader_->release(slot);
}

}  // namespace pprt
