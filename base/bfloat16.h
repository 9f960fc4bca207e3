// bfloat16 (the upper 16 bits of an IEEE binary32: sign, 8 exponent bits, 7 fraction bits) as the
// CPU backend stores it: raw uint16_t bit patterns. Conversions round to nearest, ties to even,
// as PyTorch's c10::BFloat16 and CUDA's __float2bfloat16_rn do; a NaN stays a NaN (quiet, sign
// kept), infinities stay infinities, and values beyond bfloat16's largest finite value round to
// infinity. Widening to float is exact.
// The three per-element conversions are FOUNDRY_HD: the CUDA kernels (Cast, bf16 staging) call
// these same functions, so a host replay of a device conversion is this code.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/hd.h"

namespace foundry {

namespace bf16_internal {
FOUNDRY_HD inline uint32_t BitsOf(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}
FOUNDRY_HD inline float FloatOf(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}
}  // namespace bf16_internal

FOUNDRY_HD inline float Bf16ToFloat(uint16_t h) {
  return bf16_internal::FloatOf(static_cast<uint32_t>(h) << 16);
}

FOUNDRY_HD inline uint16_t FloatToBf16(float f) {
  uint32_t bits = bf16_internal::BitsOf(f);
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
// Written with comparisons and bit operations only (no <cmath>), so that it runs on the device.
FOUNDRY_HD inline uint16_t DoubleToBf16(double d) {
  if (d != d) return FloatToBf16(static_cast<float>(d));  // NaN
  float f = static_cast<float>(d);                        // round to nearest
  uint32_t bits = bf16_internal::BitsOf(f);
  // Beyond float's range (f infinite, d finite): beyond bfloat16's too (same exponent range),
  // rounds to infinity; d infinite converts exactly.
  if ((bits & 0x7FFFFFFFu) == 0x7F800000u) return FloatToBf16(f);
  const double fd = static_cast<double>(f);
  if (fd != d) {
    // Toward zero (|f| > |d| means f is nonzero: one pattern down is one ulp smaller in
    // magnitude, to a signed zero from the smallest subnormal), then make the last bit 1.
    if ((fd < 0 ? -fd : fd) > (d < 0 ? -d : d)) bits -= 1u;
    bits |= 1u;
    f = bf16_internal::FloatOf(bits);
  }
  return FloatToBf16(f);
}

// Bulk conversions (loops the compiler vectorises); `src` and `dst` do not overlap.
void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n);
void FloatToBf16(const float* src, uint16_t* dst, int64_t n);

}  // namespace foundry
