// Shape-op CUDA kernels: the GPU twin of kernels/cpu/shape_ops.cc, same ops, attributes, dtypes
// and checks. Each kernel is a grid-stride loop around one per-element function of
// kernels/cuda/shape_index.cuh (tested on the host against the CPU kernels); the host side here
// only checks, prepares that function's parameters and launches.
//
// - Data movement works on element bytes (1, 2, 4 or 8), as on the CPU, so every dtype moves.
// - Shape-like arguments (Slice's starts, Pad's pads) come from ctx.base.constant_inputs; where
//   the output's shape already says everything (Reshape, Expand, Tile, Split, OneHot, the
//   gradients' `shape` inputs) a run-time input is accepted and the output's shape used.
// - Scalars a kernel needs at run time (Range's start and delta, Trilu's k, Pad's fill value,
//   OneHot's values) are read by the kernel from device memory: no host round trip.
// - Out-of-range indices computed at run time cannot be reported without a round trip: Gather,
//   GatherElements and GatherND write zeros for them and the scatters drop them (never an
//   out-of-bounds access); constant indices are checked on the host with the CPU's message.
// - GatherGrad, GatherElementsGrad, GatherNDGrad, ScatterND and ScatterElements sort their indices
//   by target with a stable counting sort in the workspace (integer atomics only) and fold each
//   target's updates in index order: deterministic, and bitwise the CPU's sums.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/shape_index.cuh"

namespace foundry {
namespace {

using cuda::BlocksFor;
using cuda::kThreads;
using cuda::StreamOf;
using Inputs = std::span<const Tensor* const>;
using Outputs = std::span<Tensor* const>;

#define FOUNDRY_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// --- kernels ---

template <class T>
__global__ void StridedCopyKernel(T* dst, const T* src, cuda::StridedParams p) {
  FOUNDRY_GRID_STRIDE(e, p.n) { cuda::StridedCopyElement(p, e, dst, src); }
}

__global__ void FillPatternKernel(uint8_t* dst, int64_t nbytes, cuda::BytePattern p) {
  FOUNDRY_GRID_STRIDE(b, nbytes) { dst[b] = cuda::PatternByte(p, b); }
}

template <class T>
__global__ void FillValueKernel(T* dst, int64_t n, T v) {
  FOUNDRY_GRID_STRIDE(e, n) { dst[e] = v; }
}

template <class T, class I>
__global__ void GatherCuda(T* dst, const T* src, const I* idx, cuda::GatherParams p, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { cuda::GatherElement(p, e, dst, src, idx); }
}

template <class T, class I>
__global__ void GatherElementsCuda(T* dst, const T* src, const I* idx, cuda::ElementsParams p,
                                   int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { cuda::GatherElementsElement(p, e, dst, src, idx); }
}

template <class T, class I>
__global__ void GatherNDCuda(T* dst, const T* src, const I* idx, cuda::GatherNDParams p,
                             int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { cuda::GatherNDElement(p, e, dst, src, idx); }
}

// The counting sort (shape_index.cuh): keys, counts, prefix sums, placement, index order.
template <class I>
__global__ void GatherGradKeysKernel(int64_t* keys, const I* idx, cuda::GatherParams p) {
  FOUNDRY_GRID_STRIDE(j, p.n) { keys[j] = cuda::GatherGradKey(p, j, idx); }
}

template <class I>
__global__ void GatherElementsGradKeysKernel(int64_t* keys, const I* idx, cuda::ElementsParams p,
                                             int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { keys[e] = cuda::GatherElementsGradKey(p, e, idx); }
}

template <class I>
__global__ void GatherNDGradKeysKernel(int64_t* keys, const I* idx, cuda::GatherNDParams p) {
  FOUNDRY_GRID_STRIDE(t, p.tuples) { keys[t] = cuda::GatherNDRow(p, t, idx); }
}

template <class I>
__global__ void ScatterKeysKernel(int64_t* keys, const I* idx, cuda::ScatterParams p) {
  FOUNDRY_GRID_STRIDE(t, p.tuples) { keys[t] = cuda::ScatterKey(p, t, idx); }
}

template <class I>
__global__ void ScatterElementsKeysKernel(int64_t* keys, const I* idx, cuda::ElementsParams p,
                                          int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { keys[e] = cuda::ScatterElementsKey(p, e, idx); }
}

// Integer atomics: the counts are the same whatever the order of the additions.
__global__ void CountKeysKernel(unsigned long long* count, const int64_t* keys, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) {
    if (keys[e] >= 0) atomicAdd(count + keys[e], 1ull);
  }
}

// Exclusive prefix sums of count into start[0..slots] in one block: each thread sums a contiguous
// chunk, thread 0 scans the chunk sums, each thread writes its chunk.
constexpr int kScanThreads = 1024;
__global__ void ScanCountsKernel(int64_t* start, const unsigned long long* count, int64_t slots) {
  __shared__ int64_t part[kScanThreads];
  const int t = threadIdx.x;
  const int64_t chunk = (slots + kScanThreads - 1) / kScanThreads;
  const int64_t lo = t * chunk < slots ? t * chunk : slots;
  const int64_t hi = lo + chunk < slots ? lo + chunk : slots;
  int64_t sum = 0;
  for (int64_t i = lo; i < hi; ++i) sum += static_cast<int64_t>(count[i]);
  part[t] = sum;
  __syncthreads();
  if (t == 0) {
    int64_t run = 0;
    for (int i = 0; i < kScanThreads; ++i) {
      const int64_t c = part[i];
      part[i] = run;
      run += c;
    }
    start[slots] = run;
  }
  __syncthreads();
  int64_t run = part[t];
  for (int64_t i = lo; i < hi; ++i) {
    start[i] = run;
    run += static_cast<int64_t>(count[i]);
  }
}

// The order within a segment depends on the atomics' order; OrderSegmentsKernel undoes that.
__global__ void PlaceKeysKernel(int64_t* unsorted, unsigned long long* cursor, const int64_t* start,
                                const int64_t* keys, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) {
    const int64_t k = keys[e];
    if (k >= 0) unsorted[start[k] + static_cast<int64_t>(atomicAdd(cursor + k, 1ull))] = e;
  }
}

__global__ void OrderSegmentsKernel(int64_t* sorted, const int64_t* unsorted, const int64_t* start,
                                    const int64_t* keys, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) {
    const int64_t k = keys[e];
    if (k >= 0) sorted[cuda::SortedPosition(unsorted, start[k], start[k + 1], e)] = e;
  }
}

template <class T>
__global__ void GatherGradValueKernel(T* dx, const int64_t* sorted, const int64_t* start,
                                      const T* dy, cuda::GatherParams p, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { dx[e] = cuda::GatherGradValue(p, e, sorted, start, dy); }
}

template <class T>
__global__ void GatherElementsGradValueKernel(T* dx, const int64_t* sorted, const int64_t* start,
                                              const T* dy, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { dx[e] = cuda::GatherElementsGradValue(e, sorted, start, dy); }
}

template <class T>
__global__ void GatherNDGradValueKernel(T* dx, const int64_t* sorted, const int64_t* start,
                                        const T* dy, cuda::GatherNDParams p, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { dx[e] = cuda::GatherNDGradValue(p, e, sorted, start, dy); }
}

template <class T>
__global__ void ScatterValueKernel(T* dst, const int64_t* sorted, const int64_t* start, const T* x,
                                   const T* upd, cuda::ScatterParams p, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) { dst[e] = cuda::ScatterValue(p, e, sorted, start, x, upd); }
}

template <class T>
__global__ void ScatterElementsValueKernel(T* dst, const int64_t* sorted, const int64_t* start,
                                           const T* x, const T* upd, int reduction, int64_t n) {
  FOUNDRY_GRID_STRIDE(e, n) {
    dst[e] = cuda::ScatterElementsValue(reduction, e, sorted, start, x, upd);
  }
}

// k from device memory when given there (k_dev), else p.k.
template <class T>
__global__ void TriluKernel(T* dst, const T* src, const int64_t* k_dev, cuda::TriluParams p,
                            int64_t n) {
  const int64_t k = k_dev ? *k_dev : p.k;
  FOUNDRY_GRID_STRIDE(e, n) { cuda::TriluElement(p, k, e, dst, src); }
}

template <class T>
__global__ void PadKernel(T* dst, const T* src, const T* fill_dev, T fill, cuda::PadParams p,
                          int64_t n) {
  const T v = fill_dev ? *fill_dev : fill;
  FOUNDRY_GRID_STRIDE(e, n) { cuda::PadElement(p, e, dst, src, v); }
}

template <class T, class I>
__global__ void OneHotKernel(T* dst, const I* idx, const T* values, cuda::OneHotParams p,
                             int64_t n) {
  const T off = values[0], on = values[1];
  FOUNDRY_GRID_STRIDE(e, n) { dst[e] = cuda::OneHotOn(p, e, idx) ? on : off; }
}

template <class T>
__global__ void RangeIntKernel(T* dst, const T* start, const T* delta, int64_t n) {
  const T s = *start, d = *delta;
  FOUNDRY_GRID_STRIDE(i, n) { dst[i] = cuda::RangeIntElement(s, d, i); }
}

// One thread: floating-point ranges are accumulated step by step, as on the CPU.
template <class T>
__global__ void RangeAccumulateKernel(T* dst, const T* start, const T* delta, int64_t n) {
  cuda::RangeAccumulate(*start, *delta, n, dst);
}

// --- dispatch ---

template <class F>
Status ByElementSize(const Node& node, DType t, F&& f) {
  switch (DTypeSize(t)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      return ShapeOpError(node, "unsupported element type " + std::string(DTypeName(t)));
  }
}

template <class F>
Status ByIndexType(const Node& node, DType t, F&& f) {
  if (t == DType::kInt64) return f(int64_t{});
  if (t == DType::kInt32) return f(int32_t{});
  return ShapeOpError(node, "indices must be int64 or int32, got " + std::string(DTypeName(t)));
}

template <class F>
Status ByFloatType(const Node& node, DType t, F&& f) {
  if (t == DType::kFloat32) return f(float{});
  if (t == DType::kFloat64) return f(double{});
  return ShapeOpError(node, "dY must be f32 or f64, got " + std::string(DTypeName(t)));
}

template <class T>
T* Data(Tensor& t) {
  return static_cast<T*>(t.raw());
}
template <class T>
const T* Data(const Tensor& t) {
  return static_cast<const T*>(t.raw());
}

Status LaunchStrided(const Node& node, const cuda::StridedParams& p, Tensor& dst, const Tensor& src,
                     const CudaKernelContext& ctx) {
  if (p.n == 0) return Status::Ok();
  return ByElementSize(node, dst.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    StridedCopyKernel<T>
        <<<BlocksFor(p.n), kThreads, 0, StreamOf(ctx)>>>(Data<T>(dst), Data<T>(src), p);
    FOUNDRY_CUDA_LAUNCHED(node, "StridedCopyKernel");
    return Status::Ok();
  });
}

Status LaunchPattern(const Node& node, Tensor& out, const cuda::BytePattern& p,
                     const CudaKernelContext& ctx) {
  const int64_t nbytes = static_cast<int64_t>(out.nbytes());
  if (nbytes == 0) return Status::Ok();
  FillPatternKernel<<<BlocksFor(nbytes), kThreads, 0, StreamOf(ctx)>>>(Data<uint8_t>(out), nbytes,
                                                                       p);
  FOUNDRY_CUDA_LAUNCHED(node, "FillPatternKernel");
  return Status::Ok();
}

std::span<const Tensor* const> Constants(const CudaKernelContext& ctx) {
  return ctx.base.constant_inputs;
}

// --- creation and inspection ---

Status ConstantKernel(const Node& node, Inputs, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(cuda::ConstantBytes c, cuda::ConstantPrep(node, *out[0]));
  if (c.is_small) return LaunchPattern(node, *out[0], c.small, ctx);
  // The source is the node's attribute storage, which outlives the step (not a temporary).
  FOUNDRY_CUDA_CHECK(node, cudaMemcpyAsync(out[0]->raw(), c.data, c.nbytes, cudaMemcpyHostToDevice,
                                           StreamOf(ctx)));
  return Status::Ok();
}

Status ShapeKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(std::vector<int64_t> dims, cuda::ShapeValues(node, *in[0], *out[0]));
  cuda::BytePattern p;
  if (dims.size() * sizeof(int64_t) > sizeof(p.bytes))
    return ShapeOpError(node, "the cuda Shape kernel takes inputs of rank <= 32");
  if (dims.empty()) return Status::Ok();
  p.n = static_cast<int64_t>(dims.size() * sizeof(int64_t));
  std::memcpy(p.bytes, dims.data(), p.n);
  return LaunchPattern(node, *out[0], p, ctx);
}

Status SizeKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], DType::kInt64, {}));
  const int64_t n = NumElements(in[0]->shape());
  cuda::BytePattern p;
  p.n = sizeof(n);
  std::memcpy(p.bytes, &n, sizeof(n));
  return LaunchPattern(node, *out[0], p, ctx);
}

Status ConstantOfShapeKernel(const Node& node, Inputs, Outputs out, const CudaKernelContext& ctx) {
  cuda::BytePattern v;
  RETURN_IF_ERROR(
      cuda::ConstantOfShapePrep(node, cuda::ConstantAt(Constants(ctx), 0), *out[0], &v));
  Tensor& y = *out[0];
  if (y.numel() == 0) return Status::Ok();
  if (std::all_of(v.bytes, v.bytes + v.n, [](uint8_t b) { return b == 0; })) {
    FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(y.raw(), 0, y.nbytes(), StreamOf(ctx)));
    return Status::Ok();
  }
  return ByElementSize(node, y.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    T value;
    std::memcpy(&value, v.bytes, sizeof(T));
    FillValueKernel<T>
        <<<BlocksFor(y.numel()), kThreads, 0, StreamOf(ctx)>>>(Data<T>(y), y.numel(), value);
    FOUNDRY_CUDA_LAUNCHED(node, "FillValueKernel");
    return Status::Ok();
  });
}

template <class T>
Status LaunchRange(const Node& node, Inputs in, Tensor& y, const CudaKernelContext& ctx) {
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  if constexpr (std::is_floating_point_v<T>) {
    RangeAccumulateKernel<T>
        <<<1, 1, 0, StreamOf(ctx)>>>(Data<T>(y), Data<T>(*in[0]), Data<T>(*in[2]), n);
    FOUNDRY_CUDA_LAUNCHED(node, "RangeAccumulateKernel");
  } else {
    RangeIntKernel<T><<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(Data<T>(y), Data<T>(*in[0]),
                                                                    Data<T>(*in[2]), n);
    FOUNDRY_CUDA_LAUNCHED(node, "RangeIntKernel");
  }
  return Status::Ok();
}

Status RangeKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  RETURN_IF_ERROR(cuda::RangePrep(node, in, Constants(ctx), *out[0]));
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return LaunchRange<float>(node, in, *out[0], ctx);
    case DType::kFloat64:
      return LaunchRange<double>(node, in, *out[0], ctx);
    case DType::kInt16:
      return LaunchRange<int16_t>(node, in, *out[0], ctx);
    case DType::kInt32:
      return LaunchRange<int32_t>(node, in, *out[0], ctx);
    default:
      return LaunchRange<int64_t>(node, in, *out[0], ctx);
  }
}

// --- reshaping: the bytes stay as they are ---

Status ViewKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor* reshape_to =
      node.op_type == "Reshape" ? cuda::ConstantAt(Constants(ctx), 1) : nullptr;
  RETURN_IF_ERROR(cuda::ViewPrep(node, *in[0], reshape_to, *out[0]));
  // The planner made the output a view of the input: the bytes are already there.
  if (in[0]->nbytes() && out[0]->raw() != in[0]->raw())
    FOUNDRY_CUDA_CHECK(node, cudaMemcpyAsync(out[0]->raw(), in[0]->raw(), in[0]->nbytes(),
                                             cudaMemcpyDeviceToDevice, StreamOf(ctx)));
  return Status::Ok();
}

// --- moving elements ---

Status TransposeKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(cuda::StridedParams p, cuda::TransposeStrided(node, *in[0], *out[0]));
  return LaunchStrided(node, p, *out[0], *in[0], ctx);
}

Status ExpandKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(cuda::StridedParams p,
                   cuda::ExpandStrided(node, *in[0], cuda::ConstantAt(Constants(ctx), 1), *out[0]));
  // A view (the planner aliases it only when the element count is kept): nothing moves.
  if (out[0]->raw() == in[0]->raw()) return Status::Ok();
  return LaunchStrided(node, p, *out[0], *in[0], ctx);
}

Status TileKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(cuda::StridedParams p,
                   cuda::TileStrided(node, *in[0], cuda::ConstantAt(Constants(ctx), 1), *out[0]));
  return LaunchStrided(node, p, *out[0], *in[0], ctx);
}

Status ConcatKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(std::vector<cuda::StridedParams> copies, cuda::ConcatStrided(node, in, *out[0]));
  for (size_t i = 0; i < copies.size(); ++i)
    RETURN_IF_ERROR(LaunchStrided(node, copies[i], *out[0], *in[i], ctx));
  return Status::Ok();
}

Status SplitKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const bool split_input = cuda::Present(in, 1);
  ASSIGN_OR_RETURN(
      std::vector<cuda::StridedParams> copies,
      cuda::SplitStrided(node, *in[0], split_input,
                         split_input ? cuda::ConstantAt(Constants(ctx), 1) : nullptr, out));
  for (size_t i = 0; i < copies.size(); ++i)
    if (out[i]) RETURN_IF_ERROR(LaunchStrided(node, copies[i], *out[i], *in[0], ctx));
  return Status::Ok();
}

Status SliceKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(cuda::StridedParams p, cuda::SliceStrided(node, in, Constants(ctx), *out[0]));
  return LaunchStrided(node, p, *out[0], *in[0], ctx);
}

// SliceGrad (dY, shape, starts, ends[, axes, steps]) -> dX: zeros, then dY at the slice.
Status SliceGradKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(cuda::StridedParams p,
                   cuda::SliceGradStrided(node, in, Constants(ctx), *out[0]));
  if (out[0]->nbytes())
    FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(out[0]->raw(), 0, out[0]->nbytes(), StreamOf(ctx)));
  return LaunchStrided(node, p, *out[0], *in[0], ctx);
}

Status GatherKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  Tensor& y = *out[0];
  ASSIGN_OR_RETURN(cuda::GatherParams g,
                   cuda::GatherPrep(node, x, idx, cuda::ConstantAt(Constants(ctx), 1), y));
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  return ByElementSize(node, x.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    return ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
      using I = decltype(itag);
      GatherCuda<T, I><<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(Data<T>(y), Data<T>(x),
                                                                     Data<I>(idx), g, n);
      FOUNDRY_CUDA_LAUNCHED(node, "GatherCuda");
      return Status::Ok();
    });
  });
}

Status GatherElementsKernel(const Node& node, Inputs in, Outputs out,
                            const CudaKernelContext& ctx) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  Tensor& y = *out[0];
  RETURN_IF_ERROR(CheckOutputType(node, y, x.dtype(), idx.shape()));
  ASSIGN_OR_RETURN(cuda::ElementsParams p,
                   cuda::ElementsPrep(node, x.shape(), idx, cuda::ConstantAt(Constants(ctx), 1)));
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  return ByElementSize(node, x.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    return ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
      using I = decltype(itag);
      GatherElementsCuda<T, I><<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(Data<T>(y), Data<T>(x),
                                                                             Data<I>(idx), p, n);
      FOUNDRY_CUDA_LAUNCHED(node, "GatherElementsCuda");
      return Status::Ok();
    });
  });
}

Status GatherNDKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  Tensor& y = *out[0];
  ASSIGN_OR_RETURN(cuda::GatherNDParams p,
                   cuda::GatherNDPrep(node, x, idx, cuda::ConstantAt(Constants(ctx), 1), y));
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  return ByElementSize(node, x.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    return ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
      using I = decltype(itag);
      GatherNDCuda<T, I><<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(Data<T>(y), Data<T>(x),
                                                                       Data<I>(idx), p, n);
      FOUNDRY_CUDA_LAUNCHED(node, "GatherNDCuda");
      return Status::Ok();
    });
  });
}

// The counting sort's arrays in the workspace, after `keys` has been filled (n keys in [0, slots)
// or -1): fills start (slots + 1) and sorted (n) and leaves them there.
struct Segments {
  int64_t* keys;
  unsigned long long* count;
  int64_t* start;
  int64_t* unsorted;
  int64_t* sorted;
};

Segments SegmentsIn(const CudaKernelContext& ctx, const cuda::SegmentLayout& l) {
  std::byte* w = ctx.base.workspace.data();
  return Segments{
      reinterpret_cast<int64_t*>(w + l.keys), reinterpret_cast<unsigned long long*>(w + l.count),
      reinterpret_cast<int64_t*>(w + l.start), reinterpret_cast<int64_t*>(w + l.unsorted),
      reinterpret_cast<int64_t*>(w + l.sorted)};
}

Status SortKeys(const Node& node, const Segments& s, int64_t n, int64_t slots,
                const CudaKernelContext& ctx) {
  cudaStream_t stream = StreamOf(ctx);
  const size_t count_bytes = static_cast<size_t>(slots) * sizeof(unsigned long long);
  FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(s.count, 0, count_bytes, stream));
  CountKeysKernel<<<BlocksFor(n), kThreads, 0, stream>>>(s.count, s.keys, n);
  FOUNDRY_CUDA_LAUNCHED(node, "CountKeysKernel");
  ScanCountsKernel<<<1, kScanThreads, 0, stream>>>(s.start, s.count, slots);
  FOUNDRY_CUDA_LAUNCHED(node, "ScanCountsKernel");
  FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(s.count, 0, count_bytes, stream));
  PlaceKeysKernel<<<BlocksFor(n), kThreads, 0, stream>>>(s.unsorted, s.count, s.start, s.keys, n);
  FOUNDRY_CUDA_LAUNCHED(node, "PlaceKeysKernel");
  OrderSegmentsKernel<<<BlocksFor(n), kThreads, 0, stream>>>(s.sorted, s.unsorted, s.start, s.keys,
                                                             n);
  FOUNDRY_CUDA_LAUNCHED(node, "OrderSegmentsKernel");
  return Status::Ok();
}

Status CheckWorkspace(const Node& node, const cuda::SegmentLayout& l,
                      const CudaKernelContext& ctx) {
  if (static_cast<int64_t>(ctx.base.workspace.size()) >= l.bytes) return Status::Ok();
  return ShapeOpError(node, "needs " + std::to_string(l.bytes) + " bytes of workspace, was given " +
                                std::to_string(ctx.base.workspace.size()));
}

Status ZeroOutput(const Node& node, Tensor& y, const CudaKernelContext& ctx) {
  if (y.nbytes()) FOUNDRY_CUDA_CHECK(node, cudaMemsetAsync(y.raw(), 0, y.nbytes(), StreamOf(ctx)));
  return Status::Ok();
}

// GatherGrad (shape, indices, dY) -> dX.
Status GatherGradKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor& idx = *in[1];
  const Tensor& dy = *in[2];
  Tensor& dx = *out[0];
  ASSIGN_OR_RETURN(cuda::GatherParams g,
                   cuda::GatherGradPrep(node, cuda::ConstantAt(Constants(ctx), 0), idx,
                                        cuda::ConstantAt(Constants(ctx), 1), dy, dx));
  if (dx.numel() == 0) return Status::Ok();
  if (g.n == 0) return ZeroOutput(node, dx, ctx);
  const cuda::SegmentLayout l = cuda::SegmentWorkspace(g.n, g.dim);
  RETURN_IF_ERROR(CheckWorkspace(node, l, ctx));
  const Segments s = SegmentsIn(ctx, l);
  RETURN_IF_ERROR(ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
    using I = decltype(itag);
    GatherGradKeysKernel<I>
        <<<BlocksFor(g.n), kThreads, 0, StreamOf(ctx)>>>(s.keys, Data<I>(idx), g);
    FOUNDRY_CUDA_LAUNCHED(node, "GatherGradKeysKernel");
    return Status::Ok();
  }));
  RETURN_IF_ERROR(SortKeys(node, s, g.n, g.dim, ctx));
  return ByFloatType(node, dy.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    GatherGradValueKernel<T><<<BlocksFor(dx.numel()), kThreads, 0, StreamOf(ctx)>>>(
        Data<T>(dx), s.sorted, s.start, Data<T>(dy), g, dx.numel());
    FOUNDRY_CUDA_LAUNCHED(node, "GatherGradValueKernel");
    return Status::Ok();
  });
}

// GatherElementsGrad (dY, shape, indices) -> dX.
Status GatherElementsGradKernel(const Node& node, Inputs in, Outputs out,
                                const CudaKernelContext& ctx) {
  const Tensor& dy = *in[0];
  const Tensor& idx = *in[2];
  Tensor& dx = *out[0];
  ASSIGN_OR_RETURN(cuda::ElementsParams p,
                   cuda::GatherElementsGradPrep(node, dy, cuda::ConstantAt(Constants(ctx), 1), idx,
                                                cuda::ConstantAt(Constants(ctx), 2), dx));
  const int64_t n = idx.numel();
  if (dx.numel() == 0) return Status::Ok();
  if (n == 0) return ZeroOutput(node, dx, ctx);
  const cuda::SegmentLayout l = cuda::SegmentWorkspace(n, dx.numel());
  RETURN_IF_ERROR(CheckWorkspace(node, l, ctx));
  const Segments s = SegmentsIn(ctx, l);
  RETURN_IF_ERROR(ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
    using I = decltype(itag);
    GatherElementsGradKeysKernel<I>
        <<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(s.keys, Data<I>(idx), p, n);
    FOUNDRY_CUDA_LAUNCHED(node, "GatherElementsGradKeysKernel");
    return Status::Ok();
  }));
  RETURN_IF_ERROR(SortKeys(node, s, n, dx.numel(), ctx));
  return ByFloatType(node, dy.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    GatherElementsGradValueKernel<T><<<BlocksFor(dx.numel()), kThreads, 0, StreamOf(ctx)>>>(
        Data<T>(dx), s.sorted, s.start, Data<T>(dy), dx.numel());
    FOUNDRY_CUDA_LAUNCHED(node, "GatherElementsGradValueKernel");
    return Status::Ok();
  });
}

// GatherNDGrad (shape, indices, dY) -> dX: one key per index tuple, one slot per dX row.
Status GatherNDGradKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor& idx = *in[1];
  const Tensor& dy = *in[2];
  Tensor& dx = *out[0];
  ASSIGN_OR_RETURN(cuda::GatherNDParams p,
                   cuda::GatherNDGradPrep(node, cuda::ConstantAt(Constants(ctx), 0), idx,
                                          cuda::ConstantAt(Constants(ctx), 1), dy, dx));
  if (dx.numel() == 0) return Status::Ok();
  if (p.tuples == 0) return ZeroOutput(node, dx, ctx);
  const int64_t rows = dx.numel() / p.slice;
  const cuda::SegmentLayout l = cuda::SegmentWorkspace(p.tuples, rows);
  RETURN_IF_ERROR(CheckWorkspace(node, l, ctx));
  const Segments s = SegmentsIn(ctx, l);
  RETURN_IF_ERROR(ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
    using I = decltype(itag);
    GatherNDGradKeysKernel<I>
        <<<BlocksFor(p.tuples), kThreads, 0, StreamOf(ctx)>>>(s.keys, Data<I>(idx), p);
    FOUNDRY_CUDA_LAUNCHED(node, "GatherNDGradKeysKernel");
    return Status::Ok();
  }));
  RETURN_IF_ERROR(SortKeys(node, s, p.tuples, rows, ctx));
  return ByFloatType(node, dy.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    GatherNDGradValueKernel<T><<<BlocksFor(dx.numel()), kThreads, 0, StreamOf(ctx)>>>(
        Data<T>(dx), s.sorted, s.start, Data<T>(dy), p, dx.numel());
    FOUNDRY_CUDA_LAUNCHED(node, "GatherNDGradValueKernel");
    return Status::Ok();
  });
}

template <class T>
Status LaunchScatterValues(const Node& node, const cuda::ScatterParams& p, const Segments& s,
                           const Tensor& x, const Tensor& upd, Tensor& y,
                           const CudaKernelContext& ctx) {
  ScatterValueKernel<T><<<BlocksFor(y.numel()), kThreads, 0, StreamOf(ctx)>>>(
      Data<T>(y), s.sorted, s.start, Data<T>(x), Data<T>(upd), p, y.numel());
  FOUNDRY_CUDA_LAUNCHED(node, "ScatterValueKernel");
  return Status::Ok();
}

Status ScatterNDKernel(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  const Tensor& upd = *in[2];
  Tensor& y = *out[0];
  ASSIGN_OR_RETURN(cuda::ScatterParams p,
                   cuda::ScatterPrep(node, x, idx, cuda::ConstantAt(Constants(ctx), 1), upd, y));
  if (y.numel() == 0) return Status::Ok();
  if (p.tuples == 0) {
    if (y.raw() != x.raw())
      FOUNDRY_CUDA_CHECK(node, cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(),
                                               cudaMemcpyDeviceToDevice, StreamOf(ctx)));
    return Status::Ok();
  }
  const cuda::SegmentLayout l = cuda::SegmentWorkspace(p.tuples, p.slots);
  RETURN_IF_ERROR(CheckWorkspace(node, l, ctx));
  const Segments s = SegmentsIn(ctx, l);
  RETURN_IF_ERROR(ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
    using I = decltype(itag);
    ScatterKeysKernel<I>
        <<<BlocksFor(p.tuples), kThreads, 0, StreamOf(ctx)>>>(s.keys, Data<I>(idx), p);
    FOUNDRY_CUDA_LAUNCHED(node, "ScatterKeysKernel");
    return Status::Ok();
  }));
  RETURN_IF_ERROR(SortKeys(node, s, p.tuples, p.slots, ctx));
  if (p.reduction == cuda::kScatterNone)
    return ByElementSize(node, x.dtype(), [&](auto tag) -> Status {
      return LaunchScatterValues<decltype(tag)>(node, p, s, x, upd, y, ctx);
    });
  switch (x.dtype()) {
    case DType::kFloat32:
      return LaunchScatterValues<float>(node, p, s, x, upd, y, ctx);
    case DType::kFloat64:
      return LaunchScatterValues<double>(node, p, s, x, upd, y, ctx);
    case DType::kInt32:
      return LaunchScatterValues<int32_t>(node, p, s, x, upd, y, ctx);
    default:
      return LaunchScatterValues<int64_t>(node, p, s, x, upd, y, ctx);
  }
}

template <class T>
Status LaunchScatterElementsValues(const Node& node, int reduction, const Segments& s,
                                   const Tensor& x, const Tensor& upd, Tensor& y,
                                   const CudaKernelContext& ctx) {
  ScatterElementsValueKernel<T><<<BlocksFor(y.numel()), kThreads, 0, StreamOf(ctx)>>>(
      Data<T>(y), s.sorted, s.start, Data<T>(x), Data<T>(upd), reduction, y.numel());
  FOUNDRY_CUDA_LAUNCHED(node, "ScatterElementsValueKernel");
  return Status::Ok();
}

// ScatterElements and Scatter (data, indices, updates): one key per index element (the data
// offset it targets), one slot per data element.
Status ScatterElementsKernel(const Node& node, Inputs in, Outputs out,
                             const CudaKernelContext& ctx) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  const Tensor& upd = *in[2];
  Tensor& y = *out[0];
  int reduction = cuda::kScatterNone;
  ASSIGN_OR_RETURN(cuda::ElementsParams p,
                   cuda::ScatterElementsPrep(node, x, idx, cuda::ConstantAt(Constants(ctx), 1), upd,
                                             y, &reduction));
  const int64_t n = idx.numel();
  if (y.numel() == 0) return Status::Ok();
  if (n == 0) {
    if (y.raw() != x.raw())
      FOUNDRY_CUDA_CHECK(node, cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(),
                                               cudaMemcpyDeviceToDevice, StreamOf(ctx)));
    return Status::Ok();
  }
  const cuda::SegmentLayout l = cuda::SegmentWorkspace(n, y.numel());
  RETURN_IF_ERROR(CheckWorkspace(node, l, ctx));
  const Segments s = SegmentsIn(ctx, l);
  RETURN_IF_ERROR(ByIndexType(node, idx.dtype(), [&](auto itag) -> Status {
    using I = decltype(itag);
    ScatterElementsKeysKernel<I>
        <<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(s.keys, Data<I>(idx), p, n);
    FOUNDRY_CUDA_LAUNCHED(node, "ScatterElementsKeysKernel");
    return Status::Ok();
  }));
  RETURN_IF_ERROR(SortKeys(node, s, n, y.numel(), ctx));
  if (reduction == cuda::kScatterNone)
    return ByElementSize(node, x.dtype(), [&](auto tag) -> Status {
      return LaunchScatterElementsValues<decltype(tag)>(node, reduction, s, x, upd, y, ctx);
    });
  switch (x.dtype()) {
    case DType::kFloat32:
      return LaunchScatterElementsValues<float>(node, reduction, s, x, upd, y, ctx);
    case DType::kFloat64:
      return LaunchScatterElementsValues<double>(node, reduction, s, x, upd, y, ctx);
    case DType::kInt32:
      return LaunchScatterElementsValues<int32_t>(node, reduction, s, x, upd, y, ctx);
    default:
      return LaunchScatterElementsValues<int64_t>(node, reduction, s, x, upd, y, ctx);
  }
}

Status TriluKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor& x = *in[0];
  Tensor& y = *out[0];
  if (x.rank() < 2)
    return ShapeOpError(node, "input must have rank >= 2, got " + ShapeToString(x.shape()));
  RETURN_IF_ERROR(CheckOutputType(node, y, x.dtype(), x.shape()));
  cuda::TriluParams p;
  p.rows = x.shape()[x.rank() - 2];
  p.cols = x.shape()[x.rank() - 1];
  p.upper = node.GetInt("upper", 1) != 0 ? 1 : 0;
  const int64_t* k_dev = nullptr;
  if (cuda::Present(in, 1)) {
    if (in[1]->numel() != 1) return ShapeOpError(node, "k must be a scalar");
    if (const Tensor* k = cuda::ConstantAt(Constants(ctx), 1)) {
      p.k = k->GetAsInt64(0);
    } else if (in[1]->dtype() == DType::kInt64) {
      k_dev = Data<int64_t>(*in[1]);
    } else {
      return ShapeOpError(node, "k computed at run time must be int64 on the cuda backend, got " +
                                    std::string(DTypeName(in[1]->dtype())));
    }
  }
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  return ByElementSize(node, x.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    TriluKernel<T>
        <<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(Data<T>(y), Data<T>(x), k_dev, p, n);
    FOUNDRY_CUDA_LAUNCHED(node, "TriluKernel");
    return Status::Ok();
  });
}

Status PadKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  uint64_t fill_bits = 0;
  ASSIGN_OR_RETURN(cuda::PadParams p, cuda::PadPrep(node, in, Constants(ctx), *out[0], &fill_bits));
  Tensor& y = *out[0];
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  const Tensor* fill_input = cuda::Present(in, 2) ? in[2] : nullptr;
  return ByElementSize(node, y.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    T fill;
    std::memcpy(&fill, &fill_bits, sizeof(T));
    PadKernel<T><<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(
        Data<T>(y), Data<T>(*in[0]), fill_input ? Data<T>(*fill_input) : nullptr, fill, p, n);
    FOUNDRY_CUDA_LAUNCHED(node, "PadKernel");
    return Status::Ok();
  });
}

Status OneHotKernelFn(const Node& node, Inputs in, Outputs out, const CudaKernelContext& ctx) {
  const Tensor& idx = *in[0];
  Tensor& y = *out[0];
  ASSIGN_OR_RETURN(
      cuda::OneHotParams p,
      cuda::OneHotPrep(node, idx, *in[1], cuda::ConstantAt(Constants(ctx), 1), *in[2], y));
  const int64_t n = y.numel();
  if (n == 0) return Status::Ok();
  return ByElementSize(node, y.dtype(), [&](auto tag) -> Status {
    using T = decltype(tag);
    auto launch = [&](auto itag) -> Status {
      using I = decltype(itag);
      OneHotKernel<T, I><<<BlocksFor(n), kThreads, 0, StreamOf(ctx)>>>(Data<T>(y), Data<I>(idx),
                                                                       Data<T>(*in[2]), p, n);
      FOUNDRY_CUDA_LAUNCHED(node, "OneHotKernel");
      return Status::Ok();
    };
    switch (idx.dtype()) {
      case DType::kInt64:
        return launch(int64_t{});
      case DType::kInt32:
        return launch(int32_t{});
      case DType::kFloat32:
        return launch(float{});
      default:
        return launch(double{});
    }
  });
}

// --- workspace rows: the counting sort's arrays (SegmentWorkspace) ---

int64_t NumOf(const OperandType& t) { return t.shape ? NumElements(*t.shape) : -1; }

// GatherGrad (shape, indices, dY) -> dX: one key per index, one slot per row of dX's axis.
int64_t GatherGradWorkspace(const Node& node, std::span<const OperandType> in,
                            std::span<const OperandType> out) {
  if (in.size() < 2 || out.empty() || !in[1].shape || !out[0].shape) return 0;
  const Shape& dx = *out[0].shape;
  auto axis = NormalizeAxis(node.GetInt("axis", 0), static_cast<int64_t>(dx.size()));
  if (!axis.ok() || NumElements(dx) == 0) return 0;
  return cuda::SegmentWorkspace(NumOf(in[1]), dx[*axis]).bytes;
}

// GatherElementsGrad (dY, shape, indices) -> dX: one key per index, one slot per dX element.
int64_t GatherElementsGradWorkspace(const Node&, std::span<const OperandType> in,
                                    std::span<const OperandType> out) {
  if (in.size() < 3 || out.empty() || !in[2].shape || !out[0].shape) return 0;
  if (NumOf(out[0]) == 0) return 0;
  return cuda::SegmentWorkspace(NumOf(in[2]), NumOf(out[0])).bytes;
}

// GatherNDGrad (shape, indices, dY) -> dX: one key per index tuple, one slot per dX row of
// data[b + k:] elements.
int64_t GatherNDGradWorkspace(const Node& node, std::span<const OperandType> in,
                              std::span<const OperandType> out) {
  if (in.size() < 2 || out.empty() || !in[1].shape || !out[0].shape || in[1].shape->empty())
    return 0;
  const Shape& dx = *out[0].shape;
  const int64_t k = in[1].shape->back();
  const int64_t b = node.GetInt("batch_dims", 0);
  const int64_t r = static_cast<int64_t>(dx.size());
  if (k <= 0 || b < 0 || b >= r || k > r - b || NumElements(dx) == 0) return 0;
  int64_t slice = 1;
  for (size_t d = b + k; d < dx.size(); ++d) slice *= dx[d];
  return cuda::SegmentWorkspace(NumOf(in[1]) / k, NumElements(dx) / slice).bytes;
}

// ScatterND (data, indices, updates): one key per index tuple, one slot per data[:k] position.
int64_t ScatterNDWorkspace(const Node&, std::span<const OperandType> in,
                           std::span<const OperandType>) {
  if (in.size() < 2 || !in[0].shape || !in[1].shape || in[1].shape->empty()) return 0;
  const Shape& x = *in[0].shape;
  const int64_t k = in[1].shape->back();
  if (k <= 0 || k > static_cast<int64_t>(x.size()) || NumElements(x) == 0) return 0;
  int64_t slots = 1;
  for (int64_t d = 0; d < k; ++d) slots *= x[d];
  return cuda::SegmentWorkspace(NumOf(in[1]) / k, slots).bytes;
}

// ScatterElements (data, indices, updates): one key per index element, one slot per data element.
int64_t ScatterElementsWorkspace(const Node&, std::span<const OperandType> in,
                                 std::span<const OperandType>) {
  if (in.size() < 2 || !in[0].shape || !in[1].shape || NumOf(in[0]) == 0) return 0;
  return cuda::SegmentWorkspace(NumOf(in[1]), NumOf(in[0])).bytes;
}

}  // namespace

void RegisterCudaShapeOpKernels(CudaKernelTable& table) {
  table.Add("", "Constant", ConstantKernel);
  table.Add("", "Shape", ShapeKernel);
  table.Add("", "Size", SizeKernel);
  table.Add("", "ConstantOfShape", ConstantOfShapeKernel);
  table.Add("", "Range", RangeKernel);
  table.Add("", "Reshape", ViewKernel);
  table.Add("", "Flatten", ViewKernel);
  table.Add("", "Squeeze", ViewKernel);
  table.Add("", "Unsqueeze", ViewKernel);
  table.Add("", "Transpose", TransposeKernel);
  table.Add("", "Expand", ExpandKernel);
  table.Add("", "Tile", TileKernel);
  table.Add("", "Concat", ConcatKernel);
  table.Add("", "Split", SplitKernel);
  table.Add("", "Slice", SliceKernel);
  table.Add("", "Gather", GatherKernel);
  table.Add("", "GatherElements", GatherElementsKernel);
  table.Add("", "GatherND", GatherNDKernel);
  table.Add("", "Trilu", TriluKernelFn);
  table.Add("", "Pad", PadKernelFn);
  table.Add("", "OneHot", OneHotKernelFn);
  table.Add("", "ScatterND", ScatterNDKernel);
  table.Add("", "ScatterElements", ScatterElementsKernel);
  table.Add("", "Scatter", ScatterElementsKernel);
  table.Add("com.microsoft", "SliceGrad", SliceGradKernel);
  table.Add("com.microsoft", "GatherGrad", GatherGradKernel);
  table.Add("com.microsoft", "GatherElementsGrad", GatherElementsGradKernel);
  table.Add("com.microsoft", "GatherNDGrad", GatherNDGradKernel);
}

void RegisterCudaShapeOpWorkspaces(CudaWorkspaceTable& table) {
  table.Add("com.microsoft", "GatherGrad", GatherGradWorkspace);
  table.Add("com.microsoft", "GatherElementsGrad", GatherElementsGradWorkspace);
  table.Add("com.microsoft", "GatherNDGrad", GatherNDGradWorkspace);
  table.Add("", "ScatterND", ScatterNDWorkspace);
  table.Add("", "ScatterElements", ScatterElementsWorkspace);
  table.Add("", "Scatter", ScatterElementsWorkspace);
}

}  // namespace foundry
