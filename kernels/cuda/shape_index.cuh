// Index arithmetic of the CUDA shape-op kernels (kernels/cuda/shape_ops.cu), usable from g++ as
// well as nvcc so that tests/kernels/cuda/shape_index_host_test.cc can run it on the host and
// compare it bitwise with the CPU kernels (kernels/cpu/shape_ops.cc).
//
// Two halves:
//  - FOUNDRY_HD functions: the whole body of each kernel for one output element (or one index),
//    given a small parameter struct passed to the kernel by value. A kernel is a grid-stride loop
//    around one of them.
//  - host preparation (plain inline functions): the CPU kernel's checks, with its error messages,
//    and the parameter structs, from the tensors' types and the inputs that are host constants
//    (CudaKernelContext::base.constant_inputs). Device data is never read here.
//
// Scatter-adds (GatherGrad, GatherElementsGrad, GatherNDGrad, ScatterND, ScatterElements) never use
// floating-point atomics: each index gets an integer key (the output row / slot it lands in), the
// indices are sorted by key with a stable counting sort (integer atomics give counts and a
// placement whose order within a key varies, then SegmentRank restores index order), and each
// output element folds its segment in index order: the CPU's order of additions, so the sums are
// bitwise the CPU's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "compiler/op_schema.h"
#include "compiler/ops/shape_ops.h"
#include "kernels/cpu/shape_checks.h"
#include "kernels/cuda/hd.h"

namespace foundry::cuda {

// Rank limit of the parameter structs (Tile's [r0, d0, r1, d1, ...] view doubles a rank-8 input).
inline constexpr int kShapeMaxRank = 8;
inline constexpr int kStridedMaxRank = 16;

// ---------------------------------------------------------------------------------------------
// Device-and-host element functions.

// One side of an index tuple walk: dst[dst_base + i·dst_strides] = src[src_base + i·src_strides]
// for every tuple i over dims (row-major; element e is the e-th tuple). Transpose, Expand, Tile,
// Concat, Split, Slice and SliceGrad are each a choice of bases and strides, as on the CPU.
struct StridedParams {
  int rank = 0;
  int64_t n = 0;  // number of tuples (elements moved)
  int64_t dst_base = 0;
  int64_t src_base = 0;
  int64_t dims[kStridedMaxRank] = {};
  int64_t dst_strides[kStridedMaxRank] = {};
  int64_t src_strides[kStridedMaxRank] = {};
};

FOUNDRY_HD inline void StridedOffsets(const StridedParams& p, int64_t e, int64_t* dst,
                                      int64_t* src) {
  int64_t d = p.dst_base, s = p.src_base;
  for (int k = p.rank - 1; k >= 0; --k) {
    const int64_t i = e % p.dims[k];
    e /= p.dims[k];
    d += i * p.dst_strides[k];
    s += i * p.src_strides[k];
  }
  *dst = d;
  *src = s;
}

template <class T>
FOUNDRY_HD inline void StridedCopyElement(const StridedParams& p, int64_t e, T* dst, const T* src) {
  int64_t d, s;
  StridedOffsets(p, e, &d, &s);
  dst[d] = src[s];
}

// An index normalised into [0, dim) (negative ones count from the back), or -1 when out of range.
// The CPU kernels reject such an index before writing anything; on the device an index computed at
// run time cannot be reported without a host round trip, so the kernels skip it (Gather writes
// zeros, the scatters drop it) instead of touching memory out of bounds. Constant indices are
// checked on the host with the CPU's message (CheckConstantIndices).
template <class I>
FOUNDRY_HD inline int64_t NormalizeIndex(I raw, int64_t dim) {
  const int64_t v = static_cast<int64_t>(raw);
  if (v < -dim || v >= dim) return -1;
  return v < 0 ? v + dim : v;
}

// Gather on axis viewed as data [outer, dim, inner] -> output [outer, n, inner] (n indices).
struct GatherParams {
  int64_t outer = 1;
  int64_t dim = 0;
  int64_t inner = 1;
  int64_t n = 0;
};

template <class T, class I>
FOUNDRY_HD inline void GatherElement(const GatherParams& p, int64_t e, T* dst, const T* src,
                                     const I* idx) {
  const int64_t i = e % p.inner;
  const int64_t j = (e / p.inner) % p.n;
  const int64_t o = e / (p.inner * p.n);
  const int64_t r = NormalizeIndex(idx[j], p.dim);
  dst[e] = r < 0 ? T(0) : src[(o * p.dim + r) * p.inner + i];
}

// GatherElements: indices and output share a shape; element e reads data at e's position with the
// axis coordinate replaced by the index.
struct ElementsParams {
  int rank = 0;
  int axis = 0;
  int64_t axis_dim = 0;
  int64_t idx_dims[kShapeMaxRank] = {};
  int64_t data_strides[kShapeMaxRank] = {};
};

// The data offset index element e (holding `raw`) refers to, or -1 when the index is out of range.
template <class I>
FOUNDRY_HD inline int64_t ElementOffset(const ElementsParams& p, int64_t e, I raw) {
  const int64_t v = NormalizeIndex(raw, p.axis_dim);
  if (v < 0) return -1;
  int64_t off = 0;
  for (int k = p.rank - 1; k >= 0; --k) {
    const int64_t pos = e % p.idx_dims[k];
    e /= p.idx_dims[k];
    off += (k == p.axis ? v : pos) * p.data_strides[k];
  }
  return off;
}

template <class T, class I>
FOUNDRY_HD inline void GatherElementsElement(const ElementsParams& p, int64_t e, T* dst,
                                             const T* src, const I* idx) {
  const int64_t off = ElementOffset(p, e, idx[e]);
  dst[e] = off < 0 ? T(0) : src[off];
}

// --- the stable counting sort of the scatters (see the file comment) ---
// keys[e] in [0, slots) or -1 (dropped); count[slots]; start[slots + 1] (exclusive prefix sums of
// count); unsorted / sorted [n]: index numbers grouped by key, in placement / index order.

// Where index e (with key `key`) goes in `sorted`: its key's segment start plus the number of
// indices of the same segment that come before it. The placement order inside a segment does not
// matter: the result is the same for every order.
FOUNDRY_HD inline int64_t SortedPosition(const int64_t* unsorted, int64_t lo, int64_t hi,
                                         int64_t e) {
  int64_t rank = 0;
  for (int64_t q = lo; q < hi; ++q) rank += unsorted[q] < e;
  return lo + rank;
}

// GatherGrad: dX [outer, dim, inner] from dY [outer, n, inner]; the key of index j is its row.
template <class I>
FOUNDRY_HD inline int64_t GatherGradKey(const GatherParams& p, int64_t j, const I* idx) {
  return NormalizeIndex(idx[j], p.dim);
}

// dX element e: 0 plus its row's dY rows in index order (the CPU's zero fill then `+=`).
template <class T>
FOUNDRY_HD inline T GatherGradValue(const GatherParams& p, int64_t e, const int64_t* sorted,
                                    const int64_t* start, const T* dy) {
  const int64_t i = e % p.inner;
  const int64_t r = (e / p.inner) % p.dim;
  const int64_t o = e / (p.inner * p.dim);
  T sum = T(0);
  for (int64_t q = start[r]; q < start[r + 1]; ++q) sum += dy[(o * p.n + sorted[q]) * p.inner + i];
  return sum;
}

// GatherElementsGrad: the key of index element e is the dX offset it adds into.
template <class I>
FOUNDRY_HD inline int64_t GatherElementsGradKey(const ElementsParams& p, int64_t e, const I* idx) {
  return ElementOffset(p, e, idx[e]);
}

template <class T>
FOUNDRY_HD inline T GatherElementsGradValue(int64_t off, const int64_t* sorted,
                                            const int64_t* start, const T* dy) {
  T sum = T(0);
  for (int64_t q = start[off]; q < start[off + 1]; ++q) sum += dy[sorted[q]];
  return sum;
}

// GatherND / GatherNDGrad: data viewed as [batch · slots, slice] (the CPU's NDDims); index tuple t
// (k values) of batch t / per_batch picks row batch · slots + its position among data[b..b+k).
struct GatherNDParams {
  int k = 0;
  int64_t slots = 1;
  int64_t slice = 1;
  int64_t per_batch = 1;
  int64_t tuples = 0;
  int64_t dims[kShapeMaxRank] = {};
  int64_t strides[kShapeMaxRank] = {};
};

// The row tuple t picks, or -1 when one of its indices is out of range. Also GatherNDGrad's key.
template <class I>
FOUNDRY_HD inline int64_t GatherNDRow(const GatherNDParams& p, int64_t t, const I* idx) {
  int64_t slot = 0;
  for (int j = 0; j < p.k; ++j) {
    const int64_t v = NormalizeIndex(idx[t * p.k + j], p.dims[j]);
    if (v < 0) return -1;
    slot += v * p.strides[j];
  }
  return t / p.per_batch * p.slots + slot;
}

template <class T, class I>
FOUNDRY_HD inline void GatherNDElement(const GatherNDParams& p, int64_t e, T* dst, const T* src,
                                       const I* idx) {
  const int64_t row = GatherNDRow(p, e / p.slice, idx);
  dst[e] = row < 0 ? T(0) : src[row * p.slice + e % p.slice];
}

// dX element e: 0 plus the dY slices of its row's tuples in tuple order (the CPU's `+=`).
template <class T>
FOUNDRY_HD inline T GatherNDGradValue(const GatherNDParams& p, int64_t e, const int64_t* sorted,
                                      const int64_t* start, const T* dy) {
  const int64_t row = e / p.slice;
  const int64_t i = e % p.slice;
  T sum = T(0);
  for (int64_t q = start[row]; q < start[row + 1]; ++q) sum += dy[sorted[q] * p.slice + i];
  return sum;
}

// ScatterND: data viewed as [slots, slice]; index tuple t (k values) picks a slot.
enum ScatterReduction : int {
  kScatterNone = 0,
  kScatterAdd,
  kScatterMul,
  kScatterMax,
  kScatterMin
};

struct ScatterParams {
  int k = 0;
  int reduction = kScatterNone;
  int64_t slots = 1;
  int64_t slice = 1;
  int64_t tuples = 0;
  int64_t dims[kShapeMaxRank] = {};
  int64_t slot_strides[kShapeMaxRank] = {};
};

template <class I>
FOUNDRY_HD inline int64_t ScatterKey(const ScatterParams& p, int64_t t, const I* idx) {
  int64_t slot = 0;
  for (int j = 0; j < p.k; ++j) {
    const int64_t v = NormalizeIndex(idx[t * p.k + j], p.dims[j]);
    if (v < 0) return -1;
    slot += v * p.slot_strides[j];
  }
  return slot;
}

// The CPU's ScatterReduce for one element (std::max / std::min argument order kept for NaNs).
template <class T>
FOUNDRY_HD inline T ScatterCombine(int reduction, T d, T s) {
  switch (reduction) {
    case kScatterAdd:
      return d + s;
    case kScatterMul:
      return d * s;
    case kScatterMax:
      return d < s ? s : d;
    case kScatterMin:
      return s < d ? s : d;
    default:
      return s;
  }
}

// Output element e: the data element, then every update of its slot in tuple order (with no
// reduction the last one wins, as the CPU's successive copies do).
template <class T>
FOUNDRY_HD inline T ScatterValue(const ScatterParams& p, int64_t e, const int64_t* sorted,
                                 const int64_t* start, const T* x, const T* upd) {
  const int64_t slot = e / p.slice;
  const int64_t i = e % p.slice;
  T v = x[e];
  for (int64_t q = start[slot]; q < start[slot + 1]; ++q)
    v = ScatterCombine(p.reduction, v, upd[sorted[q] * p.slice + i]);
  return v;
}

// ScatterElements: data and output share a shape; index element e targets ElementOffset(e), so
// the keys are those offsets and every output element is its own slot (ElementsParams over data).
template <class I>
FOUNDRY_HD inline int64_t ScatterElementsKey(const ElementsParams& p, int64_t e, const I* idx) {
  return ElementOffset(p, e, idx[e]);
}

// Output element e: the data element, then the updates that target it in index order.
template <class T>
FOUNDRY_HD inline T ScatterElementsValue(int reduction, int64_t e, const int64_t* sorted,
                                         const int64_t* start, const T* x, const T* upd) {
  T v = x[e];
  for (int64_t q = start[e]; q < start[e + 1]; ++q)
    v = ScatterCombine(reduction, v, upd[sorted[q]]);
  return v;
}

// Trilu over the last two axes [rows, cols]: whether element (i, j) is kept. `k` must be clamped
// (ClampTriluK) so that j - i against it cannot overflow.
FOUNDRY_HD inline int64_t ClampTriluK(int64_t k, int64_t rows, int64_t cols) {
  return k < -rows - 1 ? -rows - 1 : (k > cols + 1 ? cols + 1 : k);
}

struct TriluParams {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t k = 0;  // used when the kernel is not given k in device memory
  int upper = 1;
};

template <class T>
FOUNDRY_HD inline void TriluElement(const TriluParams& p, int64_t k, int64_t e, T* dst,
                                    const T* src) {
  const int64_t j = e % p.cols;
  const int64_t i = (e / p.cols) % p.rows;
  k = ClampTriluK(k, p.rows, p.cols);
  const bool keep = p.upper ? j - i >= k : j - i <= k;
  dst[e] = keep ? src[e] : T(0);
}

// Pad: output element e reads input offset PadSource(e), or the fill value when that is -1.
enum PadMode : int { kPadConstant = 0, kPadEdge, kPadReflect };

struct PadParams {
  int rank = 0;
  int mode = kPadConstant;
  int64_t out_dims[kShapeMaxRank] = {};
  int64_t in_dims[kShapeMaxRank] = {};
  int64_t in_strides[kShapeMaxRank] = {};
  int64_t begin[kShapeMaxRank] = {};
};

// The input index output index o of an axis (size d, `begin` padded before it) reads; -1: the fill.
FOUNDRY_HD inline int64_t PadAxisSource(int mode, int64_t o, int64_t begin, int64_t d) {
  int64_t i = o - begin;
  if (mode == kPadConstant) return i < 0 || i >= d ? -1 : i;
  if (mode == kPadEdge) return i < 0 ? 0 : (i > d - 1 ? d - 1 : i);
  if (d == 1) return 0;
  const int64_t period = 2 * (d - 1);
  i = ((i % period) + period) % period;
  return i >= d ? period - i : i;
}

FOUNDRY_HD inline int64_t PadSource(const PadParams& p, int64_t e) {
  int64_t off = 0;
  for (int k = p.rank - 1; k >= 0; --k) {
    const int64_t o = e % p.out_dims[k];
    e /= p.out_dims[k];
    const int64_t i = PadAxisSource(p.mode, o, p.begin[k], p.in_dims[k]);
    if (i < 0) return -1;
    off += i * p.in_strides[k];
  }
  return off;
}

template <class T>
FOUNDRY_HD inline void PadElement(const PadParams& p, int64_t e, T* dst, const T* src, T fill) {
  const int64_t off = PadSource(p, e);
  dst[e] = off < 0 ? fill : src[off];
}

// OneHot: output [outer, depth, inner] from indices [outer, inner].
struct OneHotParams {
  int64_t outer = 1;
  int64_t depth = 0;
  int64_t inner = 1;
};

// Whether output element e is "on". The index goes through double as the CPU's GetAsDouble does.
template <class I>
FOUNDRY_HD inline bool OneHotOn(const OneHotParams& p, int64_t e, const I* idx) {
  const int64_t i = e % p.inner;
  const int64_t d = (e / p.inner) % p.depth;
  const int64_t o = e / (p.inner * p.depth);
  int64_t v = static_cast<int64_t>(static_cast<double>(idx[o * p.inner + i]));
  if (v < 0) v += p.depth;
  return v == d;
}

// Range, element i, for integer types: start + i * delta with two's-complement wrap-around, the
// value the CPU's repeated `v += delta` reaches in T. Floating-point ranges are accumulated one
// step at a time (RangeAccumulate), as the CPU does, so every rounding matches.
template <class T>
FOUNDRY_HD inline T RangeIntElement(T start, T delta, int64_t i) {
  const uint64_t v = static_cast<uint64_t>(static_cast<int64_t>(start)) +
                     static_cast<uint64_t>(i) * static_cast<uint64_t>(static_cast<int64_t>(delta));
  return static_cast<T>(static_cast<int64_t>(v));
}

template <class T>
FOUNDRY_HD inline void RangeAccumulate(T start, T delta, int64_t n, T* out) {
  T v = start;
  for (int64_t i = 0; i < n; ++i) {
    if (i) v += delta;
    out[i] = v;
  }
}

// Up to 256 bytes handed to a kernel by value (Constant, Shape, Size): output byte b is
// bytes[b % n], so a one-element pattern fills a whole tensor.
struct BytePattern {
  int64_t n = 0;
  uint8_t bytes[256] = {};
};

FOUNDRY_HD inline uint8_t PatternByte(const BytePattern& p, int64_t b) { return p.bytes[b % p.n]; }

// ---------------------------------------------------------------------------------------------
// Host preparation: the CPU kernels' checks (kernels/cpu/shape_checks.h and these) and the
// parameter structs above.

// constant_inputs[i], or null where it is missing or run-time.
inline const Tensor* ConstantAt(std::span<const Tensor* const> constants, size_t i) {
  return i < constants.size() ? constants[i] : nullptr;
}

// Whether optional input i is given.
inline bool Present(std::span<const Tensor* const> in, size_t i) {
  return i < in.size() && in[i] != nullptr;
}

// The host copy of input i, which the kernel needs on the host (Slice's starts, Pad's pads).
inline StatusOr<const Tensor*> RequireConstant(const Node& node,
                                               std::span<const Tensor* const> constants, size_t i,
                                               const char* name) {
  if (const Tensor* t = ConstantAt(constants, i)) return t;
  return ShapeOpError(node, "input " + std::to_string(i) + " ('" + name +
                                "') must be a constant on the cuda backend; fold it at compile "
                                "time");
}

inline std::vector<int64_t> DenseStrides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// The CPU's CheckOutput: the output's allocated type must be what the inputs give.
inline Status CheckIndexType(const Node& node, const Tensor& idx) {
  if (idx.dtype() == DType::kInt64 || idx.dtype() == DType::kInt32) return Status::Ok();
  return ShapeOpError(node,
                      "indices must be int64 or int32, got " + std::string(DTypeName(idx.dtype())));
}

inline Status CheckRank(const Node& node, size_t rank, int limit) {
  if (rank <= static_cast<size_t>(limit)) return Status::Ok();
  return ShapeOpError(node, "the cuda shape kernels take tensors of rank <= " +
                                std::to_string(limit) + ", got rank " + std::to_string(rank));
}

// The CPU's IndexAt check over every element of a constant index tensor (nothing when `idx` is
// null, i.e. computed at run time). `axis_of` gives the axis element e indexes.
template <class AxisOf>
Status CheckConstantIndices(const Node& node, const Tensor* idx, AxisOf axis_of) {
  if (!idx) return Status::Ok();
  for (int64_t e = 0; e < idx->numel(); ++e) {
    const auto [axis, dim] = axis_of(e);
    const int64_t v = idx->GetAsInt64(e);
    if (v < -dim || v >= dim)
      return ShapeOpError(node, "indices[" + std::to_string(e) + "] = " + std::to_string(v) +
                                    " is out of range for axis " + std::to_string(axis) +
                                    " of size " + std::to_string(dim));
  }
  return Status::Ok();
}

// A strided copy over `shape`, with size-1 axes dropped and neighbours that are contiguous on
// both sides merged (fewer divisions per element; Concat and Split become two or three axes).
inline StatusOr<StridedParams> MakeStrided(const Node& node, const Shape& shape, int64_t dst_base,
                                           const std::vector<int64_t>& dst_strides,
                                           int64_t src_base,
                                           const std::vector<int64_t>& src_strides) {
  StridedParams p;
  p.n = NumElements(shape);
  p.dst_base = dst_base;
  p.src_base = src_base;
  if (p.n == 0) return p;
  // Innermost first.
  std::vector<int64_t> dims, ds, ss;
  for (int64_t k = static_cast<int64_t>(shape.size()) - 1; k >= 0; --k) {
    if (shape[k] == 1) continue;
    if (!dims.empty() && dst_strides[k] == ds.back() * dims.back() &&
        src_strides[k] == ss.back() * dims.back()) {
      dims.back() *= shape[k];
      continue;
    }
    dims.push_back(shape[k]);
    ds.push_back(dst_strides[k]);
    ss.push_back(src_strides[k]);
  }
  RETURN_IF_ERROR(CheckRank(node, dims.size(), kStridedMaxRank));
  p.rank = static_cast<int>(dims.size());
  for (int k = 0; k < p.rank; ++k) {
    p.dims[p.rank - 1 - k] = dims[k];
    p.dst_strides[p.rank - 1 - k] = ds[k];
    p.src_strides[p.rank - 1 - k] = ss[k];
  }
  return p;
}

inline StatusOr<StridedParams> TransposeStrided(const Node& node, const Tensor& x,
                                                const Tensor& out) {
  ASSIGN_OR_RETURN(std::vector<int64_t> perm,
                   NamedStatus(node, shape_ops::TransposePerm(node, x.rank())));
  const std::vector<int64_t> st = DenseStrides(x.shape());
  Shape shape;
  std::vector<int64_t> src;
  for (int64_t p : perm) {
    shape.push_back(x.shape()[p]);
    src.push_back(st[p]);
  }
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), shape));
  return MakeStrided(node, shape, 0, DenseStrides(shape), 0, src);
}

// Strides that read `x` broadcast (right-aligned) to `shape`; the caller checked it broadcasts.
inline std::vector<int64_t> BroadcastReadStrides(const Shape& x, const Shape& shape) {
  const std::vector<int64_t> st = DenseStrides(x);
  std::vector<int64_t> v(shape.size(), 0);
  const size_t lead = shape.size() - x.size();
  for (size_t k = lead; k < shape.size(); ++k) v[k] = x[k - lead] == 1 ? 0 : st[k - lead];
  return v;
}

// Expand's target is the output's shape when the `shape` input is computed at run time.
inline StatusOr<StridedParams> ExpandStrided(const Node& node, const Tensor& x,
                                             const Tensor* target, const Tensor& out) {
  const Shape want = target ? target->ToInt64Vector() : out.shape();
  auto shape = BroadcastShapes(x.shape(), want);
  if (!shape.ok())
    return ShapeOpError(node, "cannot expand input of shape " + ShapeToString(x.shape()) + " to " +
                                  ShapeToString(want) + ": " + shape.status().message());
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), *shape));
  return MakeStrided(node, *shape, 0, DenseStrides(*shape), 0,
                     BroadcastReadStrides(x.shape(), *shape));
}

// Tile's repeats come from the output's shape when the input is computed at run time.
inline StatusOr<StridedParams> TileStrided(const Node& node, const Tensor& x, const Tensor* repeats,
                                           const Tensor& out) {
  std::vector<int64_t> reps;
  if (repeats) {
    reps = repeats->ToInt64Vector();
  } else {
    if (out.rank() != x.rank())
      return ShapeOpError(node, "output rank " + std::to_string(out.rank()) +
                                    " differs from the input rank " + std::to_string(x.rank()));
    for (int64_t k = 0; k < x.rank(); ++k)
      reps.push_back(x.shape()[k] == 0 ? 0 : out.shape()[k] / x.shape()[k]);
  }
  if (static_cast<int64_t>(reps.size()) != x.rank())
    return ShapeOpError(node, "repeats has " + std::to_string(reps.size()) +
                                  " values for an input of rank " + std::to_string(x.rank()));
  // The output [r0*d0, r1*d1, ...] is, in row-major order, [r0, d0, r1, d1, ...] whose repeat axes
  // read the input with stride 0.
  Shape shape, inter;
  std::vector<int64_t> src;
  const std::vector<int64_t> st = DenseStrides(x.shape());
  for (int64_t k = 0; k < x.rank(); ++k) {
    if (reps[k] < 0)
      return ShapeOpError(node, "repeats " + ShapeToString(reps) + " has a negative value");
    shape.push_back(x.shape()[k] * reps[k]);
    inter.push_back(reps[k]);
    inter.push_back(x.shape()[k]);
    src.push_back(0);
    src.push_back(st[k]);
  }
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), shape));
  if (NumElements(shape) == 0) return MakeStrided(node, shape, 0, {}, 0, {});
  return MakeStrided(node, inter, 0, DenseStrides(inter), 0, src);
}

// One copy per input, each into its place along the axis.
inline StatusOr<std::vector<StridedParams>> ConcatStrided(const Node& node,
                                                          std::span<const Tensor* const> in,
                                                          const Tensor& y) {
  ASSIGN_OR_RETURN(int64_t axis,
                   NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0), y.rank())));
  const std::vector<int64_t> st = DenseStrides(y.shape());
  std::vector<StridedParams> copies;
  int64_t offset = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& x = *in[i];
    RETURN_IF_ERROR(CheckSameElementType(node, x, y));
    Shape expect = y.shape();
    expect[axis] = x.rank() == y.rank() ? x.shape()[axis] : -1;
    if (x.shape() != expect || offset + x.shape()[axis] > y.shape()[axis])
      return ShapeOpError(node, "input " + std::to_string(i) + " of shape " +
                                    ShapeToString(x.shape()) + " does not fit the output " +
                                    ShapeToString(y.shape()) + " along axis " +
                                    std::to_string(axis));
    ASSIGN_OR_RETURN(StridedParams p, MakeStrided(node, x.shape(), offset * st[axis], st, 0,
                                                  DenseStrides(x.shape())));
    copies.push_back(p);
    offset += x.shape()[axis];
  }
  if (offset != y.shape()[axis])
    return ShapeOpError(node, "inputs fill " + std::to_string(offset) + " of the " +
                                  std::to_string(y.shape()[axis]) + " positions along axis " +
                                  std::to_string(axis));
  return copies;
}

// Split sizes: the `split` input when it is a constant, the attribute, equal pieces when neither
// is given, and the outputs' shapes when the input is computed at run time.
inline StatusOr<std::vector<StridedParams>> SplitStrided(const Node& node, const Tensor& x,
                                                         bool split_input, const Tensor* split,
                                                         std::span<Tensor* const> out) {
  ASSIGN_OR_RETURN(int64_t axis,
                   NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0), x.rank())));
  std::vector<int64_t> sizes;
  if (split) {
    sizes = split->ToInt64Vector();
  } else if (split_input) {
    for (Tensor* o : out) sizes.push_back(o && o->rank() == x.rank() ? o->shape()[axis] : -1);
  } else if (node.HasAttr("split")) {
    sizes = node.GetInts("split");
  } else {
    ASSIGN_OR_RETURN(
        sizes, NamedStatus(node, shape_ops::EqualSplitSizes(x.shape()[axis],
                                                            static_cast<int64_t>(out.size()))));
  }
  if (sizes.size() != out.size())
    return ShapeOpError(node, "split " + ShapeToString(sizes) + " has " +
                                  std::to_string(sizes.size()) + " values for " +
                                  std::to_string(out.size()) + " outputs");
  const std::vector<int64_t> st = DenseStrides(x.shape());
  std::vector<StridedParams> copies;
  int64_t offset = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (sizes[i] < 0 || offset + sizes[i] > x.shape()[axis])
      return ShapeOpError(node, "split " + ShapeToString(sizes) + " does not fit axis " +
                                    std::to_string(axis) + " of size " +
                                    std::to_string(x.shape()[axis]));
    Shape shape = x.shape();
    shape[axis] = sizes[i];
    if (out[i]) {
      RETURN_IF_ERROR(CheckOutputType(node, *out[i], x.dtype(), shape));
      ASSIGN_OR_RETURN(StridedParams p,
                       MakeStrided(node, shape, 0, DenseStrides(shape), offset * st[axis], st));
      copies.push_back(p);
    } else {
      copies.push_back(StridedParams{});  // an omitted output: nothing to write
    }
    offset += sizes[i];
  }
  if (offset != x.shape()[axis])
    return ShapeOpError(node, "split " + ShapeToString(sizes) + " sums to " +
                                  std::to_string(offset) + " but axis " + std::to_string(axis) +
                                  " has size " + std::to_string(x.shape()[axis]));
  return copies;
}

// The strided view of `shape` a Slice reads (SliceGrad writes): base, strides and the slice shape.
struct SliceView {
  int64_t base = 0;
  std::vector<int64_t> strides;
  Shape shape;
};

// Slice's bounds: attributes (opset < 10, one input) or the constant inputs first..first+3
// (starts, ends, axes, steps; the last two optional).
inline StatusOr<SliceView> ResolveSliceView(const Node& node, const Shape& shape,
                                            std::span<const Tensor* const> in, size_t first,
                                            std::span<const Tensor* const> constants) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (in.size() == 1) {
    starts = node.GetInts("starts");
    ends = node.GetInts("ends");
    axes = node.GetInts("axes");
  } else {
    ASSIGN_OR_RETURN(const Tensor* s, RequireConstant(node, constants, first, "starts"));
    ASSIGN_OR_RETURN(const Tensor* e, RequireConstant(node, constants, first + 1, "ends"));
    starts = s->ToInt64Vector();
    ends = e->ToInt64Vector();
    // Given but computed at run time: an error, not a silent default.
    if (Present(in, first + 2)) {
      ASSIGN_OR_RETURN(const Tensor* a, RequireConstant(node, constants, first + 2, "axes"));
      axes = a->ToInt64Vector();
    }
    if (Present(in, first + 3)) {
      ASSIGN_OR_RETURN(const Tensor* p, RequireConstant(node, constants, first + 3, "steps"));
      steps = p->ToInt64Vector();
    }
  }
  ASSIGN_OR_RETURN(std::vector<shape_ops::SliceDim> dims,
                   NamedStatus(node, shape_ops::ResolveSlice(shape, starts, ends, axes, steps)));
  const std::vector<int64_t> st = DenseStrides(shape);
  SliceView v;
  for (size_t k = 0; k < dims.size(); ++k) {
    v.base += dims[k].start * st[k];
    v.strides.push_back(dims[k].step * st[k]);
    v.shape.push_back(dims[k].len);
  }
  return v;
}

// `in`: the node's inputs (types only; an omitted optional input is null).
inline StatusOr<StridedParams> SliceStrided(const Node& node, std::span<const Tensor* const> in,
                                            std::span<const Tensor* const> constants,
                                            const Tensor& out) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(SliceView v, ResolveSliceView(node, x.shape(), in, 1, constants));
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), v.shape));
  return MakeStrided(node, v.shape, 0, DenseStrides(v.shape), v.base, v.strides);
}

// SliceGrad (dY, shape, starts, ends[, axes, steps]) -> dX: dX is zeroed, then dY written into the
// slice positions (distinct: steps are nonzero), as on the CPU.
inline StatusOr<StridedParams> SliceGradStrided(const Node& node, std::span<const Tensor* const> in,
                                                std::span<const Tensor* const> constants,
                                                const Tensor& out) {
  const Tensor& dy = *in[0];
  if (const Tensor* shape = ConstantAt(constants, 1))
    RETURN_IF_ERROR(CheckOutputType(node, out, dy.dtype(), shape->ToInt64Vector()));
  else
    RETURN_IF_ERROR(CheckOutputType(node, out, dy.dtype(), out.shape()));
  ASSIGN_OR_RETURN(SliceView v, ResolveSliceView(node, out.shape(), in, 2, constants));
  if (v.shape != dy.shape())
    return ShapeOpError(node, "dY has shape " + ShapeToString(dy.shape()) + " but slicing " +
                                  ShapeToString(out.shape()) + " gives " + ShapeToString(v.shape));
  return MakeStrided(node, v.shape, v.base, v.strides, 0, DenseStrides(v.shape));
}

inline Shape GatherOutputShape(const Shape& data, const Shape& idx, int64_t axis) {
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return out;
}

inline StatusOr<GatherParams> GatherDimsOf(const Node& node, const Shape& data, int64_t n,
                                           int64_t* axis_out) {
  GatherParams g;
  ASSIGN_OR_RETURN(
      int64_t axis,
      NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0), static_cast<int64_t>(data.size()))));
  for (int64_t k = 0; k < axis; ++k) g.outer *= data[k];
  g.dim = data[axis];
  for (size_t k = axis + 1; k < data.size(); ++k) g.inner *= data[k];
  g.n = n;
  *axis_out = axis;
  return g;
}

// Gather (data, indices): `idx_const` is the host copy of the indices when they are constant.
inline StatusOr<GatherParams> GatherPrep(const Node& node, const Tensor& x, const Tensor& idx,
                                         const Tensor* idx_const, const Tensor& out) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  int64_t axis = 0;
  ASSIGN_OR_RETURN(GatherParams g, GatherDimsOf(node, x.shape(), idx.numel(), &axis));
  RETURN_IF_ERROR(
      CheckOutputType(node, out, x.dtype(), GatherOutputShape(x.shape(), idx.shape(), axis)));
  RETURN_IF_ERROR(CheckConstantIndices(
      node, idx_const, [&](int64_t) { return std::pair<int64_t, int64_t>(axis, g.dim); }));
  return g;
}

// GatherGrad (shape, indices, dY) -> dX; dX's shape is the output's (checked against `shape` when
// that is a constant).
inline StatusOr<GatherParams> GatherGradPrep(const Node& node, const Tensor* shape_const,
                                             const Tensor& idx, const Tensor* idx_const,
                                             const Tensor& dy, const Tensor& out) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  const Shape shape = shape_const ? shape_const->ToInt64Vector() : out.shape();
  RETURN_IF_ERROR(CheckOutputType(node, out, dy.dtype(), shape));
  if (shape.empty()) return ShapeOpError(node, "shape must have rank >= 1");
  int64_t axis = 0;
  ASSIGN_OR_RETURN(GatherParams g, GatherDimsOf(node, shape, idx.numel(), &axis));
  const Shape expect = GatherOutputShape(shape, idx.shape(), axis);
  if (dy.shape() != expect)
    return ShapeOpError(
        node, "dY has shape " + ShapeToString(dy.shape()) + ", expected " + ShapeToString(expect));
  RETURN_IF_ERROR(CheckConstantIndices(
      node, idx_const, [&](int64_t) { return std::pair<int64_t, int64_t>(axis, g.dim); }));
  if (dy.dtype() != DType::kFloat32 && dy.dtype() != DType::kFloat64)
    return ShapeOpError(node, "dY must be f32 or f64, got " + std::string(DTypeName(dy.dtype())));
  return g;
}

// GatherElements / GatherElementsGrad: data of shape `data`, indices `idx` (same rank).
inline StatusOr<ElementsParams> ElementsPrep(const Node& node, const Shape& data, const Tensor& idx,
                                             const Tensor* idx_const) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  const int64_t r = static_cast<int64_t>(data.size());
  if (idx.rank() != r)
    return ShapeOpError(node, "indices " + ShapeToString(idx.shape()) + " and data " +
                                  ShapeToString(data) + " must have the same rank");
  ASSIGN_OR_RETURN(int64_t axis, NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0), r)));
  for (int64_t k = 0; k < r; ++k)
    if (k != axis && idx.shape()[k] > data[k])
      return ShapeOpError(node, "indices " + ShapeToString(idx.shape()) + " exceed data " +
                                    ShapeToString(data) + " on axis " + std::to_string(k));
  RETURN_IF_ERROR(CheckConstantIndices(
      node, idx_const, [&](int64_t) { return std::pair<int64_t, int64_t>(axis, data[axis]); }));
  RETURN_IF_ERROR(CheckRank(node, data.size(), kShapeMaxRank));
  ElementsParams p;
  p.rank = static_cast<int>(r);
  p.axis = static_cast<int>(axis);
  p.axis_dim = data[axis];
  const std::vector<int64_t> st = DenseStrides(data);
  for (int64_t k = 0; k < r; ++k) {
    p.idx_dims[k] = idx.shape()[k];
    p.data_strides[k] = st[k];
  }
  return p;
}

// GatherElementsGrad (dY, shape, indices) -> dX.
inline StatusOr<ElementsParams> GatherElementsGradPrep(const Node& node, const Tensor& dy,
                                                       const Tensor* shape_const, const Tensor& idx,
                                                       const Tensor* idx_const, const Tensor& out) {
  const Shape shape = shape_const ? shape_const->ToInt64Vector() : out.shape();
  RETURN_IF_ERROR(CheckOutputType(node, out, dy.dtype(), shape));
  if (dy.shape() != idx.shape())
    return ShapeOpError(node, "dY " + ShapeToString(dy.shape()) + " and indices " +
                                  ShapeToString(idx.shape()) + " must have the same shape");
  if (dy.dtype() != DType::kFloat32 && dy.dtype() != DType::kFloat64)
    return ShapeOpError(node, "dY must be f32 or f64, got " + std::string(DTypeName(dy.dtype())));
  return ElementsPrep(node, shape, idx, idx_const);
}

// GatherND (data, indices) and GatherNDGrad (shape, indices, dY): the CPU's GetNDDims checks
// (constant indices included) and the parameters. `data` is GatherND's data shape or GatherNDGrad's
// dX shape; the output shape GatherND gives goes to *gathered.
inline StatusOr<GatherNDParams> GatherNDDimsOf(const Node& node, const Shape& data,
                                               const Tensor& idx, const Tensor* idx_const,
                                               Shape* gathered) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  const int64_t b = node.GetInt("batch_dims", 0);
  ASSIGN_OR_RETURN(*gathered, NamedStatus(node, shape_ops::GatherNDShape(data, idx.shape(), b)));
  const int64_t k = idx.shape().back();
  RETURN_IF_ERROR(CheckConstantIndices(node, idx_const, [&](int64_t e) {
    return std::pair<int64_t, int64_t>(b + e % k, data[b + e % k]);
  }));
  RETURN_IF_ERROR(CheckRank(node, static_cast<size_t>(k), kShapeMaxRank));
  GatherNDParams p;
  p.k = static_cast<int>(k);
  int64_t batch = 1;
  for (int64_t i = 0; i < b; ++i) batch *= data[i];
  for (int64_t j = k - 1; j >= 0; --j) {
    p.dims[j] = data[b + j];
    p.strides[j] = p.slots;
    p.slots *= data[b + j];
  }
  for (size_t i = b + k; i < data.size(); ++i) p.slice *= data[i];
  p.tuples = idx.numel() / k;
  p.per_batch = batch == 0 || p.tuples == 0 ? 1 : p.tuples / batch;
  return p;
}

inline StatusOr<GatherNDParams> GatherNDPrep(const Node& node, const Tensor& x, const Tensor& idx,
                                             const Tensor* idx_const, const Tensor& out) {
  Shape gathered;
  ASSIGN_OR_RETURN(GatherNDParams p, GatherNDDimsOf(node, x.shape(), idx, idx_const, &gathered));
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), gathered));
  return p;
}

// GatherNDGrad (shape, indices, dY) -> dX; dX's shape is the output's (checked against `shape` when
// that is a constant).
inline StatusOr<GatherNDParams> GatherNDGradPrep(const Node& node, const Tensor* shape_const,
                                                 const Tensor& idx, const Tensor* idx_const,
                                                 const Tensor& dy, const Tensor& out) {
  const Shape shape = shape_const ? shape_const->ToInt64Vector() : out.shape();
  RETURN_IF_ERROR(CheckOutputType(node, out, dy.dtype(), shape));
  Shape gathered;
  ASSIGN_OR_RETURN(GatherNDParams p, GatherNDDimsOf(node, shape, idx, idx_const, &gathered));
  if (dy.shape() != gathered)
    return ShapeOpError(node, "dY has shape " + ShapeToString(dy.shape()) + ", expected " +
                                  ShapeToString(gathered));
  if (dy.dtype() != DType::kFloat32 && dy.dtype() != DType::kFloat64)
    return ShapeOpError(node, "dY must be f32 or f64, got " + std::string(DTypeName(dy.dtype())));
  return p;
}

// The node's `reduction` (ScatterND, ScatterElements) for data of type `t`: any type moves with
// none, the reductions take f32, f64, i32 and i64 (the CPU kernels' set).
inline StatusOr<int> ScatterReductionOf(const Node& node, DType t) {
  const std::string red = node.GetString("reduction", "none");
  if (red == "none") return static_cast<int>(kScatterNone);
  const bool numeric =
      t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64;
  if (!numeric || (red != "add" && red != "mul" && red != "max" && red != "min"))
    return ShapeOpError(
        node, "reduction '" + red + "' is not supported for " + std::string(DTypeName(t)));
  return static_cast<int>(red == "add"   ? kScatterAdd
                          : red == "mul" ? kScatterMul
                          : red == "max" ? kScatterMax
                                         : kScatterMin);
}

inline StatusOr<ScatterParams> ScatterPrep(const Node& node, const Tensor& x, const Tensor& idx,
                                           const Tensor* idx_const, const Tensor& upd,
                                           const Tensor& out) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  RETURN_IF_ERROR(CheckSameElementType(node, x, upd));
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), x.shape()));
  if (idx.rank() == 0) return ShapeOpError(node, "indices must have rank >= 1");
  const int64_t k = idx.shape().back();
  if (k > x.rank())
    return ShapeOpError(node, "indices' last dimension " + std::to_string(k) +
                                  " exceeds the rank of data " + std::to_string(x.rank()));
  ScatterParams p;
  p.k = static_cast<int>(k);
  for (int64_t d = k; d < x.rank(); ++d) p.slice *= x.shape()[d];
  p.tuples = k == 0 ? idx.numel() : idx.numel() / k;
  if (upd.numel() != p.tuples * p.slice)
    return ShapeOpError(node, "updates has " + std::to_string(upd.numel()) +
                                  " elements, expected " + std::to_string(p.tuples * p.slice));
  ASSIGN_OR_RETURN(p.reduction, ScatterReductionOf(node, x.dtype()));
  RETURN_IF_ERROR(CheckConstantIndices(node, idx_const, [&](int64_t e) {
    const int64_t j = k == 0 ? 0 : e % k;
    return std::pair<int64_t, int64_t>(j, x.shape()[j]);
  }));
  RETURN_IF_ERROR(CheckRank(node, static_cast<size_t>(k), kShapeMaxRank));
  int64_t stride = 1;
  for (int64_t j = k - 1; j >= 0; --j) {
    p.dims[j] = x.shape()[j];
    p.slot_strides[j] = stride;
    stride *= x.shape()[j];
  }
  p.slots = stride;
  return p;
}

// ScatterElements (data, indices, updates) -> y: the CPU kernel's checks (constant indices
// included) and the element walk over data; the reduction goes to *reduction.
inline StatusOr<ElementsParams> ScatterElementsPrep(const Node& node, const Tensor& x,
                                                    const Tensor& idx, const Tensor* idx_const,
                                                    const Tensor& upd, const Tensor& out,
                                                    int* reduction) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  RETURN_IF_ERROR(CheckSameElementType(node, x, upd));
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), x.shape()));
  if (upd.shape() != idx.shape())
    return ShapeOpError(node, "updates " + ShapeToString(upd.shape()) + " and indices " +
                                  ShapeToString(idx.shape()) + " must have the same shape");
  ASSIGN_OR_RETURN(*reduction, ScatterReductionOf(node, x.dtype()));
  return ElementsPrep(node, x.shape(), idx, idx_const);
}

// Byte offsets of the counting sort's arrays in the workspace (each 256-aligned), for n indices and
// `slots` keys. Zero bytes when there is nothing to sort.
struct SegmentLayout {
  int64_t keys = 0, count = 0, start = 0, unsorted = 0, sorted = 0, bytes = 0;
};

inline SegmentLayout SegmentWorkspace(int64_t n, int64_t slots) {
  SegmentLayout l;
  if (n <= 0) return l;
  auto take = [&l](int64_t elements) {
    const int64_t at = l.bytes;
    l.bytes += (elements * static_cast<int64_t>(sizeof(int64_t)) + 255) / 256 * 256;
    return at;
  };
  l.keys = take(n);
  l.count = take(slots);
  l.start = take(slots + 1);
  l.unsorted = take(n);
  l.sorted = take(n);
  return l;
}

inline Status PadModeOf(const Node& node, const std::string& mode, int* out) {
  if (mode == "constant")
    *out = kPadConstant;
  else if (mode == "edge")
    *out = kPadEdge;
  else if (mode == "reflect")
    *out = kPadReflect;
  else
    return ShapeOpError(node, "mode '" + mode + "' is not supported (constant, reflect, edge are)");
  return Status::Ok();
}

// Pad (data, pads, constant_value, axes): pads and axes must be host constants; the fill value is
// read by the kernel from device memory when input 2 is given, else it is the `value` attribute
// (f32) or zero, in `fill_bits`.
inline StatusOr<PadParams> PadPrep(const Node& node, std::span<const Tensor* const> in,
                                   std::span<const Tensor* const> constants, const Tensor& out,
                                   uint64_t* fill_bits) {
  const Tensor& x = *in[0];
  const Tensor* fill_input = Present(in, 2) ? in[2] : nullptr;
  const int64_t r = x.rank();
  std::vector<int64_t> pads, axes;
  if (Present(in, 1)) {
    ASSIGN_OR_RETURN(const Tensor* t, RequireConstant(node, constants, 1, "pads"));
    pads = t->ToInt64Vector();
  } else {
    pads = node.GetInts("pads");
  }
  if (Present(in, 3)) {
    ASSIGN_OR_RETURN(const Tensor* t, RequireConstant(node, constants, 3, "axes"));
    axes = t->ToInt64Vector();
  }
  ASSIGN_OR_RETURN(
      pads, NamedStatus(node, shape_ops::FullPads(r, pads, Present(in, 3) ? &axes : nullptr)));
  const std::string mode = node.GetString("mode", "constant");
  Shape shape(r);
  for (int64_t k = 0; k < r; ++k)
    if (__builtin_add_overflow(x.shape()[k], pads[k], &shape[k]) ||
        __builtin_add_overflow(shape[k], pads[k + r], &shape[k]))
      return ShapeOpError(node, "pads " + ShapeToString(pads) + " on axis " + std::to_string(k) +
                                    " of " + ShapeToString(x.shape()) + " overflow int64");
  for (int64_t k = 0; k < r; ++k)
    if (shape[k] < 0)
      return ShapeOpError(node, "pads " + ShapeToString(pads) + " remove more than axis " +
                                    std::to_string(k) + " of " + ShapeToString(x.shape()) +
                                    " holds");
  RETURN_IF_ERROR(CheckOutputType(node, out, x.dtype(), shape));
  PadParams p;
  *fill_bits = 0;
  if (out.numel() == 0) return p;
  const size_t elem = DTypeSize(x.dtype());
  if (elem > sizeof(uint64_t) || elem == 0) return ShapeOpError(node, "unsupported element type");
  if (fill_input) {
    RETURN_IF_ERROR(CheckSameElementType(node, *fill_input, x));
  } else if (node.HasAttr("value") && x.dtype() == DType::kFloat32) {
    const float v = node.GetFloat("value", 0.f);
    std::memcpy(fill_bits, &v, sizeof(v));
  }
  // The CPU reports these per axis while building its tables; same order here.
  for (int64_t k = 0; k < r; ++k) {
    if (mode == "constant") continue;
    if (x.shape()[k] == 0)
      return ShapeOpError(node,
                          "mode '" + mode + "' cannot pad the empty axis " + std::to_string(k));
    int m;
    RETURN_IF_ERROR(PadModeOf(node, mode, &m));
  }
  if (r > 0) RETURN_IF_ERROR(PadModeOf(node, mode, &p.mode));
  RETURN_IF_ERROR(CheckRank(node, static_cast<size_t>(r), kShapeMaxRank));
  p.rank = static_cast<int>(r);
  const std::vector<int64_t> st = DenseStrides(x.shape());
  for (int64_t k = 0; k < r; ++k) {
    p.out_dims[k] = shape[k];
    p.in_dims[k] = x.shape()[k];
    p.in_strides[k] = st[k];
    p.begin[k] = pads[k];
  }
  return p;
}

// OneHot (indices, depth, values): depth is the output's size on the axis unless it is a constant.
inline StatusOr<OneHotParams> OneHotPrep(const Node& node, const Tensor& idx, const Tensor& depth,
                                         const Tensor* depth_const, const Tensor& values,
                                         const Tensor& out) {
  if (depth.numel() != 1) return ShapeOpError(node, "depth must be a scalar");
  if (values.numel() != 2) return ShapeOpError(node, "values must hold two elements [off, on]");
  const int64_t r = idx.rank();
  int64_t axis = node.GetInt("axis", -1);
  if (axis < -(r + 1) || axis > r)
    return ShapeOpError(node, "axis " + std::to_string(axis) + " is out of range for output rank " +
                                  std::to_string(r + 1));
  if (axis < 0) axis += r + 1;
  int64_t d = 0;
  if (depth_const)
    d = static_cast<int64_t>(depth_const->GetAsDouble(0));
  else if (out.rank() == r + 1)
    d = out.shape()[axis];
  Shape shape = idx.shape();
  shape.insert(shape.begin() + axis, d);
  RETURN_IF_ERROR(CheckOutputType(node, out, values.dtype(), shape));
  const DType t = idx.dtype();
  if (t != DType::kInt64 && t != DType::kInt32 && t != DType::kFloat32 && t != DType::kFloat64)
    return ShapeOpError(node,
                        "indices of type " + std::string(DTypeName(t)) +
                            " are not supported on the cuda backend (i64, i32, f32, f64 are)");
  OneHotParams p;
  p.depth = d;
  for (int64_t k = 0; k < axis; ++k) p.outer *= idx.shape()[k];
  for (int64_t k = axis; k < r; ++k) p.inner *= idx.shape()[k];
  return p;
}

// Range (start, limit, delta): the length is the output's; checked like the CPU when all three
// are constants. The kernel reads start and delta from device memory.
inline Status RangePrep(const Node& node, std::span<const Tensor* const> in,
                        std::span<const Tensor* const> constants, const Tensor& out) {
  const Tensor* s = ConstantAt(constants, 0);
  const Tensor* l = ConstantAt(constants, 1);
  const Tensor* d = ConstantAt(constants, 2);
  int64_t n = out.rank() == 1 ? out.shape()[0] : -1;
  if (s && l && d) {
    ASSIGN_OR_RETURN(n, NamedStatus(node, shape_ops::RangeLength(*s, *l, *d)));
  } else if (in[0]->dtype() != in[1]->dtype() || in[0]->dtype() != in[2]->dtype() ||
             in[0]->numel() != 1 || in[2]->numel() != 1) {
    return ShapeOpError(node, "start, limit and delta must be scalars of one type");
  }
  RETURN_IF_ERROR(CheckOutputType(node, out, in[0]->dtype(), {n}));
  switch (in[0]->dtype()) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return Status::Ok();
    default:
      return ShapeOpError(node, "unsupported element type");
  }
}

// Shape's output values: the input's dims [start, end).
inline StatusOr<std::vector<int64_t>> ShapeValues(const Node& node, const Tensor& x,
                                                  const Tensor& out) {
  const Shape& s = x.shape();
  const auto [start, end] = shape_ops::ShapeOpRange(node, static_cast<int64_t>(s.size()));
  RETURN_IF_ERROR(CheckOutputType(node, out, DType::kInt64, {end - start}));
  return std::vector<int64_t>(s.begin() + start, s.begin() + end);
}

// The bytes a Constant node produces: copied into `small` when they fit (handed to a fill kernel by
// value), else a pointer into the node's own attribute storage, which lives as long as the graph.
struct ConstantBytes {
  const void* data = nullptr;
  int64_t nbytes = 0;
  BytePattern small;
  bool is_small = false;
};

inline ConstantBytes MakeConstantBytes(const void* data, int64_t nbytes) {
  ConstantBytes c;
  c.data = data;
  c.nbytes = nbytes;
  if (nbytes <= static_cast<int64_t>(sizeof(c.small.bytes))) {
    c.is_small = true;
    c.small.n = nbytes;
    if (nbytes) std::memcpy(c.small.bytes, data, nbytes);
    c.data = nullptr;
  }
  return c;
}

inline StatusOr<ConstantBytes> ConstantPrep(const Node& node, const Tensor& out) {
  ASSIGN_OR_RETURN(const shape_ops::ConstantValue v,
                   NamedStatus(node, shape_ops::ConstantAttrValue(node)));
  RETURN_IF_ERROR(CheckOutputType(node, out, v.dtype, v.shape));
  // value_float's float, in `v`, is copied into `small` before v goes away.
  return MakeConstantBytes(v.data(), static_cast<int64_t>(out.nbytes()));
}

// ConstantOfShape's element (<= 8 bytes) into `value`; the output's type is checked (its shape
// against input 0 when that is a constant).
inline Status ConstantOfShapePrep(const Node& node, const Tensor* shape_const, const Tensor& out,
                                  BytePattern* value) {
  DType dtype = DType::kFloat32;
  const uint8_t zero[8] = {};
  const uint8_t* v = zero;
  if (node.HasAttr("value")) {
    const Attribute& a = node.attrs.at("value");
    if (a.kind != Attribute::Kind::kTensor || !a.t || a.t->numel() != 1)
      return ShapeOpError(node, "attribute 'value' must be a one-element tensor");
    dtype = a.t->dtype();
    v = static_cast<const uint8_t*>(a.t->raw());
  }
  RETURN_IF_ERROR(
      CheckOutputType(node, out, dtype, shape_const ? shape_const->ToInt64Vector() : out.shape()));
  const size_t elem = DTypeSize(dtype);
  if (elem == 0 || elem > sizeof(value->bytes))
    return ShapeOpError(node, "unsupported element type");
  value->n = static_cast<int64_t>(elem);
  std::copy(v, v + elem, value->bytes);
  return Status::Ok();
}

// Reshape / Flatten / Squeeze / Unsqueeze: the bytes stay as they are. Reshape's requested shape is
// checked when it is a constant; otherwise the output's shape (from inference) is trusted.
inline Status ViewPrep(const Node& node, const Tensor& in, const Tensor* reshape_to,
                       const Tensor& out) {
  if (reshape_to) {
    ASSIGN_OR_RETURN(Shape shape, NamedStatus(node, shape_ops::ReshapeOutputShape(
                                                        in.shape(), reshape_to->ToInt64Vector(),
                                                        node.GetInt("allowzero", 0) != 0)));
    RETURN_IF_ERROR(CheckOutputType(node, out, in.dtype(), shape));
  }
  RETURN_IF_ERROR(CheckSameElementType(node, in, out));
  if (in.numel() != out.numel())
    return ShapeOpError(node, "output was allocated as " + ShapeToString(out.shape()) + " (" +
                                  std::to_string(out.numel()) +
                                  " elements) for an input of shape " + ShapeToString(in.shape()) +
                                  " (" + std::to_string(in.numel()) + " elements)");
  return Status::Ok();
}

}  // namespace foundry::cuda
