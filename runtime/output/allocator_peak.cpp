#include "runtime/output/allocator_peak.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace pprt {
namespace {

c10::DeviceIndex index_of(const c10::Device& device) {
  return device.has_index() ? device.index()
                            : c10::impl::VirtualGuardImpl(device.type()).getDevice().index();
}

}  // namespace

void reset_allocator_peak(const c10::Device& device) {
  if (device.is_cpu()) return;
  c10::getDeviceAllocator(device.type())->resetPeakStats(index_of(device));
}

int64_t allocator_peak_bytes(const c10::Device& device) {
  if (device.is_cpu()) return -1;
  const auto stats = c10::getDeviceAllocator(device.type())->getDeviceStats(index_of(device));
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

}  // namespace pprt
