// PPRUN_KERNELS: which implementation of the model's operations and of the work between replays
// (gradient clipping, AdamW) a run takes (docs/gpu.md). For comparisons and tests: the default
// (auto) is each device's fastest, and the CPU's default keeps the CPU's numbers bit for bit.
//
//   auto         the CPU's own paths on the CPU; LibTorch's fused entry points on GPUs
//   generic      ATen's plain operations and torch::optim::AdamW everywhere (what GPUs ran before)
//   fused        LibTorch's fused entry points everywhere they exist, the CPU included
//   fused-cudnn  fused, with attention through SDPA's cuDNN kernels on CUDA
#pragma once

#include <cstdint>
#include <string>

namespace pprt {

enum class KernelChoice : uint8_t { Auto, Generic, Fused, FusedCudnn };

// The choice `value` names ("" and "auto": Auto); any other value stops with a UserError at
// "environment" that names PPRUN_KERNELS and the values it takes.
KernelChoice parse_kernel_choice(const std::string& value);
// PPRUN_KERNELS's choice (unset: Auto).
KernelChoice kernel_choice_from_env();

// Whether clipping and AdamW take the fused multi-tensor path (fused_step.h) on a device: by
// default on every device but the CPU.
bool fused_optimizer(KernelChoice k, bool cpu);

}  // namespace pprt
