// CPU reference kernels of the elementwise family (schemas in compiler/ops/elementwise.cc).
//
// Broadcasting is implemented once: ew::CollapseBroadcast drops size-1 output dimensions and
// merges neighbours along which every operand is either contiguous or broadcast, so a same-shape
// op becomes one contiguous run, a bias add [N, C] + [C] becomes N runs of C, and a scalar operand
// is a run with stride 0. Each run's inner loop is specialized for strides 0 and 1, which keeps the
// hot cases as plain vectorizable loops.
//
// Every kernel writes its output with `=`; variadic ops (Sum, Min, Max, Mean) combine their
// inputs left to right into the output, so results do not depend on anything but input order.
// Dropout draws from Philox (kernels/cpu/philox.h) keyed by (ctx.seed, ctx.node_key, element),
// so a recompute of the node reproduces its mask exactly.
//
// The per-element math is kernels/cpu/elementwise_ops.h's functors, which the CUDA kernels run
// too; the ops on exp, erf and tanh are computed here instead, in blocks (below).
//
// Float exp, erf and tanh come from vmath (kernels/cpu/vmath.h), never from libm, in every kernel
// that computes them: a fused activation and its decomposition (canonicalize) must keep agreeing
// bit for bit, and vmath gives an element the same bits at any position in any array. Kernels
// that need them work on blocks of kElementBlock elements through a stack buffer. Double stays on
// libm.
//
// Threads (kernels/cpu/parallel.h): every kernel cuts its output into index ranges fixed by the
// shape (kElementGrain elements, or whole rows) and each range writes only its own elements, so
// the bits do not depend on the thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/element_types.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vmath.h"

namespace foundry {
namespace {

using Inputs = std::span<const Tensor* const>;
using Outputs = std::span<Tensor* const>;

// ---------------------------------------------------------------------------------------------
// Broadcasting

// Calls fn(out_offset, operand_offsets, operand_inner_strides, count) for each piece of a run of
// the innermost collapsed dimension: the output is cut into chunks of kElementGrain elements that
// run on the kernels' threads, a run crossing a chunk boundary in two pieces.
template <int N, class Fn>
void ForEachRun(const Shape& out_shape, const std::array<const Shape*, N>& in, Fn&& fn) {
  const int64_t numel = NumElements(out_shape);
  if (numel == 0) return;
  ew::CollapsedBroadcast plan = ew::CollapseBroadcast(out_shape, {in.begin(), in.end()});
  if (plan.out.empty()) {  // one element
    plan.out.push_back(1);
    for (int k = 0; k < N; ++k) plan.strides[k].push_back(0);
  }
  const int64_t rank = static_cast<int64_t>(plan.out.size());
  const int64_t inner = plan.out.back();
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = plan.strides[k].back();
  ParallelFor(numel, kElementGrain, [&](int64_t begin, int64_t end) {
    // The operand offsets of run begin / inner, from its index in the outer dimensions.
    std::vector<int64_t> index(rank, 0);
    std::array<int64_t, N> offset{};
    for (int64_t d = rank - 2, q = begin / inner; d >= 0; --d) {
      index[d] = q % plan.out[d];
      q /= plan.out[d];
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
        if (++index[d] < plan.out[d]) break;
        for (int k = 0; k < N; ++k) offset[k] -= plan.strides[k][d] * plan.out[d];
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

constexpr ElementTypes kTypes{"cpu"};

// ---------------------------------------------------------------------------------------------
// The ops on exp, erf and tanh, in blocks through vmath. Their functors in elementwise_ops.h are
// the device's (libdevice, one element a thread); here vmath's array functions give every element
// the same bits at any position, which canonicalize's fusions need (file comment), and run eight
// lanes at a time. Both compute the same operations in the same order.

// Ops with a Block member run through BlockMap (FloatUnaryKernel).
struct ExpBlock {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    vmath::Exp(x, y, n);
  }
};
struct ErfBlock {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    vmath::Erf(x, y, n);
  }
};
struct TanhBlock {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    vmath::Tanh(x, y, n);
  }
};
struct SigmoidBlock {
  template <class T>
  static void Block(const T* x, T* y, int64_t n) {
    SigmoidArray(x, y, n);
  }
};

// Exact-erf GELU in the very operations, and order, of the decompositions canonicalize fuses
// into com.microsoft Gelu, so that fusing changes no bits (docs/design.md §4):
//   form "half_last"   torch 1.13 TorchScript (the default when absent):
//                      Mul(Mul(x, Add(Erf(Div(x, 1.4142135381698608)), 1.0)), 0.5)
//   form "half_first"  torch 2.6 dynamo: Mul(x, Mul(0.5, Add(Erf(Div(x, 1.4142135381698608)), 1)))
// The forms differ only where x·a overflows (a = erf + 1 = 2, x >= 2^127: half_last gives inf,
// half_first x). Elsewhere both round x·a/2 once: a is 0 or at least 2^-24 (erf + 1 is exact
// below 0.5; in f32, and likewise in f64 with its own ulp), so 0.5·a is exact; and where a is
// neither 0 nor 1, |x| > 2^-26, so no product is subnormal (where a is 1 both are x·0.5). By the
// same argument half_first is also (x·0.5)·a, Hugging Face's order and that of ONNX's Gelu function
// body. No step is a multiply followed by an add, so FMA contraction cannot reassociate it either.
template <class T>
void GeluBlock(const T* x, T* y, int64_t n, bool half_first) {
  const T sqrt2 = static_cast<T>(1.4142135623730951);  // f32: 1.4142135381698608
  T t[kElementBlock] = {};
  for (int64_t i = 0; i < n; ++i) t[i] = x[i] / sqrt2;
  vmath::Erf(t, t, n);
  for (int64_t i = 0; i < n; ++i) {
    const T a = t[i] + T(1);
    y[i] = half_first ? x[i] * (T(0.5) * a) : (x[i] * a) * T(0.5);
  }
}

// Tanh GELU, 0.5·x·(1 + tanh(k·(x + c·x³))) with k = sqrt(2/pi) and c = 0.044715, in the very
// operations and order of the two decompositions canonicalize fuses into com.microsoft FastGelu,
// so that fusing changes no bits:
//   form "gelu_new"      Hugging Face's NewGELUActivation (GPT-2):
//                        Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), c)), k)), 1))
//   form "torch_tanh"    torch.onnx's F.gelu(approximate='tanh') (the default when absent):
//                        Mul(0.5, Mul(x, Add(1, Tanh(Mul(k, Add(x, Mul(c, Mul(x, Mul(x, x)))))))))
// The forms differ in the cube (powf vs two products) and in where the 0.5 is applied; operand
// order inside one Add or Mul is immaterial (IEEE addition and multiplication commute exactly).
// gelu_new is also torch 2.6 dynamo's F.gelu(approximate='tanh'), Pow for the cube and
// x·(0.5·a): the same bits as (x·0.5)·a, for the reason given at GeluBlock (tanh + 1, like
// erf + 1, is 0 or at least 2^-24).
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

// com.microsoft QuickGelu, x·sigmoid(alpha·x), in the very operations of Sigmoid and then Mul,
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

// ---------------------------------------------------------------------------------------------
// Kernels

template <class Op>
Status NumericBinaryKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], Op{});
    return Status::Ok();
  });
}

Status DivKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], ew::DivOp{});
    } else {
      bool by_zero = false;
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], [&](T a, T b) {
        if (b == 0) by_zero = true;
        return ew::DivOp{}(a, b);
      });
      if (by_zero) return Error(node.Describe() + ": integer division by zero");
    }
    return Status::Ok();
  });
}

// fmod=0 (integers only): the remainder takes the divisor's sign (Python %);
// fmod=1: the dividend's sign (C fmod). ew::ModOp says how.
Status ModKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const bool fmod = node.GetInt("fmod", 0) == 1;
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      if (!fmod) return Error(node.Describe() + ": floating-point Mod needs attribute fmod=1");
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], ew::ModOp{fmod});
    } else {
      bool by_zero = false;
      BinaryBroadcast<T, T, T>(*in[0], *in[1], *out[0], [&](T a, T b) {
        if (b == 0) by_zero = true;
        return ew::ModOp{fmod}(a, b);
      });
      if (by_zero) return Error(node.Describe() + ": integer modulo by zero");
    }
    return Status::Ok();
  });
}

Status PowKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto base_tag) {
    using B = typename decltype(base_tag)::type;
    return kTypes.Numeric(node, in[1]->dtype(), [&](auto exp_tag) {
      using E = typename decltype(exp_tag)::type;
      BinaryBroadcast<B, E, B>(*in[0], *in[1], *out[0], ew::PowOp{});
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
  std::vector<std::vector<int64_t>> stride(n_in);
  for (size_t k = 0; k < n_in; ++k) stride[k] = ew::ElementStrides(os, in[k]->shape());
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
  return kTypes.Numeric(node, out[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    VariadicCombine<T>(in, *out[0], Op{});
    return Status::Ok();
  });
}

Status MeanKernel(const Node& node, Inputs in, Outputs out, const KernelContext& ctx) {
  RETURN_IF_ERROR(VariadicKernel<ew::AddOp>(node, in, out, ctx));
  return kTypes.Float(node, out[0]->dtype(), [&](auto tag) {
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
  return kTypes.Numeric(node, in[0]->dtype(), run);
}

template <class Op>
Status LogicalKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  if (in[0]->dtype() != DType::kBool) return kTypes.Unsupported(node, in[0]->dtype());
  BinaryBroadcast<bool, bool, bool>(*in[0], *in[1], *out[0], Op{});
  return Status::Ok();
}

// Op::Block called through a template of T: clang 14 looks a plain Op::Block up as soon as
// FloatUnaryKernel<Op> is instantiated, even in the branch discarded for an op without one
// (tests/fuzz/build.sh builds with clang).
template <class Op, class T>
void OpBlock(const T* x, T* y, int64_t n) {
  Op::Block(x, y, n);
}

template <class Op>
Status FloatUnaryKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (requires(const T* x, T* y) { Op::Block(x, y, int64_t{1}); }) {
      BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
               [](const T* x, T* y, int64_t n) { OpBlock<Op>(x, y, n); });
    } else {
      UnaryMap<T, T>(*in[0], *out[0], Op{});
    }
    return Status::Ok();
  });
}

template <class Op>
Status NumericUnaryKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    UnaryMap<T, T>(*in[0], *out[0], Op{});
    return Status::Ok();
  });
}

Status NotKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  if (in[0]->dtype() != DType::kBool) return kTypes.Unsupported(node, in[0]->dtype());
  UnaryMap<bool, bool>(*in[0], *out[0], ew::NotOp{});
  return Status::Ok();
}

Status IsNaNKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    UnaryMap<T, bool>(*in[0], *out[0], ew::IsNaNOp{});
    return Status::Ok();
  });
}

Status IsInfKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const bool negative = node.GetInt("detect_negative", 1) != 0;
  const bool positive = node.GetInt("detect_positive", 1) != 0;
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    UnaryMap<T, bool>(*in[0], *out[0], ew::IsInfOp{positive, negative});
    return Status::Ok();
  });
}

// Identity is a view: when the planner gave the output the input's buffer, nothing moves.
Status IdentityKernel(const Node&, Inputs in, Outputs out, const KernelContext&) {
  CopyUnlessSame(*in[0], *out[0]);
  return Status::Ok();
}

Status WhereKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.BySize(node, in[1]->dtype(), [&](auto tag) {
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
// target_type input). bfloat16 is stored as uint16_t bit patterns (ew::FromBf16Op, ToBf16Op).
Status CastKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const DType src = in[0]->dtype(), dst = out[0]->dtype();
  if (src == DType::kBFloat16 && dst == DType::kBFloat16) {
    CopyUnlessSame(*in[0], *out[0]);
    return Status::Ok();
  }
  if (src == DType::kBFloat16)
    return kTypes.Castable(node, dst, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      UnaryMap<uint16_t, D>(*in[0], *out[0], ew::FromBf16Op<D>{});
      return Status::Ok();
    });
  if (dst == DType::kBFloat16)
    return kTypes.Castable(node, src, [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      UnaryMap<S, uint16_t>(*in[0], *out[0], ew::ToBf16Op<S>{});
      return Status::Ok();
    });
  return kTypes.Castable(node, in[0]->dtype(), [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    return kTypes.Castable(node, out[0]->dtype(), [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      UnaryMap<S, D>(*in[0], *out[0], ew::CastOp<S, D>{});
      return Status::Ok();
    });
  });
}

// Bounds come from inputs 1 and 2 (opset >= 11) or from float attributes min/max (opset 6).
// ew::ClipValue clips.
Status ClipKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto bound = [&](size_t i, const char* attr, T* value) {
      if (i < in.size() && in[i]) {
        *value = in[i]->data<T>()[0];
        return true;
      }
      if (node.HasAttr(attr)) {
        *value = ew::Convert<float, T>(node.GetFloat(attr, 0));
        return true;
      }
      return false;
    };
    T lo{}, hi{};
    const bool has_lo = bound(1, "min", &lo);
    const bool has_hi = bound(2, "max", &hi);
    UnaryMap<T, T>(*in[0], *out[0], [=](T x) { return ew::ClipValue(x, has_lo, lo, has_hi, hi); });
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
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T scale = T(1) / (T(1) - static_cast<T>(ratio));
    const T* x = in[0]->data<T>();
    T* y = out[0]->data<T>();
    ParallelFor((n + 3) / 4, kElementGrain / 4, [&](int64_t begin, int64_t end) {
      for (int64_t block = begin; block < end; ++block)
        ew::DropoutQuad(ctx.seed, ctx.node_key, block, n, ratio, scale, x, y, m);
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
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T scale = training ? T(1) / (T(1) - static_cast<T>(ratio)) : T(1);
    const T* dy = in[0]->data<T>();
    const bool* m = in[1]->data<bool>();
    T* dx = out[0]->data<T>();
    ParallelFor(in[0]->numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dx[i] = ew::DropoutGradValue(dy[i], m[i], scale);
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
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
             [f](const T* x, T* y, int64_t n) { FastGeluBlock(x, y, n, f); });
    return Status::Ok();
  });
}

// alpha defaults to 1.702, as ONNX Runtime's QuickGelu (the CLIP approximation of GELU).
Status QuickGeluKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const float alpha = node.GetFloat("alpha", 1.702f);
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = static_cast<T>(alpha);
    BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
             [a](const T* x, T* y, int64_t n) { QuickGeluBlock(x, y, n, a); });
    return Status::Ok();
  });
}

Status GeluKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const std::string form = node.GetString("form", "half_last");
  if (form != "half_last" && form != "half_first")
    return Error(node.Describe() + ": unknown form '" + form +
                 "' (expected \"half_last\" or \"half_first\")");
  const bool half_first = form == "half_first";
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
             [half_first](const T* x, T* y, int64_t n) { GeluBlock(x, y, n, half_first); });
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
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    BlockMap(in[0]->data<T>(), out[0]->data<T>(), out[0]->numel(),
             [tanh](const T* x, T* y, int64_t n) {
               if (tanh)
                 FastGeluBlock(x, y, n, FastGeluForm::kGeluNew);
               else
                 GeluBlock(x, y, n, /*half_first=*/false);
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
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
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
  return ActivationGradKernel(node, in, out, PerElement(ew::ReluGradOp{}));
}

Status SigmoidGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return ActivationGradKernel(node, in, out, PerElement(ew::SigmoidGradOp{}));
}

Status TanhGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return ActivationGradKernel(node, in, out, PerElement(ew::TanhGradOp{}));
}

}  // namespace

void RegisterElementwiseKernels(CpuKernelTable& table) {
  table.Add("", "Add", NumericBinaryKernel<ew::AddOp>);
  table.Add("", "Sub", NumericBinaryKernel<ew::SubOp>);
  table.Add("", "Mul", NumericBinaryKernel<ew::MulOp>);
  table.Add("", "Div", DivKernel);
  table.Add("", "Mod", ModKernel);
  table.Add("", "Pow", PowKernel);
  table.Add("", "Sum", VariadicKernel<ew::AddOp>);
  table.Add("", "Min", VariadicKernel<ew::MinOp>);
  table.Add("", "Max", VariadicKernel<ew::MaxOp>);
  table.Add("", "Mean", MeanKernel);

  table.Add("", "Equal", CompareKernel<ew::EqualOp>);
  table.Add("", "Less", CompareKernel<ew::LessOp>);
  table.Add("", "Greater", CompareKernel<ew::GreaterOp>);
  table.Add("", "LessOrEqual", CompareKernel<ew::LessOrEqualOp>);
  table.Add("", "GreaterOrEqual", CompareKernel<ew::GreaterOrEqualOp>);
  table.Add("", "And", LogicalKernel<ew::AndOp>);
  table.Add("", "Or", LogicalKernel<ew::OrOp>);
  table.Add("", "Xor", LogicalKernel<ew::XorOp>);

  table.Add("", "Neg", NumericUnaryKernel<ew::NegOp>);
  table.Add("", "Abs", NumericUnaryKernel<ew::AbsOp>);
  table.Add("", "Sign", NumericUnaryKernel<ew::SignOp>);
  table.Add("", "Relu", NumericUnaryKernel<ew::ReluOp>);
  table.Add("", "Sqrt", FloatUnaryKernel<ew::SqrtOp>);
  table.Add("", "Reciprocal", FloatUnaryKernel<ew::ReciprocalOp>);
  table.Add("", "Exp", FloatUnaryKernel<ExpBlock>);
  table.Add("", "Log", FloatUnaryKernel<ew::LogOp>);
  table.Add("", "Erf", FloatUnaryKernel<ErfBlock>);
  table.Add("", "Tanh", FloatUnaryKernel<TanhBlock>);
  table.Add("", "Sigmoid", FloatUnaryKernel<SigmoidBlock>);
  table.Add("", "Sin", FloatUnaryKernel<ew::SinOp>);
  table.Add("", "Cos", FloatUnaryKernel<ew::CosOp>);
  table.Add("", "Floor", FloatUnaryKernel<ew::FloorOp>);
  table.Add("", "Ceil", FloatUnaryKernel<ew::CeilOp>);
  table.Add("", "Round", FloatUnaryKernel<ew::RoundOp>);
  table.Add("", "Softplus", FloatUnaryKernel<ew::SoftplusOp>);
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

  table.Add("com.microsoft", "Gelu", GeluKernel);
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
