// Gradient rules of the shape-op family. Every op here moves elements without arithmetic, so each
// gradient moves dY back: reshapes undo the reshape, Transpose applies the inverse permutation,
// Concat/Split swap roles, broadcasts (Expand, Tile) sum over the copies, and the indexing ops
// scatter dY into zeros (com.microsoft SliceGrad, GatherGrad, GatherElementsGrad, GatherNDGrad, as
// in ONNX Runtime's training graphs), and the scatters gather it back. Shape-producing ops
// (Constant, Shape, Size, ConstantOfShape, Range) are not differentiable and have no rule.
//
// Rules read the forward input shapes and turn them into int64 constants, so they need concrete
// shapes: when a dimension is still symbolic the rule falls back to a Shape node of the forward
// input, which later folding turns into a constant once the dimensions are bound.
#include "compiler/ops/shape_ops.h"

#include <algorithm>

#include "compiler/op_schema.h"
#include "passes/grad/grad_rule.h"

namespace foundry {
namespace {

Status Fail(GradBuilder& b, const std::string& what) {
  // The autodiff pass prefixes "autodiff: ".
  return Error("gradient rule of " + b.fwd().Describe() + ": " + what);
}

std::string Int64Const(GradBuilder& b, const std::vector<int64_t>& v, const std::string& hint) {
  return b.Constant(Tensor::FromVector<int64_t>(DType::kInt64, {static_cast<int64_t>(v.size())}, v),
                    hint);
}

bool Known(const Value& v) { return v.ShapeKnown(); }

// Forward input i's shape as an int64 1-D value.
StatusOr<std::string> InputShape(GradBuilder& b, size_t i) {
  const Value& v = b.InputValue(i);
  if (Known(v)) return Int64Const(b, v.shape, "shape");
  if (!v.rank_known)
    return Fail(b, "input '" + v.name + "' has an unknown rank; run shape inference first");
  return b.Emit1("Shape", {b.fwd().inputs[i]});
}

// The values of a constant forward input (Slice starts, Tile repeats, Pad pads).
const Tensor* ForwardConstant(GradBuilder& b, size_t i) {
  if (!b.fwd().HasInput(i)) return nullptr;
  const Value* v = b.graph().FindValue(b.fwd().inputs[i]);
  return v ? v->data.get() : nullptr;
}

// The forward node's `axis` attribute, normalized against the rank of `v`.
StatusOr<int64_t> AxisOf(GradBuilder& b, const Value& v) {
  if (!v.rank_known) return Fail(b, "the rank of '" + v.name + "' is unknown");
  auto axis = NormalizeAxis(b.fwd().GetInt("axis", 0), static_cast<int64_t>(v.shape.size()));
  if (!axis.ok()) return Fail(b, axis.status().message());
  return axis;
}

// Reshape, Flatten, Squeeze, Unsqueeze: dX = Reshape(dY, shape(X)).
Status ReshapeBackGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string shape, InputShape(b, 0));
  std::map<std::string, Attribute> attrs;
  // A 0 in X's shape is a real (empty) dimension, not "copy dY's dimension".
  const Shape& s = b.InputValue(0).shape;
  if (std::find(s.begin(), s.end(), 0) != s.end()) attrs["allowzero"] = Attribute::Int(1);
  ASSIGN_OR_RETURN(std::string dx, b.Emit1("Reshape", {b.OutputGrad(0), shape}, attrs));
  return b.SetInputGrad(0, dx);
}

Status TransposeGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Value& x = b.InputValue(0);
  if (!x.rank_known) return Fail(b, "input rank unknown");
  ASSIGN_OR_RETURN(std::vector<int64_t> perm,
                   shape_ops::TransposePerm(b.fwd(), static_cast<int64_t>(x.shape.size())));
  std::vector<int64_t> inverse(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inverse[perm[k]] = static_cast<int64_t>(k);
  ASSIGN_OR_RETURN(std::string dx,
                   b.Emit1("Transpose", {b.OutputGrad(0)}, {{"perm", Attribute::Ints(inverse)}}));
  return b.SetInputGrad(0, dx);
}

Status ExpandGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Value& x = b.InputValue(0);
  if (!Known(x)) return Fail(b, "needs the concrete shape of its input, has " + x.TypeString());
  ASSIGN_OR_RETURN(std::string dx, b.ReduceToShape(b.OutputGrad(0), x.shape));
  return b.SetInputGrad(0, dx);
}

// Y = Tile(X, r) is X broadcast to [r0, d0, r1, d1, ...]; dX sums dY over the r axes.
Status TileGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Value& x = b.InputValue(0);
  const Tensor* reps_t = ForwardConstant(b, 1);
  if (!Known(x) || !reps_t) return Fail(b, "needs the concrete input shape and constant repeats");
  std::vector<int64_t> reps = reps_t->ToInt64Vector();
  Shape inter;
  std::vector<int64_t> axes;
  for (size_t k = 0; k < x.shape.size(); ++k) {
    if (reps[k] != 1) {
      axes.push_back(static_cast<int64_t>(inter.size()));
      inter.push_back(reps[k]);
    }
    inter.push_back(x.shape[k]);
  }
  if (axes.empty()) return b.SetInputGrad(0, b.OutputGrad(0));
  ASSIGN_OR_RETURN(std::string split,
                   b.Emit1("Reshape", {b.OutputGrad(0), Int64Const(b, inter, "shape")}));
  ASSIGN_OR_RETURN(std::string dx, b.Emit1("ReduceSum", {split, Int64Const(b, axes, "axes")},
                                           {{"keepdims", Attribute::Int(0)}}));
  return b.SetInputGrad(0, dx);
}

Status ConcatGrad(GradBuilder& b) {
  const size_t n = b.fwd().inputs.size();
  ASSIGN_OR_RETURN(int64_t axis, AxisOf(b, b.InputValue(0)));
  if (n == 1) return b.NeedsInputGrad(0) ? b.SetInputGrad(0, b.OutputGrad(0)) : Status::Ok();
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < n; ++i) {
    const Value& x = b.InputValue(i);
    if (!x.rank_known || x.shape[axis] < 0)
      return Fail(b, "needs the size of input " + std::to_string(i) + " along axis " +
                         std::to_string(axis) + ", has " + x.TypeString());
    sizes.push_back(x.shape[axis]);
  }
  ASSIGN_OR_RETURN(std::vector<std::string> pieces,
                   b.Emit("Split", {b.OutputGrad(0), Int64Const(b, sizes, "split")},
                          {{"axis", Attribute::Int(axis)}}, static_cast<int>(n)));
  for (size_t i = 0; i < n; ++i)
    if (b.NeedsInputGrad(i)) RETURN_IF_ERROR(b.SetInputGrad(i, pieces[i]));
  return Status::Ok();
}

// dX = Concat of the output gradients; an output no gradient reaches contributes zeros.
Status SplitGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Value& x = b.InputValue(0);
  ASSIGN_OR_RETURN(int64_t axis, AxisOf(b, x));
  std::vector<std::string> pieces;
  for (size_t i = 0; i < b.fwd().outputs.size(); ++i) {
    if (b.HasOutputGrad(i)) {
      pieces.push_back(b.OutputGrad(i));
      continue;
    }
    const Value& y = b.OutputValue(i);
    if (!Known(y)) return Fail(b, "needs the concrete shape of output " + std::to_string(i));
    Tensor zero(x.dtype, {1});
    ASSIGN_OR_RETURN(std::string z, b.Emit1("ConstantOfShape", {Int64Const(b, y.shape, "shape")},
                                            {{"value", Attribute::FromTensor(zero)}}));
    pieces.push_back(z);
  }
  if (pieces.size() == 1) return b.SetInputGrad(0, pieces[0]);
  ASSIGN_OR_RETURN(std::string dx, b.Emit1("Concat", pieces, {{"axis", Attribute::Int(axis)}}));
  return b.SetInputGrad(0, dx);
}

Status SliceGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string shape, InputShape(b, 0));
  const Node& f = b.fwd();
  std::vector<std::string> inputs = {b.OutputGrad(0), shape};
  if (f.inputs.size() == 1) {
    // Opset-1 Slice: the bounds are attributes.
    inputs.push_back(Int64Const(b, f.GetInts("starts"), "starts"));
    inputs.push_back(Int64Const(b, f.GetInts("ends"), "ends"));
    if (f.HasAttr("axes")) inputs.push_back(Int64Const(b, f.GetInts("axes"), "axes"));
  } else {
    for (size_t i = 1; i < f.inputs.size(); ++i) inputs.push_back(f.inputs[i]);
  }
  ASSIGN_OR_RETURN(std::string dx, b.Emit1("SliceGrad", inputs, {}, "com.microsoft"));
  return b.SetInputGrad(0, dx);
}

// Constant-mode Pad: dX is the interior of dY. Negative pads crop in the forward, so their
// gradient pads dY with zeros: in general dX = Pad(dY, -pads), which is a Slice when no pad is
// negative.
Status PadGrad(GradBuilder& b) {
  if (b.NeedsInputGrad(2))
    return Fail(b, "the gradient with respect to constant_value is not supported");
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Node& f = b.fwd();
  const std::string mode = f.GetString("mode", "constant");
  if (mode != "constant")
    return Fail(b, "mode '" + mode + "' has no gradient rule (only 'constant' does)");
  const Value& x = b.InputValue(0);
  if (!Known(x)) return Fail(b, "needs the concrete shape of its input, has " + x.TypeString());
  const int64_t r = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> pads;
  if (f.HasInput(1)) {
    const Tensor* p = ForwardConstant(b, 1);
    if (!p) return Fail(b, "needs constant pads");
    pads = p->ToInt64Vector();
  } else {
    pads = f.GetInts("pads");
  }
  std::vector<int64_t> axes;
  if (f.HasInput(3)) {
    const Tensor* a = ForwardConstant(b, 3);
    if (!a) return Fail(b, "needs constant axes");
    axes = a->ToInt64Vector();
  }
  auto full = shape_ops::FullPads(r, pads, f.HasInput(3) ? &axes : nullptr);
  if (!full.ok()) return Fail(b, full.status().message());
  bool any_negative = false;
  for (int64_t p : *full) any_negative |= p < 0;
  if (any_negative) {
    std::vector<int64_t> neg(full->size());
    for (size_t i = 0; i < neg.size(); ++i) neg[i] = -(*full)[i];
    ASSIGN_OR_RETURN(std::string dx, b.Emit1("Pad", {b.OutputGrad(0), Int64Const(b, neg, "pads")}));
    return b.SetInputGrad(0, dx);
  }
  std::vector<int64_t> starts(r), ends(r), all_axes(r);
  for (int64_t k = 0; k < r; ++k) {
    starts[k] = (*full)[k];
    ends[k] = (*full)[k] + x.shape[k];
    all_axes[k] = k;
  }
  ASSIGN_OR_RETURN(
      std::string dx,
      b.Emit1("Slice", {b.OutputGrad(0), Int64Const(b, starts, "starts"),
                        Int64Const(b, ends, "ends"), Int64Const(b, all_axes, "axes")}));
  return b.SetInputGrad(0, dx);
}

Status GatherGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string shape, InputShape(b, 0));
  ASSIGN_OR_RETURN(std::string dx,
                   b.Emit1("GatherGrad", {shape, b.fwd().inputs[1], b.OutputGrad(0)},
                           {{"axis", Attribute::Int(b.fwd().GetInt("axis", 0))}}, "com.microsoft"));
  return b.SetInputGrad(0, dx);
}

Status GatherElementsGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string shape, InputShape(b, 0));
  ASSIGN_OR_RETURN(std::string dx,
                   b.Emit1("GatherElementsGrad", {b.OutputGrad(0), shape, b.fwd().inputs[1]},
                           {{"axis", Attribute::Int(b.fwd().GetInt("axis", 0))}}, "com.microsoft"));
  return b.SetInputGrad(0, dx);
}

// dX = GatherNDGrad(shape(X), indices, dY): each tuple's dY slice added into zeros, so tuples
// that repeat an index accumulate.
Status GatherNDGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string shape, InputShape(b, 0));
  ASSIGN_OR_RETURN(
      std::string dx,
      b.Emit1("GatherNDGrad", {shape, b.fwd().inputs[1], b.OutputGrad(0)},
              {{"batch_dims", Attribute::Int(b.fwd().GetInt("batch_dims", 0))}}, "com.microsoft"));
  return b.SetInputGrad(0, dx);
}

// ScatterND, ScatterElements (and Scatter, its opset-9 spelling), output Y from data X, indices
// and updates U. Reduction 'none' overwrites the scattered positions of X: dX is dY with those
// positions zeroed, the forward op scattering zeros into dY (every other element copied bit for
// bit), and dU is dY gathered at the indices (GatherND, GatherElements). Reduction 'add' passes X
// through: dX = dY, dU the same gather. Duplicate indices under 'none' (undefined in ONNX) give
// each duplicate the position's gradient, as torch's scatter backward does. mul, max and min
// would need the forward values and tie rules; they are refused.
Status ScatterGrad(GradBuilder& b, const std::string& scatter_op, const std::string& gather_op,
                   std::map<std::string, Attribute> attrs) {
  if (!b.NeedsInputGrad(0) && !b.NeedsInputGrad(2)) return Status::Ok();
  const std::string red = b.fwd().GetString("reduction", "none");
  if (red != "none" && red != "add")
    return Fail(b, "reduction '" + red +
                       "' has no gradient in foundry; only 'none' and 'add' do (keep the node off "
                       "the path from the trained parameters to the loss, e.g. --freeze)");
  const std::string& dy = b.OutputGrad(0);
  const std::string& indices = b.fwd().inputs[1];
  if (b.NeedsInputGrad(0)) {
    if (red == "add") {
      RETURN_IF_ERROR(b.SetInputGrad(0, dy));
    } else {
      ASSIGN_OR_RETURN(std::string shape, InputShape(b, 2));
      Tensor zero(b.InputValue(0).dtype, {1});
      ASSIGN_OR_RETURN(std::string zeros, b.Emit1("ConstantOfShape", {shape},
                                                  {{"value", Attribute::FromTensor(zero)}}));
      ASSIGN_OR_RETURN(std::string dx, b.Emit1(scatter_op, {dy, indices, zeros}, attrs));
      RETURN_IF_ERROR(b.SetInputGrad(0, dx));
    }
  }
  if (b.NeedsInputGrad(2)) {
    ASSIGN_OR_RETURN(std::string du, b.Emit1(gather_op, {dy, indices}, attrs));
    RETURN_IF_ERROR(b.SetInputGrad(2, du));
  }
  return Status::Ok();
}

Status ScatterNDGrad(GradBuilder& b) { return ScatterGrad(b, "ScatterND", "GatherND", {}); }

Status ScatterElementsGrad(GradBuilder& b) {
  return ScatterGrad(b, "ScatterElements", "GatherElements",
                     {{"axis", Attribute::Int(b.fwd().GetInt("axis", 0))}});
}

// Trilu zeroes a fixed pattern, so dX = Trilu(dY) with the same k and upper.
Status TriluGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  std::vector<std::string> inputs = {b.OutputGrad(0)};
  if (b.fwd().HasInput(1)) inputs.push_back(b.fwd().inputs[1]);
  ASSIGN_OR_RETURN(
      std::string dx,
      b.Emit1("Trilu", inputs, {{"upper", Attribute::Int(b.fwd().GetInt("upper", 1))}}));
  return b.SetInputGrad(0, dx);
}

}  // namespace

void RegisterShapeOpGradRules(GradRuleTable& table) {
  table.Add("", "Reshape", ReshapeBackGrad);
  table.Add("", "Flatten", ReshapeBackGrad);
  table.Add("", "Squeeze", ReshapeBackGrad);
  table.Add("", "Unsqueeze", ReshapeBackGrad);
  table.Add("", "Transpose", TransposeGrad);
  table.Add("", "Expand", ExpandGrad);
  table.Add("", "Tile", TileGrad);
  table.Add("", "Concat", ConcatGrad);
  table.Add("", "Split", SplitGrad);
  table.Add("", "Slice", SliceGrad);
  table.Add("", "Pad", PadGrad);
  table.Add("", "Gather", GatherGrad);
  table.Add("", "GatherElements", GatherElementsGrad);
  table.Add("", "GatherND", GatherNDGrad);
  table.Add("", "Trilu", TriluGrad);
  table.Add("", "ScatterND", ScatterNDGrad);
  table.Add("", "ScatterElements", ScatterElementsGrad);
  table.Add("", "Scatter", ScatterElementsGrad);
}

}  // namespace foundry
