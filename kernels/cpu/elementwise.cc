// CPU reference kernels of the elementwise family (schemas in compiler/ops/elementwise.cc).
//
// Broadcasting is implemented once: PlanBroadcast drops size-1 output dimensions and merges
// neighbours along which every operand is either contiguous or broadcast, so a same-shape op
// becomes one contiguous run, a bias add [N, C] + [C] becomes N runs of C, and a scalar operand is
// a run with stride 0. Each run's inner loop is specialized for strides 0 and 1, which keeps the
// hot cases as plain vectorizable loops.
//
// Every kernel writes its output with `=`; variadic ops (Sum, Min, Max, Mean) combine their
// inputs left to right into the output, so results do not depend on anything but input order.
// Dropout draws from Philox (kernels/cpu/philox.h) keyed by (ctx.seed, ctx.node_key, element),
// so a recompute of the node reproduces its mask exactly.
//
// Float exp, erf and tanh come from vmath (kernels/cpu/vmath.h), never from libm, in every kernel
// that computes them: a fused activation and its decomposition (canonicalize) must keep agreeing
// bit for bit, and vmath gives an element the same bits at any position in any array. Kernels
// that need them work on blocks of kElementBlock elements through a stack buffer. Double stays on libm.
//
// Threads (kernels/cpu/parallel.h): every kernel cuts its output into index ranges fixed by the
// shape (kElementGrain elements, or whole rows) and each range writes only its own elements, so
// the bits do not depend on the thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/bfloat16.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/philox.h"
#include "kernels/cpu/vmath.h"

namespace foundry {
namespace {

static_assert(sizeof(bool) == 1, "bool tensors are stored one byte per element");

using Inputs = std::span<const Tensor* const>;
using Outputs = std::span<Tensor* const>;

// ---------------------------------------------------------------------------------------------
// Broadcasting

template <int N>
struct BroadcastPlan {
  std::vector<int64_t> dims;                    // collapsed output dimensions, outermost first
  std::array<std::vector<int64_t>, N> strides;  // per operand, element stride per dimension
};

template <int N>
BroadcastPlan<N> PlanBroadcast(const Shape& out, const std::array<const Shape*, N>& in) {
  const int64_t rank = static_cast<int64_t>(out.size());
  std::array<std::vector<int64_t>, N> full;
  for (int k = 0; k < N; ++k) {
    const Shape& s = *in[k];
    full[k].assign(rank, 0);
    int64_t stride = 1;
    for (int64_t d = rank - 1, j = static_cast<int64_t>(s.size()) - 1; d >= 0 && j >= 0; --d, --j) {
      if (s[j] != 1) full[k][d] = stride;
      stride *= s[j];
    }
  }
  BroadcastPlan<N> plan;
  for (int64_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool merge = !plan.dims.empty();
    for (int k = 0; k < N && merge; ++k) merge = plan.strides[k].back() == full[k][d] * out[d];
    if (merge) {
      plan.dims.back() *= out[d];
      for (int k = 0; k < N; ++k) plan.strides[k].back() = full[k][d];
      continue;
    }
    plan.dims.push_back(out[d]);
    for (int k = 0; k < N; ++k) plan.strides[k].push_back(full[k][d]);
  }
  if (plan.dims.empty()) {  // one element
    plan.dims.push_back(1);
    for (int k = 0; k < N; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

// Calls fn(out_offset, operand_offsets, operand_inner_strides, count) for each piece of a run of
// the innermost collapsed dimension: the output is cut into chunks of kElementGrain elements that
// run on the kernels' threads, a run crossing a chunk boundary in two pieces.
template <int N, class Fn>
void ForEachRun(const Shape& out_shape, const std::array<const Shape*, N>& in, Fn&& fn) {
  const int64_t numel = NumElements(out_shape);
  if (numel == 0) return;
  const BroadcastPlan<N> plan = PlanBroadcast<N>(out_shape, in);
  const int64_t rank = static_cast<int64_t>(plan.dims.size());
  const int64_t inner = plan.dims.back();
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = plan.strides[k].back();
  ParallelFor(numel, kElementGrain, [&](int64_t begin, int64_t end) {
    // The operand offsets of run begin / inner, from its index in the outer dimensions.
    std::vector<int64_t> index(rank, 0);
    std::array<int64_t, N> offset{};
    for (int64_t d = rank - 2, q = begin / inner; d >= 0; --d) {
      index[d] = q % plan.dims[d];
      q /= plan.dims[d];
      for (int k = 0; k < N; ++k) offset[k] += index[d] * plan.strides[k][d];
    }
    int64_t p = begin % inner;
    for (int64_t o = begin; o < end;) {
      const int64_t count = std::min(inner - p, end - o);
      std::array<int64_t, N> at;
      for (int k = 0; k < N; ++k) at[k] = offset[k] + p * inner_stride[k];
      fn(o, at, inner_stride, count);
      o += count;
      p = 0;
      for (int64_t d = rank - 2; d >= 0; --d) {
        for (int k = 0; k < N; ++k) offset[k] += plan.strides[k][d];
        if (++index[d] < plan.dims[d]) break;
        for (int k = 0; k < N; ++k) offset[k] -= plan.strides[k][d] * plan.dims[d];
        index[d] = 0;
      }
    }
  });
}

// out = op(a, b) with numpy broadcasting. `out` may alias `a` when a has out's shape.
template <class A, class B, class R, class Op>
void BinaryBroadcast(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  R* po = out.data<R>();
  ForEachRun<2>(out.shape(), {&a.shape(), &b.shape()},
                [&](int64_t o, std::array<int64_t, 2> off, std::array<int64_t, 2> st, int64_t n) {
                  const A* x = pa + off[0];
                  const B* y = pb + off[1];
                  R* z = po + o;
                  if (st[0] == 1 && st[1] == 1) {
                    for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], y[i]);
                  } else if (st[0] == 0 && st[1] == 1) {
                    const A xv = x[0];
                    for (int64_t i = 0; i < n; ++i) z[i] = op(xv, y[i]);
                  } else if (st[0] == 1 && st[1] == 0) {
                    const B yv = y[0];
                    for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], yv);
                  } else {
                    for (int64_t i = 0; i < n; ++i) z[i] = op(x[i * st[0]], y[i * st[1]]);
                  }
                });
}

// out = in, bytes for bytes; nothing to do when out already is in (a view, in place).
void CopyUnlessSame(const Tensor& in, Tensor& out) {
  if (in.nbytes() && out.raw() != in.raw()) std::memcpy(out.raw(), in.raw(), in.nbytes());
}

template <class T, class R, class Op>
void UnaryMap(const Tensor& in, Tensor& out, Op op) {
  const T* x = in.data<T>();
  R* y = out.data<R>();
  ParallelFor(out.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = op(x[i]);
  });
}

// Elements per call of a block function: its temporaries live on the stack.
constexpr int64_t kElementBlock = 256;

// block(x, y, count) on pieces of at most kElementBlock elements; y may be x.
template <class T, class Block>
void BlockMap(const T* x, T* y, int64_t n, Block block) {
  ParallelFor(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += kElementBlock) block(x + i, y + i, std::min(kElementBlock, end - i));
  });
}

// 1 / (1 + exp(-x)): exp(-x) overflows to inf for x < -88 (f32), giving exactly 0, no NaN.
template <class T>
void SigmoidArray(const T* x, T* y, int64_t n) {
  T t[kElementBlock] = {};
  for (int64_t i = 0; i < n; ++i) t[i] = -x[i];
  vmath::Exp(t, t, n);
  for (int64_t i = 0; i < n; ++i) y[i] = T(1) / (T(1) + t[i]);
}

// ---------------------------------------------------------------------------------------------
// Element type dispatch: fn(Tag<T>{}) for the tensor's C++ element type.

template <class T>
struct Tag {
  using type = T;
};

Status Unsupported(const Node& node, DType t) {
  return Error(node.Describe() + ": the cpu kernel does not support element type " +
               std::string(DTypeName(t)));
}

template <class Fn>
Status VisitFloat(const Node& node, DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32:
      return fn(Tag<float>{});
    case DType::kFloat64:
      return fn(Tag<double>{});
    default:
      return Unsupported(node, t);
  }
}

template <class Fn>
Status VisitNumeric(const Node& node, DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32:
      return fn(Tag<float>{});
    case DType::kFloat64:
      return fn(Tag<double>{});
    case DType::kInt32:
      return fn(Tag<int32_t>{});
    case DType::kInt64:
      return fn(Tag<int64_t>{});
    default:
      return Unsupported(node, t);
  }
}

template <class Fn>
Status VisitCastable(const Node& node, DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32:
      return fn(Tag<float>{});
    case DType::kFloat64:
      return fn(Tag<double>{});
    case DType::kInt32:
      return fn(Tag<int32_t>{});
    case DType::kInt64:
      return fn(Tag<int64_t>{});
    case DType::kBool:
      return fn(Tag<bool>{});
    case DType::kUint8:
      return fn(Tag<uint8_t>{});
    case DType::kInt8:
      return fn(Tag<int8_t>{});
    default:
      return Unsupported(node, t);
  }
}

// Ops that only move elements dispatch on the element size.
template <class Fn>
Status VisitBySize(const Node& node, DType t, Fn&& fn) {
  switch (DTypeSize(t)) {
    case 1:
      return fn(Tag<uint8_t>{});
    case 2:
      return fn(Tag<uint16_t>{});
    case 4:
      return fn(Tag<uint32_t>{});
    case 8:
      return fn(Tag<uint64_t>{});
    default:
      return Unsupported(node, t);
  }
}

// ---------------------------------------------------------------------------------------------
// Scalar operations. Integer arithmetic wraps (two's complement) instead of being undefined.

template <class T>
using Unsigned = std::make_unsigned_t<T>;

struct AddOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(Unsigned<T>(a) + Unsigned<T>(b));
    else
      return a + b;
  }
};
struct SubOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(Unsigned<T>(a) - Unsigned<T>(b));
    else
      return a - b;
  }
};
struct MulOp {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(Unsigned<T>(a) * Unsigned<T>(b));
    else
      return a * b;
  }
};
template <class T>
T WrapNeg(T a) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(Unsigned<T>(0) - Unsigned<T>(a));
  else
    return -a;
}
// NaN propagates (as numpy.maximum/minimum and torch.max/min); ties keep the first operand.
struct MaxOp {
  template <class T>
  T operator()(T a, T b) const {
    return (b > a || b != b) ? b : a;
  }
};
struct MinOp {
  template <class T>
  T operator()(T a, T b) const {
    return (b < a || b != b) ? b : a;
  }
};

struct EqualOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a == b;
  }
};
struct LessOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a < b;
  }
};
struct GreaterOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a > b;
  }
};
struct LessOrEqualOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GreaterOrEqualOp {
  template <class T>
  bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct AndOp {
  bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp {
  bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp {
  bool operator()(bool a, bool b) const { return a != b; }
};

struct NegOp {
  template <class T>
  T operator()(T x) const {
    return WrapNeg(x);
  }
};
struct AbsOp {
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x < 0 ? WrapNeg(x) : x;
    else
      return std::fabs(x);
  }
};
struct SignOp {
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : x == T(0) ? T(0) : x;
  }
};
struct ReluOp {  // NaN propagates
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};
struct SqrtOp {
  template <class T>
  T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct ReciprocalOp {
  template <class T>
  T operator()(T x) const {
    return T(1) / x;
  }
};
// Ops with a Block member run through BlockMap (FloatUnaryKernel): the transcendental ones.
struct ExpOp {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    vmath::Exp(x, y, n);
  }
};
struct LogOp {
  template <class T>
  T operator()(T x) const {
    return std::log(x);
  }
};
struct ErfOp {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    vmath::Erf(x, y, n);
  }
};
struct TanhOp {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    vmath::Tanh(x, y, n);
  }
};
struct SigmoidOp {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    SigmoidArray(x, y, n);
  }
};
struct SinOp {
  template <class T>
  T operator()(T x) const {
    return std::sin(x);
  }
};
struct CosOp {
  template <class T>
  T operator()(T x) const {
    return std::cos(x);
  }
};
struct FloorOp {
  template <class T>
  T operator()(T x) const {
    return std::floor(x);
  }
};
struct CeilOp {
  template <class T>
  T operator()(T x) const {
    return std::ceil(x);
  }
};
struct RoundOp {  // half to even, as ONNX Round (the default rounding mode)
  template <class T>
  T operator()(T x) const {
    return std::nearbyint(x);
  }
};
struct SoftplusOp {  // log(1 + e^x) without overflow for large x
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
};

// Exact-erf GELU in the very operations, and order, of torch's ONNX export
//   Mul(Mul(x, Add(Erf(Div(x, 1.4142135381698608)), 1.0)), 0.5)
// so that fusing that pattern into Gelu changes no bits (docs/design.md §4). No step is a multiply
// followed by an add, so FMA contraction cannot reassociate it either.
struct GeluOp {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    const T sqrt2 = static_cast<T>(1.4142135623730951);  // f32: 1.4142135381698608
    T t[kElementBlock] = {};
    for (int64_t i = 0; i < n; ++i) t[i] = x[i] / sqrt2;
    vmath::Erf(t, t, n);
    for (int64_t i = 0; i < n; ++i) {
      T v = t[i] + T(1);
      v = x[i] * v;
      y[i] = v * T(0.5);
    }
  }
};

// Tanh GELU, 0.5·x·(1 + tanh(k·(x + c·x³))) with k = sqrt(2/pi) and c = 0.044715, in the very
// operations and order of the two decompositions canonicalize fuses into com.microsoft FastGelu,
// so that fusing changes no bits:
//   form "gelu_new"      Hugging Face's NewGELUActivation (GPT-2):
//                        Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), c)), k)), 1))
//   form "torch_tanh"    torch.onnx's F.gelu(approximate='tanh') (the default when absent):
//                        Mul(0.5, Mul(x, Add(1, Tanh(Mul(k, Add(x, Mul(c, Mul(x, Mul(x, x)))))))))
// The forms differ in the cube (powf vs two products) and in where the 0.5 is applied; operand
// order inside one Add or Mul is immaterial (IEEE addition and multiplication commute exactly).
// As for Gelu, no multiply is followed by an add on the same temporary without a rounding step
// that the unfused graph also has, and FMA contraction is off for this target.
enum class FastGeluForm { kTorchTanh, kGeluNew };

template <class T>
void FastGeluBlock(const T* x, T* y, int64_t n, FastGeluForm form) {
  const T k = static_cast<T>(0.7978845608028654);  // f32: 0.7978845834732056
  const T c = static_cast<T>(0.044715);
  T t[kElementBlock] = {};
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    // The Pow kernel's std::pow for gelu_new: x·x·x may differ from it in the last bit.
    const T cube =
        form == FastGeluForm::kGeluNew ? static_cast<T>(std::pow(xi, T(3))) : xi * (xi * xi);
    T v = c * cube;
    v = xi + v;
    t[i] = k * v;
  }
  vmath::Tanh(t, t, n);
  for (int64_t i = 0; i < n; ++i) {
    const T a = t[i] + T(1);
    y[i] = form == FastGeluForm::kGeluNew ? (x[i] * T(0.5)) * a : (x[i] * a) * T(0.5);
  }
}

// com.microsoft QuickGelu, x·sigmoid(alpha·x), in the very operations of SigmoidOp and then MulOp,
// so that canonicalize's fusion of SiLU, Mul(x, Sigmoid(x)) into QuickGelu {alpha = 1}, changes
// no bits: 1·x is x exactly, and the product's operand order is immaterial (IEEE multiplication
// commutes exactly).
template <class T>
void QuickGeluBlock(const T* x, T* y, int64_t n, T alpha) {
  T s[kElementBlock] = {};
  for (int64_t i = 0; i < n; ++i) s[i] = alpha * x[i];
  SigmoidArray(s, s, n);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s[i];
}

// Float -> integer truncates toward zero (numpy astype); NaN becomes 0 and values beyond int64
// saturate, where numpy leaves the result unspecified. Narrower integers then wrap.
template <class S, class D>
D Convert(S s) {
  if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    if (s != s) return D(0);
    const double d = static_cast<double>(s);
    constexpr double kTwo63 = 9223372036854775808.0;
    int64_t v = d <= -kTwo63  ? std::numeric_limits<int64_t>::min()
                : d >= kTwo63 ? std::numeric_limits<int64_t>::max()
                              : static_cast<int64_t>(d);
    return static_cast<D>(v);
  } else {
    return static_cast<D>(s);
  }
}

// Integer power by squaring (wrapping); negative exponents truncate 1/a^-e toward zero.
template <class T>
T IntPow(T a, int64_t e) {
  if (e < 0) return a == T(1) ? T(1) : a == T(-1) ? (e % 2 ? T(-1) : T(1)) : T(0);
  Unsigned<T> result = 1, base = static_cast<Unsigned<T>>(a);
  while (e > 0) {
    if (e & 1) result *= base;
    base *= base;
    e >>= 1;
  }
  return static_cast<T>(result);
}

template <class B, class E>
B PowScalar(B a, E e) {
  if constexpr (std::is_floating_point_v<B>) {
    const B be = static_cast<B>(e);
    if (be == B(2)) return a * a;  // the x^2 of every norm: exact and cheap
    return std::pow(a, be);
  } else if constexpr (std::is_integral_v<E>) {
    return IntPow(a, static_cast<int64_t>(e));
  } else {
    return Convert<double, B>(std::pow(static_cast<double>(a), static_cast<double>(e)));
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels

template <class Op>
Status NumericBinaryKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitNumeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], Op{});
    return Status::Ok();
  });
}

Status DivKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitNumeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], [](T a, T b) { return a / b; });
    } else {
      bool by_zero = false;
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], [&](T a, T b) -> T {
        if (b == 0) {
          by_zero = true;
          return 0;
        }
        return b == T(-1) ? WrapNeg(a) : a / b;  // truncates toward zero, as C and ORT do
      });
      if (by_zero) return Error(node.Describe() + ": integer division by zero");
    }
    return Status::Ok();
  });
}

// fmod=0 (integers only): the remainder takes the divisor's sign (Python %);
// fmod=1: the dividend's sign (C fmod).
Status ModKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const bool fmod = node.GetInt("fmod", 0) == 1;
  return VisitNumeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      if (!fmod) return Error(node.Describe() + ": floating-point Mod needs attribute fmod=1");
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], [](T a, T b) { return std::fmod(a, b); });
    } else {
      bool by_zero = false;
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], [&](T a, T b) -> T {
        if (b == 0) {
          by_zero = true;
          return 0;
        }
        if (b == T(-1)) return 0;
        T r = a % b;
        if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
        return r;
      });
      if (by_zero) return Error(node.Describe() + ": integer modulo by zero");
    }
    return Status::Ok();
  });
}

Status PowKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitNumeric(node, in[0]->dtype(), [&](auto base_tag) {
    using B = typename decltype(base_tag)::type;
    return VisitNumeric(node, in[1]->dtype(), [&](auto exp_tag) {
      using E = typename decltype(exp_tag)::type;
      BinaryBroadcast<B, E, B>(*in[0], *in[1], *out[0], [](B a, E e) { return PowScalar(a, e); });
      return Status::Ok();
    });
  });
}

// Sum, Min, Max: per element, acc = in0, then acc = op(acc, in_k) for k = 1.. in order, then
// out = acc. Each output element is written after every input has been read at it, so the output
// may take the buffer of any input of its own shape (Sum runs in place on any of them).
template <class T, class Op>
void VariadicCombine(Inputs in, Tensor& out, Op op) {
  const Shape& os = out.shape();
  const int64_t numel = out.numel();
  const size_t n_in = in.size();
  T* y = out.data<T>();
  if (numel == 0) return;
  if (std::all_of(in.begin(), in.end(), [&](const Tensor* t) { return t->shape() == os; })) {
    // One pass: blocks of a stack buffer keep the per-input loops plain and vectorizable.
    ParallelFor(numel, kElementGrain, [&](int64_t begin, int64_t end) {
      T acc[kElementBlock];
      for (int64_t b = begin; b < end; b += kElementBlock) {
        const int64_t n = std::min(kElementBlock, end - b);
        const T* x0 = in[0]->data<T>() + b;
        if (n_in == 1) {
          for (int64_t i = 0; i < n; ++i) acc[i] = x0[i];
        } else {
          const T* x1 = in[1]->data<T>() + b;
          for (int64_t i = 0; i < n; ++i) acc[i] = op(x0[i], x1[i]);
        }
        for (size_t k = 2; k < n_in; ++k) {
          const T* xk = in[k]->data<T>() + b;
          for (int64_t i = 0; i < n; ++i) acc[i] = op(acc[i], xk[i]);
        }
        std::memcpy(y + b, acc, n * sizeof(T));
      }
    });
    return;
  }
  // Broadcasting: per input, its element stride along each output axis (0 where it broadcasts);
  // rank-sized tables, walked one innermost row at a time.
  const int64_t rank = static_cast<int64_t>(os.size());
  std::vector<std::vector<int64_t>> stride(n_in, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n_in; ++k) {
    const Shape& s = in[k]->shape();
    int64_t st = 1;
    for (int64_t d = rank - 1, j = static_cast<int64_t>(s.size()) - 1; d >= 0 && j >= 0; --d, --j) {
      if (s[j] != 1) stride[k][d] = st;
      st *= s[j];
    }
  }
  // rank >= 1 here: with rank 0 every input is a scalar of the output's shape. Chunks of whole
  // innermost rows; each starts from its first row's index.
  const int64_t inner = os[rank - 1];
  ParallelFor(numel / inner, RowGrain(inner), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(rank, 0), offset(n_in, 0);
    for (int64_t d = rank - 2, q = begin; d >= 0; --d) {
      index[d] = q % os[d];
      q /= os[d];
      for (size_t k = 0; k < n_in; ++k) offset[k] += index[d] * stride[k][d];
    }
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row * inner;
      for (int64_t i = 0; i < inner; ++i) {
        T acc = in[0]->data<T>()[offset[0] + i * stride[0][rank - 1]];
        for (size_t k = 1; k < n_in; ++k)
          acc = op(acc, in[k]->data<T>()[offset[k] + i * stride[k][rank - 1]]);
        y[o + i] = acc;
      }
      for (int64_t d = rank - 2; d >= 0; --d) {
        for (size_t k = 0; k < n_in; ++k) offset[k] += stride[k][d];
        if (++index[d] < os[d]) break;
        for (size_t k = 0; k < n_in; ++k) offset[k] -= stride[k][d] * os[d];
        index[d] = 0;
      }
    }
  });
}

template <class Op>
Status VariadicKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitNumeric(node, out[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    VariadicCombine<T>(in, *out[0], Op{});
    return Status::Ok();
  });
}

Status MeanKernel(const Node& node, Inputs in, Outputs out, const KernelContext& ctx) {
  RETURN_IF_ERROR(VariadicKernel<AddOp>(node, in, out, ctx));
  return VisitFloat(node, out[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T n = static_cast<T>(in.size());
    UnaryMap<T, T>(*out[0], *out[0], [n](T x) { return x / n; });
    return Status::Ok();
  });
}

template <class Op>
Status CompareKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    BinaryBroadcast<T, T, bool>(*in[0], *in[1], *out[0], Op{});
    return Status::Ok();
  };
  if (in[0]->dtype() == DType::kBool) return run(Tag<bool>{});
  return VisitNumeric(node, in[0]->dtype(), run);
}

template <class Op>
Status LogicalKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  if (in[0]->dtype() != DType::kBool) return Unsupported(node, in[0]->dtype());
  BinaryBroadcast<bool, bool, bool>(*in[0], *in[1], *out[0], Op{});
  return Status::Ok();
}

template <class Op>
Status FloatUnaryKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (requires(const T* x, T* y) { Op::Block(x, y, int64_t{1}); }) {
      BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
               [](const T* x, T* y, int64_t n) { Op::Block(x, y, n); });
    } else {
      UnaryMap<T, T>(*in[0], *out[0], Op{});
    }
    return Status::Ok();
  });
}

template <class Op>
Status NumericUnaryKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitNumeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    UnaryMap<T, T>(*in[0], *out[0], Op{});
    return Status::Ok();
  });
}

Status NotKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  if (in[0]->dtype() != DType::kBool) return Unsupported(node, in[0]->dtype());
  UnaryMap<bool, bool>(*in[0], *out[0], [](bool x) { return !x; });
  return Status::Ok();
}

Status IsNaNKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    UnaryMap<T, bool>(*in[0], *out[0], [](T x) { return x != x; });
    return Status::Ok();
  });
}

Status IsInfKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const bool negative = node.GetInt("detect_negative", 1) != 0;
  const bool positive = node.GetInt("detect_positive", 1) != 0;
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr T kInf = std::numeric_limits<T>::infinity();
    UnaryMap<T, bool>(*in[0], *out[0],
                      [&](T x) { return (positive && x == kInf) || (negative && x == -kInf); });
    return Status::Ok();
  });
}

// Identity is a view: when the planner gave the output the input's buffer, nothing moves.
Status IdentityKernel(const Node&, Inputs in, Outputs out, const KernelContext&) {
  CopyUnlessSame(*in[0], *out[0]);
  return Status::Ok();
}

Status WhereKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitBySize(node, in[1]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* c = in[0]->data<bool>();
    const T* x = in[1]->data<T>();
    const T* y = in[2]->data<T>();
    T* z = out[0]->data<T>();
    ForEachRun<3>(out[0]->shape(), {&in[0]->shape(), &in[1]->shape(), &in[2]->shape()},
                  [&](int64_t o, std::array<int64_t, 3> off, std::array<int64_t, 3> st, int64_t n) {
                    const bool* cc = c + off[0];
                    const T* xx = x + off[1];
                    const T* yy = y + off[2];
                    T* zz = z + o;
                    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
                      for (int64_t i = 0; i < n; ++i) zz[i] = cc[i] ? xx[i] : yy[i];
                    } else {
                      for (int64_t i = 0; i < n; ++i)
                        zz[i] = cc[i * st[0]] ? xx[i * st[1]] : yy[i * st[2]];
                    }
                  });
    return Status::Ok();
  });
}

// Cast and CastLike: the target type is the output's (shape inference read `to` / the
// target_type input).
// bfloat16 (stored as uint16_t bit patterns, base/bfloat16.h) widens exactly to float and then
// converts as float does; a cast to bfloat16 rounds once to nearest even (doubles and integers
// through DoubleToBf16, so a double is not rounded twice).
Status CastKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const DType src = in[0]->dtype(), dst = out[0]->dtype();
  if (src == DType::kBFloat16 && dst == DType::kBFloat16) {
    CopyUnlessSame(*in[0], *out[0]);
    return Status::Ok();
  }
  if (src == DType::kBFloat16)
    return VisitCastable(node, dst, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      UnaryMap<uint16_t, D>(*in[0], *out[0],
                            [](uint16_t h) { return Convert<float, D>(Bf16ToFloat(h)); });
      return Status::Ok();
    });
  if (dst == DType::kBFloat16)
    return VisitCastable(node, src, [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      if constexpr (std::is_same_v<S, float>)
        UnaryMap<float, uint16_t>(*in[0], *out[0], [](float f) { return FloatToBf16(f); });
      else
        UnaryMap<S, uint16_t>(*in[0], *out[0],
                              [](S s) { return DoubleToBf16(static_cast<double>(s)); });
      return Status::Ok();
    });
  return VisitCastable(node, in[0]->dtype(), [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    return VisitCastable(node, out[0]->dtype(), [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      UnaryMap<S, D>(*in[0], *out[0], [](S s) { return Convert<S, D>(s); });
      return Status::Ok();
    });
  });
}

// Bounds come from inputs 1 and 2 (opset >= 11) or from float attributes min/max (opset 6).
// A missing bound does not clip. NaN passes through; min > max gives max (as numpy.clip).
Status ClipKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return VisitNumeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto bound = [&](size_t i, const char* attr, T* value) {
      if (i < in.size() && in[i]) {
        *value = in[i]->data<T>()[0];
        return true;
      }
      if (node.HasAttr(attr)) {
        *value = Convert<float, T>(node.GetFloat(attr, 0));
        return true;
      }
      return false;
    };
    T lo{}, hi{};
    const bool has_lo = bound(1, "min", &lo);
    const bool has_hi = bound(2, "max", &hi);
    UnaryMap<T, T>(*in[0], *out[0], [=](T x) {
      if (has_lo && x < lo) x = lo;
      if (has_hi && x > hi) x = hi;
      return x;
    });
    return Status::Ok();
  });
}

// Dropout (opset 12+: data, ratio = 0.5, training_mode = false; opset < 12: attribute ratio and
// never training). Active only when training_mode is true and the run is a training run
// (ctx.training); then element e is kept iff uniform(e) >= ratio and kept values are scaled by
// 1 / (1 - ratio). Inactive, or with ratio 0, the output is the input and the mask all true.
Status DropoutKernel(const Node& node, Inputs in, Outputs out, const KernelContext& ctx) {
  float ratio = node.GetFloat("ratio", 0.5f);
  if (in.size() > 1 && in[1]) ratio = static_cast<float>(in[1]->GetAsDouble(0));
  bool training = in.size() > 2 && in[2] && in[2]->GetAsDouble(0) != 0;
  training = training && ctx.training;
  Tensor* mask = out.size() > 1 ? out[1] : nullptr;
  bool* m = mask ? mask->data<bool>() : nullptr;
  const int64_t n = in[0]->numel();
  if (training && !(ratio >= 0.f && ratio < 1.f))
    return Error(node.Describe() + ": ratio " + std::to_string(ratio) + " is outside [0, 1)");
  if (!training || ratio == 0.f) {
    CopyUnlessSame(*in[0], *out[0]);  // output 0 may run in place
    if (m) std::memset(m, 1, n);
    return Status::Ok();
  }
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T scale = T(1) / (T(1) - static_cast<T>(ratio));
    const T* x = in[0]->data<T>();
    T* y = out[0]->data<T>();
    ParallelFor((n + 3) / 4, kElementGrain / 4, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block) {
        const Philox4 bits = PhiloxBlock(ctx.seed, ctx.node_key, static_cast<uint64_t>(block));
        for (int lane = 0; lane < 4; ++lane) {
          const int64_t e = block * 4 + lane;
          if (e >= n) break;
          const bool keep = PhiloxBitsToUniform(bits.v[lane]) >= ratio;
          y[e] = keep ? x[e] * scale : T(0);
          if (m) m[e] = keep;
        }
      }
    });
    return Status::Ok();
  });
}

// com.microsoft DropoutGrad (dY, mask[, ratio = 0.5, training_mode = false]) -> dX:
// dX = mask ? dY * scale : 0, with the forward's scale (1 / (1 - ratio) when it was active, else
// 1, in which case the forward's mask is all true and dX = dY).
Status DropoutGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext& ctx) {
  float ratio = 0.5f;
  if (in.size() > 2 && in[2]) ratio = static_cast<float>(in[2]->GetAsDouble(0));
  bool training = in.size() > 3 && in[3] && in[3]->GetAsDouble(0) != 0;
  training = training && ctx.training;
  if (in[1]->numel() != in[0]->numel())
    return Error(node.Describe() + ": mask has " + std::to_string(in[1]->numel()) +
                 " elements, dY has " + std::to_string(in[0]->numel()));
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T scale = training ? T(1) / (T(1) - static_cast<T>(ratio)) : T(1);
    const T* dy = in[0]->data<T>();
    const bool* m = in[1]->data<bool>();
    T* dx = out[0]->data<T>();
    ParallelFor(in[0]->numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dx[i] = m[i] ? dy[i] * scale : T(0);
    });
    return Status::Ok();
  });
}

Status FastGeluKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const std::string form = node.GetString("form", "torch_tanh");
  if (form != "torch_tanh" && form != "gelu_new")
    return Error(node.Describe() + ": unknown form '" + form +
                 "' (expected \"torch_tanh\" or \"gelu_new\")");
  const FastGeluForm f = form == "gelu_new" ? FastGeluForm::kGeluNew : FastGeluForm::kTorchTanh;
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
             [f](const T* x, T* y, int64_t n) { FastGeluBlock(x, y, n, f); });
    return Status::Ok();
  });
}

// alpha defaults to 1.702, as ONNX Runtime's QuickGelu (the CLIP approximation of GELU).
Status QuickGeluKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const float alpha = node.GetFloat("alpha", 1.702f);
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = static_cast<T>(alpha);
    BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
             [a](const T* x, T* y, int64_t n) { QuickGeluBlock(x, y, n, a); });
    return Status::Ok();
  });
}

// ai.onnx Gelu (opset 20) in the very operations of com.microsoft Gelu ("none") and of FastGelu's
// gelu_new form ("tanh": 0.5·x first, Pow for the cube, as the ONNX function body), so that
// canonicalize's rewrite into those ops changes no bits. The ONNX function body itself differs in
// two places: its erf form computes (0.5·x)·(1 + erf) where GeluOp computes (x·(erf + 1))·0.5, the
// same bits for every float below 2^127 (above, x·2 overflows: GeluOp gives inf, the body x); its
// tanh form takes k = Sqrt(0.63661977236f), one ulp below the correctly rounded sqrt(2/pi) that
// FastGelu, torch and ONNX Runtime use.
Status OnnxGeluKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const std::string approximate = node.GetString("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return Error(node.Describe() +
                 ": attribute 'approximate' must be \"none\" or \"tanh\", got \"" + approximate +
                 "\"");
  const bool tanh = approximate == "tanh";
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
             [tanh](const T* x, T* y, int64_t n) {
               if (tanh)
                 FastGeluBlock(x, y, n, FastGeluForm::kGeluNew);
               else
                 GeluOp::Block(x, y, n);
             });
    return Status::Ok();
  });
}

// (dY, other) -> dX for same-shape activation gradients: block(dy, v, dx, count) on pieces of at
// most kElementBlock elements.
template <class Block>
Status ActivationGradKernel(const Node& node, Inputs in, Outputs out, Block block) {
  if (in[1]->numel() != in[0]->numel())
    return Error(node.Describe() + ": inputs have " + std::to_string(in[0]->numel()) + " and " +
                 std::to_string(in[1]->numel()) + " elements");
  return VisitFloat(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dy = in[0]->data<T>();
    const T* v = in[1]->data<T>();
    T* dx = out[0]->data<T>();
    ParallelFor(in[0]->numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; i += kElementBlock)
        block(dy + i, v + i, dx + i, std::min(kElementBlock, end - i));
    });
    return Status::Ok();
  });
}

// An activation gradient that needs no transcendental function, element by element.
template <class Fn>
auto PerElement(Fn fn) {
  return [fn](const auto* dy, const auto* v, auto* dx, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dx[i] = fn(dy[i], v[i]);
  };
}

// dX = dY * (Phi(x) + x * phi(x)): Phi the normal CDF, phi its density.
Status GeluGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return ActivationGradKernel(node, in, out,
                              [](const auto* dy, const auto* x, auto* dx, int64_t n) {
                                using T = std::remove_cvref_t<decltype(*x)>;
                                const T kInvSqrt2 = T(0.70710678118654752440);
                                const T kInvSqrt2Pi = T(0.39894228040143267794);
                                T e[kElementBlock] = {}, g[kElementBlock] = {};
                                for (int64_t i = 0; i < n; ++i) {
                                  e[i] = x[i] * kInvSqrt2;
                                  g[i] = T(-0.5) * x[i] * x[i];
                                }
                                vmath::Erf(e, e, n);
                                vmath::Exp(g, g, n);
                                for (int64_t i = 0; i < n; ++i) {
                                  const T cdf = T(0.5) * (T(1) + e[i]);
                                  const T pdf = kInvSqrt2Pi * g[i];
                                  dx[i] = dy[i] * (cdf + x[i] * pdf);
                                }
                              });
}

// d/dx of 0.5·x·(1 + tanh(u)), u = k·(x + c·x³): 0.5·(1 + t) + 0.5·x·(1 − t²)·k·(1 + 3c·x²).
// Both forward forms share it (they differ only in rounding).
Status FastGeluGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return ActivationGradKernel(
      node, in, out, [](const auto* dy, const auto* x, auto* dx, int64_t n) {
        using T = std::remove_cvref_t<decltype(*x)>;
        const T k = static_cast<T>(0.7978845608028654);
        const T c = static_cast<T>(0.044715);
        T t[kElementBlock] = {};
        for (int64_t i = 0; i < n; ++i) {
          const T x2 = x[i] * x[i];
          t[i] = k * (x[i] + c * x2 * x[i]);
        }
        vmath::Tanh(t, t, n);
        for (int64_t i = 0; i < n; ++i) {
          const T x2 = x[i] * x[i];
          const T du = k * (T(1) + T(3) * c * x2);
          dx[i] = dy[i] * (T(0.5) * (T(1) + t[i]) + T(0.5) * x[i] * (T(1) - t[i] * t[i]) * du);
        }
      });
}

// QuickGeluGrad (dY, X) {alpha}: with v = alpha·x and s = sigmoid(v),
// dX = dY·s·(1 + v·(1 − s)), torch's silu_backward (its association, its sigmoid) at alpha = 1.
Status QuickGeluGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const float alpha = node.GetFloat("alpha", 1.702f);
  return ActivationGradKernel(node, in, out,
                              [alpha](const auto* dy, const auto* x, auto* dx, int64_t n) {
                                using T = std::remove_cvref_t<decltype(*x)>;
                                T v[kElementBlock] = {}, s[kElementBlock] = {};
                                for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(alpha) * x[i];
                                SigmoidArray(v, s, n);
                                for (int64_t i = 0; i < n; ++i)
                                  dx[i] = dy[i] * s[i] * (T(1) + v[i] * (T(1) - s[i]));
                              });
}

// (dY, Y) -> dY where Y > 0, else 0. The gradient rule passes Relu's output; its input gives the
// same result (Y > 0 exactly where X > 0), so ONNX Runtime graphs that pass X still run.
Status ReluGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return ActivationGradKernel(node, in, out, PerElement([](auto dy, auto y) {
                                using T = decltype(y);
                                return y > T(0) ? dy : T(0);
                              }));
}

Status SigmoidGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return ActivationGradKernel(node, in, out, PerElement([](auto dy, auto y) {
                                using T = decltype(y);
                                return dy * y * (T(1) - y);
                              }));
}

Status TanhGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return ActivationGradKernel(node, in, out, PerElement([](auto dy, auto y) {
                                using T = decltype(y);
                                return dy * (T(1) - y * y);
                              }));
}

}  // namespace

void RegisterElementwiseKernels(CpuKernelTable& table) {
  table.Add("", "Add", NumericBinaryKernel<AddOp>);
  table.Add("", "Sub", NumericBinaryKernel<SubOp>);
  table.Add("", "Mul", NumericBinaryKernel<MulOp>);
  table.Add("", "Div", DivKernel);
  table.Add("", "Mod", ModKernel);
  table.Add("", "Pow", PowKernel);
  table.Add("", "Sum", VariadicKernel<AddOp>);
  table.Add("", "Min", VariadicKernel<MinOp>);
  table.Add("", "Max", VariadicKernel<MaxOp>);
  table.Add("", "Mean", MeanKernel);

  table.Add("", "Equal", CompareKernel<EqualOp>);
  table.Add("", "Less", CompareKernel<LessOp>);
  table.Add("", "Greater", CompareKernel<GreaterOp>);
  table.Add("", "LessOrEqual", CompareKernel<LessOrEqualOp>);
  table.Add("", "GreaterOrEqual", CompareKernel<GreaterOrEqualOp>);
  table.Add("", "And", LogicalKernel<AndOp>);
  table.Add("", "Or", LogicalKernel<OrOp>);
  table.Add("", "Xor", LogicalKernel<XorOp>);

  table.Add("", "Neg", NumericUnaryKernel<NegOp>);
  table.Add("", "Abs", NumericUnaryKernel<AbsOp>);
  table.Add("", "Sign", NumericUnaryKernel<SignOp>);
  table.Add("", "Relu", NumericUnaryKernel<ReluOp>);
  table.Add("", "Sqrt", FloatUnaryKernel<SqrtOp>);
  table.Add("", "Reciprocal", FloatUnaryKernel<ReciprocalOp>);
  table.Add("", "Exp", FloatUnaryKernel<ExpOp>);
  table.Add("", "Log", FloatUnaryKernel<LogOp>);
  table.Add("", "Erf", FloatUnaryKernel<ErfOp>);
  table.Add("", "Tanh", FloatUnaryKernel<TanhOp>);
  table.Add("", "Sigmoid", FloatUnaryKernel<SigmoidOp>);
  table.Add("", "Sin", FloatUnaryKernel<SinOp>);
  table.Add("", "Cos", FloatUnaryKernel<CosOp>);
  table.Add("", "Floor", FloatUnaryKernel<FloorOp>);
  table.Add("", "Ceil", FloatUnaryKernel<CeilOp>);
  table.Add("", "Round", FloatUnaryKernel<RoundOp>);
  table.Add("", "Softplus", FloatUnaryKernel<SoftplusOp>);
  table.Add("", "Not", NotKernel);
  table.Add("", "IsNaN", IsNaNKernel);
  table.Add("", "IsInf", IsInfKernel);
  table.Add("", "Identity", IdentityKernel);

  table.Add("", "Where", WhereKernel);
  table.Add("", "Cast", CastKernel);
  table.Add("", "CastLike", CastKernel);
  table.Add("", "Clip", ClipKernel);
  table.Add("", "Dropout", DropoutKernel);
  table.Add("", "Gelu", OnnxGeluKernel);

  table.Add("com.microsoft", "Gelu", FloatUnaryKernel<GeluOp>);
  table.Add("com.microsoft", "GeluGrad", GeluGradKernel);
  table.Add("com.microsoft", "FastGelu", FastGeluKernel);
  table.Add("com.microsoft", "FastGeluGrad", FastGeluGradKernel);
  table.Add("com.microsoft", "QuickGelu", QuickGeluKernel);
  table.Add("com.microsoft", "QuickGeluGrad", QuickGeluGradKernel);
  table.Add("com.microsoft", "ReluGrad", ReluGradKernel);
  table.Add("com.microsoft", "SigmoidGrad", SigmoidGradKernel);
  table.Add("com.microsoft", "TanhGrad", TanhGradKernel);
  table.Add("com.microsoft", "DropoutGrad", DropoutGradKernel);
}

}  // namespace foundry
