// CPU kernels of the shape-op family. Most of these ops move elements without looking at them, so
// they are written once over element *bytes* (1, 2, 4 or 8 per element) and work unchanged for
// every dtype: f32 activations, i64 indices and shapes, bool masks. One strided-copy primitive
// (StridedCopy) does Transpose, Slice, SliceGrad, Expand, Tile, Concat and Split: each is a choice
// of base offset and per-axis strides (0 to broadcast, negative to walk backwards).
//
// Every output is written in full with `=`; the scatter-adds of the gradient ops (GatherGrad,
// GatherElementsGrad, GatherNDGrad) first zero their output and then accumulate `+=` in index
// order, so repeated indices sum in a fixed order and the bits never change between runs.
//
// Threads (kernels/cpu/parallel.h): the strided copy cuts its rows into chunks fixed by the shape;
// Gather cuts its output rows; GatherGrad cuts the columns (each element keeps its index order).
// Each chunk writes only its own outputs, so the bits do not depend on the thread count.
#include "compiler/ops/shape_ops.h"

#include <algorithm>
#include <cstring>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/shape_checks.h"

namespace foundry {
namespace {

using shape_ops::SliceDim;
using Inputs = std::span<const Tensor* const>;
using Outputs = std::span<Tensor* const>;

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// One side of a strided copy, in elements.
struct View {
  int64_t base = 0;
  std::vector<int64_t> strides;
};

View Dense(const Shape& s) { return View{0, Strides(s)}; }

template <class T>
void StridedCopyT(T* dst, const View& dv, const T* src, const View& sv, const Shape& shape) {
  const size_t r = shape.size();
  if (NumElements(shape) == 0) return;
  if (r == 0) {
    dst[dv.base] = src[sv.base];
    return;
  }
  // Rows of the innermost dimension, in chunks on the kernels' threads; each chunk starts from its
  // first row's index.
  const int64_t inner = shape[r - 1], di = dv.strides[r - 1], si = sv.strides[r - 1];
  ParallelFor(NumElements(shape) / inner, RowGrain(inner), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(r - 1, 0);
    int64_t d = dv.base, s = sv.base;
    for (int64_t k = static_cast<int64_t>(r) - 2, q = begin; k >= 0; --k) {
      idx[k] = q % shape[k];
      q /= shape[k];
      d += idx[k] * dv.strides[k];
      s += idx[k] * sv.strides[k];
    }
    for (int64_t row = begin; row < end; ++row) {
      if (di == 1 && si == 1) {
        std::memcpy(dst + d, src + s, inner * sizeof(T));
      } else {
        for (int64_t j = 0; j < inner; ++j) dst[d + j * di] = src[s + j * si];
      }
      for (int64_t k = static_cast<int64_t>(r) - 2; k >= 0; --k) {
        d += dv.strides[k];
        s += sv.strides[k];
        if (++idx[k] < shape[k]) break;
        d -= dv.strides[k] * shape[k];
        s -= sv.strides[k] * shape[k];
        idx[k] = 0;
      }
    }
  });
}

// memset(dst, 0, bytes) in chunks on the kernels' threads.
void ParallelZero(void* dst, int64_t bytes) {
  auto* p = static_cast<uint8_t*>(dst);
  ParallelFor(bytes, 4 * kElementGrain, [&](int64_t begin, int64_t end) {
    std::memset(p + begin, 0, end - begin);
  });
}

// For every index tuple i over `shape`: dst[dv.base + i·dv.strides] = src[sv.base + i·sv.strides].
void StridedCopy(Tensor& dst, const View& dv, const Tensor& src, const View& sv,
                 const Shape& shape) {
  switch (DTypeSize(dst.dtype())) {
    case 1:
      return StridedCopyT(dst.data<uint8_t>(), dv, src.data<uint8_t>(), sv, shape);
    case 2:
      return StridedCopyT(dst.data<uint16_t>(), dv, src.data<uint16_t>(), sv, shape);
    case 4:
      return StridedCopyT(dst.data<uint32_t>(), dv, src.data<uint32_t>(), sv, shape);
    case 8:
      return StridedCopyT(dst.data<uint64_t>(), dv, src.data<uint64_t>(), sv, shape);
    default:
      return;
  }
}

// --- creation and inspection ---

// The value goes straight into the output (no temporary tensor).
Status ConstantKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  ASSIGN_OR_RETURN(const shape_ops::ConstantValue v,
                   NamedStatus(node, shape_ops::ConstantAttrValue(node)));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], v.dtype, v.shape));
  if (out[0]->nbytes()) std::memcpy(out[0]->raw(), v.data(), out[0]->nbytes());
  return Status::Ok();
}

Status ShapeKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Shape& s = in[0]->shape();
  const auto [start, end] = shape_ops::ShapeOpRange(node, static_cast<int64_t>(s.size()));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], DType::kInt64, {end - start}));
  for (int64_t i = start; i < end; ++i) out[0]->data<int64_t>()[i - start] = s[i];
  return Status::Ok();
}

Status SizeKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], DType::kInt64, {}));
  // From the shape, not numel(): constant folding passes a shape-only placeholder.
  *out[0]->data<int64_t>() = NumElements(in[0]->shape());
  return Status::Ok();
}

Status ConstantOfShapeKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  static constexpr float kZero = 0.f;
  DType dtype = DType::kFloat32;
  const auto* v = reinterpret_cast<const uint8_t*>(&kZero);
  if (node.HasAttr("value")) {
    const Attribute& a = node.attrs.at("value");
    if (a.kind != Attribute::Kind::kTensor || !a.t || a.t->numel() != 1)
      return ShapeOpError(node, "attribute 'value' must be a one-element tensor");
    dtype = a.t->dtype();
    v = static_cast<const uint8_t*>(a.t->raw());
  }
  Shape shape = in[0]->ToInt64Vector();
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], dtype, shape));
  const size_t elem = DTypeSize(dtype);
  bool zero = std::all_of(v, v + elem, [](uint8_t b) { return b == 0; });
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  if (zero) {
    std::memset(dst, 0, out[0]->nbytes());
  } else {
    for (int64_t i = 0; i < out[0]->numel(); ++i) std::memcpy(dst + i * elem, v, elem);
  }
  return Status::Ok();
}

template <class T>
void FillRange(T start, T delta, Tensor& out) {
  // Accumulated as in the ONNX function body (and ONNX Runtime), not start + i * delta.
  // No step past the last element: near INT64_MAX that step would overflow.
  T v = start;
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (i) v += delta;
    out.data<T>()[i] = v;
  }
}

Status RangeKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  ASSIGN_OR_RETURN(int64_t n, NamedStatus(node, shape_ops::RangeLength(*in[0], *in[1], *in[2])));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], in[0]->dtype(), {n}));
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      FillRange(*in[0]->data<float>(), *in[2]->data<float>(), *out[0]);
      break;
    case DType::kFloat64:
      FillRange(*in[0]->data<double>(), *in[2]->data<double>(), *out[0]);
      break;
    case DType::kInt16:
      FillRange(*in[0]->data<int16_t>(), *in[2]->data<int16_t>(), *out[0]);
      break;
    case DType::kInt32:
      FillRange(*in[0]->data<int32_t>(), *in[2]->data<int32_t>(), *out[0]);
      break;
    case DType::kInt64:
      FillRange(*in[0]->data<int64_t>(), *in[2]->data<int64_t>(), *out[0]);
      break;
    default:
      return ShapeOpError(node, "unsupported element type");
  }
  return Status::Ok();
}

// --- reshaping: the bytes stay as they are ---

Status CopyBytes(const Node& node, const Tensor& in, Tensor& out) {
  RETURN_IF_ERROR(CheckSameElementType(node, in, out));
  if (in.numel() != out.numel())
    return ShapeOpError(node, "output was allocated as " + ShapeToString(out.shape()) + " (" +
                          std::to_string(out.numel()) + " elements) for an input of shape " +
                          ShapeToString(in.shape()) + " (" + std::to_string(in.numel()) +
                          " elements)");
  // The planner made the output a view of the input: the bytes are already there.
  if (in.nbytes() && out.raw() != in.raw()) std::memcpy(out.raw(), in.raw(), in.nbytes());
  return Status::Ok();
}

Status ReshapeKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  ASSIGN_OR_RETURN(Shape shape,
                   NamedStatus(node, shape_ops::ReshapeOutputShape(in[0]->shape(), in[1]->ToInt64Vector(),
                                                             node.GetInt("allowzero", 0) != 0)));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], in[0]->dtype(), shape));
  return CopyBytes(node, *in[0], *out[0]);
}

// Flatten, Squeeze, Unsqueeze: shape inference already decided the output shape.
Status SameBytesKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  return CopyBytes(node, *in[0], *out[0]);
}

// --- moving elements ---

Status TransposeKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(std::vector<int64_t> perm,
                   NamedStatus(node, shape_ops::TransposePerm(node, x.rank())));
  Shape shape;
  View src{0, {}};
  std::vector<int64_t> st = Strides(x.shape());
  for (int64_t p : perm) {
    shape.push_back(x.shape()[p]);
    src.strides.push_back(st[p]);
  }
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), shape));
  StridedCopy(*out[0], Dense(shape), x, src, shape);
  return Status::Ok();
}

// Strides that read `x` broadcast (right-aligned, numpy style) to `shape`.
View BroadcastView(const Shape& x, const Shape& shape) {
  std::vector<int64_t> st = Strides(x);
  View v{0, std::vector<int64_t>(shape.size(), 0)};
  const size_t lead = shape.size() - x.size();
  for (size_t k = lead; k < shape.size(); ++k) v.strides[k] = x[k - lead] == 1 ? 0 : st[k - lead];
  return v;
}

Status ExpandKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  Shape target = in[1]->ToInt64Vector();
  auto shape = BroadcastShapes(x.shape(), target);
  if (!shape.ok())
    return ShapeOpError(node, "cannot expand input of shape " + ShapeToString(x.shape()) + " to " +
                          ShapeToString(target) + ": " + shape.status().message());
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), *shape));
  // A view (the planner gave the output the input's buffer, which it does only when the element
  // count is kept: the same bytes in the same order): nothing moves.
  if (out[0]->raw() == x.raw()) return Status::Ok();
  StridedCopy(*out[0], Dense(*shape), x, BroadcastView(x.shape(), *shape), *shape);
  return Status::Ok();
}

Status TileKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  std::vector<int64_t> reps = in[1]->ToInt64Vector();
  if (static_cast<int64_t>(reps.size()) != x.rank())
    return ShapeOpError(node, "repeats has " + std::to_string(reps.size()) +
                          " values for an input of rank " + std::to_string(x.rank()));
  // The output [r0*d0, r1*d1, ...] is, in row-major order, the array [r0, d0, r1, d1, ...] whose
  // repeat axes read the input with stride 0.
  Shape shape, inter;
  View src{0, {}};
  std::vector<int64_t> st = Strides(x.shape());
  for (int64_t k = 0; k < x.rank(); ++k) {
    if (reps[k] < 0) return ShapeOpError(node, "repeats " + ShapeToString(reps) + " has a negative value");
    shape.push_back(x.shape()[k] * reps[k]);
    inter.push_back(reps[k]);
    inter.push_back(x.shape()[k]);
    src.strides.push_back(0);
    src.strides.push_back(st[k]);
  }
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), shape));
  StridedCopy(*out[0], Dense(inter), x, src, inter);
  return Status::Ok();
}

Status ConcatKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  Tensor& y = *out[0];
  ASSIGN_OR_RETURN(int64_t axis, NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0), y.rank())));
  std::vector<int64_t> st = Strides(y.shape());
  int64_t offset = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& x = *in[i];
    RETURN_IF_ERROR(CheckSameElementType(node, x, y));
    Shape expect = y.shape();
    expect[axis] = x.rank() == y.rank() ? x.shape()[axis] : -1;
    if (x.shape() != expect || offset + x.shape()[axis] > y.shape()[axis])
      return ShapeOpError(node, "input " + std::to_string(i) + " of shape " + ShapeToString(x.shape()) +
                            " does not fit the output " + ShapeToString(y.shape()) +
                            " along axis " + std::to_string(axis));
    StridedCopy(y, View{offset * st[axis], st}, x, Dense(x.shape()), x.shape());
    offset += x.shape()[axis];
  }
  if (offset != y.shape()[axis])
    return ShapeOpError(node, "inputs fill " + std::to_string(offset) + " of the " +
                          std::to_string(y.shape()[axis]) + " positions along axis " +
                          std::to_string(axis));
  return Status::Ok();
}

Status SplitKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(int64_t axis, NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0), x.rank())));
  std::vector<int64_t> sizes;
  if (in.size() > 1 && in[1]) {
    sizes = in[1]->ToInt64Vector();
  } else if (node.HasAttr("split")) {
    sizes = node.GetInts("split");
  } else {
    ASSIGN_OR_RETURN(sizes, NamedStatus(node, shape_ops::EqualSplitSizes(
                                            x.shape()[axis], static_cast<int64_t>(out.size()))));
  }
  if (sizes.size() != out.size())
    return ShapeOpError(node, "split " + ShapeToString(sizes) + " has " + std::to_string(sizes.size()) +
                          " values for " + std::to_string(out.size()) + " outputs");
  std::vector<int64_t> st = Strides(x.shape());
  int64_t offset = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (sizes[i] < 0 || offset + sizes[i] > x.shape()[axis])
      return ShapeOpError(node, "split " + ShapeToString(sizes) + " does not fit axis " +
                            std::to_string(axis) + " of size " + std::to_string(x.shape()[axis]));
    Shape shape = x.shape();
    shape[axis] = sizes[i];
    RETURN_IF_ERROR(CheckOutputType(node, *out[i], x.dtype(), shape));
    StridedCopy(*out[i], Dense(shape), x, View{offset * st[axis], st}, shape);
    offset += sizes[i];
  }
  if (offset != x.shape()[axis])
    return ShapeOpError(node, "split " + ShapeToString(sizes) + " sums to " + std::to_string(offset) +
                          " but axis " + std::to_string(axis) + " has size " +
                          std::to_string(x.shape()[axis]));
  return Status::Ok();
}

std::vector<int64_t> OptionalInts(Inputs in, size_t i) {
  return i < in.size() && in[i] ? in[i]->ToInt64Vector() : std::vector<int64_t>{};
}

// The strided view of `shape` that Slice reads (or SliceGrad writes), and the slice's shape.
StatusOr<std::pair<View, Shape>> SliceView(const Node& node, const Shape& shape,
                                           const std::vector<int64_t>& starts,
                                           const std::vector<int64_t>& ends,
                                           const std::vector<int64_t>& axes,
                                           const std::vector<int64_t>& steps) {
  ASSIGN_OR_RETURN(std::vector<SliceDim> dims,
                   NamedStatus(node, shape_ops::ResolveSlice(shape, starts, ends, axes, steps)));
  std::vector<int64_t> st = Strides(shape);
  View v{0, {}};
  Shape out;
  for (size_t k = 0; k < dims.size(); ++k) {
    v.base += dims[k].start * st[k];
    v.strides.push_back(dims[k].step * st[k]);
    out.push_back(dims[k].len);
  }
  return std::make_pair(v, out);
}

Status SliceKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  std::pair<View, Shape> view;
  if (in.size() == 1) {
    ASSIGN_OR_RETURN(view, SliceView(node, x.shape(), node.GetInts("starts"), node.GetInts("ends"),
                                     node.GetInts("axes"), {}));
  } else {
    ASSIGN_OR_RETURN(view,
                     SliceView(node, x.shape(), in[1]->ToInt64Vector(), in[2]->ToInt64Vector(),
                               OptionalInts(in, 3), OptionalInts(in, 4)));
  }
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), view.second));
  StridedCopy(*out[0], Dense(view.second), x, view.first, view.second);
  return Status::Ok();
}

// SliceGrad (dY, shape, starts, ends[, axes, steps]) -> dX.
Status SliceGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& dy = *in[0];
  Shape shape = in[1]->ToInt64Vector();
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], dy.dtype(), shape));
  ASSIGN_OR_RETURN(auto view, SliceView(node, shape, in[2]->ToInt64Vector(), in[3]->ToInt64Vector(),
                                        OptionalInts(in, 4), OptionalInts(in, 5)));
  if (view.second != dy.shape())
    return ShapeOpError(node, "dY has shape " + ShapeToString(dy.shape()) + " but slicing " +
                          ShapeToString(shape) + " gives " + ShapeToString(view.second));
  // Slice positions are distinct (steps are nonzero), so a plain copy after zeroing suffices.
  ParallelZero(out[0]->raw(), out[0]->nbytes());
  StridedCopy(*out[0], view.first, dy, Dense(dy.shape()), dy.shape());
  return Status::Ok();
}

// Reads index i of an int32/int64 tensor, normalized into [0, dim); error when out of range.
StatusOr<int64_t> IndexAt(const Node& node, const Tensor& idx, int64_t i, int64_t axis,
                          int64_t dim) {
  int64_t v = idx.GetAsInt64(i);
  if (v < -dim || v >= dim)
    return ShapeOpError(node, "indices[" + std::to_string(i) + "] = " + std::to_string(v) +
                          " is out of range for axis " + std::to_string(axis) + " of size " +
                          std::to_string(dim));
  return v < 0 ? v + dim : v;
}

Status CheckIndexType(const Node& node, const Tensor& idx) {
  if (idx.dtype() == DType::kInt64 || idx.dtype() == DType::kInt32) return Status::Ok();
  return ShapeOpError(node, "indices must be int64 or int32, got " + std::string(DTypeName(idx.dtype())));
}

// Gather viewed as [outer, axis_dim, inner] -> [outer, n, inner].
struct GatherDims {
  int64_t axis, outer = 1, dim, inner = 1;
};

StatusOr<GatherDims> GetGatherDims(const Node& node, const Shape& data) {
  GatherDims g;
  ASSIGN_OR_RETURN(g.axis, NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0),
                                                     static_cast<int64_t>(data.size()))));
  for (int64_t k = 0; k < g.axis; ++k) g.outer *= data[k];
  g.dim = data[g.axis];
  for (size_t k = g.axis + 1; k < data.size(); ++k) g.inner *= data[k];
  return g;
}

// Every index in range, checked once before anything is written; Row then reads them unchecked
// (no table of rows: kernels take no scratch they can do without).
Status CheckIndices(const Node& node, const Tensor& idx, const GatherDims& g) {
  for (int64_t j = 0; j < idx.numel(); ++j)
    RETURN_IF_ERROR(IndexAt(node, idx, j, g.axis, g.dim).status());
  return Status::Ok();
}
int64_t Row(const Tensor& idx, int64_t j, const GatherDims& g) {
  const int64_t v = idx.GetAsInt64(j);
  return v < 0 ? v + g.dim : v;
}

Shape GatherShape(const Shape& data, const Shape& idx, int64_t axis) {
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  return out;
}

Status GatherKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  ASSIGN_OR_RETURN(GatherDims g, GetGatherDims(node, x.shape()));
  RETURN_IF_ERROR(
      CheckOutputType(node, *out[0], x.dtype(), GatherShape(x.shape(), idx.shape(), g.axis)));
  const int64_t n = idx.numel();
  RETURN_IF_ERROR(CheckIndices(node, idx, g));
  const size_t row_bytes = g.inner * DTypeSize(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  ParallelFor(g.outer * n, RowGrain(g.inner), [&](int64_t begin, int64_t end) {
    for (int64_t on = begin; on < end; ++on) {
      const int64_t o = on / n, j = on % n;
      std::memcpy(dst + on * row_bytes, src + (o * g.dim + Row(idx, j, g)) * row_bytes, row_bytes);
    }
  });
  return Status::Ok();
}

// Threads take ranges of the inner (column) index: every output element still receives its rows
// of dY in index order, whatever the thread count.
template <class T>
void GatherGradT(const GatherDims& g, const Tensor& idx, const T* dy, T* dx) {
  const int64_t n = idx.numel();
  ParallelZero(dx, g.outer * g.dim * g.inner * static_cast<int64_t>(sizeof(T)));
  ParallelFor(g.inner, RowGrain(g.outer * n), [&](int64_t begin, int64_t end) {
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t j = 0; j < n; ++j) {
        const T* s = dy + (o * n + j) * g.inner;
        T* d = dx + (o * g.dim + Row(idx, j, g)) * g.inner;
        for (int64_t i = begin; i < end; ++i) d[i] += s[i];
      }
  });
}

// bfloat16 dY and dX (FSDP's bf16 parameters): each element of dX adds up its elements of dY in
// f32, in index order, and is rounded to bfloat16 once: the f32 kernel's numbers on staged f32
// copies, bit for bit, without an f32 copy of dX. The indices are grouped by row first (a counting
// sort in the workspace, GatherGradWorkspace); threads take ranges of rows.
void GatherGradBf16(const GatherDims& g, const Tensor& idx, const uint16_t* dy, uint16_t* dx,
                    const KernelContext& ctx) {
  const int64_t n = idx.numel();
  // Row r's positions are order[start[r] .. start[r + 1]), in index order.
  int64_t* start = WorkspaceArray<int64_t>(ctx);  // [dim + 1]
  int64_t* cursor = start + g.dim + 1;            // [dim]
  int64_t* order = cursor + g.dim;                // [n]
  std::fill(start, start + g.dim + 1, int64_t{0});
  for (int64_t j = 0; j < n; ++j) ++start[Row(idx, j, g) + 1];
  for (int64_t r = 0; r < g.dim; ++r) start[r + 1] += start[r];
  std::copy(start, start + g.dim, cursor);
  for (int64_t j = 0; j < n; ++j) order[cursor[Row(idx, j, g)]++] = j;
  constexpr int64_t kColumns = 256;
  ParallelFor(g.outer * g.dim, RowGrain(g.inner), [&](int64_t begin, int64_t end) {
    float acc[kColumns];
    for (int64_t orow = begin; orow < end; ++orow) {
      const int64_t o = orow / g.dim, r = orow % g.dim;
      uint16_t* d = dx + orow * g.inner;
      for (int64_t c0 = 0; c0 < g.inner; c0 += kColumns) {
        const int64_t len = std::min(kColumns, g.inner - c0);
        std::fill(acc, acc + len, 0.0f);
        for (int64_t k = start[r]; k < start[r + 1]; ++k) {
          const uint16_t* s = dy + (o * n + order[k]) * g.inner + c0;
          for (int64_t i = 0; i < len; ++i) acc[i] += Bf16ToFloat(s[i]);
        }
        for (int64_t i = 0; i < len; ++i) d[c0 + i] = FloatToBf16(acc[i]);
      }
    }
  });
}

// GatherGrad's workspace: the counting sort of GatherGradBf16 (none for f32 and f64).
int64_t GatherGradWorkspace(const Node& node, std::span<const OperandType> in,
                            std::span<const OperandType> out) {
  if (in.size() < 2 || out.empty() || out[0].dtype != DType::kBFloat16 || !in[1].shape ||
      !out[0].shape)
    return 0;
  const Shape& dx = *out[0].shape;
  auto axis = NormalizeAxis(node.GetInt("axis", 0), static_cast<int64_t>(dx.size()));
  if (!axis.ok()) return 0;
  return (2 * dx[*axis] + 1 + NumElements(*in[1].shape)) * static_cast<int64_t>(sizeof(int64_t));
}

// GatherGrad (shape, indices, dY) -> dX: rows of dY added into zeros, indices in order.
Status GatherGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext& ctx) {
  Shape shape = in[0]->ToInt64Vector();
  const Tensor& idx = *in[1];
  const Tensor& dy = *in[2];
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], dy.dtype(), shape));
  if (shape.empty()) return ShapeOpError(node, "shape must have rank >= 1");
  ASSIGN_OR_RETURN(GatherDims g, GetGatherDims(node, shape));
  Shape expect = GatherShape(shape, idx.shape(), g.axis);
  if (dy.shape() != expect)
    return ShapeOpError(
        node, "dY has shape " + ShapeToString(dy.shape()) + ", expected " + ShapeToString(expect));
  RETURN_IF_ERROR(CheckIndices(node, idx, g));
  switch (dy.dtype()) {
    case DType::kFloat32:
      GatherGradT(g, idx, dy.data<float>(), out[0]->data<float>());
      break;
    case DType::kFloat64:
      GatherGradT(g, idx, dy.data<double>(), out[0]->data<double>());
      break;
    case DType::kBFloat16:
      GatherGradBf16(g, idx, dy.data<uint16_t>(), out[0]->data<uint16_t>(), ctx);
      break;
    default:
      return ShapeOpError(node,
                          "dY must be f32, f64 or bf16, got " + std::string(DTypeName(dy.dtype())));
  }
  return Status::Ok();
}

// For GatherElements and its gradient: fn(e, offset) for each element e of `indices` in order, with
// the data offset it refers to. Every index is checked before fn first runs.
template <class Fn>
Status ForEachElementOffset(const Node& node, const Shape& data, const Tensor& idx, Fn fn) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  const int64_t r = static_cast<int64_t>(data.size());
  if (idx.rank() != r)
    return ShapeOpError(node, "indices " + ShapeToString(idx.shape()) + " and data " + ShapeToString(data) +
                          " must have the same rank");
  ASSIGN_OR_RETURN(int64_t axis, NamedStatus(node, NormalizeAxis(node.GetInt("axis", 0), r)));
  for (int64_t k = 0; k < r; ++k)
    if (k != axis && idx.shape()[k] > data[k])
      return ShapeOpError(node, "indices " + ShapeToString(idx.shape()) + " exceed data " +
                            ShapeToString(data) + " on axis " + std::to_string(k));
  for (int64_t e = 0; e < idx.numel(); ++e)
    RETURN_IF_ERROR(IndexAt(node, idx, e, axis, data[axis]).status());
  std::vector<int64_t> ds = Strides(data);
  std::vector<int64_t> pos(r, 0);
  for (int64_t e = 0; e < idx.numel(); ++e) {
    int64_t v = idx.GetAsInt64(e);
    if (v < 0) v += data[axis];
    int64_t off = 0;
    for (int64_t k = 0; k < r; ++k) off += (k == axis ? v : pos[k]) * ds[k];
    fn(e, off);
    for (int64_t k = r - 1; k >= 0; --k) {
      if (++pos[k] < idx.shape()[k]) break;
      pos[k] = 0;
    }
  }
  return Status::Ok();
}

Status GatherElementsKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), in[1]->shape()));
  const size_t elem = DTypeSize(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  return ForEachElementOffset(node, x.shape(), *in[1], [&](int64_t e, int64_t off) {
    std::memcpy(dst + e * elem, src + off * elem, elem);
  });
}

template <class T>
Status ScatterAddT(const Node& node, const Shape& shape, const Tensor& idx, const T* dy, T* dx) {
  std::fill(dx, dx + NumElements(shape), T(0));
  return ForEachElementOffset(node, shape, idx, [&](int64_t e, int64_t off) { dx[off] += dy[e]; });
}

// GatherElementsGrad (dY, shape, indices) -> dX.
Status GatherElementsGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& dy = *in[0];
  Shape shape = in[1]->ToInt64Vector();
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], dy.dtype(), shape));
  if (dy.shape() != in[2]->shape())
    return ShapeOpError(node, "dY " + ShapeToString(dy.shape()) + " and indices " +
                          ShapeToString(in[2]->shape()) + " must have the same shape");
  switch (dy.dtype()) {
    case DType::kFloat32:
      return ScatterAddT(node, shape, *in[2], dy.data<float>(), out[0]->data<float>());
    case DType::kFloat64:
      return ScatterAddT(node, shape, *in[2], dy.data<double>(), out[0]->data<double>());
    default:
      return ShapeOpError(node, "dY must be f32 or f64, got " + std::string(DTypeName(dy.dtype())));
  }
}

// GatherND / GatherNDGrad view data as [batch, slots, slice]: batch the product of the
// batch_dims leading axes, slots the positions of data[b..b+k) that one index tuple picks among,
// slice the elements each tuple moves. Tuple t (row-major over indices.shape[:-1]) lies in batch
// t / per_batch.
struct NDDims {
  int64_t b = 0, k = 0, batch = 1, slots = 1, slice = 1, tuples = 0, per_batch = 0;
  std::vector<int64_t> dims, strides;  // data[b..b+k) and their strides within a batch's slots
  Shape out;                           // GatherND's output shape
};

// Checks the shapes and every index (before anything is written).
StatusOr<NDDims> GetNDDims(const Node& node, const Shape& data, const Tensor& idx) {
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  NDDims d;
  d.b = node.GetInt("batch_dims", 0);
  ASSIGN_OR_RETURN(d.out, NamedStatus(node, shape_ops::GatherNDShape(data, idx.shape(), d.b)));
  d.k = idx.shape().back();
  for (int64_t i = 0; i < d.b; ++i) d.batch *= data[i];
  d.dims.assign(data.begin() + d.b, data.begin() + d.b + d.k);
  d.strides = Strides(d.dims);
  for (int64_t dim : d.dims) d.slots *= dim;
  for (size_t i = d.b + d.k; i < data.size(); ++i) d.slice *= data[i];
  d.tuples = idx.numel() / d.k;
  d.per_batch = d.batch == 0 ? 0 : d.tuples / d.batch;
  for (int64_t e = 0; e < idx.numel(); ++e) {
    const int64_t j = e % d.k;
    RETURN_IF_ERROR(IndexAt(node, idx, e, d.b + j, d.dims[j]).status());
  }
  return d;
}

// The [batch · slots] row tuple t picks (its indices already checked).
int64_t NDRow(const NDDims& d, const Tensor& idx, int64_t t) {
  int64_t slot = 0;
  for (int64_t j = 0; j < d.k; ++j) {
    int64_t v = idx.GetAsInt64(t * d.k + j);
    if (v < 0) v += d.dims[j];
    slot += v * d.strides[j];
  }
  return t / d.per_batch * d.slots + slot;
}

Status GatherNDKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  ASSIGN_OR_RETURN(NDDims d, GetNDDims(node, x.shape(), idx));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), d.out));
  const size_t slice_bytes = d.slice * DTypeSize(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  for (int64_t t = 0; t < d.tuples; ++t)
    std::memcpy(dst + t * slice_bytes, src + NDRow(d, idx, t) * slice_bytes, slice_bytes);
  return Status::Ok();
}

template <class T>
void GatherNDGradT(const NDDims& d, const Tensor& idx, const T* dy, T* dx) {
  std::fill(dx, dx + d.batch * d.slots * d.slice, T(0));
  for (int64_t t = 0; t < d.tuples; ++t) {
    const T* s = dy + t * d.slice;
    T* r = dx + NDRow(d, idx, t) * d.slice;
    for (int64_t i = 0; i < d.slice; ++i) r[i] += s[i];
  }
}

// GatherNDGrad (shape, indices, dY) -> dX: dY's slices added into zeros, tuples in order.
Status GatherNDGradKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  Shape shape = in[0]->ToInt64Vector();
  const Tensor& idx = *in[1];
  const Tensor& dy = *in[2];
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], dy.dtype(), shape));
  ASSIGN_OR_RETURN(NDDims d, GetNDDims(node, shape, idx));
  if (dy.shape() != d.out)
    return ShapeOpError(node,
                "dY has shape " + ShapeToString(dy.shape()) + ", expected " + ShapeToString(d.out));
  switch (dy.dtype()) {
    case DType::kFloat32:
      GatherNDGradT(d, idx, dy.data<float>(), out[0]->data<float>());
      return Status::Ok();
    case DType::kFloat64:
      GatherNDGradT(d, idx, dy.data<double>(), out[0]->data<double>());
      return Status::Ok();
    default:
      return ShapeOpError(node, "dY must be f32 or f64, got " + std::string(DTypeName(dy.dtype())));
  }
}

Status TriluKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  if (x.rank() < 2) return ShapeOpError(node, "input must have rank >= 2, got " + ShapeToString(x.shape()));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), x.shape()));
  int64_t k = 0;
  if (in.size() > 1 && in[1]) {
    if (in[1]->numel() != 1) return ShapeOpError(node, "k must be a scalar");
    k = in[1]->GetAsInt64(0);
  }
  const bool upper = node.GetInt("upper", 1) != 0;
  const int64_t rows = x.shape()[x.rank() - 2], cols = x.shape()[x.rank() - 1];
  const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  const size_t elem = DTypeSize(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  // Clamp k so that i + k cannot overflow; beyond +-cols it keeps or drops whole rows anyway.
  k = std::clamp<int64_t>(k, -rows - 1, cols + 1);
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      // Kept columns: j - i >= k (upper) or j - i <= k (lower).
      int64_t lo = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
      int64_t hi = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
      size_t row = (m * rows + i) * cols * elem;
      std::memset(dst + row, 0, cols * elem);
      if (hi > lo) std::memcpy(dst + row + lo * elem, src + row + lo * elem, (hi - lo) * elem);
    }
  return Status::Ok();
}

// Workspace (PadWorkspace): per axis, the input index each output index reads.
Status PadKernel(const Node& node, Inputs in, Outputs out, const KernelContext& ctx) {
  const Tensor& x = *in[0];
  const int64_t r = x.rank();
  std::vector<int64_t> pads =
      in.size() > 1 && in[1] ? in[1]->ToInt64Vector() : node.GetInts("pads");
  std::vector<int64_t> axes = OptionalInts(in, 3);
  ASSIGN_OR_RETURN(
      pads, NamedStatus(node, shape_ops::FullPads(r, pads, in.size() > 3 && in[3] ? &axes : nullptr)));
  const std::string mode = node.GetString("mode", "constant");
  Shape shape(r);
  for (int64_t k = 0; k < r; ++k)
    if (__builtin_add_overflow(x.shape()[k], pads[k], &shape[k]) ||
        __builtin_add_overflow(shape[k], pads[k + r], &shape[k]))
      return ShapeOpError(node, "pads " + ShapeToString(pads) + " on axis " + std::to_string(k) + " of " +
                            ShapeToString(x.shape()) + " overflow int64");
  for (int64_t k = 0; k < r; ++k)
    if (shape[k] < 0)
      return ShapeOpError(node, "pads " + ShapeToString(pads) + " remove more than axis " +
                            std::to_string(k) + " of " + ShapeToString(x.shape()) + " holds");
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), shape));
  // An empty output may still have a huge axis ([0, 2^30]): the per-axis tables below would be
  // sized by it.
  if (out[0]->numel() == 0) return Status::Ok();

  const size_t elem = DTypeSize(x.dtype());
  uint64_t fill_bytes = 0;  // one element of any type the kernel moves
  if (elem > sizeof(fill_bytes)) return ShapeOpError(node, "unsupported element type");
  auto* fill = reinterpret_cast<uint8_t*>(&fill_bytes);
  if (in.size() > 2 && in[2]) {
    RETURN_IF_ERROR(CheckSameElementType(node, *in[2], x));
    std::memcpy(fill, in[2]->raw(), elem);
  } else if (node.HasAttr("value") && x.dtype() == DType::kFloat32) {
    float v = node.GetFloat("value", 0.f);
    std::memcpy(fill, &v, elem);
  }
  // Per axis, the input index each output index reads (-1: the constant): map[k] is shape[k]
  // entries of the workspace.
  std::vector<int64_t*> map(r);
  int64_t* next = WorkspaceArray<int64_t>(ctx);
  for (int64_t k = 0; k < r; ++k) {
    map[k] = next;
    next += shape[k];
    const int64_t d = x.shape()[k];
    for (int64_t o = 0; o < shape[k]; ++o) {
      int64_t i = o - pads[k];
      if (mode == "constant") {
        if (i < 0 || i >= d) i = -1;
      } else if (d == 0) {
        return ShapeOpError(node, "mode '" + mode + "' cannot pad the empty axis " + std::to_string(k));
      } else if (mode == "edge") {
        i = std::clamp<int64_t>(i, 0, d - 1);
      } else if (mode == "reflect") {
        if (d == 1) i = 0;
        const int64_t period = 2 * (d - 1);
        if (d > 1) {
          i = ((i % period) + period) % period;
          if (i >= d) i = period - i;
        }
      } else {
        return ShapeOpError(node, "mode '" + mode + "' is not supported (constant, reflect, edge are)");
      }
      map[k][o] = i;
    }
  }
  std::vector<int64_t> st = Strides(x.shape());
  std::vector<int64_t> pos(r, 0);
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  for (int64_t e = 0; e < out[0]->numel(); ++e) {
    int64_t off = 0;
    bool inside = true;
    for (int64_t k = 0; k < r && inside; ++k) {
      int64_t i = map[k][pos[k]];
      inside = i >= 0;
      off += i * st[k];
    }
    std::memcpy(dst + e * elem, inside ? src + off * elem : fill, elem);
    for (int64_t k = r - 1; k >= 0; --k) {
      if (++pos[k] < shape[k]) break;
      pos[k] = 0;
    }
  }
  return Status::Ok();
}

int64_t PadWorkspace(const Node&, std::span<const OperandType>, std::span<const OperandType> out) {
  if (out.empty() || !out[0].shape || NumElements(*out[0].shape) == 0) return 0;
  int64_t n = 0;
  for (int64_t d : *out[0].shape) n += d;
  return static_cast<int64_t>(sizeof(int64_t)) * n;
}

Status OneHotKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& idx = *in[0];
  const Tensor& values = *in[2];
  if (in[1]->numel() != 1) return ShapeOpError(node, "depth must be a scalar");
  if (values.numel() != 2) return ShapeOpError(node, "values must hold two elements [off, on]");
  const int64_t depth = static_cast<int64_t>(in[1]->GetAsDouble(0));
  const int64_t r = idx.rank();
  int64_t axis = node.GetInt("axis", -1);
  if (axis < -(r + 1) || axis > r)
    return ShapeOpError(node, "axis " + std::to_string(axis) + " is out of range for output rank " +
                          std::to_string(r + 1));
  if (axis < 0) axis += r + 1;
  Shape shape = idx.shape();
  shape.insert(shape.begin() + axis, depth);
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], values.dtype(), shape));
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= idx.shape()[k];
  for (int64_t k = axis; k < r; ++k) inner *= idx.shape()[k];
  const size_t elem = DTypeSize(values.dtype());
  const auto* off = static_cast<const uint8_t*>(values.raw());
  const uint8_t* on = off + elem;
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t d = 0; d < depth; ++d)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t v = static_cast<int64_t>(idx.GetAsDouble(o * inner + i));
        if (v < 0) v += depth;
        std::memcpy(dst + ((o * depth + d) * inner + i) * elem, v == d ? on : off, elem);
      }
  return Status::Ok();
}

template <class T>
void ScatterReduce(T* dst, const T* src, int64_t n, const std::string& red) {
  for (int64_t i = 0; i < n; ++i) {
    if (red == "add")
      dst[i] += src[i];
    else if (red == "mul")
      dst[i] *= src[i];
    else if (red == "max")
      dst[i] = std::max(dst[i], src[i]);
    else
      dst[i] = std::min(dst[i], src[i]);
  }
}

Status ScatterNDKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  const Tensor& upd = *in[2];
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  RETURN_IF_ERROR(CheckSameElementType(node, x, upd));
  RETURN_IF_ERROR(CheckOutputType(node, *out[0], x.dtype(), x.shape()));
  if (idx.rank() == 0) return ShapeOpError(node, "indices must have rank >= 1");
  const int64_t k = idx.shape().back();
  if (k > x.rank())
    return ShapeOpError(node, "indices' last dimension " + std::to_string(k) +
                          " exceeds the rank of data " + std::to_string(x.rank()));
  int64_t slice = 1;
  for (int64_t d = k; d < x.rank(); ++d) slice *= x.shape()[d];
  const int64_t tuples = k == 0 ? idx.numel() : idx.numel() / k;
  if (upd.numel() != tuples * slice)
    return ShapeOpError(node, "updates has " + std::to_string(upd.numel()) + " elements, expected " +
                          std::to_string(tuples * slice));
  const std::string red = node.GetString("reduction", "none");
  std::memcpy(out[0]->raw(), x.raw(), x.nbytes());
  std::vector<int64_t> st = Strides(x.shape());
  const size_t elem = DTypeSize(x.dtype());
  auto* dst = static_cast<uint8_t*>(out[0]->raw());
  const auto* src = static_cast<const uint8_t*>(upd.raw());
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      ASSIGN_OR_RETURN(int64_t v, IndexAt(node, idx, t * k + j, j, x.shape()[j]));
      off += v * st[j];
    }
    uint8_t* d = dst + off * elem;
    const uint8_t* s = src + t * slice * elem;
    if (red == "none") {
      std::memcpy(d, s, slice * elem);
      continue;
    }
    switch (x.dtype()) {
      case DType::kFloat32:
        ScatterReduce(reinterpret_cast<float*>(d), reinterpret_cast<const float*>(s), slice, red);
        break;
      case DType::kFloat64:
        ScatterReduce(reinterpret_cast<double*>(d), reinterpret_cast<const double*>(s), slice, red);
        break;
      case DType::kInt32:
        ScatterReduce(reinterpret_cast<int32_t*>(d), reinterpret_cast<const int32_t*>(s), slice,
                      red);
        break;
      case DType::kInt64:
        ScatterReduce(reinterpret_cast<int64_t*>(d), reinterpret_cast<const int64_t*>(s), slice,
                      red);
        break;
      default:
        return ShapeOpError(node, "reduction '" + red + "' is not supported for " +
                              std::string(DTypeName(x.dtype())));
    }
  }
  return Status::Ok();
}

// ScatterElements (data, indices, updates) -> y: a copy of data, then each update in index order
// written to (reduction none) or combined with (add, mul, max, min) the element GatherElements
// would read for it, as ONNX's reference does; a repeated position sees its updates in that order.
template <class T, class Combine>
Status ScatterElementsT(const Node& node, const Tensor& x, const Tensor& idx, const Tensor& upd,
                        Tensor& y, Combine combine) {
  const T* u = upd.data<T>();
  T* d = y.data<T>();
  return ForEachElementOffset(node, x.shape(), idx,
                              [&](int64_t e, int64_t off) { d[off] = combine(d[off], u[e]); });
}

template <class T>
Status ScatterElementsReduce(const Node& node, const std::string& red, const Tensor& x,
                             const Tensor& idx, const Tensor& upd, Tensor& y) {
  if (red == "add")
    return ScatterElementsT<T>(node, x, idx, upd, y, [](T a, T b) { return a + b; });
  if (red == "mul")
    return ScatterElementsT<T>(node, x, idx, upd, y, [](T a, T b) { return a * b; });
  if (red == "max")
    return ScatterElementsT<T>(node, x, idx, upd, y, [](T a, T b) { return std::max(a, b); });
  return ScatterElementsT<T>(node, x, idx, upd, y, [](T a, T b) { return std::min(a, b); });
}

// ScatterElements, and the deprecated Scatter (the same without reduction).
Status ScatterElementsKernel(const Node& node, Inputs in, Outputs out, const KernelContext&) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  const Tensor& upd = *in[2];
  Tensor& y = *out[0];
  RETURN_IF_ERROR(CheckIndexType(node, idx));
  RETURN_IF_ERROR(CheckSameElementType(node, x, upd));
  RETURN_IF_ERROR(CheckOutputType(node, y, x.dtype(), x.shape()));
  if (upd.shape() != idx.shape())
    return ShapeOpError(node, "updates " + ShapeToString(upd.shape()) + " and indices " +
                                  ShapeToString(idx.shape()) + " must have the same shape");
  const std::string red = node.GetString("reduction", "none");
  const bool numeric = x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64 ||
                       x.dtype() == DType::kInt32 || x.dtype() == DType::kInt64;
  if (red != "none" && (!numeric || (red != "add" && red != "mul" && red != "max" && red != "min")))
    return ShapeOpError(
        node, "reduction '" + red + "' is not supported for " + std::string(DTypeName(x.dtype())));
  if (y.raw() != x.raw() && x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  if (red == "none") {
    const size_t elem = DTypeSize(x.dtype());
    auto* dst = static_cast<uint8_t*>(y.raw());
    const auto* src = static_cast<const uint8_t*>(upd.raw());
    return ForEachElementOffset(node, x.shape(), idx, [&](int64_t e, int64_t off) {
      std::memcpy(dst + off * elem, src + e * elem, elem);
    });
  }
  switch (x.dtype()) {
    case DType::kFloat32:
      return ScatterElementsReduce<float>(node, red, x, idx, upd, y);
    case DType::kFloat64:
      return ScatterElementsReduce<double>(node, red, x, idx, upd, y);
    case DType::kInt32:
      return ScatterElementsReduce<int32_t>(node, red, x, idx, upd, y);
    default:
      return ScatterElementsReduce<int64_t>(node, red, x, idx, upd, y);
  }
}

}  // namespace

void RegisterShapeOpWorkspaces(CpuWorkspaceTable& table) {
  table.Add("", "Pad", PadWorkspace);
  table.Add("com.microsoft", "GatherGrad", GatherGradWorkspace);
}

void RegisterShapeOpKernels(CpuKernelTable& table) {
  table.Add("", "Constant", ConstantKernel);
  table.Add("", "Shape", ShapeKernel);
  table.Add("", "Size", SizeKernel);
  table.Add("", "ConstantOfShape", ConstantOfShapeKernel);
  table.Add("", "Range", RangeKernel);
  table.Add("", "Reshape", ReshapeKernel);
  table.Add("", "Flatten", SameBytesKernel);
  table.Add("", "Squeeze", SameBytesKernel);
  table.Add("", "Unsqueeze", SameBytesKernel);
  table.Add("", "Transpose", TransposeKernel);
  table.Add("", "Expand", ExpandKernel);
  table.Add("", "Tile", TileKernel);
  table.Add("", "Concat", ConcatKernel);
  table.Add("", "Split", SplitKernel);
  table.Add("", "Slice", SliceKernel);
  table.Add("", "Gather", GatherKernel);
  table.Add("", "GatherElements", GatherElementsKernel);
  table.Add("", "GatherND", GatherNDKernel);
  table.Add("", "Trilu", TriluKernel);
  table.Add("", "Pad", PadKernel);
  table.Add("", "OneHot", OneHotKernel);
  table.Add("", "ScatterND", ScatterNDKernel);
  table.Add("", "ScatterElements", ScatterElementsKernel);
  table.Add("", "Scatter", ScatterElementsKernel);
  table.Add("com.microsoft", "SliceGrad", SliceGradKernel);
  table.Add("com.microsoft", "GatherGrad", GatherGradKernel);
  table.Add("com.microsoft", "GatherElementsGrad", GatherElementsGradKernel);
  table.Add("com.microsoft", "GatherNDGrad", GatherNDGradKernel);
}

}  // namespace foundry
