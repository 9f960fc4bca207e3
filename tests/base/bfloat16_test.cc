// bfloat16 conversions against a reference written another way: the two bfloat16 neighbours of a
// value found by exact double arithmetic, the nearer one taken, ties to the even bit pattern.
#include "base/bfloat16.h"

#include "base/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace foundry {
namespace FOUNDRY_TEST_NS {

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// The correctly rounded bfloat16 of a finite double, by search: bfloat16 values are ordered like
// their bit patterns (for one sign), so the candidates are the truncation and the next pattern.
uint16_t Reference(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  // Largest bfloat16 magnitude <= a, by scanning exponents then fractions (slow, exact).
  uint16_t lo = 0;
  for (uint16_t m = 0x7F7F;; --m) {  // from the largest finite magnitude down
    if (static_cast<double>(Bf16ToFloat(m)) <= a) {
      lo = m;
      break;
    }
    if (m == 0) break;
  }
  const double vlo = Bf16ToFloat(lo);
  if (vlo == a) return sign | lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // 0x7F80 (infinity) past the largest
  // Past the largest finite value, round to infinity from halfway to the next power of two up.
  const double vhi = hi == 0x7F80 ? std::ldexp(1.0, 128) : static_cast<double>(Bf16ToFloat(hi));
  const double dlo = a - vlo, dhi = vhi - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

// Binary search version of Reference's scan (same answer, used on many values).
uint16_t ReferenceFast(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  uint32_t lo = 0, hi = 0x7F7F;  // invariant: value(lo) <= a (lo = 0 gives +0)
  if (static_cast<double>(Bf16ToFloat(0x7F7F)) <= a) {
    lo = 0x7F7F;
  } else {
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      (static_cast<double>(Bf16ToFloat(static_cast<uint16_t>(mid))) <= a ? lo : hi) = mid;
    }
  }
  const double vlo = Bf16ToFloat(static_cast<uint16_t>(lo));
  if (vlo == a) return sign | lo;
  const uint16_t up = static_cast<uint16_t>(lo + 1);
  const double vhi = up == 0x7F80 ? std::ldexp(1.0, 128) : static_cast<double>(Bf16ToFloat(up));
  const double dlo = a - vlo, dhi = vhi - a;
  if (dlo < dhi) return sign | lo;
  if (dhi < dlo) return sign | up;
  return sign | ((lo & 1) ? up : lo);
}

TEST(BFloat16, KnownValues) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (even: 1); 1 + 3·2^-8 between
  // 1 + 2^-7 and 1 + 2^-6 (even: the upper).
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808000u)), 0x3F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F818000u)), 0x3F82);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808001u)), 0x3F81);  // just above a tie
  // The largest finite float rounds to infinity; the largest finite bfloat16 stays.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(FloatToBf16(FromBits(0x7F7F0000u)), 0x7F7F);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN stays NaN (quiet), sign kept, even one whose payload sits only in the low bits.
  const uint16_t nan = FloatToBf16(FromBits(0x7F800001u));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(nan))) << std::hex << nan;
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(FromBits(0xFFC00000u)))));
  EXPECT_EQ(FloatToBf16(FromBits(0xFFC00000u)) & 0x8000, 0x8000);
  // Subnormals round like everything else.
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000u)), 0x0000);  // tie, to even (zero)
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000u)), 0x0002);  // tie, to even (up)
  EXPECT_EQ(FloatToBf16(FromBits(0x00010001u)), 0x0001);
}

TEST(BFloat16, WideningIsExactAndRoundTrips) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    ASSERT_EQ(bits, h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), h) << std::hex << h;
    }
  }
}

TEST(BFloat16, ReferencesAgree) {
  // The scan and the binary search give the same answer (the scan is the definition).
  for (double d : {0.0, 1e-40, 1.0, 1.00390625, 3.14159, 1e38, 3.4e38, 3.39e38, 1e-45})
    EXPECT_EQ(ReferenceFast(d), Reference(d)) << d;
}

// Every 1021st float pattern (all exponents, all signs) and every tie pattern of a stretch of
// exponents: FloatToBf16 is the correctly rounded value.
TEST(BFloat16, FloatToBf16IsCorrectlyRounded) {
  int64_t checked = 0;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 1021) {
    const float f = FromBits(static_cast<uint32_t>(b));
    if (std::isnan(f)) continue;
    const uint16_t want =
        std::isinf(f) ? (std::signbit(f) ? 0xFF80 : 0x7F80) : ReferenceFast(static_cast<double>(f));
    ASSERT_EQ(FloatToBf16(f), want) << std::hex << b;
    ++checked;
  }
  for (uint32_t top = 0x3E00; top < 0x4200; ++top)
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u}) {
      const float f = FromBits(top << 16 | low);
      ASSERT_EQ(FloatToBf16(f), ReferenceFast(f)) << std::hex << (top << 16 | low);
    }
  EXPECT_GT(checked, 4000000);
}

// double -> bfloat16 rounds once: a double just above a bfloat16 tie that float rounding would
// turn into an exact tie must round up, not to even.
TEST(BFloat16, DoubleToBf16RoundsOnce) {
  const double just_above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(FloatToBf16(static_cast<float>(just_above_tie)), 0x3F80);  // two roundings: wrong
  EXPECT_EQ(DoubleToBf16(just_above_tie), 0x3F81);
  EXPECT_EQ(DoubleToBf16(-just_above_tie), 0xBF81);
  EXPECT_EQ(DoubleToBf16(1.0 + std::ldexp(1.0, -8)), 0x3F80);  // an exact tie: to even
  EXPECT_EQ(DoubleToBf16(1e300), 0x7F80);
  EXPECT_EQ(DoubleToBf16(-1e300), 0xFF80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(DoubleToBf16(std::nan("")))));
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-140, 127);
  for (int i = 0; i < 200000; ++i) {
    const double d = std::ldexp(mantissa(rng), exponent(rng)) * (i % 2 ? -1 : 1);
    ASSERT_EQ(DoubleToBf16(d), ReferenceFast(d)) << d;
  }
}

TEST(BFloat16, BulkConversionsMatchScalar) {
  std::vector<float> f(1003);
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::ldexp(static_cast<float>(i) * 1.37f - 600, -3);
  std::vector<uint16_t> h(f.size());
  FloatToBf16(f.data(), h.data(), static_cast<int64_t>(f.size()));
  std::vector<float> back(f.size());
  Bf16ToFloat(h.data(), back.data(), static_cast<int64_t>(f.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(h[i], FloatToBf16(f[i]));
    ASSERT_EQ(back[i], Bf16ToFloat(h[i]));
  }
}

// A bf16 tensor's elements read as numbers (GetAsDouble / GetAsInt64: scalar attributes and
// test comparisons) are their exact values, not 0.
TEST(Bfloat16Test, TensorElementsReadAsTheirValues) {
  const std::vector<uint16_t> bits = {FloatToBf16(1.5f), FloatToBf16(-3.0f), FloatToBf16(0.1f),
                                      0x7F80 /* +inf */};
  Tensor t = Tensor::FromVector<uint16_t>(DType::kBFloat16, {4}, bits);
  EXPECT_EQ(t.GetAsDouble(0), 1.5);
  EXPECT_EQ(t.GetAsDouble(1), -3.0);
  EXPECT_EQ(t.GetAsDouble(2), static_cast<double>(Bf16ToFloat(bits[2])));
  EXPECT_NE(t.GetAsDouble(2), 0.0);
  EXPECT_TRUE(std::isinf(t.GetAsDouble(3)));
  EXPECT_EQ(t.GetAsInt64(1), -3);
}

}  // namespace
}  // namespace foundry
