// Schemas of the shape-op family: ops that create, inspect or move elements without arithmetic on
// them (Constant, Shape, Reshape, Transpose, Slice, Gather, GatherND, Concat, Split, Pad, ...),
// plus the com.microsoft gradient ops of the family (SliceGrad, GatherGrad, GatherElementsGrad,
// GatherNDGrad).
//
// Many output shapes here depend on the *values* of small int64 inputs (Reshape's shape, Slice's
// starts). When such a value is not a compile-time constant yet, inference returns -1 dimensions
// (or an unknown rank when even that is undecidable); constant folding later makes the value known
// and inference runs again.
#include "compiler/ops/shape_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "compiler/op_schema.h"

namespace foundry {
namespace shape_ops {

namespace {

std::string IntsToString(const std::vector<int64_t>& v) { return ShapeToString(v); }

}  // namespace

StatusOr<Tensor> ConstantAttrTensor(const Node& node) {
  auto it = node.attrs.find("value");
  if (it != node.attrs.end() && it->second.kind == Attribute::Kind::kTensor && it->second.t)
    return *it->second.t;
  ASSIGN_OR_RETURN(const ConstantValue v, ConstantAttrValue(node));
  Tensor t(v.dtype, v.shape);
  if (t.nbytes()) std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

StatusOr<ConstantValue> ConstantAttrValue(const Node& node) {
  ConstantValue v;
  auto it = node.attrs.find("value");
  if (it != node.attrs.end()) {
    if (it->second.kind != Attribute::Kind::kTensor || !it->second.t)
      return Error("attribute 'value' must be a tensor");
    const Tensor& t = *it->second.t;
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.bytes = t.raw();
  } else if ((it = node.attrs.find("value_float")) != node.attrs.end()) {
    v.dtype = DType::kFloat32;
    v.in_scalar = true;
    v.scalar =
        it->second.kind == Attribute::Kind::kInt ? static_cast<float>(it->second.i) : it->second.f;
  } else if ((it = node.attrs.find("value_floats")) != node.attrs.end()) {
    v.dtype = DType::kFloat32;
    v.shape = {static_cast<int64_t>(it->second.floats.size())};
    v.bytes = it->second.floats.data();
  } else if ((it = node.attrs.find("value_int")) != node.attrs.end()) {
    v.dtype = DType::kInt64;
    v.bytes = &it->second.i;
  } else if ((it = node.attrs.find("value_ints")) != node.attrs.end()) {
    v.dtype = DType::kInt64;
    v.shape = {static_cast<int64_t>(it->second.ints.size())};
    v.bytes = it->second.ints.data();
  } else {
    return Error(
        "needs one of the attributes value, value_float, value_floats, value_int, value_ints "
        "(sparse_value and string constants are not supported)");
  }
  return v;
}

DimRange ShapeOpRange(const Node& node, int64_t rank) {
  auto clamp = [rank](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  DimRange r;
  r.start = clamp(node.GetInt("start", 0));
  r.end = std::max(node.HasAttr("end") ? clamp(node.GetInt("end", rank)) : rank, r.start);
  return r;
}

StatusOr<Shape> ReshapeOutputShape(const Shape& in, const std::vector<int64_t>& requested,
                                   bool allowzero) {
  const std::string req = IntsToString(requested);
  Shape out(requested.size());
  std::vector<bool> copied(requested.size(), false);
  int64_t infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < requested.size(); ++i) {
    int64_t r = requested[i];
    if (r == -1) {
      if (infer_at >= 0) return Error("shape " + req + " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      out[i] = -1;
    } else if (r == 0 && !allowzero) {
      if (i >= in.size())
        return Error("shape " + req + " copies dimension " + std::to_string(i) +
                     " (a 0) but the input " + ShapeToString(in) + " has rank " +
                     std::to_string(in.size()));
      out[i] = in[i];
      copied[i] = true;
    } else if (r < 0) {
      return Error("shape " + req + " has an invalid dimension " + std::to_string(r));
    } else {
      has_zero |= r == 0;
      out[i] = r;
    }
  }
  if (allowzero && has_zero && infer_at >= 0)
    return Error("shape " + req + " has both a 0 and a -1, which allowzero=1 forbids");

  // Dimensions copied by a 0 appear on both sides and cancel, so a -1 can often be inferred even
  // when those copied dimensions are symbolic (unknown).
  // Checked products: a requested shape of 2^62 elements must not wrap to a small count.
  int64_t in_rest = 1, out_rest = 1;
  bool in_known = true, all_in_known = true, overflow = false;
  for (size_t j = 0; j < in.size(); ++j) {
    if (in[j] < 0) all_in_known = false;
    if (j < copied.size() && copied[j]) continue;
    if (in[j] < 0)
      in_known = false;
    else
      overflow |= __builtin_mul_overflow(in_rest, in[j], &in_rest);
  }
  for (size_t j = 0; j < out.size(); ++j) {
    if (copied[j] || static_cast<int64_t>(j) == infer_at) continue;
    overflow |= __builtin_mul_overflow(out_rest, out[j], &out_rest);
  }
  if (overflow)
    return Error("cannot reshape a tensor of shape " + ShapeToString(in) + " to shape " + req +
                 ": the element count overflows int64");

  const std::string in_desc =
      "a tensor of shape " + ShapeToString(in) +
      (all_in_known ? " (" + std::to_string(NumElements(in)) + " elements)" : "");
  if (infer_at >= 0) {
    if (!in_known) return out;
    if (out_rest == 0)
      return Error("cannot reshape " + in_desc + " to shape " + req +
                   ": the -1 is ambiguous when the other dimensions multiply to 0");
    if (in_rest % out_rest != 0)
      return Error("cannot reshape " + in_desc + " to shape " + req + ": " +
                   std::to_string(in_rest) + " is not a multiple of " + std::to_string(out_rest));
    out[infer_at] = in_rest / out_rest;
    return out;
  }
  if (in_known && in_rest != out_rest)
    return Error("cannot reshape " + in_desc + " to shape " + req +
                 (all_in_known ? " (" + std::to_string(NumElements(out)) + " elements)" : ""));
  return out;
}

StatusOr<std::vector<int64_t>> TransposePerm(const Node& node, int64_t rank) {
  std::vector<int64_t> perm;
  if (!node.HasAttr("perm")) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    return perm;
  }
  perm = node.GetInts("perm");
  std::vector<bool> seen(rank, false);
  bool ok = static_cast<int64_t>(perm.size()) == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < rank && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok)
    return Error("perm " + IntsToString(perm) + " is not a permutation of the " +
                 std::to_string(rank) + " axes of the input");
  return perm;
}

StatusOr<std::vector<SliceDim>> ResolveSlice(const Shape& in, const std::vector<int64_t>& starts,
                                             const std::vector<int64_t>& ends,
                                             std::vector<int64_t> axes,
                                             std::vector<int64_t> steps) {
  const int64_t rank = static_cast<int64_t>(in.size());
  const size_t n = starts.size();
  if (ends.size() != n)
    return Error("starts has " + std::to_string(n) + " values but ends has " +
                 std::to_string(ends.size()));
  if (axes.empty())
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(n, 1);
  if (axes.size() != n || steps.size() != n)
    return Error("starts, ends, axes and steps must have the same length; got " +
                 std::to_string(n) + ", " + std::to_string(ends.size()) + ", " +
                 std::to_string(axes.size()) + ", " + std::to_string(steps.size()));
  std::vector<SliceDim> dims(rank);
  for (int64_t k = 0; k < rank; ++k) dims[k] = SliceDim{0, 1, in[k]};
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(axes[i], rank));
    if (seen[axis]) return Error("axis " + std::to_string(axes[i]) + " appears twice in axes");
    seen[axis] = true;
    int64_t step = steps[i];
    if (step == 0) return Error("steps must not be 0 (axis " + std::to_string(axes[i]) + ")");
    int64_t d = in[axis];
    if (d < 0) {
      dims[axis] = SliceDim{0, step, -1};
      continue;
    }
    if (d == 0) {
      dims[axis] = SliceDim{0, step, 0};
      continue;
    }
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += d;
    if (e < 0) e += d;
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      len = e > s ? (e - s - 1) / step + 1 : 0;  // not (e - s + step - 1): step may be huge
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      // -step may overflow for INT64_MIN; such a step takes at most one element anyway.
      int64_t mag =
          step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
      len = s > e ? (s - e - 1) / mag + 1 : 0;
    }
    dims[axis] = SliceDim{s, step, len};
  }
  return dims;
}

StatusOr<std::vector<int64_t>> EqualSplitSizes(int64_t dim, int64_t num_outputs) {
  if (num_outputs <= 0)
    return Error("cannot split into " + std::to_string(num_outputs) + " outputs");
  if (dim < 0) return std::vector<int64_t>(num_outputs, -1);
  int64_t chunk = dim / num_outputs + (dim % num_outputs != 0);
  int64_t last = dim - chunk * (num_outputs - 1);
  if (last < 0)
    return Error("cannot split a dimension of size " + std::to_string(dim) + " into " +
                 std::to_string(num_outputs) + " pieces of at most " + std::to_string(chunk));
  std::vector<int64_t> sizes(num_outputs, chunk);
  sizes.back() = last;
  return sizes;
}

namespace {

Status TooLong() {
  return Error("start, limit and delta give more than " + std::to_string(INT64_MAX) +
               " elements; one tensor may hold at most " + std::to_string(kMaxTensorBytes) +
               " bytes (1 TiB)");
}

template <class T>
StatusOr<int64_t> FloatRangeLength(T start, T limit, T delta) {
  // As ONNX Runtime: the difference in T, the division in double. An infinite or huge quotient
  // would make the conversion to int64 undefined; NaN gives no elements (n > 0 is false).
  double n = std::ceil(static_cast<double>(limit - start) / static_cast<double>(delta));
  if (n >= 9223372036854775808.0) return TooLong();
  return n > 0 ? static_cast<int64_t>(n) : 0;
}

}  // namespace

StatusOr<int64_t> RangeLength(const Tensor& start, const Tensor& limit, const Tensor& delta) {
  if (start.numel() != 1 || limit.numel() != 1 || delta.numel() != 1)
    return Error("start, limit and delta must be scalars; got shapes " +
                 ShapeToString(start.shape()) + ", " + ShapeToString(limit.shape()) + ", " +
                 ShapeToString(delta.shape()));
  if (start.dtype() != limit.dtype() || start.dtype() != delta.dtype())
    return Error("start, limit and delta must have the same element type");
  if (delta.GetAsDouble(0) == 0) return Error("delta must not be 0");
  switch (start.dtype()) {
    case DType::kFloat32:
      return FloatRangeLength(*start.data<float>(), *limit.data<float>(), *delta.data<float>());
    case DType::kFloat64:
      return FloatRangeLength(*start.data<double>(), *limit.data<double>(), *delta.data<double>());
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64: {
      // In uint64: limit - start can exceed INT64_MAX (start = INT64_MIN, limit = INT64_MAX).
      int64_t s = start.GetAsInt64(0), l = limit.GetAsInt64(0), d = delta.GetAsInt64(0);
      uint64_t span = 0, step = 0;
      if (d > 0 && l > s) {
        span = static_cast<uint64_t>(l) - static_cast<uint64_t>(s);
        step = static_cast<uint64_t>(d);
      } else if (d < 0 && s > l) {
        span = static_cast<uint64_t>(s) - static_cast<uint64_t>(l);
        step = 0 - static_cast<uint64_t>(d);
      }
      if (span == 0) return int64_t{0};
      uint64_t n = (span - 1) / step + 1;
      if (n > static_cast<uint64_t>(INT64_MAX)) return TooLong();
      return static_cast<int64_t>(n);
    }
    default:
      return Error("element type " + std::string(DTypeName(start.dtype())) +
                   " is not supported (f32, f64, i16, i32, i64 are)");
  }
}

StatusOr<std::vector<int64_t>> FullPads(int64_t rank, const std::vector<int64_t>& pads,
                                        const std::vector<int64_t>* axes) {
  if (!axes) {
    if (static_cast<int64_t>(pads.size()) != 2 * rank)
      return Error("pads has " + std::to_string(pads.size()) + " values; a rank-" +
                   std::to_string(rank) + " input needs " + std::to_string(2 * rank));
    return pads;
  }
  const int64_t k = static_cast<int64_t>(axes->size());
  if (static_cast<int64_t>(pads.size()) != 2 * k)
    return Error("pads has " + std::to_string(pads.size()) + " values for " + std::to_string(k) +
                 " axes; it needs " + std::to_string(2 * k));
  std::vector<int64_t> full(2 * rank, 0);
  for (int64_t i = 0; i < k; ++i) {
    ASSIGN_OR_RETURN(int64_t a, NormalizeAxis((*axes)[i], rank));
    full[a] = pads[i];
    full[a + rank] = pads[i + k];
  }
  return full;
}

StatusOr<std::vector<int64_t>> NormalizeAxes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(a, rank));
    if (std::find(out.begin(), out.end(), n) != out.end())
      return Error("axis " + std::to_string(a) + " appears twice in axes " + IntsToString(axes));
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<Shape> GatherNDShape(const Shape& data, const Shape& indices, int64_t batch_dims) {
  const int64_t r = static_cast<int64_t>(data.size());
  const int64_t q = static_cast<int64_t>(indices.size());
  if (r == 0 || q == 0)
    return Error("data and indices must have rank >= 1; got " + ShapeToString(data) + " and " +
                 ShapeToString(indices));
  const int64_t b = batch_dims;
  if (b < 0 || b >= std::min(r, q))
    return Error("batch_dims " + std::to_string(b) + " must be in [0, " +
                 std::to_string(std::min(r, q)) + "), the smaller rank of data " +
                 ShapeToString(data) + " and indices " + ShapeToString(indices));
  const int64_t k = indices.back();
  if (k < 1 || k > r - b)
    return Error("indices " + ShapeToString(indices) + " have tuples of " + std::to_string(k) +
                 " values; with batch_dims " + std::to_string(b) + " and data " +
                 ShapeToString(data) + " a tuple holds 1 to " + std::to_string(r - b));
  for (int64_t i = 0; i < b; ++i)
    if (data[i] >= 0 && indices[i] >= 0 && data[i] != indices[i])
      return Error("batch axis " + std::to_string(i) + " differs: data " + ShapeToString(data) +
                   ", indices " + ShapeToString(indices));
  Shape out(indices.begin(), indices.end() - 1);
  out.insert(out.end(), data.begin() + b + k, data.end());
  return out;
}

}  // namespace shape_ops

namespace {

using shape_ops::SliceDim;
using Types = std::vector<TypeInfo>;

TypeInfo UnknownRank(DType dt) { return TypeInfo{dt, {}, false}; }
TypeInfo RankOnly(DType dt, int64_t rank) { return TypeInfo{dt, Shape(rank, -1), true}; }

std::optional<std::vector<int64_t>> ConstInts(const InferContext& ctx, size_t i) {
  const Tensor* t = ctx.constant(i);
  if (!t) return std::nullopt;
  return t->ToInt64Vector();
}

// Number of elements of a 1-D input whose values are not known yet (-1 when its length isn't
// known either).
int64_t Length1D(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return -1;
  const Value& v = ctx.input(i);
  if (!v.rank_known || v.shape.size() != 1) return -1;
  return v.shape[0];
}

// Prefixes the node to a helper's error.
template <class T>
StatusOr<T> Named(const InferContext& ctx, StatusOr<T> r) {
  if (!r.ok()) return ctx.Fail(r.status().message());
  return r;
}

Status RequireIndexType(const InferContext& ctx, size_t i, const std::string& what) {
  if (!ctx.has_input(i)) return Status::Ok();
  DType t = ctx.input(i).dtype;
  if (t == DType::kInt64 || t == DType::kInt32 || t == DType::kUndefined) return Status::Ok();
  return ctx.Fail(what + " must be int64 or int32, got " + std::string(DTypeName(t)));
}

// An output shape carried by a 1-D int64 input (ConstantOfShape, SliceGrad, GatherGrad).
StatusOr<TypeInfo> ShapeFromInput(const InferContext& ctx, size_t i, DType dt) {
  if (auto s = ConstInts(ctx, i)) {
    for (int64_t d : *s)
      if (d < 0) return ctx.Fail("shape " + ShapeToString(*s) + " has a negative dimension");
    return TypeInfo{dt, *s, true};
  }
  int64_t n = Length1D(ctx, i);
  if (n < 0) return UnknownRank(dt);
  return RankOnly(dt, n);
}

// --- creation and inspection ---

StatusOr<Types> InferConstant(const InferContext& ctx) {
  auto t = shape_ops::ConstantAttrTensor(ctx.node);
  if (!t.ok()) return ctx.Fail(t.status().message());
  return Types{TypeInfo{t->dtype(), t->shape(), true}};
}

StatusOr<Types> InferShape(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  if (!x.rank_known) return Types{TypeInfo{DType::kInt64, {-1}, true}};
  const shape_ops::DimRange dims =
      shape_ops::ShapeOpRange(ctx.node, static_cast<int64_t>(x.shape.size()));
  return Types{TypeInfo{DType::kInt64, {dims.end - dims.start}, true}};
}

StatusOr<Types> InferSize(const InferContext& ctx) {
  return Types{TypeInfo{DType::kInt64, {}, true}};
}

StatusOr<Types> InferConstantOfShape(const InferContext& ctx) {
  DType dt = DType::kFloat32;
  if (ctx.node.HasAttr("value")) {
    const Attribute& a = ctx.node.attrs.at("value");
    if (a.kind != Attribute::Kind::kTensor || !a.t || a.t->numel() != 1)
      return ctx.Fail("attribute 'value' must be a one-element tensor");
    dt = a.t->dtype();
  }
  RETURN_IF_ERROR(RequireIndexType(ctx, 0, "input 'input' (the shape)"));
  ASSIGN_OR_RETURN(TypeInfo t, ShapeFromInput(ctx, 0, dt));
  return Types{t};
}

StatusOr<Types> InferRange(const InferContext& ctx) {
  DType dt = ctx.input(0).dtype;
  for (size_t i = 1; i < 3; ++i)
    if (ctx.input(i).dtype != dt)
      return ctx.Fail("start, limit and delta must have the same element type; got " +
                      std::string(DTypeName(dt)) + " and " +
                      std::string(DTypeName(ctx.input(i).dtype)));
  if (ctx.constant(0) && ctx.constant(1) && ctx.constant(2)) {
    ASSIGN_OR_RETURN(
        int64_t n,
        Named(ctx, shape_ops::RangeLength(*ctx.constant(0), *ctx.constant(1), *ctx.constant(2))));
    return Types{TypeInfo{dt, {n}, true}};
  }
  return Types{TypeInfo{dt, {-1}, true}};
}

// --- reshaping without moving elements ---

StatusOr<Types> InferReshape(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'shape'"));
  auto requested = ConstInts(ctx, 1);
  if (!requested) {
    int64_t n = Length1D(ctx, 1);
    return Types{n < 0 ? UnknownRank(x.dtype) : RankOnly(x.dtype, n)};
  }
  bool allowzero = ctx.node.GetInt("allowzero", 0) != 0;
  if (!x.rank_known) {
    // Without the input's rank only explicit positive dims (and zeros under allowzero) are known.
    Shape out(requested->size(), -1);
    for (size_t i = 0; i < out.size(); ++i)
      if ((*requested)[i] > 0 || (allowzero && (*requested)[i] == 0)) out[i] = (*requested)[i];
    return Types{TypeInfo{x.dtype, out, true}};
  }
  ASSIGN_OR_RETURN(Shape out,
                   Named(ctx, shape_ops::ReshapeOutputShape(x.shape, *requested, allowzero)));
  return Types{TypeInfo{x.dtype, out, true}};
}

StatusOr<Types> InferFlatten(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  if (!x.rank_known) return Types{RankOnly(x.dtype, 2)};
  const int64_t r = static_cast<int64_t>(x.shape.size());
  int64_t axis = ctx.node.GetInt("axis", 1);
  if (axis < -r || axis > r)
    return ctx.Fail("axis " + std::to_string(axis) + " is out of range for rank " +
                    std::to_string(r) + " (Flatten accepts [-r, r])");
  if (axis < 0) axis += r;
  auto prod = [&](int64_t lo, int64_t hi) {
    Shape part(x.shape.begin() + lo, x.shape.begin() + hi);
    if (std::any_of(part.begin(), part.end(), [](int64_t d) { return d < 0; })) return int64_t{-1};
    return NumElements(part);
  };
  int64_t outer = prod(0, axis), inner = prod(axis, r);
  if ((outer < 0 || inner < 0) && x.ShapeKnown())
    return ctx.Fail("input " + x.TypeString() + " has more elements than int64 can count");
  return Types{TypeInfo{x.dtype, {outer, inner}, true}};
}

// Squeeze/Unsqueeze axes: an input since opset 13, an attribute before. nullopt = not known yet.
struct AxesArg {
  bool given = false;
  std::optional<std::vector<int64_t>> values;
  int64_t count = -1;  // number of axes when known
};

AxesArg GetAxesArg(const InferContext& ctx, size_t input) {
  AxesArg a;
  if (ctx.has_input(input)) {
    a.given = true;
    a.values = ConstInts(ctx, input);
    a.count = a.values ? static_cast<int64_t>(a.values->size()) : Length1D(ctx, input);
  } else if (ctx.node.HasAttr("axes")) {
    a.given = true;
    a.values = ctx.node.GetInts("axes");
    a.count = static_cast<int64_t>(a.values->size());
  }
  return a;
}

StatusOr<Types> InferSqueeze(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  AxesArg axes = GetAxesArg(ctx, 1);
  if (!x.rank_known) return Types{UnknownRank(x.dtype)};
  const int64_t r = static_cast<int64_t>(x.shape.size());
  if (!axes.given) {
    Shape out;
    for (int64_t d : x.shape) {
      if (d < 0) return Types{UnknownRank(x.dtype)};  // a symbolic dim might be 1
      if (d != 1) out.push_back(d);
    }
    return Types{TypeInfo{x.dtype, out, true}};
  }
  if (!axes.values)
    return Types{axes.count < 0 ? UnknownRank(x.dtype) : RankOnly(x.dtype, r - axes.count)};
  ASSIGN_OR_RETURN(std::vector<int64_t> norm,
                   Named(ctx, shape_ops::NormalizeAxes(*axes.values, r)));
  Shape out;
  for (int64_t i = 0; i < r; ++i) {
    bool squeezed = std::binary_search(norm.begin(), norm.end(), i);
    if (!squeezed) {
      out.push_back(x.shape[i]);
    } else if (x.shape[i] >= 0 && x.shape[i] != 1) {
      return ctx.Fail("cannot squeeze axis " + std::to_string(i) + " of size " +
                      std::to_string(x.shape[i]) + " (input shape " + ShapeToString(x.shape) + ")");
    }
  }
  return Types{TypeInfo{x.dtype, out, true}};
}

StatusOr<Types> InferUnsqueeze(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  AxesArg axes = GetAxesArg(ctx, 1);
  if (!axes.given) return ctx.Fail("needs axes (an input since opset 13, an attribute before)");
  if (!x.rank_known) return Types{UnknownRank(x.dtype)};
  const int64_t r = static_cast<int64_t>(x.shape.size());
  if (!axes.values)
    return Types{axes.count < 0 ? UnknownRank(x.dtype) : RankOnly(x.dtype, r + axes.count)};
  const int64_t out_rank = r + static_cast<int64_t>(axes.values->size());
  ASSIGN_OR_RETURN(std::vector<int64_t> norm,
                   Named(ctx, shape_ops::NormalizeAxes(*axes.values, out_rank)));
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i)
    out.push_back(std::binary_search(norm.begin(), norm.end(), i) ? 1 : x.shape[next++]);
  return Types{TypeInfo{x.dtype, out, true}};
}

// --- moving elements ---

StatusOr<Types> InferTranspose(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  if (!x.rank_known) {
    if (ctx.node.HasAttr("perm"))
      return Types{RankOnly(x.dtype, static_cast<int64_t>(ctx.node.GetInts("perm").size()))};
    return Types{UnknownRank(x.dtype)};
  }
  ASSIGN_OR_RETURN(
      std::vector<int64_t> perm,
      Named(ctx, shape_ops::TransposePerm(ctx.node, static_cast<int64_t>(x.shape.size()))));
  Shape out;
  for (int64_t p : perm) out.push_back(x.shape[p]);
  return Types{TypeInfo{x.dtype, out, true}};
}

StatusOr<Types> InferExpand(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'shape'"));
  auto shape = ConstInts(ctx, 1);
  if (!x.rank_known) {
    if (shape) {
      // Bidirectional: a 1 in `shape` keeps the (unknown) input dim.
      Shape out(shape->size(), -1);
      for (size_t i = 0; i < out.size(); ++i)
        if ((*shape)[i] != 1) out[i] = (*shape)[i];
      return Types{TypeInfo{x.dtype, out, true}};
    }
    return Types{UnknownRank(x.dtype)};
  }
  if (!shape) {
    int64_t n = Length1D(ctx, 1);
    if (n < 0) return Types{UnknownRank(x.dtype)};
    shape = std::vector<int64_t>(n, -1);
  }
  for (int64_t d : *shape)
    if (d < -1) return ctx.Fail("shape " + ShapeToString(*shape) + " has a negative dimension");
  auto out = BroadcastShapes(x.shape, *shape);
  if (!out.ok())
    return ctx.Fail("cannot expand input of shape " + ShapeToString(x.shape) + " to " +
                    ShapeToString(*shape) + ": " + out.status().message());
  return Types{TypeInfo{x.dtype, *out, true}};
}

StatusOr<Types> InferTile(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'repeats'"));
  if (!x.rank_known) return Types{UnknownRank(x.dtype)};
  const int64_t r = static_cast<int64_t>(x.shape.size());
  auto reps = ConstInts(ctx, 1);
  if (!reps) return Types{RankOnly(x.dtype, r)};
  if (static_cast<int64_t>(reps->size()) != r)
    return ctx.Fail("repeats has " + std::to_string(reps->size()) +
                    " values for an input of rank " + std::to_string(r));
  Shape out(r);
  for (int64_t i = 0; i < r; ++i) {
    if ((*reps)[i] < 0)
      return ctx.Fail("repeats " + ShapeToString(*reps) + " has a negative value");
    if (x.shape[i] < 0) {
      out[i] = -1;
    } else if (__builtin_mul_overflow(x.shape[i], (*reps)[i], &out[i])) {
      return ctx.Fail("repeats " + ShapeToString(*reps) + " on an input of shape " +
                      ShapeToString(x.shape) + " overflow int64 in axis " + std::to_string(i));
    }
  }
  return Types{TypeInfo{x.dtype, out, true}};
}

StatusOr<Types> InferConcat(const InferContext& ctx) {
  if (!ctx.node.HasAttr("axis")) return ctx.Fail("needs the attribute 'axis'");
  DType dt = ctx.input(0).dtype;
  int64_t rank = -1;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Fail("input " + std::to_string(i) + " is empty");
    const Value& v = ctx.input(i);
    if (v.dtype != dt)
      return ctx.Fail("input " + std::to_string(i) + " has element type " +
                      std::string(DTypeName(v.dtype)) + ", input 0 has " +
                      std::string(DTypeName(dt)));
    if (!v.rank_known) continue;
    if (rank >= 0 && static_cast<int64_t>(v.shape.size()) != rank)
      return ctx.Fail("input " + std::to_string(i) + " has rank " + std::to_string(v.shape.size()) +
                      ", others have rank " + std::to_string(rank));
    rank = static_cast<int64_t>(v.shape.size());
  }
  if (rank < 0) return Types{UnknownRank(dt)};
  ASSIGN_OR_RETURN(int64_t axis, Named(ctx, NormalizeAxis(ctx.node.GetInt("axis", 0), rank)));
  Shape out(rank, -1);
  out[axis] = 0;
  int ref = -1;  // first input whose dims outside the axis we matched against
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Value& v = ctx.input(i);
    if (!v.rank_known) {
      out[axis] = -1;
      continue;
    }
    if (out[axis] >= 0) {
      if (v.shape[axis] < 0)
        out[axis] = -1;
      else if (__builtin_add_overflow(out[axis], v.shape[axis], &out[axis]))
        return ctx.Fail("the inputs' sizes along axis " + std::to_string(axis) + " sum past int64");
    }
    for (int64_t k = 0; k < rank; ++k) {
      if (k == axis || v.shape[k] < 0) continue;
      if (out[k] >= 0 && out[k] != v.shape[k])
        return ctx.Fail("input " + std::to_string(i) + " has shape " + ShapeToString(v.shape) +
                        ", which differs from input " + std::to_string(ref) + " outside axis " +
                        std::to_string(axis));
      out[k] = v.shape[k];
    }
    if (ref < 0) ref = static_cast<int>(i);
  }
  return Types{TypeInfo{dt, out, true}};
}

StatusOr<Types> InferSplit(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  const int64_t n_out = static_cast<int64_t>(ctx.node.outputs.size());
  if (ctx.node.HasAttr("num_outputs") && ctx.node.GetInt("num_outputs", 0) != n_out)
    return ctx.Fail("num_outputs is " + std::to_string(ctx.node.GetInt("num_outputs", 0)) +
                    " but the node has " + std::to_string(n_out) + " outputs");
  if (!x.rank_known) return Types(n_out, UnknownRank(x.dtype));
  const int64_t r = static_cast<int64_t>(x.shape.size());
  ASSIGN_OR_RETURN(int64_t axis, Named(ctx, NormalizeAxis(ctx.node.GetInt("axis", 0), r)));
  const int64_t dim = x.shape[axis];
  std::vector<int64_t> sizes;
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'split'"));
  std::optional<std::vector<int64_t>> split;
  if (ctx.has_input(1))
    split = ConstInts(ctx, 1);
  else if (ctx.node.HasAttr("split"))
    split = ctx.node.GetInts("split");
  if (split) {
    if (static_cast<int64_t>(split->size()) != n_out)
      return ctx.Fail("split " + ShapeToString(*split) + " has " + std::to_string(split->size()) +
                      " values for " + std::to_string(n_out) + " outputs");
    int64_t sum = 0;
    for (int64_t s : *split) {
      if (s < 0) return ctx.Fail("split " + ShapeToString(*split) + " has a negative size");
      if (__builtin_add_overflow(sum, s, &sum))
        return ctx.Fail("split " + ShapeToString(*split) + " sums past int64");
    }
    if (dim >= 0 && sum != dim)
      return ctx.Fail("split " + ShapeToString(*split) + " sums to " + std::to_string(sum) +
                      " but axis " + std::to_string(axis) + " has size " + std::to_string(dim));
    sizes = *split;
  } else if (ctx.has_input(1)) {
    sizes.assign(n_out, -1);
  } else {
    ASSIGN_OR_RETURN(sizes, Named(ctx, shape_ops::EqualSplitSizes(dim, n_out)));
  }
  Types out;
  for (int64_t s : sizes) {
    TypeInfo t{x.dtype, x.shape, true};
    t.shape[axis] = s;
    out.push_back(t);
  }
  return out;
}

// Slice's starts/ends/axes/steps: inputs since opset 10, attributes before.
struct SliceArgs {
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  bool has_axes = false, has_steps = false;
};

SliceArgs GetSliceArgs(const InferContext& ctx) {
  SliceArgs a;
  if (ctx.num_inputs() == 1) {
    a.starts = ctx.node.GetInts("starts");
    a.ends = ctx.node.GetInts("ends");
    a.has_axes = ctx.node.HasAttr("axes");
    if (a.has_axes) a.axes = ctx.node.GetInts("axes");
    return a;
  }
  a.starts = ConstInts(ctx, 1);
  a.ends = ConstInts(ctx, 2);
  a.has_axes = ctx.has_input(3);
  if (a.has_axes) a.axes = ConstInts(ctx, 3);
  a.has_steps = ctx.has_input(4);
  if (a.has_steps) a.steps = ConstInts(ctx, 4);
  return a;
}

// Output shape of slicing `in` (the data of Slice; the gradient of SliceGrad).
StatusOr<TypeInfo> SliceType(const InferContext& ctx, const SliceArgs& a, DType dt,
                             const Value& x) {
  if (!x.rank_known) return UnknownRank(dt);
  const int64_t r = static_cast<int64_t>(x.shape.size());
  bool args_known = a.starts && a.ends && (!a.has_axes || a.axes) && (!a.has_steps || a.steps);
  if (args_known) {
    ASSIGN_OR_RETURN(
        std::vector<SliceDim> dims,
        Named(ctx, shape_ops::ResolveSlice(x.shape, *a.starts, *a.ends,
                                           a.has_axes ? *a.axes : std::vector<int64_t>{},
                                           a.has_steps ? *a.steps : std::vector<int64_t>{})));
    Shape out;
    for (const auto& d : dims) out.push_back(d.len);
    return TypeInfo{dt, out, true};
  }
  // Only the sliced axes are unknown; when even those are unknown, every axis is.
  Shape out = x.shape;
  std::vector<int64_t> axes;
  if (a.has_axes && a.axes) {
    axes = *a.axes;
  } else if (!a.has_axes) {
    int64_t n = a.starts ? static_cast<int64_t>(a.starts->size()) : Length1D(ctx, 1);
    if (n < 0) return RankOnly(dt, r);
    for (int64_t i = 0; i < n; ++i) axes.push_back(i);
  } else {
    return RankOnly(dt, r);
  }
  for (int64_t ax : axes) {
    ASSIGN_OR_RETURN(int64_t k, Named(ctx, NormalizeAxis(ax, r)));
    out[k] = -1;
  }
  return TypeInfo{dt, out, true};
}

StatusOr<Types> InferSlice(const InferContext& ctx) {
  if (ctx.num_inputs() == 2 ||
      (ctx.num_inputs() == 1 && (!ctx.node.HasAttr("starts") || !ctx.node.HasAttr("ends"))))
    return ctx.Fail("needs starts and ends (inputs 1 and 2, or attributes before opset 10)");
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    RETURN_IF_ERROR(RequireIndexType(ctx, i, "input " + std::to_string(i)));
  const Value& x = ctx.input(0);
  ASSIGN_OR_RETURN(TypeInfo t, SliceType(ctx, GetSliceArgs(ctx), x.dtype, x));
  return Types{t};
}

StatusOr<Types> InferGather(const InferContext& ctx) {
  const Value& data = ctx.input(0);
  const Value& idx = ctx.input(1);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'indices'"));
  if (!data.rank_known || !idx.rank_known) return Types{UnknownRank(data.dtype)};
  const int64_t r = static_cast<int64_t>(data.shape.size());
  if (r == 0) return ctx.Fail("data must have rank >= 1");
  ASSIGN_OR_RETURN(int64_t axis, Named(ctx, NormalizeAxis(ctx.node.GetInt("axis", 0), r)));
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  return Types{TypeInfo{data.dtype, out, true}};
}

StatusOr<Types> InferGatherElements(const InferContext& ctx) {
  const Value& data = ctx.input(0);
  const Value& idx = ctx.input(1);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'indices'"));
  if (!idx.rank_known) return Types{UnknownRank(data.dtype)};
  if (data.rank_known) {
    if (data.shape.size() != idx.shape.size())
      return ctx.Fail("data " + ShapeToString(data.shape) + " and indices " +
                      ShapeToString(idx.shape) + " must have the same rank");
    ASSIGN_OR_RETURN(int64_t axis,
                     Named(ctx, NormalizeAxis(ctx.node.GetInt("axis", 0),
                                              static_cast<int64_t>(data.shape.size()))));
    (void)axis;
  }
  return Types{TypeInfo{data.dtype, idx.shape, true}};
}

StatusOr<Types> InferGatherND(const InferContext& ctx) {
  const Value& data = ctx.input(0);
  const Value& idx = ctx.input(1);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'indices'"));
  const int64_t b = ctx.node.GetInt("batch_dims", 0);
  if (b < 0) return ctx.Fail("batch_dims must be >= 0, got " + std::to_string(b));
  if (idx.rank_known && idx.shape.empty()) return ctx.Fail("indices must have rank >= 1");
  if (!data.rank_known || !idx.rank_known || idx.shape.back() < 0)
    return Types{UnknownRank(data.dtype)};
  ASSIGN_OR_RETURN(Shape out, Named(ctx, shape_ops::GatherNDShape(data.shape, idx.shape, b)));
  return Types{TypeInfo{data.dtype, out, true}};
}

StatusOr<Types> InferTrilu(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  if (x.rank_known && x.shape.size() < 2)
    return ctx.Fail("input must have rank >= 2, got " + ShapeToString(x.shape));
  if (ctx.has_input(1) && ctx.input(1).rank_known && NumElements(ctx.input(1).shape) != 1)
    return ctx.Fail("k must be a scalar");
  return Types{SameAs(x)};
}

StatusOr<Types> InferPad(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  std::string mode = ctx.node.GetString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return ctx.Fail("mode '" + mode + "' is not supported (constant, reflect, edge are)");
  if (ctx.has_input(2) && ctx.input(2).dtype != x.dtype)
    return ctx.Fail("constant_value has element type " +
                    std::string(DTypeName(ctx.input(2).dtype)) + ", data has " +
                    std::string(DTypeName(x.dtype)));
  if (!x.rank_known) return Types{UnknownRank(x.dtype)};
  const int64_t r = static_cast<int64_t>(x.shape.size());
  std::optional<std::vector<int64_t>> pads =
      ctx.has_input(1) ? ConstInts(ctx, 1)
                       : std::optional<std::vector<int64_t>>(ctx.node.GetInts("pads"));
  std::optional<std::vector<int64_t>> axes;
  if (ctx.has_input(3)) {
    axes = ConstInts(ctx, 3);
    if (!axes) return Types{RankOnly(x.dtype, r)};
  }
  if (!pads) return Types{RankOnly(x.dtype, r)};
  ASSIGN_OR_RETURN(std::vector<int64_t> full,
                   Named(ctx, shape_ops::FullPads(r, *pads, axes ? &*axes : nullptr)));
  Shape out(r);
  for (int64_t i = 0; i < r; ++i) {
    if (x.shape[i] < 0) {
      out[i] = -1;
      continue;
    }
    if (__builtin_add_overflow(x.shape[i], full[i], &out[i]) ||
        __builtin_add_overflow(out[i], full[i + r], &out[i]))
      return ctx.Fail("pads " + ShapeToString(*pads) + " on axis " + std::to_string(i) + " of " +
                      ShapeToString(x.shape) + " overflow int64");
    if (out[i] < 0)
      return ctx.Fail("pads " + ShapeToString(*pads) + " remove more than axis " +
                      std::to_string(i) + " of " + ShapeToString(x.shape) + " holds");
    if (mode != "constant" && x.shape[i] == 0 && out[i] > 0)
      return ctx.Fail("mode '" + mode + "' cannot pad the empty axis " + std::to_string(i));
    if (mode == "reflect" && (full[i] >= x.shape[i] || full[i + r] >= x.shape[i]) &&
        (full[i] > 0 || full[i + r] > 0))
      return ctx.Fail("mode 'reflect' needs pads smaller than the axis; axis " + std::to_string(i) +
                      " has size " + std::to_string(x.shape[i]));
  }
  return Types{TypeInfo{x.dtype, out, true}};
}

StatusOr<Types> InferOneHot(const InferContext& ctx) {
  const Value& idx = ctx.input(0);
  const Value& values = ctx.input(2);
  if (values.rank_known && NumElements(values.shape) != 2)
    return ctx.Fail("values must hold two elements [off, on], has shape " +
                    ShapeToString(values.shape));
  if (!idx.rank_known) return Types{UnknownRank(values.dtype)};
  const int64_t r = static_cast<int64_t>(idx.shape.size());
  int64_t axis = ctx.node.GetInt("axis", -1);
  if (axis < -(r + 1) || axis > r)
    return ctx.Fail("axis " + std::to_string(axis) + " is out of range for output rank " +
                    std::to_string(r + 1));
  if (axis < 0) axis += r + 1;
  int64_t depth = -1;
  if (const Tensor* d = ctx.constant(1)) {
    if (d->numel() != 1) return ctx.Fail("depth must be a scalar");
    // Range-checked as a double first: converting a huge or NaN value to int64 is undefined.
    double dv = d->GetAsDouble(0);
    if (!(dv >= 1)) return ctx.Fail("depth must be positive, got " + std::to_string(dv));
    if (dv > static_cast<double>(kMaxTensorBytes))
      return ctx.Fail("depth " + std::to_string(dv) + " is larger than one tensor may hold");
    depth = static_cast<int64_t>(dv);
  }
  Shape out = idx.shape;
  out.insert(out.begin() + axis, depth);
  return Types{TypeInfo{values.dtype, out, true}};
}

// The scatters' `reduction` (none, add, mul, max, min) and updates of data's element type.
Status CheckScatterReductionAndTypes(const InferContext& ctx, const Value& data, const Value& upd) {
  const std::string red = ctx.node.GetString("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min")
    return ctx.Fail("reduction '" + red + "' is not supported");
  if (upd.dtype != data.dtype)
    return ctx.Fail("updates has element type " + std::string(DTypeName(upd.dtype)) +
                    ", data has " + std::string(DTypeName(data.dtype)));
  return Status::Ok();
}

StatusOr<Types> InferScatterND(const InferContext& ctx) {
  const Value& data = ctx.input(0);
  const Value& idx = ctx.input(1);
  const Value& upd = ctx.input(2);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'indices'"));
  RETURN_IF_ERROR(CheckScatterReductionAndTypes(ctx, data, upd));
  if (data.rank_known && idx.rank_known && upd.rank_known && !idx.shape.empty()) {
    int64_t k = idx.shape.back();
    const int64_t r = static_cast<int64_t>(data.shape.size());
    if (k > r)
      return ctx.Fail("indices' last dimension " + std::to_string(k) +
                      " exceeds the rank of data " + std::to_string(r));
    if (k >= 0) {
      Shape want(idx.shape.begin(), idx.shape.end() - 1);
      want.insert(want.end(), data.shape.begin() + k, data.shape.end());
      bool match = want.size() == upd.shape.size();
      for (size_t i = 0; match && i < want.size(); ++i)
        match = want[i] < 0 || upd.shape[i] < 0 || want[i] == upd.shape[i];
      if (!match)
        return ctx.Fail("updates has shape " + ShapeToString(upd.shape) + ", expected " +
                        ShapeToString(want));
    }
  }
  return Types{SameAs(data)};
}

// ScatterElements (data, indices, updates) -> data with updates[e] written (or combined) at e's
// position with the axis coordinate replaced by indices[e]: GatherElements' inverse. The
// deprecated opset-9 Scatter is the same op without `reduction`.
StatusOr<Types> InferScatterElements(const InferContext& ctx) {
  const Value& data = ctx.input(0);
  const Value& idx = ctx.input(1);
  const Value& upd = ctx.input(2);
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'indices'"));
  if (ctx.node.op_type == "Scatter" && ctx.node.HasAttr("reduction"))
    return ctx.Fail("Scatter has no attribute 'reduction' (ScatterElements has, from opset 16)");
  RETURN_IF_ERROR(CheckScatterReductionAndTypes(ctx, data, upd));
  if (idx.rank_known && upd.rank_known) {
    bool match = idx.shape.size() == upd.shape.size();
    for (size_t i = 0; match && i < idx.shape.size(); ++i)
      match = idx.shape[i] < 0 || upd.shape[i] < 0 || idx.shape[i] == upd.shape[i];
    if (!match)
      return ctx.Fail("updates " + ShapeToString(upd.shape) + " and indices " +
                      ShapeToString(idx.shape) + " must have the same shape");
  }
  if (data.rank_known) {
    const int64_t r = static_cast<int64_t>(data.shape.size());
    ASSIGN_OR_RETURN(int64_t axis, Named(ctx, NormalizeAxis(ctx.node.GetInt("axis", 0), r)));
    if (idx.rank_known) {
      if (data.shape.size() != idx.shape.size())
        return ctx.Fail("data " + ShapeToString(data.shape) + " and indices " +
                        ShapeToString(idx.shape) + " must have the same rank");
      for (int64_t k = 0; k < r; ++k)
        if (k != axis && idx.shape[k] >= 0 && data.shape[k] >= 0 && idx.shape[k] > data.shape[k])
          return ctx.Fail("indices " + ShapeToString(idx.shape) + " exceed data " +
                          ShapeToString(data.shape) + " on axis " + std::to_string(k));
    }
  }
  return Types{SameAs(data)};
}

// --- com.microsoft gradient ops ---

// SliceGrad (dY, shape, starts, ends[, axes, steps]) -> dX: dX has `shape`, zero except where
// the forward Slice read, which receives dY.
StatusOr<Types> InferSliceGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'shape'"));
  const Value& dy = ctx.input(0);
  ASSIGN_OR_RETURN(TypeInfo t, ShapeFromInput(ctx, 1, dy.dtype));
  if (t.rank_known && dy.rank_known && ctx.constant(1)) {
    // dY must have the shape the forward Slice produced.
    Value x;
    x.shape = t.shape;
    x.rank_known = true;
    SliceArgs a;
    a.starts = ConstInts(ctx, 2);
    a.ends = ConstInts(ctx, 3);
    a.has_axes = ctx.has_input(4);
    if (a.has_axes) a.axes = ConstInts(ctx, 4);
    a.has_steps = ctx.has_input(5);
    if (a.has_steps) a.steps = ConstInts(ctx, 5);
    ASSIGN_OR_RETURN(TypeInfo fwd, SliceType(ctx, a, dy.dtype, x));
    bool match = fwd.shape.size() == dy.shape.size();
    for (size_t i = 0; match && i < dy.shape.size(); ++i)
      match = fwd.shape[i] < 0 || dy.shape[i] < 0 || fwd.shape[i] == dy.shape[i];
    if (!match)
      return ctx.Fail("dY has shape " + ShapeToString(dy.shape) + " but slicing " +
                      ShapeToString(t.shape) + " gives " + ShapeToString(fwd.shape));
  }
  return Types{t};
}

// GatherGrad (shape, indices, dY) -> dX, attr axis: scatter-add of dY rows into zeros of `shape`.
StatusOr<Types> InferGatherGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireIndexType(ctx, 0, "input 'shape'"));
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'indices'"));
  const Value& dy = ctx.input(2);
  if (!IsFloat(dy.dtype) && dy.dtype != DType::kUndefined)
    return ctx.Fail("dY must be floating point, got " + std::string(DTypeName(dy.dtype)));
  ASSIGN_OR_RETURN(TypeInfo t, ShapeFromInput(ctx, 0, dy.dtype));
  if (t.rank_known) {
    const int64_t r = static_cast<int64_t>(t.shape.size());
    if (r == 0) return ctx.Fail("shape must have rank >= 1");
    ASSIGN_OR_RETURN(int64_t axis, Named(ctx, NormalizeAxis(ctx.node.GetInt("axis", 0), r)));
    const Value& idx = ctx.input(1);
    if (dy.rank_known && idx.rank_known && dy.shape.size() != t.shape.size() - 1 + idx.shape.size())
      return ctx.Fail("dY has rank " + std::to_string(dy.shape.size()) + "; gathering axis " +
                      std::to_string(axis) + " of " + ShapeToString(t.shape) + " with indices " +
                      ShapeToString(idx.shape) + " gives rank " +
                      std::to_string(t.shape.size() - 1 + idx.shape.size()));
  }
  return Types{t};
}

// GatherElementsGrad (dY, shape, indices) -> dX, attr axis.
StatusOr<Types> InferGatherElementsGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'shape'"));
  RETURN_IF_ERROR(RequireIndexType(ctx, 2, "input 'indices'"));
  const Value& dy = ctx.input(0);
  if (!IsFloat(dy.dtype) && dy.dtype != DType::kUndefined)
    return ctx.Fail("dY must be floating point, got " + std::string(DTypeName(dy.dtype)));
  ASSIGN_OR_RETURN(TypeInfo t, ShapeFromInput(ctx, 1, dy.dtype));
  const Value& idx = ctx.input(2);
  if (t.rank_known && idx.rank_known && idx.shape.size() != t.shape.size())
    return ctx.Fail("indices " + ShapeToString(idx.shape) + " and shape " + ShapeToString(t.shape) +
                    " must have the same rank");
  return Types{t};
}

// GatherNDGrad (shape, indices, dY) -> dX, attr batch_dims: scatter-add of dY slices into zeros
// of `shape` (ONNX Runtime's signature).
StatusOr<Types> InferGatherNDGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireIndexType(ctx, 0, "input 'shape'"));
  RETURN_IF_ERROR(RequireIndexType(ctx, 1, "input 'indices'"));
  const Value& dy = ctx.input(2);
  if (!IsFloat(dy.dtype) && dy.dtype != DType::kUndefined)
    return ctx.Fail("dY must be floating point, got " + std::string(DTypeName(dy.dtype)));
  ASSIGN_OR_RETURN(TypeInfo t, ShapeFromInput(ctx, 0, dy.dtype));
  const Value& idx = ctx.input(1);
  if (t.rank_known && idx.rank_known && !idx.shape.empty() && idx.shape.back() >= 0) {
    ASSIGN_OR_RETURN(
        Shape fwd,
        Named(ctx, shape_ops::GatherNDShape(t.shape, idx.shape, ctx.node.GetInt("batch_dims", 0))));
    bool match = !dy.rank_known || fwd.size() == dy.shape.size();
    for (size_t i = 0; match && dy.rank_known && i < fwd.size(); ++i)
      match = fwd[i] < 0 || dy.shape[i] < 0 || fwd[i] == dy.shape[i];
    if (!match)
      return ctx.Fail("dY has shape " + ShapeToString(dy.shape) + " but GatherND of " +
                      ShapeToString(t.shape) + " with indices " + ShapeToString(idx.shape) +
                      " gives " + ShapeToString(fwd));
  }
  return Types{t};
}

constexpr int kMany = 1 << 20;

}  // namespace

// Data movement counts no FLOPs; the scatter-adds of the gradients one add per element they add
// (GatherGrad's and GatherNDGrad's dY, input 2; GatherElementsGrad's input 0).
void RegisterShapeOpSchemas(OpSchemaTable& table) {
  const FlopsFn kMoves = FlopsPerOutput(0);
  table.Add({"", "Constant", 0, 0, 1, 1, InferConstant, kMoves});
  table.Add({"", "Shape", 1, 1, 1, 1, InferShape, kMoves});
  table.Add({"", "Size", 1, 1, 1, 1, InferSize, kMoves});
  table.Add({"", "ConstantOfShape", 1, 1, 1, 1, InferConstantOfShape, kMoves});
  table.Add({"", "Range", 3, 3, 1, 1, InferRange, kMoves});
  table.Add({"", "Reshape", 2, 2, 1, 1, InferReshape, kMoves, /*view=*/true});
  table.Add({"", "Flatten", 1, 1, 1, 1, InferFlatten, kMoves, /*view=*/true});
  table.Add({"", "Squeeze", 1, 2, 1, 1, InferSqueeze, kMoves, /*view=*/true});
  table.Add({"", "Unsqueeze", 1, 2, 1, 1, InferUnsqueeze, kMoves, /*view=*/true});
  table.Add({"", "Transpose", 1, 1, 1, 1, InferTranspose, kMoves});
  // A view only when it keeps the element count (it adds or keeps size-1 axes: the same bytes in
  // the same order); the planner aliases a view only when the byte counts match, so an Expand
  // that repeats elements still gets a buffer of its own.
  table.Add({"", "Expand", 2, 2, 1, 1, InferExpand, kMoves, /*view=*/true});
  table.Add({"", "Tile", 2, 2, 1, 1, InferTile, kMoves});
  table.Add({"", "Concat", 1, kMany, 1, 1, InferConcat, kMoves});
  table.Add({"", "Split", 1, 2, 1, kMany, InferSplit, kMoves});
  table.Add({"", "Slice", 1, 5, 1, 1, InferSlice, kMoves});
  table.Add({"", "Gather", 2, 2, 1, 1, InferGather, kMoves});
  table.Add({"", "GatherElements", 2, 2, 1, 1, InferGatherElements, kMoves});
  table.Add({"", "GatherND", 2, 2, 1, 1, InferGatherND, kMoves});
  table.Add({"", "Trilu", 1, 2, 1, 1, InferTrilu, kMoves});
  table.Add({"", "Pad", 1, 4, 1, 1, InferPad, kMoves});
  table.Add({"", "OneHot", 3, 3, 1, 1, InferOneHot, kMoves});
  table.Add({"", "ScatterND", 3, 3, 1, 1, InferScatterND, kMoves});
  table.Add({"", "ScatterElements", 3, 3, 1, 1, InferScatterElements, kMoves});
  table.Add({"", "Scatter", 3, 3, 1, 1, InferScatterElements, kMoves});
  table.Add({"com.microsoft", "SliceGrad", 4, 6, 1, 1, InferSliceGrad, kMoves});
  table.Add({"com.microsoft", "GatherGrad", 3, 3, 1, 1, InferGatherGrad, FlopsPerInput(2, 1)});
  table.Add({"com.microsoft", "GatherElementsGrad", 3, 3, 1, 1, InferGatherElementsGrad,
             FlopsPerInput(0, 1)});
  table.Add({"com.microsoft", "GatherNDGrad", 3, 3, 1, 1, InferGatherNDGrad, FlopsPerInput(2, 1)});
}

}  // namespace foundry
