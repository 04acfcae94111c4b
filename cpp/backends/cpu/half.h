#pragma once
// IEEE half (f16) and bfloat16 <-> f32 conversions, branch-light and exact: f16 -> f32 is exact
// for every value (subnormals, inf, NaN); f32 -> f16 and f32 -> bf16 round to nearest even,
// overflow to inf and keep NaN a NaN. Header-only so that loops using them vectorise.
#include <cstdint>
#include <cstring>

namespace tl::cpu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  // Shifting exponent+mantissa into float position and scaling by 2^112 re-biases normals and
  // turns f16 subnormals into the right float value; inf/NaN need their exponent set to 255.
  float f = bits_float(em << 13) * 0x1p112f;
  uint32_t u = em >= 0x7c00u ? ((em << 13) | 0x7f800000u) : float_bits(f);
  return bits_float(u | sign);
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (x < 0x38800000u) {
    // Result is subnormal (or zero): adding 0.5 lines the f16 subnormal step up with the float ulp.
    float a = bits_float(x) + 0.5f;
    return static_cast<uint16_t>(sign | (float_bits(a) - 0x3f000000u));
  }
  uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;  // re-bias exponent by -112 and round to nearest even
  return static_cast<uint16_t>(sign | (x >> 13));
}

inline float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace tl::cpu
