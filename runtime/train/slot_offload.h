// The executor's offloading (issue 42, --offload; model/offload.h does the copies): which slot's
// activations go to the host after its F, which come back before the rank's next compute action,
// and what the slots hold meanwhile on the activation-bytes count (activation_bytes.h).
//
// The plan says which compute action comes next on the rank, so a prefetch starts when the action
// before a B or I (an OVERLAP_F_B's backward part) of an offloaded slot starts: no guessing. A slot
// whose B or I is the very next compute action after its F stays on the device (a round trip that
// frees nothing). What goes to the host is not counted as activation bytes (the host copies are
// allocated with the count paused); what comes back is, from the moment it is asked for: a
// prefetch, or the B or I itself where nothing prefetched it.
//
// Included only by LibTorch translation units.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "compiler/action.h"
#include "runtime/model/offload.h"

namespace pprt {

class ActivationBytes;
class AllocationMeter;

class SlotOffload {
 public:
  // A slot of (plan stage, microbatch), as the executor numbers them.
  using SlotOf = std::function<size_t(int stage, int microbatch)>;

  // `on`: the rank's stages offload something (else every call below does nothing). `slots`
  // slots on `device`; `host_copy`: the CPU's test copies (offload.h). `actions`: the rank's
  // order, which must outlive this.
  SlotOffload(bool on, const c10::Device& device, size_t slots, bool host_copy,
              const std::vector<ppc::Action>& actions, SlotOf slot_of);

  bool on() const { return offloader_ != nullptr; }

  // While `target` (emplaced here when on) lives (a slot's F), what offloaded layers save goes to
  // `slot`.
  void aim(std::optional<Offloader::Target>& target, size_t slot);
  // After the slot's F (of the compute action that started last): its saved tensors to the host,
  // not counted as activation bytes, unless the rank's next compute action is the slot's B or I.
  // Returns the bytes copied (0 when off).
  int64_t offload(size_t slot);
  // When compute action `index` starts: the slot of its own B or I (an OVERLAP_F_B's backward
  // part), if still on the host, comes back now; and if the rank's next compute action is a B or I
  // of an offloaded slot, its activations start back now. `held` counts what comes back
  // (`allocated`'s growth meanwhile) on its slot.
  void prefetch_after(size_t index, AllocationMeter& allocated, ActivationBytes& held);
  // After the slot's B or W: nothing of it is kept any more.
  void release(size_t slot);

 private:
  // The slot whose B or I compute action `index` runs (as its backward part), if any.
  std::optional<size_t> backward_slot(size_t index) const;
  // The rank's compute action after `index` (actions_.size() if none).
  size_t next_compute(size_t index) const;
  // Brings `slot` back, `held` counting it.
  void bring_back(size_t slot, AllocationMeter& allocated, ActivationBytes& held);

  std::unique_ptr<Offloader> offloader_;
  const std::vector<ppc::Action>& actions_;
  SlotOf slot_of_;
  size_t current_ = 0;  // the compute action that started last
};

}  // namespace pprt
