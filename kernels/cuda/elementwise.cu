// Elementwise CUDA kernels: the GPU twin of kernels/cpu/elementwise.cc, same ops, attributes,
// element types and host-side errors. The per-element math is kernels/cpu/elementwise_ops.h (the
// CPU kernels' and the host test's too); this file holds the kernels, which are one grid-stride
// loop each (one thread per output element; Dropout one thread per Philox block of four
// elements), and the launchers, which read attributes and constant inputs on the host and never
// touch device memory.
//
// Broadcasting: an operand whose shape is the output's is indexed directly (the fast path); the
// others go through common.cuh's Strides / BroadcastOffset, computed on the collapsed shapes
// (ew::CollapseBroadcast) so that a bias add is a rank-2 problem.
//
// Every output element is written with `=` after every input has been read at it, so an output
// may alias any same-shaped input (the schema's in_place_inputs; Sum's first eight).
#include <cstring>
#include <string>
#include <utility>

#include "kernels/cpu/element_types.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cuda/common.cuh"

namespace foundry {
namespace {

using cuda::BroadcastOffset;
using cuda::Strides;
using Inputs = std::span<const Tensor* const>;
using Outputs = std::span<Tensor* const>;

#define FOUNDRY_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// ---------------------------------------------------------------------------------------------
// Kernels

template <class R, class T, class Op>
__global__ void UnaryKernel(R* y, const T* x, int64_t n, Op op) {
  FOUNDRY_GRID_STRIDE(i, n) y[i] = op(x[i]);
}

// `same`: both operands have the output's shape (or element count, for the activation
// gradients), so element i is element i of each.
template <class R, class A, class B, class Op>
__global__ void BinaryKernel(R* z, const A* a, const B* b, int64_t n, Strides sa, Strides sb,
                             bool same, Op op) {
  FOUNDRY_GRID_STRIDE(i, n) {
    const int64_t ia = same ? i : BroadcastOffset(sa, i);
    const int64_t ib = same ? i : BroadcastOffset(sb, i);
    z[i] = op(a[ia], b[ib]);
  }
}

template <class T>
__global__ void WhereKernel(T* z, const bool* c, const T* x, const T* y, int64_t n, Strides sc,
                            Strides sx, Strides sy, bool same) {
  FOUNDRY_GRID_STRIDE(i, n) {
    const bool keep_x = c[same ? i : BroadcastOffset(sc, i)];
    z[i] = keep_x ? x[same ? i : BroadcastOffset(sx, i)] : y[same ? i : BroadcastOffset(sy, i)];
  }
}

// Up to kMaxVariadic operands per launch (kernel parameters are by value, 4 KiB at most).
constexpr int kMaxVariadic = 8;
template <class T>
struct VariadicArgs {
  const T* in[kMaxVariadic] = {};
  Strides strides[kMaxVariadic];
  bool same[kMaxVariadic] = {};
  int count = 0;
};

// y = op(...op(op(in0, in1), in2)..., in_{count-1}), left to right as the CPU, then / divisor
// when `divide` (Mean).
template <class T, class Op>
__global__ void VariadicKernel(T* y, VariadicArgs<T> args, int64_t n, bool divide, T divisor,
                               Op op) {
  FOUNDRY_GRID_STRIDE(i, n) {
    T acc = args.in[0][args.same[0] ? i : BroadcastOffset(args.strides[0], i)];
    for (int k = 1; k < args.count; ++k)
      acc = op(acc, args.in[k][args.same[k] ? i : BroadcastOffset(args.strides[k], i)]);
    if (divide) acc = acc / divisor;
    y[i] = acc;
  }
}

// Clip bounds come from a device scalar (input 1 / 2), an attribute value, or nowhere.
template <class T>
__global__ void ClipKernel(T* y, const T* x, int64_t n, const T* lo_ptr, const T* hi_ptr,
                           bool has_lo, T lo, bool has_hi, T hi) {
  const T l = lo_ptr ? *lo_ptr : lo;
  const T h = hi_ptr ? *hi_ptr : hi;
  FOUNDRY_GRID_STRIDE(i, n) y[i] = ew::ClipValue(x[i], has_lo, l, has_hi, h);
}

// One thread per Philox block (four elements).
template <class T>
__global__ void DropoutKernel(T* y, bool* mask, const T* x, int64_t n, uint64_t seed,
                              uint64_t node_key, float ratio, T scale) {
  const int64_t blocks = (n + 3) / 4;
  FOUNDRY_GRID_STRIDE(b, blocks) ew::DropoutQuad(seed, node_key, b, n, ratio, scale, x, y, mask);
}

template <class T>
__global__ void DropoutGradKernel(T* dx, const T* dy, const bool* mask, int64_t n, T scale) {
  FOUNDRY_GRID_STRIDE(i, n) dx[i] = ew::DropoutGradValue(dy[i], mask[i], scale);
}

#undef FOUNDRY_GRID_STRIDE

// ---------------------------------------------------------------------------------------------
// Launch and checks

// Launches `kernel` over `threads` grid-stride iterations on the node's stream; a launch error
// names the node and the kernel. Nothing is launched for no work.
template <class... Params, class... Args>
Status Launch(const Node& node, const CudaKernelContext& ctx, const char* what, int64_t threads,
              void (*kernel)(Params...), Args&&... args) {
  if (threads <= 0) return Status::Ok();
  kernel<<<cuda::BlocksFor(threads), cuda::kThreads, 0, cuda::StreamOf(ctx)>>>(
      std::forward<Args>(args)...);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return cuda::CudaError(node, (std::string("launching ") + what).c_str(), err);
  return Status::Ok();
}

// out = in, bytes for bytes; nothing to do when out already is in (a view, in place).
Status CopyUnlessSame(const Node& node, const CudaKernelContext& ctx, const Tensor& in,
                      Tensor& out) {
  if (in.nbytes() && out.raw() != in.raw())
    FOUNDRY_CUDA_CHECK(node, cudaMemcpyAsync(out.raw(), in.raw(), in.nbytes(),
                                             cudaMemcpyDeviceToDevice, cuda::StreamOf(ctx)));
  return Status::Ok();
}

// The host copy of input i when it is a compile-time constant, else null.
const Tensor* ConstantInput(const CudaKernelContext& ctx, size_t i) {
  return i < ctx.base.constant_inputs.size() ? ctx.base.constant_inputs[i] : nullptr;
}

Status NotConstant(const Node& node, size_t i, const char* what) {
  return Error(node.Describe() + ": input " + std::to_string(i) + " ('" + what +
               "') must be a constant on the cuda backend; fold it at compile time");
}

// The operand's Strides over the collapsed output, after checking (on the full shapes) that it
// broadcasts: the error names the node and both shapes.
StatusOr<std::vector<Strides>> OperandStrides(const Node& node, const Shape& out,
                                              const std::vector<const Shape*>& in) {
  for (const Shape* s : in) RETURN_IF_ERROR(cuda::BroadcastStrides(node, *s, out).status());
  const ew::CollapsedBroadcast c = ew::CollapseBroadcast(out, in);
  std::vector<Strides> strides(in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    ASSIGN_OR_RETURN(strides[k], cuda::BroadcastStrides(node, c.in[k], c.out));
  }
  return strides;
}

template <class A, class B, class R, class Op>
Status Binary(const Node& node, const CudaKernelContext& ctx, const Tensor& a, const Tensor& b,
              Tensor& out, Op op) {
  const int64_t n = out.numel();
  if (n == 0) return Status::Ok();
  const bool same = a.shape() == out.shape() && b.shape() == out.shape();
  Strides sa, sb;
  if (!same) {
    ASSIGN_OR_RETURN(std::vector<Strides> s,
                     OperandStrides(node, out.shape(), {&a.shape(), &b.shape()}));
    sa = s[0];
    sb = s[1];
  }
  return Launch(node, ctx, "BinaryKernel", n, BinaryKernel<R, A, B, Op>, out.data<R>(), a.data<A>(),
                b.data<B>(), n, sa, sb, same, op);
}

template <class T, class R, class Op>
Status Unary(const Node& node, const CudaKernelContext& ctx, const Tensor& in, Tensor& out, Op op) {
  const int64_t n = out.numel();
  return Launch(node, ctx, "UnaryKernel", n, UnaryKernel<R, T, Op>, out.data<R>(), in.data<T>(), n,
                op);
}

// Element type dispatch: the CPU's sets and errors.
constexpr ElementTypes kTypes{"cuda"};

// ---------------------------------------------------------------------------------------------
// Kernel functions (the op table's entries)

template <class Op>
Status NumericBinaryKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Binary<T, T, T>(node, ctx, *in[0], *in[1], *out[0], Op{});
  });
}

// An integer divisor that is a compile-time constant is checked for zeros here, with the CPU's
// error. A divisor computed at run time cannot be checked without a host round trip: a zero there
// gives 0 in the quotient (the value the CPU writes before failing the node).
template <class T>
bool HasZero(const Tensor* divisor, DType dtype) {
  if (!divisor || divisor->dtype() != dtype) return false;
  for (int64_t i = 0; i < divisor->numel(); ++i)
    if (divisor->data<T>()[i] == 0) return true;
  return false;
}

Status DivKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      if (out[0]->numel() > 0 && HasZero<T>(ConstantInput(ctx, 1), in[0]->dtype()))
        return Error(node.Describe() + ": integer division by zero");
    }
    return Binary<T, T, T>(node, ctx, *in[0], *in[1], *out[0], ew::DivOp{});
  });
}

Status ModKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const bool fmod = node.GetInt("fmod", 0) == 1;
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      if (!fmod) return Error(node.Describe() + ": floating-point Mod needs attribute fmod=1");
    } else {
      if (out[0]->numel() > 0 && HasZero<T>(ConstantInput(ctx, 1), in[0]->dtype()))
        return Error(node.Describe() + ": integer modulo by zero");
    }
    return Binary<T, T, T>(node, ctx, *in[0], *in[1], *out[0], ew::ModOp{fmod});
  });
}

Status PowKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto base_tag) {
    using B = typename decltype(base_tag)::type;
    return kTypes.Numeric(node, in[1]->dtype(), [&](auto exp_tag) {
      using E = typename decltype(exp_tag)::type;
      return Binary<B, E, B>(node, ctx, *in[0], *in[1], *out[0], ew::PowOp{});
    });
  });
}

// Sum, Min, Max, Mean: left to right in launches of up to kMaxVariadic operands; after the first,
// each launch folds the output (the accumulator so far, rounded to T as the CPU's) with the next
// inputs. The output may alias one of the first kMaxVariadic inputs (the schema allows Sum's first
// eight): the first launch reads them all before writing. A later input cannot be aliased.
template <class T, class Op>
Status Variadic(const Node& node, const CudaKernelContext& ctx, Inputs in, Tensor& out, bool mean,
                Op op) {
  const int64_t n = out.numel();
  if (n == 0) return Status::Ok();
  for (size_t k = kMaxVariadic; k < in.size(); ++k)
    if (in[k]->raw() == out.raw())
      return Error(node.Describe() +
                   ": the output may share its buffer only with one of the first " +
                   std::to_string(kMaxVariadic) + " inputs, not input " + std::to_string(k));
  std::vector<const Shape*> shapes;
  for (const Tensor* t : in) shapes.push_back(&t->shape());
  ASSIGN_OR_RETURN(std::vector<Strides> strides, OperandStrides(node, out.shape(), shapes));
  const T divisor = static_cast<T>(in.size());
  size_t next = 0;
  while (next < in.size()) {
    VariadicArgs<T> args;
    if (next > 0) {  // the accumulator so far
      args.in[0] = out.data<T>();
      args.same[0] = true;
      args.count = 1;
    }
    for (; next < in.size() && args.count < kMaxVariadic; ++next, ++args.count) {
      args.in[args.count] = in[next]->data<T>();
      args.strides[args.count] = strides[next];
      args.same[args.count] = in[next]->shape() == out.shape();
    }
    const bool last = next == in.size();
    RETURN_IF_ERROR(Launch(node, ctx, "VariadicKernel", n, VariadicKernel<T, Op>, out.data<T>(),
                           args, n, mean && last, divisor, op));
  }
  return Status::Ok();
}

template <class Op>
Status VariadicKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Numeric(node, out[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Variadic<T>(node, ctx, in, *out[0], /*mean=*/false, Op{});
  });
}

Status MeanKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Float(node, out[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Variadic<T>(node, ctx, in, *out[0], /*mean=*/true, ew::AddOp{});
  });
}

template <class Op>
Status CompareKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Binary<T, T, bool>(node, ctx, *in[0], *in[1], *out[0], Op{});
  };
  if (in[0]->dtype() == DType::kBool) return run(Tag<bool>{});
  return kTypes.Numeric(node, in[0]->dtype(), run);
}

template <class Op>
Status LogicalKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  if (in[0]->dtype() != DType::kBool) return kTypes.Unsupported(node, in[0]->dtype());
  return Binary<bool, bool, bool>(node, ctx, *in[0], *in[1], *out[0], Op{});
}

template <class Op>
Status FloatUnaryKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Unary<T, T>(node, ctx, *in[0], *out[0], Op{});
  });
}

template <class Op>
Status NumericUnaryKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Unary<T, T>(node, ctx, *in[0], *out[0], Op{});
  });
}

Status NotKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  if (in[0]->dtype() != DType::kBool) return kTypes.Unsupported(node, in[0]->dtype());
  return Unary<bool, bool>(node, ctx, *in[0], *out[0], ew::NotOp{});
}

Status IsNaNKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Unary<T, bool>(node, ctx, *in[0], *out[0], ew::IsNaNOp{});
  });
}

Status IsInfKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ew::IsInfOp op;
  op.negative = node.GetInt("detect_negative", 1) != 0;
  op.positive = node.GetInt("detect_positive", 1) != 0;
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Unary<T, bool>(node, ctx, *in[0], *out[0], op);
  });
}

// Identity is a view: when the planner gave the output the input's buffer, nothing moves.
Status IdentityKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return CopyUnlessSame(node, ctx, *in[0], *out[0]);
}

Status WhereKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.BySize(node, in[1]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor& z = *out[0];
    const int64_t n = z.numel();
    if (n == 0) return Status::Ok();
    const bool same =
        in[0]->shape() == z.shape() && in[1]->shape() == z.shape() && in[2]->shape() == z.shape();
    std::vector<Strides> s(3);
    if (!same) {
      ASSIGN_OR_RETURN(
          s, OperandStrides(node, z.shape(), {&in[0]->shape(), &in[1]->shape(), &in[2]->shape()}));
    }
    return Launch(node, ctx, "WhereKernel", n, WhereKernel<T>, z.data<T>(), in[0]->data<bool>(),
                  in[1]->data<T>(), in[2]->data<T>(), n, s[0], s[1], s[2], same);
  });
}

// Cast and CastLike: the target type is the output's. bfloat16 (uint16_t bit patterns) on
// either side: ew::FromBf16Op / ToBf16Op; bfloat16 to bfloat16 moves the bits.
Status CastKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const DType src = in[0]->dtype(), dst = out[0]->dtype();
  if (src == DType::kBFloat16 && dst == DType::kBFloat16)
    return CopyUnlessSame(node, ctx, *in[0], *out[0]);
  if (src == DType::kBFloat16)
    return kTypes.Castable(node, dst, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      return Unary<uint16_t, D>(node, ctx, *in[0], *out[0], ew::FromBf16Op<D>{});
    });
  if (dst == DType::kBFloat16)
    return kTypes.Castable(node, src, [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      return Unary<S, uint16_t>(node, ctx, *in[0], *out[0], ew::ToBf16Op<S>{});
    });
  return kTypes.Castable(node, in[0]->dtype(), [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    return kTypes.Castable(node, out[0]->dtype(), [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      return Unary<S, D>(node, ctx, *in[0], *out[0], ew::CastOp<S, D>{});
    });
  });
}

// Bounds from inputs 1 and 2 (read on the device: they may be computed at run time) or from the
// float attributes min / max (opset 6).
Status ClipKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return kTypes.Numeric(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ptr[2] = {nullptr, nullptr};
    T value[2] = {T(0), T(0)};
    bool has[2] = {false, false};
    const char* attr[2] = {"min", "max"};
    for (int b = 0; b < 2; ++b) {
      const size_t i = static_cast<size_t>(b) + 1;
      if (i < in.size() && in[i]) {
        ptr[b] = in[i]->data<T>();
        has[b] = true;
      } else if (node.HasAttr(attr[b])) {
        value[b] = ew::Convert<float, T>(node.GetFloat(attr[b], 0));
        has[b] = true;
      }
    }
    const int64_t n = out[0]->numel();
    return Launch(node, ctx, "ClipKernel", n, ClipKernel<T>, out[0]->data<T>(), in[0]->data<T>(), n,
                  ptr[0], ptr[1], has[0], value[0], has[1], value[1]);
  });
}

// Dropout (opset 12+: data, ratio = 0.5, training_mode = false; opset < 12: attribute ratio and
// never training): the CPU's rule, with ratio and training_mode read from the host constants.
Status DropoutKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  float ratio = node.GetFloat("ratio", 0.5f);
  if (in.size() > 1 && in[1]) {
    const Tensor* c = ConstantInput(ctx, 1);
    if (!c) return NotConstant(node, 1, "ratio");
    ratio = static_cast<float>(c->GetAsDouble(0));
  }
  bool training = false;
  if (in.size() > 2 && in[2]) {
    const Tensor* c = ConstantInput(ctx, 2);
    if (!c) return NotConstant(node, 2, "training_mode");
    training = c->GetAsDouble(0) != 0;
  }
  training = training && ctx.base.training;
  Tensor* mask = out.size() > 1 ? out[1] : nullptr;
  const int64_t n = in[0]->numel();
  if (training && !(ratio >= 0.f && ratio < 1.f))
    return Error(node.Describe() + ": ratio " + std::to_string(ratio) + " is outside [0, 1)");
  if (!training || ratio == 0.f) {
    RETURN_IF_ERROR(CopyUnlessSame(node, ctx, *in[0], *out[0]));  // output 0 may run in place
    if (mask && n > 0)
      FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(mask->raw(), 1, n, cuda::StreamOf(ctx)));
    return Status::Ok();
  }
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T scale = T(1) / (T(1) - static_cast<T>(ratio));
    return Launch(node, ctx, "DropoutKernel", (n + 3) / 4, DropoutKernel<T>, out[0]->data<T>(),
                  mask ? mask->data<bool>() : nullptr, in[0]->data<T>(), n, ctx.base.seed,
                  ctx.base.node_key, ratio, scale);
  });
}

// com.microsoft DropoutGrad (dY, mask[, ratio = 0.5, training_mode = false]) -> dX.
Status DropoutGradKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  float ratio = 0.5f;
  if (in.size() > 2 && in[2]) {
    const Tensor* c = ConstantInput(ctx, 2);
    if (!c) return NotConstant(node, 2, "ratio");
    ratio = static_cast<float>(c->GetAsDouble(0));
  }
  bool training = false;
  if (in.size() > 3 && in[3]) {
    const Tensor* c = ConstantInput(ctx, 3);
    if (!c) return NotConstant(node, 3, "training_mode");
    training = c->GetAsDouble(0) != 0;
  }
  training = training && ctx.base.training;
  if (in[1]->numel() != in[0]->numel())
    return Error(node.Describe() + ": mask has " + std::to_string(in[1]->numel()) +
                 " elements, dY has " + std::to_string(in[0]->numel()));
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T scale = training ? T(1) / (T(1) - static_cast<T>(ratio)) : T(1);
    const int64_t n = in[0]->numel();
    return Launch(node, ctx, "DropoutGradKernel", n, DropoutGradKernel<T>, out[0]->data<T>(),
                  in[0]->data<T>(), in[1]->data<bool>(), n, scale);
  });
}

Status FastGeluKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const std::string form = node.GetString("form", "torch_tanh");
  if (form != "torch_tanh" && form != "gelu_new")
    return Error(node.Describe() + ": unknown form '" + form +
                 "' (expected \"torch_tanh\" or \"gelu_new\")");
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Unary<T, T>(node, ctx, *in[0], *out[0], ew::FastGeluOp{form == "gelu_new"});
  });
}

Status GeluKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const std::string form = node.GetString("form", "half_last");
  if (form != "half_last" && form != "half_first")
    return Error(node.Describe() + ": unknown form '" + form +
                 "' (expected \"half_last\" or \"half_first\")");
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Unary<T, T>(node, ctx, *in[0], *out[0], ew::GeluOp{form == "half_first"});
  });
}

// ai.onnx Gelu: com.microsoft Gelu's op ("none") or FastGelu's gelu_new ("tanh"), as on the CPU.
Status OnnxGeluKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const std::string approximate = node.GetString("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return Error(node.Describe() +
                 ": attribute 'approximate' must be \"none\" or \"tanh\", got \"" + approximate +
                 "\"");
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (approximate == "tanh") return Unary<T, T>(node, ctx, *in[0], *out[0], ew::FastGeluOp{true});
    return Unary<T, T>(node, ctx, *in[0], *out[0], ew::GeluOp{});
  });
}

// (dY, other) -> dX for same-size activation gradients (flat, as the CPU).
template <class Op>
Status ActivationGrad(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx,
                      Op op) {
  if (in[1]->numel() != in[0]->numel())
    return Error(node.Describe() + ": inputs have " + std::to_string(in[0]->numel()) + " and " +
                 std::to_string(in[1]->numel()) + " elements");
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = in[0]->numel();
    return Launch(node, ctx, "BinaryKernel", n, BinaryKernel<T, T, T, Op>, out[0]->data<T>(),
                  in[0]->data<T>(), in[1]->data<T>(), n, Strides{}, Strides{}, true, op);
  });
}
template <class Op>
Status ActivationGradKernel(const Node& node, Inputs in, Outputs out,
                            const CudaKernelContext& ctx) {
  return ActivationGrad(node, in, out, ctx, Op{});
}

// QuickGelu and its gradient: alpha defaults to 1.702, as on the CPU (ONNX Runtime's default).
Status QuickGeluKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const ew::QuickGeluOp op{node.GetFloat("alpha", 1.702f)};
  return kTypes.Float(node, in[0]->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Unary<T, T>(node, ctx, *in[0], *out[0], op);
  });
}
Status QuickGeluGradKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  return ActivationGrad(node, in, out, ctx, ew::QuickGeluGradOp{node.GetFloat("alpha", 1.702f)});
}

}  // namespace

void RegisterCudaElementwiseKernels(CudaKernelTable& table) {
  table.Add("", "Add", NumericBinaryKernel<ew::AddOp>);
  table.Add("", "Sub", NumericBinaryKernel<ew::SubOp>);
  table.Add("", "Mul", NumericBinaryKernel<ew::MulOp>);
  table.Add("", "Div", DivKernel);
  table.Add("", "Mod", ModKernel);
  table.Add("", "Pow", PowKernel);
  table.Add("", "Sum", VariadicKernelFn<ew::AddOp>);
  table.Add("", "Min", VariadicKernelFn<ew::MinOp>);
  table.Add("", "Max", VariadicKernelFn<ew::MaxOp>);
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
  table.Add("", "Exp", FloatUnaryKernel<ew::ExpOp>);
  table.Add("", "Log", FloatUnaryKernel<ew::LogOp>);
  table.Add("", "Erf", FloatUnaryKernel<ew::ErfOp>);
  table.Add("", "Tanh", FloatUnaryKernel<ew::TanhOp>);
  table.Add("", "Sigmoid", FloatUnaryKernel<ew::SigmoidOp>);
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

  table.Add("", "Where", WhereKernelFn);
  table.Add("", "Cast", CastKernel);
  table.Add("", "CastLike", CastKernel);
  table.Add("", "Clip", ClipKernelFn);
  table.Add("", "Dropout", DropoutKernelFn);
  table.Add("", "Gelu", OnnxGeluKernel);

  table.Add("com.microsoft", "Gelu", GeluKernel);
  table.Add("com.microsoft", "GeluGrad", ActivationGradKernel<ew::GeluGradOp>);
  table.Add("com.microsoft", "FastGelu", FastGeluKernel);
  table.Add("com.microsoft", "FastGeluGrad", ActivationGradKernel<ew::FastGeluGradOp>);
  table.Add("com.microsoft", "QuickGelu", QuickGeluKernel);
  table.Add("com.microsoft", "QuickGeluGrad", QuickGeluGradKernel);
  table.Add("com.microsoft", "ReluGrad", ActivationGradKernel<ew::ReluGradOp>);
  table.Add("com.microsoft", "SigmoidGrad", ActivationGradKernel<ew::SigmoidGradOp>);
  table.Add("com.microsoft", "TanhGrad", ActivationGradKernel<ew::TanhGradOp>);
  table.Add("com.microsoft", "DropoutGrad", DropoutGradKernelFn);
}

// No elementwise kernel needs scratch.
void RegisterCudaElementwiseWorkspaces(CudaWorkspaceTable&) {}

}  // namespace foundry
