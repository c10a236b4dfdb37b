// Offloading through saved-tensor hooks (offload.h).
#include "runtime/model/offload.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "compiler/diagnostic.h"

namespace pprt {

namespace {

// One tensor storage a slot's F saved: on the device, on the host, or on its way.
struct Stored {
  c10::Storage device;  // on the device: until offloaded, and again once brought back
  at::Tensor host;      // its bytes on the host, while offloaded
  int64_t bytes = 0;
  c10::Device where{c10::kCPU};
  std::optional<c10::Stream> side;    // a GPU's copy stream; none on the CPU
  std::optional<c10::Event> to_host;  // GPU: the copy to the host, until its device is dropped
  std::optional<c10::Event> back;     // GPU: the copy back, until a consumer waited for it

  // The storage's bytes as a tensor on the device.
  static at::Tensor bytes_of(const c10::Storage& s, const c10::Device& d, int64_t n) {
    return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(d)).set_(s, 0, {n}, {1});
  }

  // Only a storage that nothing but the saved tensors holds: what else holds one (the stage's
  // output, a cached working copy of a weight, a layer that keeps its own) keeps it on the device
  // anyway, and a copy would free nothing.
  int64_t offload() {
    if (!device || host.defined() || device.use_count() > 1) return 0;
    at::NoGradGuard no_grad;
    const at::Tensor from = bytes_of(device, where, bytes);
    if (!side) {  // the CPU's test copy: host to host, now
      host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
      host.copy_(from);
      device = c10::Storage();
      return bytes;
    }
    c10::impl::VirtualGuardImpl impl(where.type());
    c10::Event ready(where.type());  // the F's kernels that wrote it
    ready.record(impl.getStream(where));
    ready.block(*side);
    {
      c10::StreamGuard on_side(*side);
      host = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      host.copy_(from, /*non_blocking=*/true);
    }
    to_host.emplace(where.type());
    to_host->record(*side);
    return bytes;  // `device` is dropped by poll(), once the copy is done
  }

  void poll() {
    if (to_host && device && to_host->query()) {
      device = c10::Storage();
      to_host.reset();
    }
  }

  int64_t prefetch() {
    if (device) {  // never left (a GPU's copy still under way: it need not come back)
      host = at::Tensor();
      to_host.reset();
      return 0;
    }
    if (!host.defined()) return 0;
    at::NoGradGuard no_grad;
    // Allocated on the compute stream, which uses it; written on the side stream after what the
    // compute stream queued before (the block may have been free only since then).
    at::Tensor to = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(where));
    if (!side) {
      to.copy_(host);
    } else {
      c10::impl::VirtualGuardImpl impl(where.type());
      c10::Event ready(where.type());
      ready.record(impl.getStream(where));
      ready.block(*side);
      {
        c10::StreamGuard on_side(*side);
        to.copy_(host, /*non_blocking=*/true);
      }
      back.emplace(where.type());
      back->record(*side);
    }
    device = to.storage();
    host = at::Tensor();  // (pinned: its allocator keeps it until the copy is done)
    return bytes;
  }

  // The storage on the device, ready for the current stream.
  const c10::Storage& ready() {
    if (!device) prefetch();
    if (back) {
      back->block(c10::impl::VirtualGuardImpl(where.type()).getStream(where));
      back.reset();
    }
    return device;
  }
};

// A slot's storages. The saved tensors' hooks own them: once autograd frees what it saved (a B,
// an I), what only it held is freed, as without offloading; the W's weight work holds its own.
using Slot = std::unordered_map<const c10::StorageImpl*, std::weak_ptr<Stored>>;

}  // namespace

struct OffloadState {
  c10::Device device{c10::kCPU};
  std::optional<c10::Stream> side;
  std::vector<Slot> slots;
  int64_t offloaded = 0;
};

namespace {

thread_local OffloadState* target_state = nullptr;
thread_local size_t target_slot = 0;
thread_local bool packing = false;

// A saved tensor: its storage's Stored (shared by every view of it the slot saved) and its view,
// or the tensor itself where it stays (a parameter, a stage's input, another device's tensor).
class Hooks final : public torch::autograd::SavedVariableHooks {
 public:
  Hooks(OffloadState& state, size_t slot) : state_(&state), slot_(slot) {}

  void call_pack_hook(const at::Tensor& t) override {
    OffloadState& st = *state_;
    state_ = nullptr;  // used here only: the graph may outlive the offloader
    if (!t.defined() || (t.is_leaf() && t.requires_grad()) || !t.has_storage() ||
        t.device() != st.device || t.layout() != at::kStrided || t.storage().nbytes() == 0) {
      kept_ = t.tensor_data();  // without autograd's metadata, as autograd saves outputs
      return;
    }
    const c10::Storage& s = t.storage();
    std::weak_ptr<Stored>& entry = st.slots[slot_][s.unsafeGetStorageImpl()];
    std::shared_ptr<Stored> stored = entry.lock();
    if (!stored) {
      stored = std::make_shared<Stored>();
      stored->device = s;
      stored->bytes = static_cast<int64_t>(s.nbytes());
      stored->where = st.device;
      stored->side = st.side;
      entry = stored;
    }
    stored_ = std::move(stored);
    dtype_ = t.scalar_type();
    offset_ = t.storage_offset();
    sizes_ = t.sizes().vec();
    strides_ = t.strides().vec();
  }

  at::Tensor call_unpack_hook() override {
    if (!stored_) return kept_;
    at::NoGradGuard no_grad;
    const c10::Storage& s = stored_->ready();
    return at::empty({0}, at::TensorOptions().dtype(dtype_).device(stored_->where))
        .set_(s, offset_, sizes_, strides_);
  }

 private:
  OffloadState* state_;
  size_t slot_;
  at::Tensor kept_;
  std::shared_ptr<Stored> stored_;
  at::ScalarType dtype_ = at::kFloat;
  int64_t offset_ = 0;
  std::vector<int64_t> sizes_, strides_;
};

// The default engine, but for the hooks it gives what autograd saves inside an OffloadPacking.
struct OffloadEngine final : torch::autograd::Engine {
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (!packing || !target_state) return nullptr;
    return std::make_unique<Hooks>(*target_state, target_slot);
  }
};

torch::autograd::Engine& offload_engine() {
  static OffloadEngine engine;
  return engine;
}

}  // namespace

void install_offload_engine() {
  static std::once_flag once;
  std::call_once(once, [] { torch::autograd::set_default_engine_stub(&offload_engine); });
}

Offloader::Offloader(const c10::Device& device, size_t slots, bool host_copy)
    : state_(std::make_unique<OffloadState>()) {
  PPC_INTERNAL_ASSERT(host_copy || !device.is_cpu(), "offloading on the CPU is the tests' copy");
  state_->device = device;
  state_->slots.resize(slots);
  if (!device.is_cpu())
    state_->side = c10::impl::VirtualGuardImpl(device.type())
                       .getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  install_offload_engine();
}

Offloader::~Offloader() = default;

int64_t Offloader::offload(size_t slot) {
  int64_t n = 0;
  for (auto& [impl, entry] : state_->slots[slot])
    if (std::shared_ptr<Stored> stored = entry.lock()) n += stored->offload();
  state_->offloaded += n;
  return n;
}

int64_t Offloader::prefetch(size_t slot) {
  int64_t n = 0;
  for (auto& [impl, entry] : state_->slots[slot])
    if (std::shared_ptr<Stored> stored = entry.lock()) n += stored->prefetch();
  return n;
}

void Offloader::release(size_t slot) {
  state_->slots[slot].clear();
}

void Offloader::poll() {
  if (!state_->side) return;
  for (Slot& s : state_->slots)
    for (auto& [impl, entry] : s)
      if (std::shared_ptr<Stored> stored = entry.lock()) stored->poll();
}

int64_t Offloader::offloaded_bytes() const {
  return state_->offloaded;
}

Offloader::Target::Target(Offloader* offloader, size_t slot)
    : previous_(target_state), previous_slot_(target_slot) {
  target_state = offloader ? offloader->state_.get() : nullptr;
  target_slot = slot;
}

Offloader::Target::~Target() {
  target_state = previous_;
  target_slot = previous_slot_;
}

OffloadPacking::OffloadPacking(bool on) : previous_(packing) {
  packing = on;
}

OffloadPacking::~OffloadPacking() {
  packing = previous_;
}

}  // namespace pprt
