// Shape and type inference for the math family: matrix products (MatMul, Gemm, com.microsoft
// FusedMatMul), Softmax/LogSoftmax, the Reduce* ops, CumSum, the normalizations
// (LayerNormalization, com.microsoft SimplifiedLayerNormalization = RMSNorm),
// SoftmaxCrossEntropyLoss, and the com.microsoft gradient ops their gradient rules emit (ONNX
// Runtime's names and signatures).
//
// Reduce* axes: ReduceSum takes them as input 1 since opset 13, the others since opset 18 (an
// attribute before). The node does not record its opset, so every Reduce* accepts both: the
// `axes` attribute when present, else input 1. An axes input that is not a constant leaves the
// output rank (keepdims=0) or its dimensions (keepdims=1) unknown.
#include <algorithm>
#include <string>
#include <vector>

#include "compiler/op_schema.h"

namespace foundry {

namespace {

constexpr char kMs[] = "com.microsoft";

bool IsFloatOrDouble(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16;
}

std::string TypeName(DType t) { return std::string(DTypeName(t)); }

Status RequireFloat(const InferContext& ctx, size_t i, const char* what) {
  DType t = ctx.input(i).dtype;
  if (!IsFloatOrDouble(t))
    return ctx.Fail(std::string(what) + " must be f32 or f64, got " + TypeName(t));
  return Status::Ok();
}

Status RequireSameDType(const InferContext& ctx, size_t i, size_t j) {
  if (ctx.input(i).dtype != ctx.input(j).dtype)
    return ctx.Fail("inputs " + std::to_string(i) + " and " + std::to_string(j) +
                    " have different element types (" + TypeName(ctx.input(i).dtype) + " vs " +
                    TypeName(ctx.input(j).dtype) + ")");
  return Status::Ok();
}

TypeInfo UnknownRankType(DType t) { return TypeInfo{t, {}, false}; }

bool DimsDiffer(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

// --- matrix products ---

// Numpy matmul shape rule with ONNX Runtime's FusedMatMul transposes of the last two dimensions.
StatusOr<std::vector<TypeInfo>> InferMatMul(const InferContext& ctx) {
  const Value& a = ctx.input(0);
  const Value& b = ctx.input(1);
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "A"));
  RETURN_IF_ERROR(RequireSameDType(ctx, 0, 1));
  const Node& n = ctx.node;
  bool ta = n.GetInt("transA", 0) != 0, tb = n.GetInt("transB", 0) != 0;
  if (n.GetInt("transBatchA", 0) != 0 || n.GetInt("transBatchB", 0) != 0)
    return ctx.Fail("transBatchA/transBatchB are not supported");
  if (!a.rank_known || !b.rank_known) return std::vector<TypeInfo>{UnknownRankType(a.dtype)};
  if (a.shape.empty() || b.shape.empty())
    return ctx.Fail("operands must have rank >= 1, got " + ShapeToString(a.shape) + " and " +
                    ShapeToString(b.shape));
  if ((ta && a.shape.size() < 2) || (tb && b.shape.size() < 2))
    return ctx.Fail("transA/transB need an operand of rank >= 2");
  bool a_vec = a.shape.size() == 1, b_vec = b.shape.size() == 1;
  Shape as = a_vec ? Shape{1, a.shape[0]} : a.shape;
  Shape bs = b_vec ? Shape{b.shape[0], 1} : b.shape;
  size_t ra = as.size(), rb = bs.size();
  int64_t m = ta ? as[ra - 1] : as[ra - 2];
  int64_t ka = ta ? as[ra - 2] : as[ra - 1];
  int64_t kb = tb ? bs[rb - 1] : bs[rb - 2];
  int64_t nn = tb ? bs[rb - 2] : bs[rb - 1];
  if (DimsDiffer(ka, kb))
    return ctx.Fail("inner dimensions do not match: A is " + ShapeToString(a.shape) +
                    (ta ? " (transposed)" : "") + ", B is " + ShapeToString(b.shape) +
                    (tb ? " (transposed)" : ""));
  auto batch = BroadcastShapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2));
  if (!batch.ok()) return ctx.Fail("batch dimensions: " + batch.status().message());
  Shape out = *batch;
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(nn);
  return std::vector<TypeInfo>{{a.dtype, out}};
}

StatusOr<std::vector<TypeInfo>> InferGemm(const InferContext& ctx) {
  const Value& a = ctx.input(0);
  const Value& b = ctx.input(1);
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "A"));
  RETURN_IF_ERROR(RequireSameDType(ctx, 0, 1));
  if (!a.rank_known || !b.rank_known) return std::vector<TypeInfo>{{a.dtype, {-1, -1}}};
  if (a.shape.size() != 2 || b.shape.size() != 2)
    return ctx.Fail("A and B must be matrices, got " + ShapeToString(a.shape) + " and " +
                    ShapeToString(b.shape));
  bool ta = ctx.node.GetInt("transA", 0) != 0, tb = ctx.node.GetInt("transB", 0) != 0;
  int64_t m = ta ? a.shape[1] : a.shape[0], ka = ta ? a.shape[0] : a.shape[1];
  int64_t kb = tb ? b.shape[1] : b.shape[0], nn = tb ? b.shape[0] : b.shape[1];
  if (DimsDiffer(ka, kb))
    return ctx.Fail("inner dimensions do not match: A is " + ShapeToString(a.shape) +
                    (ta ? " (transposed)" : "") + ", B is " + ShapeToString(b.shape) +
                    (tb ? " (transposed)" : ""));
  Shape out = {m, nn};
  if (ctx.has_input(2)) {
    RETURN_IF_ERROR(RequireSameDType(ctx, 0, 2));
    const Value& c = ctx.input(2);
    if (c.rank_known) {
      if (c.shape.size() > 2)
        return ctx.Fail("C must have rank <= 2, got " + ShapeToString(c.shape));
      // Unidirectional broadcast: C's dims are 1 or equal to Y's.
      for (size_t i = 0; i < c.shape.size(); ++i) {
        int64_t cd = c.shape[c.shape.size() - 1 - i], yd = out[1 - i];
        if (cd != 1 && DimsDiffer(cd, yd))
          return ctx.Fail("C of shape " + ShapeToString(c.shape) +
                          " does not broadcast to the product's shape " + ShapeToString(out));
      }
    }
  }
  return std::vector<TypeInfo>{{a.dtype, out}};
}

// --- softmax ---

StatusOr<std::vector<TypeInfo>> InferSoftmax(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "input"));
  const Value& x = ctx.input(0);
  if (x.rank_known) {
    auto axis = NormalizeAxis(ctx.node.GetInt("axis", -1), static_cast<int64_t>(x.shape.size()));
    if (!axis.ok()) return ctx.Fail(axis.status().message());
  }
  return std::vector<TypeInfo>{SameAs(x)};
}

// SoftmaxGrad_13 / LogSoftmaxGrad_13 (dY, Y) -> dX.
StatusOr<std::vector<TypeInfo>> InferSoftmaxGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "dY"));
  RETURN_IF_ERROR(RequireSameDType(ctx, 0, 1));
  const Value& dy = ctx.input(0);
  const Value& y = ctx.input(1);
  if (dy.rank_known && y.rank_known) {
    if (dy.shape.size() != y.shape.size())
      return ctx.Fail("dY " + ShapeToString(dy.shape) + " and Y " + ShapeToString(y.shape) +
                      " differ in shape");
    for (size_t i = 0; i < dy.shape.size(); ++i)
      if (DimsDiffer(dy.shape[i], y.shape[i]))
        return ctx.Fail("dY " + ShapeToString(dy.shape) + " and Y " + ShapeToString(y.shape) +
                        " differ in shape");
    auto axis = NormalizeAxis(ctx.node.GetInt("axis", -1), static_cast<int64_t>(y.shape.size()));
    if (!axis.ok()) return ctx.Fail(axis.status().message());
  }
  return std::vector<TypeInfo>{SameAs(y)};
}

// --- reductions ---

enum class ReduceDTypes { kAny, kFloatOnly };

InferFn MakeInferReduce(ReduceDTypes allowed) {
  return [allowed](const InferContext& ctx) -> StatusOr<std::vector<TypeInfo>> {
    const Node& n = ctx.node;
    const Value& x = ctx.input(0);
    DType t = x.dtype;
    bool ok_type = IsFloatOrDouble(t) ||
                   (allowed == ReduceDTypes::kAny && (t == DType::kInt64 || t == DType::kInt32));
    if (!ok_type) return ctx.Fail("unsupported element type " + TypeName(t));
    bool keepdims = n.GetInt("keepdims", 1) != 0;
    bool noop = n.GetInt("noop_with_empty_axes", 0) != 0;
    if (n.HasAttr("axes") && ctx.has_input(1))
      return ctx.Fail("axes given both as an attribute and as input 1");
    std::vector<int64_t> axes;
    if (n.HasAttr("axes")) {
      axes = n.GetInts("axes");
    } else if (ctx.has_input(1)) {
      const Value& av = ctx.input(1);
      if (av.dtype != DType::kInt64)
        return ctx.Fail("axes input must be i64, got " + TypeName(av.dtype));
      const Tensor* c = ctx.constant(1);
      if (!c) {
        if (!x.rank_known || !keepdims) return std::vector<TypeInfo>{UnknownRankType(t)};
        return std::vector<TypeInfo>{{t, Shape(x.shape.size(), -1)}};
      }
      axes = c->ToInt64Vector();
    }
    if (!x.rank_known) return std::vector<TypeInfo>{UnknownRankType(t)};
    int64_t rank = static_cast<int64_t>(x.shape.size());
    if (axes.empty() && noop) return std::vector<TypeInfo>{SameAs(x)};
    std::vector<bool> reduced(rank, axes.empty());
    for (int64_t a : axes) {
      auto na = NormalizeAxis(a, rank);
      if (!na.ok()) return ctx.Fail(na.status().message());
      if (reduced[*na]) return ctx.Fail("axis " + std::to_string(a) + " appears twice in axes");
      reduced[*na] = true;
    }
    Shape out;
    for (int64_t i = 0; i < rank; ++i) {
      if (!reduced[i])
        out.push_back(x.shape[i]);
      else if (keepdims)
        out.push_back(1);
    }
    return std::vector<TypeInfo>{{t, out}};
  };
}

// --- running sums ---

// CumSum (x, axis) -> y (opset 14): axis a 0-D or one-element int32/int64 tensor, attributes
// exclusive and reverse (0 or 1).
StatusOr<std::vector<TypeInfo>> InferCumSum(const InferContext& ctx) {
  const Value& x = ctx.input(0);
  const Value& axis = ctx.input(1);
  DType t = x.dtype;
  if (!IsFloatOrDouble(t) && t != DType::kInt32 && t != DType::kInt64)
    return ctx.Fail("x must be f32, f64, i32 or i64, got " + TypeName(t));
  for (const char* attr : {"exclusive", "reverse"}) {
    int64_t v = ctx.node.GetInt(attr, 0);
    if (v != 0 && v != 1)
      return ctx.Fail(std::string("attribute '") + attr + "' must be 0 or 1, got " +
                      std::to_string(v));
  }
  if (axis.dtype != DType::kInt64 && axis.dtype != DType::kInt32 && axis.dtype != DType::kUndefined)
    return ctx.Fail("axis must be i64 or i32, got " + TypeName(axis.dtype));
  if (axis.rank_known &&
      (axis.shape.size() > 1 || (axis.ShapeKnown() && NumElements(axis.shape) != 1)))
    return ctx.Fail("axis must be a 0-D (or one-element) tensor, has shape " +
                    ShapeToString(axis.shape));
  if (const Tensor* c = ctx.constant(1); c && x.rank_known) {
    if (x.shape.empty()) return ctx.Fail("x must have rank >= 1");
    auto a = NormalizeAxis(c->GetAsInt64(0), static_cast<int64_t>(x.shape.size()));
    if (!a.ok()) return ctx.Fail(a.status().message());
  }
  return std::vector<TypeInfo>{SameAs(x)};
}

// --- normalizations ---

// Statistics (Mean, InvStdDev, inv_std_var) keep X's leading dims and set the normalized ones to 1.
Shape StatsShape(const Shape& x, int64_t axis) {
  Shape s = x;
  for (size_t i = static_cast<size_t>(axis); i < s.size(); ++i) s[i] = 1;
  return s;
}

// Checks that `param` (scale or bias) has as many elements as the normalized dims.
Status CheckNormParam(const InferContext& ctx, size_t i, const char* what, const Shape& x,
                      int64_t axis) {
  const Value& p = ctx.input(i);
  if (p.dtype != ctx.input(0).dtype)
    return ctx.Fail(std::string(what) + " has element type " + TypeName(p.dtype) + ", X has " +
                    TypeName(ctx.input(0).dtype));
  Shape norm(x.begin() + axis, x.end());
  if (!p.ShapeKnown() || std::any_of(norm.begin(), norm.end(), [](int64_t d) { return d < 0; }))
    return Status::Ok();
  if (NumElements(p.shape) != NumElements(norm))
    return ctx.Fail(std::string(what) + " of shape " + ShapeToString(p.shape) +
                    " does not match the normalized shape " + ShapeToString(norm));
  return Status::Ok();
}

// LayerNormalization (X, Scale[, B]) -> (Y[, Mean, InvStdDev]) and SimplifiedLayerNormalization
// (X, scale) -> (Y[, inv_std_var]).
StatusOr<std::vector<TypeInfo>> InferLayerNorm(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "X"));
  const Value& x = ctx.input(0);
  if (ctx.node.GetInt("stash_type", 1) != 1)
    return ctx.Fail("only stash_type=1 (f32 statistics) is supported");
  if (!x.rank_known) return std::vector<TypeInfo>(3, UnknownRankType(x.dtype));
  auto axis = NormalizeAxis(ctx.node.GetInt("axis", -1), static_cast<int64_t>(x.shape.size()));
  if (!axis.ok()) return ctx.Fail(axis.status().message());
  RETURN_IF_ERROR(CheckNormParam(ctx, 1, "scale", x.shape, *axis));
  if (ctx.has_input(2)) RETURN_IF_ERROR(CheckNormParam(ctx, 2, "bias", x.shape, *axis));
  TypeInfo stats{DType::kFloat32, StatsShape(x.shape, *axis)};
  if (ctx.node.op_type == "SimplifiedLayerNormalization")
    return std::vector<TypeInfo>{SameAs(x), stats};
  return std::vector<TypeInfo>{SameAs(x), stats, stats};
}

// LayerNormalizationGrad (dY, X, scale, mean, inv_std_dev) -> (dX, dscale, dbias);
// SimplifiedLayerNormalizationGrad (dY, X, scale, inv_std_var) -> (dX, dscale).
StatusOr<std::vector<TypeInfo>> InferLayerNormGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "dY"));
  RETURN_IF_ERROR(RequireSameDType(ctx, 0, 1));
  RETURN_IF_ERROR(RequireSameDType(ctx, 0, 2));
  const Value& x = ctx.input(1);
  const Value& scale = ctx.input(2);
  if (x.rank_known) {
    auto axis = NormalizeAxis(ctx.node.GetInt("axis", -1), static_cast<int64_t>(x.shape.size()));
    if (!axis.ok()) return ctx.Fail(axis.status().message());
    RETURN_IF_ERROR(CheckNormParam(ctx, 2, "scale", x.shape, *axis));
  }
  return std::vector<TypeInfo>{SameAs(x), SameAs(scale), SameAs(scale)};
}

// --- softmax cross-entropy ---

Status CheckReduction(const InferContext& ctx) {
  std::string r = ctx.node.GetString("reduction", "mean");
  if (r != "mean" && r != "sum" && r != "none")
    return ctx.Fail("reduction must be \"mean\", \"sum\" or \"none\", got \"" + r + "\"");
  return Status::Ok();
}

// Labels are scores' shape without dimension 1 (the classes).
Status CheckLabels(const InferContext& ctx, const Value& scores, const Value& labels) {
  if (labels.dtype != DType::kInt64 && labels.dtype != DType::kInt32)
    return ctx.Fail("labels must be i64 or i32, got " + TypeName(labels.dtype));
  if (!scores.rank_known || !labels.rank_known) return Status::Ok();
  if (scores.shape.size() < 2)
    return ctx.Fail("scores must have shape [N, C, d1, ...], got " + ShapeToString(scores.shape));
  Shape expect = scores.shape;
  expect.erase(expect.begin() + 1);
  bool match = labels.shape.size() == expect.size();
  for (size_t i = 0; match && i < expect.size(); ++i)
    if (DimsDiffer(labels.shape[i], expect[i])) match = false;
  if (!match)
    return ctx.Fail("labels of shape " + ShapeToString(labels.shape) + " do not match scores " +
                    ShapeToString(scores.shape) + " (expected " + ShapeToString(expect) + ")");
  return Status::Ok();
}

Status CheckClassWeights(const InferContext& ctx, size_t i, const Value& scores) {
  if (!ctx.has_input(i)) return Status::Ok();
  const Value& w = ctx.input(i);
  if (w.dtype != scores.dtype)
    return ctx.Fail("weights have element type " + TypeName(w.dtype) + ", scores have " +
                    TypeName(scores.dtype));
  if (w.rank_known && scores.rank_known && scores.shape.size() >= 2 &&
      (w.shape.size() != 1 || DimsDiffer(w.shape[0], scores.shape[1])))
    return ctx.Fail("weights must have shape [C] = [" + std::to_string(scores.shape[1]) +
                    "], got " + ShapeToString(w.shape));
  return Status::Ok();
}

// SoftmaxCrossEntropyLoss (scores, labels[, weights]) -> (loss[, log_prob]).
StatusOr<std::vector<TypeInfo>> InferSoftmaxCrossEntropy(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "scores"));
  RETURN_IF_ERROR(CheckReduction(ctx));
  const Value& scores = ctx.input(0);
  const Value& labels = ctx.input(1);
  RETURN_IF_ERROR(CheckLabels(ctx, scores, labels));
  RETURN_IF_ERROR(CheckClassWeights(ctx, 2, scores));
  TypeInfo loss{scores.dtype, {}};
  if (ctx.node.GetString("reduction", "mean") == "none") {
    if (labels.rank_known) {
      loss.shape = labels.shape;
    } else {
      loss.rank_known = false;
    }
  }
  return std::vector<TypeInfo>{loss, SameAs(scores)};
}

// SoftmaxCrossEntropyLossGrad (dY, log_prob, label[, weight]) -> d_scores, and
// foundry::NegativeLogLikelihoodLossGrad (dY, log_prob, label[, weight]) -> d_log_prob: the
// gradient of the negative log-likelihood with respect to log_prob (whose shape it takes; its
// values are not read), the first half of PyTorch's nn.CrossEntropyLoss backward
// (passes/loss_backward.h).
StatusOr<std::vector<TypeInfo>> InferSoftmaxCrossEntropyGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(RequireFloat(ctx, 0, "dY"));
  RETURN_IF_ERROR(RequireSameDType(ctx, 0, 1));
  RETURN_IF_ERROR(CheckReduction(ctx));
  const Value& dy = ctx.input(0);
  const Value& log_prob = ctx.input(1);
  const Value& labels = ctx.input(2);
  RETURN_IF_ERROR(CheckLabels(ctx, log_prob, labels));
  RETURN_IF_ERROR(CheckClassWeights(ctx, 3, log_prob));
  bool none = ctx.node.GetString("reduction", "mean") == "none";
  if (dy.rank_known && labels.rank_known) {
    bool ok = none ? dy.shape == labels.shape : dy.shape.empty();
    if (!ok)
      return ctx.Fail("dY has shape " + ShapeToString(dy.shape) + ", expected " +
                      (none ? ShapeToString(labels.shape) : std::string("[] (a scalar loss)")));
  }
  return std::vector<TypeInfo>{SameAs(log_prob)};
}

// Matrix products count 2·K per output element: 2·m·n·k per matrix, times the broadcast batch.
int64_t MatMulFlops(const FlopContext& c) { return 2 * c.output_elements() * c.input_dim(0, -1); }

int64_t FusedMatMulFlops(const FlopContext& c) {
  const bool trans_a = c.node.GetInt("transA", 0) != 0;
  const Value* a = c.input(0);
  const bool vector = a && a->rank_known && a->shape.size() == 1;
  return 2 * c.output_elements() * c.input_dim(0, trans_a && !vector ? -2 : -1);
}

// 2·M·N·K, and one add per output element with a bias.
int64_t GemmFlops(const FlopContext& c) {
  const int64_t out = c.output_elements();
  return 2 * out * c.input_dim(0, c.node.GetInt("transA", 0) != 0 ? 0 : 1) +
         (c.node.HasInput(2) ? out : 0);
}

}  // namespace

// FLOPs per element of the output unless said otherwise (FlopsFn in compiler/op_schema.h).
void RegisterMathSchemas(OpSchemaTable& table) {
  table.Add({"", "MatMul", 2, 2, 1, 1, InferMatMul, MatMulFlops});
  table.Add({kMs, "FusedMatMul", 2, 2, 1, 1, InferMatMul, FusedMatMulFlops});
  table.Add({"", "Gemm", 2, 3, 1, 1, InferGemm, GemmFlops});

  // max, -, exp, Σ, / (or - log Σ).
  table.Add({"", "Softmax", 1, 1, 1, 1, InferSoftmax, FlopsPerOutput(5)});
  table.Add({"", "LogSoftmax", 1, 1, 1, 1, InferSoftmax, FlopsPerOutput(5)});
  // y · (dy - Σ dy·y): ·, Σ, -, ·; dy - exp(y) · Σ dy: Σ, exp, ·, -.
  table.Add({kMs, "SoftmaxGrad_13", 2, 2, 1, 1, InferSoftmaxGrad, FlopsPerOutput(4)});
  table.Add({kMs, "LogSoftmaxGrad_13", 2, 2, 1, 1, InferSoftmaxGrad, FlopsPerOutput(4)});

  // Per element of the input reduced.
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})
    table.Add({"", op, 1, 2, 1, 1, MakeInferReduce(ReduceDTypes::kAny), FlopsPerInput(0, 1)});
  const std::pair<const char*, int64_t> kFloatReductions[] = {{"ReduceL1", 2},
                                                              {"ReduceL2", 2},
                                                              {"ReduceSumSquare", 2},
                                                              {"ReduceLogSum", 1},
                                                              {"ReduceLogSumExp", 2}};
  for (const auto& [op, flops] : kFloatReductions)
    table.Add(
        {"", op, 1, 2, 1, 1, MakeInferReduce(ReduceDTypes::kFloatOnly), FlopsPerInput(0, flops)});

  table.Add({"", "CumSum", 2, 2, 1, 1, InferCumSum, FlopsPerOutput(1)});  // one add

  // Σ, -mean, square, Σ, ·1/std, ·scale, +bias.
  table.Add({"", "LayerNormalization", 2, 3, 1, 3, InferLayerNorm, FlopsPerOutput(7)});
  // x̂ = (x - mean)·r (2); dbias += dy (1); dscale += dy·x̂ (2); g = dy·scale (1); Σ g (1);
  // Σ g·x̂ (2); dx = r·(g - mean(g) - x̂·mean(g·x̂)) (4).
  table.Add({kMs, "LayerNormalizationGrad", 5, 5, 1, 3, InferLayerNormGrad, FlopsPerOutput(13)});
  // RMSNorm: x², Σ, · 1/rms, · scale.
  table.Add({kMs, "SimplifiedLayerNormalization", 2, 2, 1, 2, InferLayerNorm, FlopsPerOutput(4)});
  // x̂ = x·r (1); dscale += dy·x̂ (2); g = dy·scale (1); Σ g·x̂ (2); dx = r·(g - x̂·mean) (3).
  table.Add(
      {kMs, "SimplifiedLayerNormalizationGrad", 4, 4, 1, 2, InferLayerNormGrad, FlopsPerOutput(9)});

  // Its log-softmax over the logits, per logit.
  table.Add(
      {"", "SoftmaxCrossEntropyLoss", 2, 3, 1, 2, InferSoftmaxCrossEntropy, FlopsPerInput(0, 5)});
  // exp(log p), minus the label's one, · dloss.
  table.Add({kMs, "SoftmaxCrossEntropyLossGrad", 3, 4, 1, 1, InferSoftmaxCrossEntropyGrad,
             FlopsPerOutput(3)});
  // The same inputs; only the label's class is written (· dloss), the rest are zeros.
  table.Add({"foundry", "NegativeLogLikelihoodLossGrad", 3, 4, 1, 1, InferSoftmaxCrossEntropyGrad,
             FlopsPerOutput(1)});
}

}  // namespace foundry
