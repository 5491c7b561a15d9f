#pragma once
// Host-side bfloat16 <-> float conversion (round-to-nearest-even, NaN kept).
#include <cstdint>
#include <cstring>

namespace lantern {

using bf16_bits = uint16_t;  // raw bfloat16 as stored in safetensors

inline float bf16_to_float(bf16_bits b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16_bits float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<bf16_bits>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_bits>(u >> 16);
}

}  // namespace lantern
