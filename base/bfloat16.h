// bfloat16 (the upper 16 bits of an IEEE binary32: sign, 8 exponent bits, 7 fraction bits) as the
// CPU backend stores it: raw uint16_t bit patterns. Conversions round to nearest, ties to even,
// as PyTorch's c10::BFloat16 and CUDA's __float2bfloat16_rn do; a NaN stays a NaN (quiet, sign
// kept), infinities stay infinities, and values beyond bfloat16's largest finite value round to
// infinity. Widening to float is exact.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace foundry {

inline float Bf16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)  // NaN: keep the sign and the top fraction bits, quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Round to nearest even on bit 16: add 0x7FFF plus the lowest kept bit, then truncate. A carry
  // out of the fraction bumps the exponent (to infinity past the largest finite value).
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// double -> bfloat16 with one rounding (converting through float would round twice): the double
// is first narrowed to float rounding to odd (truncate, then set the last bit when anything was
// cut), which keeps enough information for the final round-to-nearest-even to be correct.
inline uint16_t DoubleToBf16(double d) {
  if (std::isnan(d)) return FloatToBf16(static_cast<float>(d));
  float f = static_cast<float>(d);  // round to nearest
  if (std::isinf(f) && !std::isinf(d)) {
    // Beyond float's range: beyond bfloat16's too (same exponent range), rounds to infinity.
    return FloatToBf16(f);
  }
  if (static_cast<double>(f) != d) {
    // Toward zero, then make the last bit 1 (round to odd).
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    bits |= 1u;
    std::memcpy(&f, &bits, sizeof f);
  }
  return FloatToBf16(f);
}

// Bulk conversions (loops the compiler vectorises); `src` and `dst` do not overlap.
void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n);
void FloatToBf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace foundry
