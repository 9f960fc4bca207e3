// Vectorised float transcendental functions over arrays, for the CPU kernels' hot loops (libm's
// expf/erff/tanhf are scalar calls of 5-20 ns; these run eight lanes at a time).
//
// Every element goes through the same sequence of IEEE operations whatever its position in the
// array, the array's length or the CPU: the tail is padded through the same 8-lane code (no scalar
// path), the file is built with -ffp-contract=off (no a * b + c fused behind the code's back in
// the AVX2 clone), and every operation used (+, -, *, /, comparisons, selects, conversions of
// integral-valued floats) is exactly rounded, so the AVX2 and the baseline clone give the same
// bits. A kernel that computes the same math as another (a fused op and its decomposition, a
// recompute clone) gets the same bits by calling the same function here.
//
// Special values follow libm: NaN propagates (quieted), exp(-inf) = 0, exp(x > 88.72) = +inf,
// exp of a large negative argument underflows through the denormals to +0, erf(±inf) = ±1,
// tanh(±large) = ±1, erf(±0) = tanh(±0) = ±0.
//
// Accuracy against a double-precision reference (std::exp, std::erf, std::tanh of the float
// argument, rounded to float), measured over every float in the tested ranges
// (tests/kernels/cpu/vmath_test.cc asserts these bounds):
//   Exp   max 1 ulp (normal results; denormal results within 1 ulp of the denormal grid)
//   Erf   max 2 ulp
//   Tanh  max 2 ulp
// "ulp" is the distance in representable floats from the correctly rounded result.
#pragma once

#include <cstdint>
#include <cstring>

namespace foundry::vmath {

// y[i] = f(x[i]) for i in [0, n). y may be x (in place); otherwise the arrays must not overlap.
void Exp(const float* x, float* y, int64_t n);
void Erf(const float* x, float* y, int64_t n);
void Tanh(const float* x, float* y, int64_t n);

// The double forms are libm's, element by element: kernels templated on the element type call
// vmath for both, and double results stay what they were.
void Exp(const double* x, double* y, int64_t n);
void Erf(const double* x, double* y, int64_t n);
void Tanh(const double* x, double* y, int64_t n);

// The number of floats between a and b (0 when equal, +0 and -0 equal; 1 for neighbours): the
// measure of the bounds above. Both must be numbers.
inline int64_t UlpDistance(float a, float b) {
  auto ordinal = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? -static_cast<int64_t>(i & 0x7FFFFFFF) : static_cast<int64_t>(i);
  };
  const int64_t d = ordinal(a) - ordinal(b);
  return d < 0 ? -d : d;
}

}  // namespace foundry::vmath
