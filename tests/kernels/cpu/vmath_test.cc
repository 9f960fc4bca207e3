// kernels/cpu/vmath.h: the ulp bounds it states, over a dense sweep of all floats plus every float
// around each approximation's split point; libm's special values; and results that do not depend
// on an element's position or the array's length.
#include "kernels/cpu/vmath.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace foundry {
namespace FOUNDRY_TEST_NS {

using ArrayFn = void (*)(const float*, float*, int64_t);

struct Fn {
  const char* name;
  ArrayFn f;
  double (*ref)(double);
  int64_t max_ulp;  // vmath.h's bound
};

std::vector<Fn> Fns() {
  return {{"Exp", vmath::Exp, [](double x) { return std::exp(x); }, 1},
          {"Erf", vmath::Erf, [](double x) { return std::erf(x); }, 2},
          {"Tanh", vmath::Tanh, [](double x) { return std::tanh(x); }, 1}};
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// The worst ulp error of fn over `x` (NaN results must be NaN exactly where the reference is).
void ExpectWithinBound(const Fn& fn, const std::vector<float>& x, const std::string& what) {
  std::vector<float> y(x.size());
  fn.f(x.data(), y.data(), static_cast<int64_t>(x.size()));
  int64_t worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(fn.ref(x[i]));
    if (want != want || y[i] != y[i]) {
      ASSERT_TRUE(want != want && y[i] != y[i]) << fn.name << "(" << x[i] << ") = " << y[i];
      continue;
    }
    const int64_t u = vmath::UlpDistance(y[i], want);
    if (u > worst) {
      worst = u;
      worst_x = x[i];
    }
  }
  EXPECT_LE(worst, fn.max_ulp) << fn.name << " " << what << ": worst at x = " << worst_x;
}

// Every 61st bit pattern of all 2^32 (70 million floats: every binade, both signs, denormals,
// infinities and NaNs), in slices.
TEST(VmathTest, DenseSweepOfAllFloatsWithinStatedBound) {
  constexpr uint64_t kStride = 61;
  constexpr uint64_t kSlice = 1 << 22;
  for (const Fn& fn : Fns()) {
    std::vector<float> x;
    x.reserve(kSlice);
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += kStride) {
      x.push_back(FromBits(static_cast<uint32_t>(b)));
      if (x.size() == kSlice) {
        ExpectWithinBound(fn, x, "sweep");
        x.clear();
      }
    }
    ExpectWithinBound(fn, x, "sweep");
  }
}

// Every float in a window around each place the approximations change: the piecewise splits
// (erf 0.921875, tanh 0.625), where erf and tanh saturate to 1, and exp's overflow and underflow
// thresholds.
TEST(VmathTest, EveryFloatAroundTheSplitsWithinStatedBound) {
  auto window = [](float lo, float hi) {
    std::vector<float> x;
    for (float v = lo; v <= hi; v = std::nextafter(v, std::numeric_limits<float>::infinity()))
      x.push_back(v);
    return x;
  };
  const std::vector<Fn> fns = Fns();
  for (float c : {88.72f, -87.33f, -103.97f, 0.3466f})
    ExpectWithinBound(fns[0], window(c - 0.01f, c + 0.01f), "window");
  for (float c : {0.921875f, -0.921875f, 3.92f, 4.0f})
    ExpectWithinBound(fns[1], window(c - 0.01f, c + 0.01f), "window");
  for (float c : {0.625f, -0.625f, 9.0f, 9.5f})
    ExpectWithinBound(fns[2], window(c - 0.01f, c + 0.01f), "window");
}

TEST(VmathTest, SpecialValuesFollowLibm) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  auto one = [](ArrayFn f, float x) {
    float y;
    f(&x, &y, 1);
    return y;
  };
  struct Case {
    ArrayFn f;
    const char* name;
    float x, want;
  };
  const Case cases[] = {
      {vmath::Exp, "exp", 0.f, 1.f},        {vmath::Exp, "exp", -0.f, 1.f},
      {vmath::Exp, "exp", inf, inf},        {vmath::Exp, "exp", -inf, 0.f},
      {vmath::Exp, "exp", 88.8f, inf},      {vmath::Exp, "exp", 1e30f, inf},
      {vmath::Exp, "exp", -104.f, 0.f},     {vmath::Exp, "exp", -1e30f, 0.f},
      {vmath::Exp, "exp", tiny, 1.f},       {vmath::Exp, "exp", -1e-30f, 1.f},
      {vmath::Erf, "erf", 0.f, 0.f},        {vmath::Erf, "erf", -0.f, -0.f},
      {vmath::Erf, "erf", inf, 1.f},        {vmath::Erf, "erf", -inf, -1.f},
      {vmath::Erf, "erf", 4.f, 1.f},        {vmath::Erf, "erf", -30.f, -1.f},
      {vmath::Erf, "erf", tiny, tiny},      {vmath::Tanh, "tanh", 0.f, 0.f},
      {vmath::Tanh, "tanh", -0.f, -0.f},    {vmath::Tanh, "tanh", inf, 1.f},
      {vmath::Tanh, "tanh", -inf, -1.f},    {vmath::Tanh, "tanh", 9.5f, 1.f},
      {vmath::Tanh, "tanh", -1e30f, -1.f},  {vmath::Tanh, "tanh", tiny, tiny},
      {vmath::Tanh, "tanh", -1e-30f, -1e-30f},
  };
  for (const Case& c : cases) {
    const float got = one(c.f, c.x);
    EXPECT_EQ(Bits(got), Bits(c.want)) << c.name << "(" << c.x << ") = " << got;
  }
  // Denormal results: exp underflows gradually, as libm does.
  EXPECT_LE(vmath::UlpDistance(one(vmath::Exp, -103.9f), std::exp(-103.9f)), 1);
  EXPECT_GT(one(vmath::Exp, -100.f), 0.f);
  for (ArrayFn f : std::vector<ArrayFn>{vmath::Exp, vmath::Erf, vmath::Tanh}) {
    EXPECT_TRUE(std::isnan(one(f, nan)));
    EXPECT_TRUE(std::isnan(one(f, -nan)));
  }
}

// An element's bits do not depend on where it sits or how long the array is: every sub-array of
// a random array gives the bits of the whole (the tail goes through the same 8-lane code).
TEST(VmathTest, ResultsDoNotDependOnOffsetOrLength) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-12.f, 12.f);
  std::vector<float> x(203);
  for (float& v : x) v = u(rng);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[9] = -std::numeric_limits<float>::infinity();
  for (const Fn& fn : Fns()) {
    std::vector<float> whole(x.size());
    fn.f(x.data(), whole.data(), static_cast<int64_t>(x.size()));
    for (int64_t offset = 0; offset < 17; ++offset)
      for (int64_t len = 0; offset + len <= static_cast<int64_t>(x.size()); len += 1 + len / 3) {
        std::vector<float> part(len + 1, 12345.f);
        fn.f(x.data() + offset, part.data(), len);
        for (int64_t i = 0; i < len; ++i)
          ASSERT_EQ(Bits(part[i]), Bits(whole[offset + i]))
              << fn.name << " offset " << offset << " length " << len << " element " << i;
        EXPECT_EQ(part[len], 12345.f) << fn.name << ": wrote past the end";
      }
    // In place equals out of place.
    std::vector<float> in_place = x;
    fn.f(in_place.data(), in_place.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(Bits(in_place[i]), Bits(whole[i])) << fn.name;
  }
}

}  // namespace
}  // namespace foundry
