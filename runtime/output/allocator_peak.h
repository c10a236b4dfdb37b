// The device allocator's peak (issue 42, section 1: "on GPUs, the allocator's peak"): the most
// bytes the caching allocator of a non-CPU device had handed out at once since its last reset,
// read through the device-generic c10 allocator interface (c10::getDeviceAllocator), so it compiles
// in the CPU build and serves any accelerator whose allocator implements it.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace pprt {

// Starts the peak anew from what is allocated now. Nothing on the CPU.
void reset_allocator_peak(const c10::Device& device);

// The peak of allocated bytes since the last reset; -1 on the CPU (no device allocator).
int64_t allocator_peak_bytes(const c10::Device& device);

}  // namespace pprt
