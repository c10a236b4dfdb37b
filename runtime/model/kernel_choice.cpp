// PPRUN_KERNELS (kernel_choice.h).
#include "runtime/model/kernel_choice.h"

#include <fmt/format.h>

#include <cstdlib>

#include "runtime/fail.h"

namespace pprt {

KernelChoice parse_kernel_choice(const std::string& value) {
  if (value.empty() || value == "auto") return KernelChoice::Auto;
  if (value == "generic") return KernelChoice::Generic;
  if (value == "fused") return KernelChoice::Fused;
  if (value == "fused-cudnn") return KernelChoice::FusedCudnn;
  fail("environment",
       fmt::format("PPRUN_KERNELS={}: expected auto, generic, fused or fused-cudnn", value));
}

KernelChoice kernel_choice_from_env() {
  const char* v = std::getenv("PPRUN_KERNELS");
  return parse_kernel_choice(v ? v : "");
}

bool fused_optimizer(KernelChoice k, bool cpu) {
  switch (k) {
    case KernelChoice::Auto:
      return !cpu;
    case KernelChoice::Generic:
      return false;
    case KernelChoice::Fused:
    case KernelChoice::FusedCudnn:
      return true;
  }
  return false;
}

}  // namespace pprt
