// The conversions between float32 and the half dtypes that reading and writing Hugging Face
// directories (hf.cpp) use. Internal to runtime/checkpoint.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace pprt::hf_internal {

// --- dtypes -----------------------------------------------------------------------------------

inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline float f16_to_float(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(mant + 1024), exp - 25);
  return (h & 0x8000) ? -v : v;
}

// Round to nearest, ties to even (as torch's .to(torch.bfloat16)); NaN stays NaN.
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

}  // namespace pprt::hf_internal
