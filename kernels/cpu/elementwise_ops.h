// The per-element math of the elementwise kernels, written once for the host and the device: the
// CPU kernels (kernels/cpu/elementwise.cc) and the CUDA kernels (kernels/cuda/elementwise.cu) call
// these functors, each what one thread computes for one element (for Dropout, one Philox block of
// four), and the host test (tests/kernels/cuda/elementwise_host_test.cc) runs them with g++.
//
// Bits: on the host these are the CPU kernels' operations. On the device the arithmetic
// (+ - * /, sqrt, fma, conversions) is IEEE-rounded as on the CPU, but nvcc contracts a * b + c
// into one fma by default (the CPU build has no FMA instructions), so every product that feeds an
// addition is spelled Mul / Add (kernels/cpu/rounded.h: __fmul_rn / __fadd_rn on the device). The
// transcendental functions (exp, erf, tanh, sin, log, pow, ...) are glibc's on the host and CUDA's
// libdevice on the device, within 1-2 ulp of each other but not bit-equal: their kernels match
// the CPU within a tolerance, not bitwise. The CPU-vs-GPU tests say which.
//
// Two backends, two formulas: the f32 ops built on exp, erf or tanh (Exp, Erf, Tanh, Sigmoid,
// Gelu, FastGelu, QuickGelu and their gradients) run on the CPU through vmath's array functions
// (kernels/cpu/vmath.h: eight lanes at a time, the same bits at any position, which fusions in
// canonicalize rely on), in blocks, so the CPU keeps its own block forms of those
// (kernels/cpu/elementwise.cc); the functors below are the device's, in the same operations and
// order with libdevice's functions.
//
// Plain C++ for g++: no CUDA header; device-only intrinsics sit behind __CUDA_ARCH__. Nothing here
// calls a constexpr host function (std::numeric_limits, std::max) that device code may not call.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/bfloat16.h"
#include "base/hd.h"
#include "kernels/cpu/philox.h"
#include "kernels/cpu/rounded.h"

namespace foundry::ew {

// Rounded arithmetic that the device compiler may not contract (a * b + c stays two roundings).
using rn::Add;
using rn::Mul;
using rn::Sub;

// libm by element type: the C names resolve to glibc on the host (what std::exp(float) calls) and
// to CUDA's device math library on the device.
#define FOUNDRY_EW_LIBM1(Name, f32, f64)                   \
  FOUNDRY_HD inline float Name(float x) { return f32(x); } \
  FOUNDRY_HD inline double Name(double x) { return f64(x); }
FOUNDRY_EW_LIBM1(Sqrt, sqrtf, sqrt)
FOUNDRY_EW_LIBM1(Exp, expf, exp)
FOUNDRY_EW_LIBM1(Log, logf, log)
FOUNDRY_EW_LIBM1(Log1p, log1pf, log1p)
FOUNDRY_EW_LIBM1(Erf, erff, erf)
FOUNDRY_EW_LIBM1(Tanh, tanhf, tanh)
FOUNDRY_EW_LIBM1(Sin, sinf, sin)
FOUNDRY_EW_LIBM1(Cos, cosf, cos)
FOUNDRY_EW_LIBM1(Floor, floorf, floor)
FOUNDRY_EW_LIBM1(Ceil, ceilf, ceil)
FOUNDRY_EW_LIBM1(NearbyInt, nearbyintf, nearbyint)
FOUNDRY_EW_LIBM1(Fabs, fabsf, fabs)
#undef FOUNDRY_EW_LIBM1
FOUNDRY_HD inline float Pow(float a, float b) { return powf(a, b); }
FOUNDRY_HD inline double Pow(double a, double b) { return pow(a, b); }
FOUNDRY_HD inline float Fmod(float a, float b) { return fmodf(a, b); }
FOUNDRY_HD inline double Fmod(double a, double b) { return fmod(a, b); }
// The largest finite value: x > MaxFinite(x) exactly when x is +inf.
FOUNDRY_HD inline float MaxFinite(float) { return FLT_MAX; }
FOUNDRY_HD inline double MaxFinite(double) { return DBL_MAX; }

// ---------------------------------------------------------------------------------------------
// Scalar operations. Integer arithmetic wraps (two's complement) instead of being undefined.

template <class T>
using Unsigned = std::make_unsigned_t<T>;

template <class T>
FOUNDRY_HD T WrapNeg(T a) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(Unsigned<T>(0) - Unsigned<T>(a));
  else
    return -a;
}

struct AddOp {
  template <class T>
  FOUNDRY_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(Unsigned<T>(a) + Unsigned<T>(b));
    else
      return a + b;
  }
};
struct SubOp {
  template <class T>
  FOUNDRY_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(Unsigned<T>(a) - Unsigned<T>(b));
    else
      return a - b;
  }
};
struct MulOp {
  template <class T>
  FOUNDRY_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(Unsigned<T>(a) * Unsigned<T>(b));
    else
      return a * b;
  }
};
// Integer division truncates toward zero, as C and ONNX Runtime do; a zero divisor gives 0 (the
// CPU kernel then fails the node; a device kernel cannot fail without a host round trip, so the
// CUDA launcher checks constant divisors on the host and documents the rest).
struct DivOp {
  template <class T>
  FOUNDRY_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return 0;
      return b == T(-1) ? WrapNeg(a) : a / b;
    } else {
      return a / b;
    }
  }
};
// fmod: the remainder takes the dividend's sign (C fmod); otherwise (integers only) the divisor's
// (Python %). A zero divisor gives 0 for integers, as DivOp.
struct ModOp {
  bool fmod = false;
  template <class T>
  FOUNDRY_HD T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0 || b == T(-1)) return 0;
      T r = a % b;
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    } else {
      return Fmod(a, b);
    }
  }
};
// NaN propagates (as numpy.maximum/minimum and torch.max/min); ties keep the first operand.
struct MaxOp {
  template <class T>
  FOUNDRY_HD T operator()(T a, T b) const {
    return (b > a || b != b) ? b : a;
  }
};
struct MinOp {
  template <class T>
  FOUNDRY_HD T operator()(T a, T b) const {
    return (b < a || b != b) ? b : a;
  }
};

struct EqualOp {
  template <class T>
  FOUNDRY_HD bool operator()(T a, T b) const {
    return a == b;
  }
};
struct LessOp {
  template <class T>
  FOUNDRY_HD bool operator()(T a, T b) const {
    return a < b;
  }
};
struct GreaterOp {
  template <class T>
  FOUNDRY_HD bool operator()(T a, T b) const {
    return a > b;
  }
};
struct LessOrEqualOp {
  template <class T>
  FOUNDRY_HD bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GreaterOrEqualOp {
  template <class T>
  FOUNDRY_HD bool operator()(T a, T b) const {
    return a >= b;
  }
};
static_assert(sizeof(bool) == 1, "bool tensors are stored one byte per element");
struct AndOp {
  FOUNDRY_HD bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp {
  FOUNDRY_HD bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp {
  FOUNDRY_HD bool operator()(bool a, bool b) const { return a != b; }
};

// Integer power by squaring (wrapping); negative exponents truncate 1/a^-e toward zero.
template <class T>
FOUNDRY_HD T IntPow(T a, int64_t e) {
  if (e < 0) return a == T(1) ? T(1) : a == T(-1) ? (e % 2 ? T(-1) : T(1)) : T(0);
  Unsigned<T> result = 1, base = static_cast<Unsigned<T>>(a);
  while (e > 0) {
    if (e & 1) result *= base;
    base *= base;
    e >>= 1;
  }
  return static_cast<T>(result);
}

// Float -> integer truncates toward zero (numpy astype); NaN becomes 0 and values beyond int64
// saturate, where numpy leaves the result unspecified; narrower integers then wrap. To bool:
// nonzero (NaN included) is true.
template <class S, class D>
FOUNDRY_HD D Convert(S s) {
  if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    if (s != s) return D(0);
    const double d = static_cast<double>(s);
    constexpr double kTwo63 = 9223372036854775808.0;
    const int64_t v = d <= -kTwo63 ? INT64_MIN : d >= kTwo63 ? INT64_MAX : static_cast<int64_t>(d);
    return static_cast<D>(v);
  } else {
    return static_cast<D>(s);
  }
}

// Pow with the exponent's own element type (ONNX Pow allows a different one).
struct PowOp {
  template <class B, class E>
  FOUNDRY_HD B operator()(B a, E e) const {
    if constexpr (std::is_floating_point_v<B>) {
      const B be = static_cast<B>(e);
      if (be == B(2)) return a * a;  // the x^2 of every norm: exact and cheap
      return Pow(a, be);
    } else if constexpr (std::is_integral_v<E>) {
      return IntPow(a, static_cast<int64_t>(e));
    } else {
      return Convert<double, B>(Pow(static_cast<double>(a), static_cast<double>(e)));
    }
  }
};

struct NegOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return WrapNeg(x);
  }
};
struct AbsOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x < 0 ? WrapNeg(x) : x;
    else
      return Fabs(x);
  }
};
// -0 gives +0, NaN itself.
struct SignOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : x == T(0) ? T(0) : x;
  }
};
struct ReluOp {  // NaN and -0 pass through
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};
struct SqrtOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Sqrt(x);
  }
};
struct ReciprocalOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return T(1) / x;
  }
};
struct ExpOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Exp(x);
  }
};
struct LogOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Log(x);
  }
};
struct ErfOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Erf(x);
  }
};
struct TanhOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Tanh(x);
  }
};
struct SigmoidOp {  // exp(-x) overflows to inf for x < -88 (f32), giving exactly 0: no NaN.
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return T(1) / (T(1) + Exp(-x));
  }
};
struct SinOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Sin(x);
  }
};
struct CosOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Cos(x);
  }
};
struct FloorOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Floor(x);
  }
};
struct CeilOp {
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return Ceil(x);
  }
};
struct RoundOp {  // half to even, as ONNX Round (nearbyint in the default rounding mode)
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return NearbyInt(x);
  }
};
struct SoftplusOp {  // log(1 + e^x) without overflow for large x
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    return x > T(0) ? x + Log1p(Exp(-x)) : Log1p(Exp(x));
  }
};
struct NotOp {
  FOUNDRY_HD bool operator()(bool x) const { return !x; }
};
struct IsNaNOp {
  template <class T>
  FOUNDRY_HD bool operator()(T x) const {
    return x != x;
  }
};
struct IsInfOp {
  bool positive = true, negative = true;
  template <class T>
  FOUNDRY_HD bool operator()(T x) const {
    return (positive && x > MaxFinite(x)) || (negative && x < -MaxFinite(x));
  }
};
template <class S, class D>
struct CastOp {
  FOUNDRY_HD D operator()(S s) const { return Convert<S, D>(s); }
};
// Casts from and to bfloat16 (uint16_t bit patterns) with base/bfloat16.h's own conversions:
// bfloat16 widens exactly to float, then converts as float does; f32 rounds once to nearest even;
// f64, integers and bool go through DoubleToBf16 (one rounding, never two).
template <class D>
struct FromBf16Op {
  FOUNDRY_HD D operator()(uint16_t h) const { return Convert<float, D>(Bf16ToFloat(h)); }
};
template <class S>
struct ToBf16Op {
  FOUNDRY_HD uint16_t operator()(S s) const {
    if constexpr (std::is_same_v<S, float>)
      return FloatToBf16(s);
    else
      return DoubleToBf16(static_cast<double>(s));
  }
};

// Clip: a missing bound does not clip; NaN passes through; min > max gives max (numpy.clip).
template <class T>
FOUNDRY_HD T ClipValue(T x, bool has_lo, T lo, bool has_hi, T hi) {
  if (has_lo && x < lo) x = lo;
  if (has_hi && x > hi) x = hi;
  return x;
}

// Exact-erf GELU in the two forms canonicalize fuses into Gelu (the CPU's GeluBlock):
//   half_last:  (x * (erf(x / sqrt2) + 1)) * 0.5
//   half_first: x * (0.5 * (erf(x / sqrt2) + 1))
// (no product feeds an addition, so nothing can contract).
struct GeluOp {
  bool half_first = false;
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    const T sqrt2 = static_cast<T>(1.4142135623730951);  // f32: 1.4142135381698608
    T t = x / sqrt2;
    t = Erf(t);
    t = t + T(1);
    if (half_first) return x * (T(0.5) * t);
    t = x * t;
    return t * T(0.5);
  }
};

// Tanh GELU in the two forms canonicalize fuses into FastGelu (the CPU's FastGeluBlock):
//   gelu_new:   (x * 0.5) * (tanh(k * (x + c * pow(x, 3))) + 1)
//   torch_tanh: (x * (tanh(k * (x + c * (x * (x * x)))) + 1)) * 0.5
struct FastGeluOp {
  bool gelu_new = false;
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    const T k = static_cast<T>(0.7978845608028654);  // f32: 0.7978845834732056
    const T c = static_cast<T>(0.044715);
    const T cube = gelu_new ? Pow(x, T(3)) : x * (x * x);
    T v = Add(x, Mul(c, cube));
    v = k * v;
    const T a = Tanh(v) + T(1);
    if (gelu_new) return (x * T(0.5)) * a;
    return (x * a) * T(0.5);
  }
};

// QuickGelu x·sigmoid(alpha·x): SigmoidOp then the product, as the CPU's QuickGeluBlock (the
// steps of the SiLU, Mul(x, Sigmoid(x)), that canonicalize fuses with alpha = 1).
struct QuickGeluOp {
  float alpha = 1.702f;
  template <class T>
  FOUNDRY_HD T operator()(T x) const {
    const T s = SigmoidOp{}(Mul(static_cast<T>(alpha), x));
    return Mul(x, s);
  }
};

// Activation gradients (dY, other) -> dX. GeluGrad, FastGeluGrad and QuickGeluGrad are the CPU
// kernels' formulas in their association order (the CPU computes them in blocks, on vmath).

// dX = dY * (Phi(x) + x * phi(x)).
struct GeluGradOp {
  template <class T>
  FOUNDRY_HD T operator()(T dy, T x) const {
    const T kInvSqrt2 = T(0.70710678118654752440);
    const T kInvSqrt2Pi = T(0.39894228040143267794);
    const T cdf = T(0.5) * (T(1) + Erf(x * kInvSqrt2));
    const T pdf = kInvSqrt2Pi * Exp(T(-0.5) * x * x);
    return dy * Add(cdf, Mul(x, pdf));
  }
};

// 0.5·(1 + t) + 0.5·x·(1 − t²)·k·(1 + 3c·x²), t = tanh(k·(x + c·x³)).
struct FastGeluGradOp {
  template <class T>
  FOUNDRY_HD T operator()(T dy, T x) const {
    const T k = static_cast<T>(0.7978845608028654);
    const T c = static_cast<T>(0.044715);
    const T x2 = x * x;
    const T t = Tanh(Mul(k, Add(x, Mul(Mul(c, x2), x))));
    const T du = Mul(k, Add(T(1), Mul(Mul(T(3), c), x2)));
    const T left = Mul(T(0.5), T(1) + t);
    const T right = Mul(Mul(Mul(T(0.5), x), Sub(T(1), Mul(t, t))), du);
    return Mul(dy, Add(left, right));
  }
};

// dY·s·(1 + v·(1 − s)), v = alpha·x, s = sigmoid(v).
struct QuickGeluGradOp {
  float alpha = 1.702f;
  template <class T>
  FOUNDRY_HD T operator()(T dy, T x) const {
    const T v = Mul(static_cast<T>(alpha), x);
    const T s = SigmoidOp{}(v);
    return Mul(Mul(dy, s), Add(T(1), Mul(v, Sub(T(1), s))));
  }
};
struct ReluGradOp {  // dY where y > 0 (y = Relu's output, > 0 exactly where its input is)
  template <class T>
  FOUNDRY_HD T operator()(T dy, T y) const {
    return y > T(0) ? dy : T(0);
  }
};
struct SigmoidGradOp {  // dY * y * (1 - y)
  template <class T>
  FOUNDRY_HD T operator()(T dy, T y) const {
    return Mul(Mul(dy, y), Sub(T(1), y));
  }
};
struct TanhGradOp {  // dY * (1 - y²)
  template <class T>
  FOUNDRY_HD T operator()(T dy, T y) const {
    return Mul(dy, Sub(T(1), Mul(y, y)));
  }
};

// ---------------------------------------------------------------------------------------------
// Dropout: element e is kept iff uniform(Philox(seed, node_key, e)) >= ratio; kept values are
// scaled by `scale` = 1 / (1 - ratio) (computed once by the caller in T, as the CPU does).

FOUNDRY_HD inline bool DropoutKeep(uint32_t bits, float ratio) {
  return PhiloxBitsToUniform(bits) >= ratio;
}

// Elements 4·block .. min(4·block + 4, n) - 1: one Philox block feeds four elements, so one
// thread per block draws each random number once. `y` may be `x` (read before written).
template <class T>
FOUNDRY_HD void DropoutQuad(uint64_t seed, uint64_t node_key, int64_t block, int64_t n, float ratio,
                            T scale, const T* x, T* y, bool* mask) {
  const Philox4 bits = PhiloxBlock(seed, node_key, static_cast<uint64_t>(block));
  for (int lane = 0; lane < 4; ++lane) {
    const int64_t e = block * 4 + lane;
    if (e >= n) break;
    const bool keep = DropoutKeep(bits.v[lane], ratio);
    y[e] = keep ? x[e] * scale : T(0);
    if (mask) mask[e] = keep;
  }
}

// DropoutGrad: dX = mask ? dY * scale : 0.
template <class T>
FOUNDRY_HD T DropoutGradValue(T dy, bool keep, T scale) {
  return keep ? dy * scale : T(0);
}

// ---------------------------------------------------------------------------------------------
// Broadcast index arithmetic (host side: the CPU kernels' loops, and the CUDA launchers before a
// launch).

// The element stride of an operand of shape `in` along each dimension of the output shape `out`
// (numpy broadcasting, shapes aligned at their last dimension): 0 where it broadcasts.
inline std::vector<int64_t> ElementStrides(const std::vector<int64_t>& out,
                                           const std::vector<int64_t>& in) {
  const int64_t rank = static_cast<int64_t>(out.size());
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (int64_t d = rank - 1, j = static_cast<int64_t>(in.size()) - 1; d >= 0 && j >= 0; --d, --j) {
    if (in[j] != 1) strides[d] = stride;
    stride *= in[j];
  }
  return strides;
}

// Drops the output's size-1 dimensions and merges neighbouring dimensions along which every
// operand is contiguous or broadcast, so a bias add [N, C] + [C] is a rank-2 problem, a same-shape
// operand a rank-1 one and a scalar a run of stride 0; the CPU walks the collapsed dimensions in
// runs, the device's per-element offset loop (BroadcastOffset) gets short. Element order is
// unchanged: flat index i of the output is flat index i of the collapsed one. A one-element output
// collapses to rank 0.
struct CollapsedBroadcast {
  std::vector<int64_t> out;                   // collapsed output dimensions, outermost first
  std::vector<std::vector<int64_t>> in;       // per operand, its collapsed shape (same rank; 1
                                              // where it broadcasts)
  std::vector<std::vector<int64_t>> strides;  // per operand, its element stride per collapsed
                                              // dimension (0 where it broadcasts)
};

inline CollapsedBroadcast CollapseBroadcast(const std::vector<int64_t>& out,
                                            const std::vector<const std::vector<int64_t>*>& in) {
  const size_t n_in = in.size();
  const int64_t rank = static_cast<int64_t>(out.size());
  std::vector<std::vector<int64_t>> full(n_in);
  for (size_t k = 0; k < n_in; ++k) full[k] = ElementStrides(out, *in[k]);
  CollapsedBroadcast c;
  c.in.resize(n_in);
  c.strides.resize(n_in);
  for (int64_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool merge = !c.out.empty();
    for (size_t k = 0; k < n_in && merge; ++k) merge = c.strides[k].back() == full[k][d] * out[d];
    if (merge) {
      c.out.back() *= out[d];
      for (size_t k = 0; k < n_in; ++k) {
        c.strides[k].back() = full[k][d];
        if (full[k][d] != 0) c.in[k].back() *= out[d];
      }
      continue;
    }
    c.out.push_back(out[d]);
    for (size_t k = 0; k < n_in; ++k) {
      c.strides[k].push_back(full[k][d]);
      c.in[k].push_back(full[k][d] != 0 ? out[d] : 1);
    }
  }
  return c;
}

}  // namespace foundry::ew
