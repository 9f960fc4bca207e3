// Gradient rules of the math family. Matrix products differentiate into com.microsoft FusedMatMul
// with transposed operands (no transposed copy of any tensor is materialised); softmax, the
// normalizations and the cross-entropy loss into ONNX Runtime's fused gradient ops; reductions
// into standard ONNX ops (Reshape, Expand, Div, Equal, Cast, Mul, ReduceSum); CumSum into CumSum.
//
// Saved statistics: the rules of LayerNormalization, SimplifiedLayerNormalization and
// SoftmaxCrossEntropyLoss read the forward node's optional outputs (Mean/InvStdDev, inv_std_var,
// log_prob) instead of recomputing them; the autodiff pass must give every such node those outputs
// before differentiating. A rule whose node lacks them fails with an error saying so.
#include <map>
#include <string>
#include <vector>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "passes/grad/grad_rule.h"

namespace foundry {

namespace {

constexpr char kMs[] = "com.microsoft";

Status RuleError(GradBuilder& b, const std::string& what) {
  return Error("autodiff: gradient rule of " + b.fwd().Describe() + ": " + what);
}

std::string I64Const(GradBuilder& b, const std::vector<int64_t>& v, const std::string& hint) {
  return b.Constant(Tensor::FromVector<int64_t>(DType::kInt64, {static_cast<int64_t>(v.size())}, v),
                    hint);
}

std::string ScalarConst(GradBuilder& b, DType t, double v, const std::string& hint) {
  if (t == DType::kFloat64) return b.Constant(Tensor::FromVector<double>(t, {}, {v}), hint);
  if (t == DType::kBFloat16)
    return b.Constant(Tensor::FromVector<uint16_t>(t, {}, {DoubleToBf16(v)}), hint);
  return b.Constant(Tensor::Scalar(static_cast<float>(v)), hint);
}

StatusOr<std::string> ReshapeTo(GradBuilder& b, const std::string& x, const Shape& shape) {
  return b.Emit1("Reshape", {x, I64Const(b, shape, "shape")});
}

Status RequireStaticShape(GradBuilder& b, const Value& v) {
  if (!v.ShapeKnown())
    return RuleError(b, "needs the static shape of '" + v.name + "', which is " + v.TypeString() +
                            "; bind symbolic dimensions with --dim");
  return Status::Ok();
}

// ============================== matrix products ==============================

// Y = alpha * op(A) op(B), op = transpose of the last two dims when transA/transB (FusedMatMul;
// plain MatMul has neither). With Aop = op(A), Bop = op(B):
//   dAop = alpha dY Bop^T, dBop = alpha Aop^T dY, so
//   dA = transA ? alpha Bop dY^T : alpha dY Bop^T    (FusedMatMul(B, dY) / FusedMatMul(dY, B))
//   dB = transB ? alpha dY^T Aop : alpha Aop^T dY    (FusedMatMul(dY, A) / FusedMatMul(A, dY))
// summed over broadcast batch dims. A 1-D A is the row [1,K], a 1-D B the column [K,1]; dY is
// viewed with those unit dims re-inserted and the gradients are reshaped back. When B is a matrix
// and A is batched ([B,S,D] x [D,N], a linear layer), dB is one GEMM over the B*S flattened rows
// rather than a batched product followed by a ReduceSum.
Status MatMulGrad(GradBuilder& b) {
  const Node& fwd = b.fwd();
  bool fused = fwd.op_type == "FusedMatMul";
  bool ta = fused && fwd.GetInt("transA", 0) != 0;
  bool tb = fused && fwd.GetInt("transB", 0) != 0;
  float alpha = fused ? fwd.GetFloat("alpha", 1.0f) : 1.0f;
  const Value& av = b.InputValue(0);
  const Value& bv = b.InputValue(1);
  RETURN_IF_ERROR(RequireStaticShape(b, av));
  RETURN_IF_ERROR(RequireStaticShape(b, bv));
  const Shape& a = av.shape;
  const Shape& bs = bv.shape;
  Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape b2 = bs.size() == 1 ? Shape{bs[0], 1} : bs;
  const std::string& dy = b.OutputGrad(0);
  int64_t m = ta ? a2.back() : a2[a2.size() - 2];
  int64_t n = tb ? b2[b2.size() - 2] : b2.back();
  // dY viewed as batch + [M, N] (a Reshape only with a 1-D operand, emitted on first use).
  std::string dy2;
  auto dy_matrix = [&]() -> StatusOr<std::string> {
    if (!dy2.empty()) return dy2;
    if (a.size() != 1 && bs.size() != 1) return dy2 = dy;
    auto batch = BroadcastShapes(Shape(a2.begin(), a2.end() - 2), Shape(b2.begin(), b2.end() - 2));
    if (!batch.ok()) return RuleError(b, batch.status().message());
    Shape y2 = *batch;
    y2.push_back(m);
    y2.push_back(n);
    ASSIGN_OR_RETURN(dy2, ReshapeTo(b, dy, y2));
    return dy2;
  };
  auto mm = [&](const std::string& x, const std::string& y, bool t1,
                bool t2) -> StatusOr<std::string> {
    std::map<std::string, Attribute> attrs;
    if (t1) attrs["transA"] = Attribute::Int(1);
    if (t2) attrs["transB"] = Attribute::Int(1);
    if (alpha != 1.0f) attrs["alpha"] = Attribute::Float(alpha);
    return b.Emit1("FusedMatMul", {x, y}, std::move(attrs), kMs);
  };

  if (b.NeedsInputGrad(0)) {
    std::string bm = fwd.inputs[1];
    if (bs.size() == 1) {
      ASSIGN_OR_RETURN(bm, ReshapeTo(b, bm, b2));
    }
    ASSIGN_OR_RETURN(std::string dym, dy_matrix());
    std::string g;
    if (ta) {
      ASSIGN_OR_RETURN(g, mm(bm, dym, tb, true));
    } else {
      ASSIGN_OR_RETURN(g, mm(dym, bm, false, !tb));
    }
    ASSIGN_OR_RETURN(g, b.ReduceToShape(g, a2));
    if (a.size() == 1) {
      ASSIGN_OR_RETURN(g, ReshapeTo(b, g, a));
    }
    RETURN_IF_ERROR(b.SetInputGrad(0, g));
  }

  if (b.NeedsInputGrad(1)) {
    std::string am = fwd.inputs[0];
    if (a.size() == 1) {
      ASSIGN_OR_RETURN(am, ReshapeTo(b, am, a2));
    }
    std::string g;
    if (b2.size() == 2 && a2.size() >= 3 && !ta) {
      // [P, K] rows of A against [P, N] rows of dY, P = every batch element times M.
      int64_t k = a2.back();
      int64_t p = NumElements(a2) / k;
      ASSIGN_OR_RETURN(std::string a_rows, ReshapeTo(b, am, {p, k}));
      ASSIGN_OR_RETURN(std::string dy_rows, ReshapeTo(b, dy, {p, n}));
      if (tb) {
        ASSIGN_OR_RETURN(g, mm(dy_rows, a_rows, true, false));
      } else {
        ASSIGN_OR_RETURN(g, mm(a_rows, dy_rows, true, false));
      }
    } else {
      ASSIGN_OR_RETURN(std::string dym, dy_matrix());
      if (tb) {
        ASSIGN_OR_RETURN(g, mm(dym, am, true, ta));
      } else {
        ASSIGN_OR_RETURN(g, mm(am, dym, !ta, false));
      }
      ASSIGN_OR_RETURN(g, b.ReduceToShape(g, b2));
    }
    if (bs.size() == 1) {
      ASSIGN_OR_RETURN(g, ReshapeTo(b, g, bs));
    }
    RETURN_IF_ERROR(b.SetInputGrad(1, g));
  }
  return Status::Ok();
}

// Y = alpha op(A) op(B) + beta C: the same algebra as FusedMatMul, with Gemm itself, and
// dC = beta * dY summed down to C's shape.
Status GemmGrad(GradBuilder& b) {
  const Node& fwd = b.fwd();
  bool ta = fwd.GetInt("transA", 0) != 0, tb = fwd.GetInt("transB", 0) != 0;
  float alpha = fwd.GetFloat("alpha", 1.0f), beta = fwd.GetFloat("beta", 1.0f);
  const std::string& dy = b.OutputGrad(0);
  auto gemm = [&](const std::string& x, const std::string& y, bool t1,
                  bool t2) -> StatusOr<std::string> {
    std::map<std::string, Attribute> attrs;
    if (t1) attrs["transA"] = Attribute::Int(1);
    if (t2) attrs["transB"] = Attribute::Int(1);
    if (alpha != 1.0f) attrs["alpha"] = Attribute::Float(alpha);
    return b.Emit1("Gemm", {x, y}, std::move(attrs));
  };
  if (b.NeedsInputGrad(0)) {
    std::string g;
    if (ta) {
      ASSIGN_OR_RETURN(g, gemm(fwd.inputs[1], dy, tb, true));
    } else {
      ASSIGN_OR_RETURN(g, gemm(dy, fwd.inputs[1], false, !tb));
    }
    RETURN_IF_ERROR(b.SetInputGrad(0, g));
  }
  if (b.NeedsInputGrad(1)) {
    std::string g;
    if (tb) {
      ASSIGN_OR_RETURN(g, gemm(dy, fwd.inputs[0], true, ta));
    } else {
      ASSIGN_OR_RETURN(g, gemm(fwd.inputs[0], dy, !ta, false));
    }
    RETURN_IF_ERROR(b.SetInputGrad(1, g));
  }
  if (fwd.HasInput(2) && b.NeedsInputGrad(2)) {
    const Value& cv = b.InputValue(2);
    RETURN_IF_ERROR(RequireStaticShape(b, cv));
    ASSIGN_OR_RETURN(std::string g, b.ReduceToShape(dy, cv.shape));
    if (beta != 1.0f) {
      ASSIGN_OR_RETURN(g, b.Emit1("Mul", {g, ScalarConst(b, cv.dtype, beta, "beta")}));
    }
    RETURN_IF_ERROR(b.SetInputGrad(2, g));
  }
  return Status::Ok();
}

// ============================== softmax ==============================

// SoftmaxGrad_13 (dY, Y) and LogSoftmaxGrad_13 (dY, Y): both read the forward output.
template <bool kLog>
Status SoftmaxGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Node& fwd = b.fwd();
  ASSIGN_OR_RETURN(std::string g, b.Emit1(kLog ? "LogSoftmaxGrad_13" : "SoftmaxGrad_13",
                                          {b.OutputGrad(0), fwd.outputs[0]},
                                          {{"axis", Attribute::Int(fwd.GetInt("axis", -1))}}, kMs));
  return b.SetInputGrad(0, g);
}

// ============================== reductions ==============================

struct ReduceGeometry {
  bool identity = false;      // empty axes with noop_with_empty_axes: Y is X
  std::vector<int64_t> axes;  // normalized, ascending
  Shape keep_shape;           // X's shape with the reduced dims set to 1
  int64_t count = 1;          // elements per output
  bool keepdims = true;
};

StatusOr<ReduceGeometry> ReduceGeometryOf(GradBuilder& b) {
  const Node& fwd = b.fwd();
  const Value& x = b.InputValue(0);
  RETURN_IF_ERROR(RequireStaticShape(b, x));
  std::vector<int64_t> axes;
  if (fwd.HasAttr("axes")) {
    axes = fwd.GetInts("axes");
  } else if (fwd.HasInput(1)) {
    const Value& av = b.InputValue(1);
    if (!av.data) return RuleError(b, "axes input '" + av.name + "' must be a constant");
    axes = av.data->ToInt64Vector();
  }
  ReduceGeometry geo;
  geo.keepdims = fwd.GetInt("keepdims", 1) != 0;
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (axes.empty()) {
    if (fwd.GetInt("noop_with_empty_axes", 0) != 0) {
      geo.identity = true;
      return geo;
    }
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) {
    auto na = NormalizeAxis(a, rank);
    if (!na.ok()) return RuleError(b, na.status().message());
    reduced[*na] = true;
  }
  geo.keep_shape = x.shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i]) continue;
    geo.axes.push_back(i);
    geo.count *= x.shape[i];
    geo.keep_shape[i] = 1;
  }
  return geo;
}

// dY with the reduced dims restored as size 1 (a Reshape when keepdims=0).
StatusOr<std::string> WithKeptDims(GradBuilder& b, const ReduceGeometry& geo,
                                   const std::string& v) {
  if (geo.keepdims) return v;
  return ReshapeTo(b, v, geo.keep_shape);
}

// ReduceSum: dX = Expand(dY). ReduceMean: dX = Expand(dY / count) (torch's mean backward divides
// the gradient by the count).
template <bool kMean>
Status ReduceSumMeanGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(ReduceGeometry geo, ReduceGeometryOf(b));
  std::string g = b.OutputGrad(0);
  if (geo.identity) return b.SetInputGrad(0, g);
  const Value& x = b.InputValue(0);
  if (kMean) {
    ASSIGN_OR_RETURN(
        g, b.Emit1("Div", {g, ScalarConst(b, x.dtype, static_cast<double>(geo.count), "count")}));
  }
  ASSIGN_OR_RETURN(g, WithKeptDims(b, geo, g));
  if (geo.keep_shape != x.shape) {
    ASSIGN_OR_RETURN(g, b.Emit1("Expand", {g, I64Const(b, x.shape, "shape")}));
  }
  return b.SetInputGrad(0, g);
}

// ReduceMax / ReduceMin: the gradient goes to the positions equal to the result, split evenly
// among ties (torch.amax/amin's rule): dX = mask * (dY / count(mask)), mask = (X == Y).
Status ReduceMaxMinGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(ReduceGeometry geo, ReduceGeometryOf(b));
  std::string dy = b.OutputGrad(0);
  if (geo.identity) return b.SetInputGrad(0, dy);
  const Node& fwd = b.fwd();
  const Value& x = b.InputValue(0);
  ASSIGN_OR_RETURN(std::string y, WithKeptDims(b, geo, fwd.outputs[0]));
  ASSIGN_OR_RETURN(dy, WithKeptDims(b, geo, dy));
  ASSIGN_OR_RETURN(std::string eq, b.Emit1("Equal", {fwd.inputs[0], y}));
  ASSIGN_OR_RETURN(std::string mask,
                   b.Emit1("Cast", {eq}, {{"to", Attribute::Int(static_cast<int64_t>(x.dtype))}}));
  ASSIGN_OR_RETURN(std::string count, b.Emit1("ReduceSum", {mask, I64Const(b, geo.axes, "axes")},
                                              {{"keepdims", Attribute::Int(1)}}));
  ASSIGN_OR_RETURN(std::string share, b.Emit1("Div", {dy, count}));
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {mask, share}));
  return b.SetInputGrad(0, g);
}

// ============================== normalizations ==============================

// Fails when gradient flows into a saved-statistics output (only the backward reads those).
// y_j sums x_i over i <= j (i < j when exclusive), or i >= j (i > j) when reversed; so x_i reaches
// every y_j on the other side: dX = CumSum(dY) along the same axis with `reverse` flipped and the
// same `exclusive`. The axis is not differentiable.
Status CumSumGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Node& f = b.fwd();
  ASSIGN_OR_RETURN(std::string dx,
                   b.Emit1("CumSum", {b.OutputGrad(0), f.inputs[1]},
                           {{"exclusive", Attribute::Int(f.GetInt("exclusive", 0))},
                            {"reverse", Attribute::Int(f.GetInt("reverse", 0) != 0 ? 0 : 1)}}));
  return b.SetInputGrad(0, dx);
}

Status NoGradIntoStats(GradBuilder& b, size_t first, const char* names) {
  for (size_t i = first; i < b.fwd().outputs.size(); ++i)
    if (b.HasOutputGrad(i))
      return RuleError(b, std::string("a gradient flows into its ") + names +
                              " output, which is not supported (only the backward may read it)");
  return Status::Ok();
}

// LayerNormalizationGrad (dY, X, scale, mean, inv_std_dev) -> (dX, dscale, dbias).
Status LayerNormGrad(GradBuilder& b) {
  const Node& fwd = b.fwd();
  if (!fwd.HasOutput(1) || !fwd.HasOutput(2))
    return RuleError(b,
                     "the node has no Mean/InvStdDev outputs (outputs 1 and 2); the autodiff "
                     "pass must add them before differentiating");
  RETURN_IF_ERROR(NoGradIntoStats(b, 1, "Mean/InvStdDev"));
  ASSIGN_OR_RETURN(
      std::vector<std::string> g,
      b.Emit("LayerNormalizationGrad",
             {b.OutputGrad(0), fwd.inputs[0], fwd.inputs[1], fwd.outputs[1], fwd.outputs[2]},
             {{"axis", Attribute::Int(fwd.GetInt("axis", -1))}}, 3, kMs));
  for (size_t i = 0; i < 3; ++i)
    if (fwd.HasInput(i) && b.NeedsInputGrad(i)) RETURN_IF_ERROR(b.SetInputGrad(i, g[i]));
  return Status::Ok();
}

// SimplifiedLayerNormalizationGrad (dY, X, scale, inv_std_var) -> (dX, dscale).
Status SimplifiedLayerNormGrad(GradBuilder& b) {
  const Node& fwd = b.fwd();
  if (!fwd.HasOutput(1))
    return RuleError(b,
                     "the node has no inv_std_var output (output 1); the autodiff pass must add "
                     "it before differentiating");
  RETURN_IF_ERROR(NoGradIntoStats(b, 1, "inv_std_var"));
  ASSIGN_OR_RETURN(std::vector<std::string> g,
                   b.Emit("SimplifiedLayerNormalizationGrad",
                          {b.OutputGrad(0), fwd.inputs[0], fwd.inputs[1], fwd.outputs[1]},
                          {{"axis", Attribute::Int(fwd.GetInt("axis", -1))}}, 2, kMs));
  for (size_t i = 0; i < 2; ++i)
    if (b.NeedsInputGrad(i)) RETURN_IF_ERROR(b.SetInputGrad(i, g[i]));
  return Status::Ok();
}

// ============================== softmax cross-entropy ==============================

// d_scores = SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels[, weights]), plus
// LogSoftmaxGrad_13(dLogProb, log_prob) over the class axis when log_prob itself gets a gradient.
Status SoftmaxCrossEntropyGrad(GradBuilder& b) {
  const Node& fwd = b.fwd();
  if (!fwd.HasOutput(1))
    return RuleError(b,
                     "the node has no log_prob output (output 1); the autodiff pass must add it "
                     "before differentiating");
  if (fwd.HasInput(2) && b.NeedsInputGrad(2))
    return RuleError(b, "gradients with respect to the class weights are not supported");
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  std::string g;
  if (b.HasOutputGrad(0)) {
    std::vector<std::string> ins = {b.OutputGrad(0), fwd.outputs[1], fwd.inputs[1]};
    if (fwd.HasInput(2)) ins.push_back(fwd.inputs[2]);
    std::map<std::string, Attribute> attrs = {
        {"reduction", Attribute::String(fwd.GetString("reduction", "mean"))}};
    if (fwd.HasAttr("ignore_index"))
      attrs["ignore_index"] = Attribute::Int(fwd.GetInt("ignore_index", 0));
    ASSIGN_OR_RETURN(g, b.Emit1("SoftmaxCrossEntropyLossGrad", ins, attrs, kMs));
  }
  if (b.HasOutputGrad(1)) {
    ASSIGN_OR_RETURN(std::string t, b.Emit1("LogSoftmaxGrad_13", {b.OutputGrad(1), fwd.outputs[1]},
                                            {{"axis", Attribute::Int(1)}}, kMs));
    if (g.empty()) {
      g = t;
    } else {
      ASSIGN_OR_RETURN(g, b.Emit1("Add", {g, t}));
    }
  }
  return b.SetInputGrad(0, g);
}

}  // namespace

void RegisterMathGradRules(GradRuleTable& table) {
  table.Add("", "MatMul", MatMulGrad);
  table.Add(kMs, "FusedMatMul", MatMulGrad);
  table.Add("", "Gemm", GemmGrad);
  table.Add("", "Softmax", SoftmaxGrad<false>);
  table.Add("", "LogSoftmax", SoftmaxGrad<true>);
  table.Add("", "ReduceSum", ReduceSumMeanGrad<false>);
  table.Add("", "ReduceMean", ReduceSumMeanGrad<true>);
  table.Add("", "ReduceMax", ReduceMaxMinGrad);
  table.Add("", "ReduceMin", ReduceMaxMinGrad);
  table.Add("", "CumSum", CumSumGrad);
  table.Add("", "LayerNormalization", LayerNormGrad);
  table.Add(kMs, "SimplifiedLayerNormalization", SimplifiedLayerNormGrad);
  table.Add("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyGrad);
}

}  // namespace foundry
