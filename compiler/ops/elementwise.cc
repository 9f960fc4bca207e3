// Shape and type inference for the elementwise family: numpy-broadcasting binary and variadic ops,
// comparisons and logic (bool out), unary math, Where, Cast/CastLike, Clip, Dropout, Gelu, and the
// com.microsoft activations and activation gradients (Gelu, GeluGrad, QuickGelu, QuickGeluGrad,
// ReluGrad, SigmoidGrad, TanhGrad, DropoutGrad) that the gradient rules of this family emit.
//
// Element types are checked here, once, so a model with an op on a type the CPU kernels do not
// handle fails at compile time with the node's name rather than in the middle of a run.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "compiler/op_schema.h"

namespace foundry {
namespace {

constexpr uint32_t Bit(DType t) { return 1u << static_cast<int>(t); }
constexpr uint32_t kFloatTypes =
    Bit(DType::kFloat32) | Bit(DType::kFloat64) | Bit(DType::kBFloat16);
constexpr uint32_t kIntTypes = Bit(DType::kInt32) | Bit(DType::kInt64);
constexpr uint32_t kNumericTypes = kFloatTypes | kIntTypes;
constexpr uint32_t kBoolType = Bit(DType::kBool);
// Every type Cast converts between (and Where / Identity move).
constexpr uint32_t kAllTypes = kNumericTypes | kBoolType | Bit(DType::kUint8) | Bit(DType::kInt8);

constexpr int kVariadic = INT_MAX;

std::string TypeList(uint32_t mask) {
  std::string s;
  for (int code = 0; code < 32; ++code) {
    if (!(mask & (1u << code))) continue;
    if (!s.empty()) s += ", ";
    s += DTypeName(static_cast<DType>(code));
  }
  return s;
}

Status CheckType(const InferContext& ctx, size_t i, uint32_t allowed) {
  DType t = ctx.input(i).dtype;
  if (allowed & Bit(t)) return Status::Ok();
  return ctx.Fail("input '" + ctx.input(i).name + "' has element type " +
                  std::string(DTypeName(t)) + "; expected one of " + TypeList(allowed));
}

// Inputs [first, last) that are present must all have input `first`'s element type.
Status CheckSameType(const InferContext& ctx, size_t first, size_t last) {
  for (size_t i = first + 1; i < last; ++i) {
    if (!ctx.has_input(i)) continue;
    if (ctx.input(i).dtype != ctx.input(first).dtype)
      return ctx.Fail("inputs '" + ctx.input(first).name + "' (" +
                      std::string(DTypeName(ctx.input(first).dtype)) + ") and '" +
                      ctx.input(i).name + "' (" + std::string(DTypeName(ctx.input(i).dtype)) +
                      ") must have the same element type");
  }
  return Status::Ok();
}

// Numpy broadcast of the present inputs among [first, last).
StatusOr<TypeInfo> Broadcast(const InferContext& ctx, size_t first, size_t last, DType dtype) {
  TypeInfo out{dtype, {}, true};
  bool have_shape = false;
  std::string shape_from;
  for (size_t i = first; i < last; ++i) {
    if (!ctx.has_input(i)) continue;
    const Value& v = ctx.input(i);
    if (!v.rank_known) {
      out.rank_known = false;
      continue;
    }
    if (!have_shape) {
      out.shape = v.shape;
      have_shape = true;
      shape_from = "'" + v.name + "' " + ShapeToString(v.shape);
      continue;
    }
    StatusOr<Shape> s = BroadcastShapes(out.shape, v.shape);
    if (!s.ok())
      return ctx.Fail("input '" + v.name + "' of shape " + ShapeToString(v.shape) +
                      " does not broadcast with " + shape_from);
    out.shape = *s;
    shape_from = "the shape " + ShapeToString(out.shape) + " of the inputs before it";
  }
  if (!out.rank_known) out.shape.clear();
  return out;
}

// A scalar operand (Clip bounds, Dropout ratio/training_mode): one element when the shape is
// known.
Status CheckScalar(const InferContext& ctx, size_t i, const std::string& what) {
  if (!ctx.has_input(i)) return Status::Ok();
  const Value& v = ctx.input(i);
  if (v.ShapeKnown() && NumElements(v.shape) != 1)
    return ctx.Fail(what + " '" + v.name + "' must be a scalar, has shape " +
                    ShapeToString(v.shape));
  return Status::Ok();
}

// Same-shape com.microsoft gradient ops: (dY, X or Y) -> dX.
Status CheckSameShape(const InferContext& ctx, size_t a, size_t b) {
  const Value& va = ctx.input(a);
  const Value& vb = ctx.input(b);
  if (va.ShapeKnown() && vb.ShapeKnown() && va.shape != vb.shape)
    return ctx.Fail("inputs '" + va.name + "' " + ShapeToString(va.shape) + " and '" + vb.name +
                    "' " + ShapeToString(vb.shape) + " must have the same shape");
  return Status::Ok();
}

using Types = std::vector<TypeInfo>;

// Binary or variadic op whose inputs share one type from `allowed`; the output has `out` type
// (kUndefined: the inputs' type).
InferFn BroadcastOp(uint32_t allowed, DType out = DType::kUndefined) {
  return [allowed, out](const InferContext& ctx) -> StatusOr<Types> {
    RETURN_IF_ERROR(CheckType(ctx, 0, allowed));
    RETURN_IF_ERROR(CheckSameType(ctx, 0, ctx.num_inputs()));
    DType t = out == DType::kUndefined ? ctx.input(0).dtype : out;
    ASSIGN_OR_RETURN(TypeInfo info, Broadcast(ctx, 0, ctx.num_inputs(), t));
    return Types{info};
  };
}

InferFn UnaryOp(uint32_t allowed, DType out = DType::kUndefined) {
  return [allowed, out](const InferContext& ctx) -> StatusOr<Types> {
    RETURN_IF_ERROR(CheckType(ctx, 0, allowed));
    TypeInfo info = SameAs(ctx.input(0));
    if (out != DType::kUndefined) info.dtype = out;
    return Types{info};
  };
}

// (dY, other) -> dX, both float and of one shape.
StatusOr<Types> InferActivationGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kFloatTypes));
  RETURN_IF_ERROR(CheckSameType(ctx, 0, 2));
  RETURN_IF_ERROR(CheckSameShape(ctx, 0, 1));
  return Types{SameAs(ctx.input(0))};
}

StatusOr<Types> InferPow(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kNumericTypes));
  RETURN_IF_ERROR(CheckType(ctx, 1, kNumericTypes));
  ASSIGN_OR_RETURN(TypeInfo info, Broadcast(ctx, 0, 2, ctx.input(0).dtype));
  return Types{info};
}

StatusOr<Types> InferMod(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kNumericTypes));
  RETURN_IF_ERROR(CheckSameType(ctx, 0, 2));
  if (IsFloat(ctx.input(0).dtype) && ctx.node.GetInt("fmod", 0) != 1)
    return ctx.Fail("floating-point Mod needs attribute fmod=1 (C fmod semantics)");
  ASSIGN_OR_RETURN(TypeInfo info, Broadcast(ctx, 0, 2, ctx.input(0).dtype));
  return Types{info};
}

StatusOr<Types> InferWhere(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kBoolType));
  RETURN_IF_ERROR(CheckType(ctx, 1, kAllTypes));
  RETURN_IF_ERROR(CheckSameType(ctx, 1, 3));
  ASSIGN_OR_RETURN(TypeInfo info, Broadcast(ctx, 0, 3, ctx.input(1).dtype));
  return Types{info};
}

StatusOr<Types> InferCast(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kAllTypes));
  if (!ctx.node.HasAttr("to")) return ctx.Fail("attribute 'to' is required");
  int64_t to = ctx.node.GetInt("to", 0);
  if (to < 0 || to >= 32 || !(kAllTypes & (1u << to)))
    return ctx.Fail("cannot cast to element type " + std::to_string(to) +
                    "; supported: " + TypeList(kAllTypes));
  TypeInfo info = SameAs(ctx.input(0));
  info.dtype = static_cast<DType>(to);
  return Types{info};
}

StatusOr<Types> InferCastLike(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kAllTypes));
  RETURN_IF_ERROR(CheckType(ctx, 1, kAllTypes));
  TypeInfo info = SameAs(ctx.input(0));
  info.dtype = ctx.input(1).dtype;
  return Types{info};
}

StatusOr<Types> InferClip(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kNumericTypes));
  RETURN_IF_ERROR(CheckSameType(ctx, 0, ctx.num_inputs()));
  RETURN_IF_ERROR(CheckScalar(ctx, 1, "min"));
  RETURN_IF_ERROR(CheckScalar(ctx, 2, "max"));
  return Types{SameAs(ctx.input(0))};
}

StatusOr<Types> InferDropout(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kFloatTypes));
  if (ctx.has_input(1)) {
    RETURN_IF_ERROR(CheckType(ctx, 1, kFloatTypes));
    RETURN_IF_ERROR(CheckScalar(ctx, 1, "ratio"));
    if (const Tensor* r = ctx.constant(1)) {
      double ratio = r->GetAsDouble(0);
      if (!(ratio >= 0 && ratio < 1))
        return ctx.Fail("ratio " + std::to_string(ratio) + " is outside [0, 1)");
    }
  }
  if (ctx.has_input(2)) {
    RETURN_IF_ERROR(CheckType(ctx, 2, kBoolType));
    RETURN_IF_ERROR(CheckScalar(ctx, 2, "training_mode"));
  }
  TypeInfo out = SameAs(ctx.input(0));
  TypeInfo mask = out;
  mask.dtype = DType::kBool;
  return Types{out, mask};
}

// ai.onnx Gelu (opset 20), approximate "none" (erf) or "tanh". Canonicalize rewrites it into
// com.microsoft Gelu / FastGelu, whose kernels and gradient rules the rest of foundry uses.
StatusOr<Types> InferGelu(const InferContext& ctx) {
  const std::string approximate = ctx.node.GetString("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    return ctx.Fail("attribute 'approximate' must be \"none\" or \"tanh\", got \"" + approximate +
                    "\"");
  RETURN_IF_ERROR(CheckType(ctx, 0, kFloatTypes));
  return Types{SameAs(ctx.input(0))};
}

// com.microsoft Gelu, form "half_last" (the default) or "half_first" (kernels/cpu/elementwise.cc).
StatusOr<Types> InferMsGelu(const InferContext& ctx) {
  const std::string form = ctx.node.GetString("form", "half_last");
  if (form != "half_last" && form != "half_first")
    return ctx.Fail("unknown form '" + form + "' (expected \"half_last\" or \"half_first\")");
  RETURN_IF_ERROR(CheckType(ctx, 0, kFloatTypes));
  return Types{SameAs(ctx.input(0))};
}

// com.microsoft FastGelu, form "torch_tanh" (the default) or "gelu_new"
// (kernels/cpu/elementwise.cc).
StatusOr<Types> InferFastGelu(const InferContext& ctx) {
  const std::string form = ctx.node.GetString("form", "torch_tanh");
  if (form != "torch_tanh" && form != "gelu_new")
    return ctx.Fail("unknown form '" + form + "' (expected \"torch_tanh\" or \"gelu_new\")");
  RETURN_IF_ERROR(CheckType(ctx, 0, kFloatTypes));
  return Types{SameAs(ctx.input(0))};
}

// com.microsoft DropoutGrad (dY, mask[, ratio, training_mode]) -> dX.
StatusOr<Types> InferDropoutGrad(const InferContext& ctx) {
  RETURN_IF_ERROR(CheckType(ctx, 0, kFloatTypes));
  RETURN_IF_ERROR(CheckType(ctx, 1, kBoolType));
  RETURN_IF_ERROR(CheckSameShape(ctx, 0, 1));
  if (ctx.has_input(2)) RETURN_IF_ERROR(CheckScalar(ctx, 2, "ratio"));
  if (ctx.has_input(3)) RETURN_IF_ERROR(CheckType(ctx, 3, kBoolType));
  return Types{SameAs(ctx.input(0))};
}

// Min, Max, Sum: one per element for each input beyond the first; Mean: one more (its scale).
FlopsFn VariadicFlops(int64_t extra) {
  return [extra](const FlopContext& c) {
    int64_t inputs = 0;
    for (const auto& in : c.node.inputs) inputs += !in.empty();
    return c.output_elements() * (std::max<int64_t>(inputs, 1) - 1 + extra);
  };
}

// Gelu 0.5·x·(1 + erf(x/√2)): x/√2, erf, +1, ·x, ·0.5. FastGelu
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): x², x³, ·c, +x, ·√(2/π), tanh, +1, ·x, ·0.5.
constexpr int64_t kGeluFlops = 5;
constexpr int64_t kFastGeluFlops = 9;

// ai.onnx Gelu: approximate="none" counts as com.microsoft Gelu, "tanh" as FastGelu.
int64_t GeluFlops(const FlopContext& c) {
  const bool tanh = c.node.GetString("approximate", "none") == "tanh";
  return (tanh ? kFastGeluFlops : kGeluFlops) * c.output_elements();
}

// `in_place`: the inputs output 0 may write over (OpSchema::in_place_inputs); each kernel reads
// every element of those inputs before it writes the same element of the output.
void Add(OpSchemaTable& table, const std::string& domain, const std::string& op, int min_in,
         int max_in, InferFn infer, FlopsFn flops, int min_out = 1, int max_out = 1,
         std::vector<int> in_place = {}) {
  table.Add(OpSchema{domain, op, min_in, max_in, min_out, max_out, std::move(infer),
                     std::move(flops), /*view=*/false, std::move(in_place)});
}

}  // namespace

// FLOPs per element of the output unless said otherwise (FlopsFn in compiler/op_schema.h).
void RegisterElementwiseSchemas(OpSchemaTable& table) {
  const FlopsFn one = FlopsPerOutput(1);
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    Add(table, "", op, 2, 2, BroadcastOp(kNumericTypes), one, 1, 1, {0, 1});
  Add(table, "", "Pow", 2, 2, InferPow, one, 1, 1, {0});
  Add(table, "", "Mod", 2, 2, InferMod, one);
  for (const char* op : {"Min", "Max"})
    Add(table, "", op, 1, kVariadic, BroadcastOp(kNumericTypes), VariadicFlops(0));
  Add(table, "", "Sum", 1, kVariadic, BroadcastOp(kNumericTypes), VariadicFlops(0), 1, 1,
      {0, 1, 2, 3, 4, 5, 6, 7});
  Add(table, "", "Mean", 1, kVariadic, BroadcastOp(kFloatTypes), VariadicFlops(1));

  for (const char* op : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    Add(table, "", op, 2, 2, BroadcastOp(kNumericTypes, DType::kBool), one);
  Add(table, "", "Equal", 2, 2, BroadcastOp(kNumericTypes | kBoolType, DType::kBool), one);
  for (const char* op : {"And", "Or", "Xor"})
    Add(table, "", op, 2, 2, BroadcastOp(kBoolType, DType::kBool), one);

  for (const char* op : {"Sqrt", "Reciprocal", "Exp", "Log", "Erf", "Tanh"})
    Add(table, "", op, 1, 1, UnaryOp(kFloatTypes), one, 1, 1, {0});
  // 1 / (1 + exp(-x)): -, exp, +1, 1/.
  Add(table, "", "Sigmoid", 1, 1, UnaryOp(kFloatTypes), FlopsPerOutput(4), 1, 1, {0});
  // log(1 + exp x).
  Add(table, "", "Softplus", 1, 1, UnaryOp(kFloatTypes), FlopsPerOutput(3), 1, 1, {0});
  for (const char* op : {"Sin", "Cos", "Floor", "Ceil", "Round"})
    Add(table, "", op, 1, 1, UnaryOp(kFloatTypes), one);
  for (const char* op : {"Neg", "Abs", "Relu"})
    Add(table, "", op, 1, 1, UnaryOp(kNumericTypes), one, 1, 1, {0});
  Add(table, "", "Sign", 1, 1, UnaryOp(kNumericTypes), one);
  Add(table, "", "Not", 1, 1, UnaryOp(kBoolType), one);
  Add(table, "", "IsNaN", 1, 1, UnaryOp(kFloatTypes, DType::kBool), one);
  Add(table, "", "IsInf", 1, 1, UnaryOp(kFloatTypes, DType::kBool), one);
  OpSchema identity{"", "Identity", 1, 1, 1, 1, UnaryOp(kAllTypes), FlopsPerOutput(0)};
  identity.view = true;
  table.Add(std::move(identity));

  Add(table, "", "Where", 3, 3, InferWhere, one, 1, 1, {1, 2});  // a select
  Add(table, "", "Cast", 1, 1, InferCast, FlopsPerOutput(0));
  Add(table, "", "CastLike", 2, 2, InferCastLike, FlopsPerOutput(0));
  Add(table, "", "Clip", 1, 3, InferClip, FlopsPerOutput(2), 1, 1, {0});  // max, min
  // Compare to the ratio, scale.
  Add(table, "", "Dropout", 1, 3, InferDropout, FlopsPerOutput(2), 1, 2, {0});
  Add(table, "", "Gelu", 1, 1, InferGelu, GeluFlops, 1, 1, {0});

  Add(table, "com.microsoft", "Gelu", 1, 1, InferMsGelu, FlopsPerOutput(kGeluFlops), 1, 1, {0});
  Add(table, "com.microsoft", "FastGelu", 1, 1, InferFastGelu, FlopsPerOutput(kFastGeluFlops), 1, 1,
      {0});
  // QuickGelu x·sigmoid(alpha·x) {alpha, default 1.702 as ONNX Runtime}, QuickGeluGrad (dY, X)
  // {alpha}: canonicalize writes alpha = 1 for SiLU, Mul(x, Sigmoid(x)). QuickGelu: ·(-α), exp,
  // +1, 1/, ·x (SiLU at α = 1 counts as Sigmoid and Mul unfused).
  Add(table, "com.microsoft", "QuickGelu", 1, 1, UnaryOp(kFloatTypes), FlopsPerOutput(5), 1, 1,
      {0});
  // The gradients, each its formula's terms:
  //   GeluGrad      dy · (0.5·(1 + erf(x/√2)) + x·exp(-x²/2)/√(2π)): 4 + 5 + 1 + 1
  //   FastGeluGrad  t = tanh(u), u = k·(x + c·x³) (6); 0.5·(1 + t) (2); 1 - t² (2);
  //                 du/dx = k·(1 + 3c·x²) (3); 0.5·x·(1 - t²)·du/dx (3); the sum (1); · dy (1)
  //   ReluGrad      dy where y > 0 (a select)
  //   SigmoidGrad   dy · y · (1 - y)
  //   TanhGrad      dy · (1 - y²)
  //   QuickGeluGrad v = αx (1); s = 1/(1 + exp(-v)) (4); dy·s·(1 + v·(1 - s)) (5)
  const std::pair<const char*, int64_t> kGrads[] = {{"GeluGrad", 11}, {"FastGeluGrad", 18},
                                                    {"ReluGrad", 1},  {"SigmoidGrad", 3},
                                                    {"TanhGrad", 3},  {"QuickGeluGrad", 10}};
  for (const auto& [op, flops] : kGrads)
    Add(table, "com.microsoft", op, 2, 2, InferActivationGrad, FlopsPerOutput(flops), 1, 1, {0, 1});
  // dy · mask · scale.
  Add(table, "com.microsoft", "DropoutGrad", 2, 4, InferDropoutGrad, FlopsPerOutput(2), 1, 1, {0});
}

}  // namespace foundry
