// Vectorised exp, erf and tanh (vmath.h). Built with -ffp-contract=off (CMakeLists.txt): the
// AVX2 clone must round every product and sum where the baseline clone does.
//
// The arithmetic is written on GCC vector types of eight floats: the AVX2 clone maps them to one
// register, the baseline clone to two SSE registers; the operations and their order are the same.
// Branches of a piecewise approximation are both computed and the lane's own value selects one, so
// a lane's result never depends on its neighbours.
//
// Polynomial coefficients are Chebyshev fits (mpmath.chebyfit) of the functions named at each,
// rounded to float; the error bounds in vmath.h were measured, not derived.
#include "kernels/cpu/vmath.h"

#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FOUNDRY_VMATH_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FOUNDRY_VMATH_CLONES
#endif
#define FOUNDRY_VMATH_INLINE inline __attribute__((always_inline))

namespace foundry::vmath {
namespace {

typedef float V __attribute__((vector_size(32)));
typedef int32_t VI __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;

FOUNDRY_VMATH_INLINE V Abs(V x) { return (V)((VI)x & 0x7FFFFFFF); }
// |magnitude| with the sign of `sign`.
FOUNDRY_VMATH_INLINE V CopySign(V magnitude, V sign) {
  return (V)(((VI)magnitude & 0x7FFFFFFF) | ((VI)sign & static_cast<int32_t>(0x80000000u)));
}
// NaN lanes of x come back quieted (x + x), the others from r.
FOUNDRY_VMATH_INLINE V PassNaN(V x, V r) { return x != x ? x + x : r; }

// exp(x) for x not NaN. Cody-Waite reduction x = n·ln2 + r, |r| <= ln2/2 (n·C1 is exact: C1 has 9
// significant bits, |n| <= 150), exp(r) by Cephes' expf polynomial, then 2^n applied as two
// factors 2^(n/2)·2^(n-n/2) so that both are normal floats and the one rounding of the second
// product gives overflow to inf and gradual underflow.
FOUNDRY_VMATH_INLINE V ExpFinite(V x) {
  // Above ~88.7228 the result overflows, below ~-103.97 it rounds to 0: clamping just outside
  // keeps n in [-150, 128] and gives those results through the scaling below. NaN becomes kHi.
  const float kHi = 88.8f, kLo = -104.0f;
  V xc = x < kHi ? x : kHi;
  xc = xc > kLo ? xc : kLo;
  const float kShifter = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer (ties to even)
  V n = (xc * 1.44269504088896341f + kShifter) - kShifter;
  V r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r;
  p = p + 1.0f;
  const VI ni = __builtin_convertvector(n, VI);
  const VI n1 = ni >> 1;
  const VI n2 = ni - n1;
  const V s1 = (V)((n1 + 127) << 23);
  const V s2 = (V)((n2 + 127) << 23);
  return (p * s1) * s2;
}

FOUNDRY_VMATH_INLINE V ExpV(V x) { return PassNaN(x, ExpFinite(x)); }

// erf: below kErfSplit, x·P(x²) with P a fit of erf(√s)/√s on s in [0, kErfSplit²]; above,
// 1 − exp(L(|x| − kErfSplit)) with L a fit of log(erfc(t)) on t in [kErfSplit, 4]. L's variable
// starts at the split, where erfc is largest, so that L is evaluated there without cancellation
// (an error of L is a relative error of erfc). Beyond 4, erfc < 2^-26 and 1 − exp(L) rounds to 1.
constexpr float kErfSplit = 0.921875f;

FOUNDRY_VMATH_INLINE V ErfV(V x) {
  const V s = x * x;
  V q = s * 8.3875910457089158e-5f + -8.1472020926134944e-4f;
  q = q * s + 5.2014668689663058e-3f;
  q = q * s + -2.6859592310705880e-2f;
  q = q * s + 1.1283699425717714e-1f;
  q = q * s + -3.7612634028172249e-1f;
  q = q * s + 1.1283791666731698f;
  const V small = x * q;

  const V a = Abs(x);
  const V ac = a < 4.0f ? a : 4.0f;  // also NaN -> 4
  const V u = ac - kErfSplit;
  V l = u * -5.2118401230289077e-8f + 2.3369192326906418e-6f;
  l = l * u + -3.7864688536565162e-5f;
  l = l * u + 3.4999731008161772e-4f;
  l = l * u + -2.2279588981831197e-3f;
  l = l * u + 1.0928465302814084e-2f;
  l = l * u + -4.4862504560988463e-2f;
  l = l * u + -8.3297973690852539e-1f;
  l = l * u + -2.5080133873233609f;
  l = l * u + -1.6485618805088412f;
  const V big = CopySign(1.0f - ExpFinite(l), x);
  return PassNaN(x, a < kErfSplit ? small : big);
}

// tanh: below kTanhSplit, x + x·s·P(s), s = x², P a fit of (tanh(x)/x − 1)/s; above,
// 1 − 2/(exp(2|x|) + 1). Beyond 9.5, 2·e^-19 < 2^-26 and the result rounds to 1.
constexpr float kTanhSplit = 0.625f;

FOUNDRY_VMATH_INLINE V TanhV(V x) {
  const V s = x * x;
  V q = s * 2.2927448161781423e-3f + -8.3439455158391520e-3f;
  q = q * s + 2.1768918651028210e-2f;
  q = q * s + -5.3959259577204543e-2f;
  q = q * s + 1.3333303556915742e-1f;
  q = q * s + -3.3333333172140362e-1f;
  // The sign of x: at x = -0 the sum would be -0 + +0 = +0.
  const V small = CopySign(x + (x * s) * q, x);

  const V a = Abs(x);
  const V ac = a < 9.5f ? a : 9.5f;  // also NaN -> 9.5
  const V e = ExpFinite(ac + ac);
  const V big = CopySign(1.0f - 2.0f / (e + 1.0f), x);
  return PassNaN(x, a < kTanhSplit ? small : big);
}

// y = F(x) eight lanes at a time; the last partial group is padded with zeros and goes through
// the same code.
template <V (*F)(V)>
FOUNDRY_VMATH_INLINE void Map(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V v;
    std::memcpy(&v, x + i, sizeof v);
    v = F(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  if (i == n) return;
  const size_t tail = static_cast<size_t>(n - i) * sizeof(float);
  float buf[kLanes] = {};
  std::memcpy(buf, x + i, tail);
  V v;
  std::memcpy(&v, buf, sizeof v);
  v = F(v);
  std::memcpy(buf, &v, sizeof v);
  std::memcpy(y + i, buf, tail);
}

}  // namespace

FOUNDRY_VMATH_CLONES void Exp(const float* x, float* y, int64_t n) { Map<ExpV>(x, y, n); }
FOUNDRY_VMATH_CLONES void Erf(const float* x, float* y, int64_t n) { Map<ErfV>(x, y, n); }
FOUNDRY_VMATH_CLONES void Tanh(const float* x, float* y, int64_t n) { Map<TanhV>(x, y, n); }

void Exp(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}
void Erf(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::erf(x[i]);
}
void Tanh(const double* x, double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace foundry::vmath
