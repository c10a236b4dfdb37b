#include "runtime/train/device_queue.h"

namespace pprt {

DeviceQueue::DeviceQueue(const c10::Device& d) {
  if (!d.is_cuda()) return;
  impl.emplace(d.type());
  device = d.has_index() ? d : impl->getDevice();
  compute = impl->getStreamFromGlobalPool(device, /*isHighPriority=*/false);
}

size_t DeviceQueue::mark() {
  if (used == events.size()) events.emplace_back(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  events[used].record(*compute);
  return used++;
}

double DeviceQueue::ms(size_t from, size_t to) const {
  return events[from].elapsedTime(events[to]);
}

size_t DeviceQueue::begin() {
  used = 0;
  caller = impl->getStream(device);
  if (!ready) ready.emplace(device.type());
  ready->record(*caller);
  ready->block(*compute);
  return mark();
}

void DeviceQueue::end() {
  const size_t last = mark();
  events[last].block(*caller);
  events[last].synchronize();
}

}  // namespace pprt
