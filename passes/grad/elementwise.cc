// Gradient rules of the elementwise family. Conventions:
//  - A broadcast operand's gradient is computed at the output's shape and then summed down to
//    the operand's shape (GradBuilder::ReduceToShape), after any per-element factor is applied.
//  - A gradient that equals dY (Identity, Add, Cast f32->f32, ...) is declared as dY itself, not
//    copied.
//  - Activation gradients use ONNX Runtime's com.microsoft ops: ReluGrad (dY, Y), SigmoidGrad
//    (dY, Y), TanhGrad (dY, Y), GeluGrad (dY, X), FastGeluGrad (dY, X), QuickGeluGrad (dY, X)
//    {alpha}, DropoutGrad (dY, mask, ratio, training_mode).
//    Everything else is standard ONNX ops.
//  - A rule reads only what its formula needs, and of two equivalent operands the one the
//    backward keeps anyway: ReluGrad reads the output (Y > 0 exactly where X > 0, as torch's
//    threshold_backward(grad, result, 0)), which the next layer's matrix product saves already.
//  - Min/Max of two operands follow torch.maximum/minimum: ties split dY evenly. Of more
//    operands (no torch op exports that) dY goes to the first input equal to the result. Clip
//    passes dY where min <= x <= max (PyTorch's clamp gradient at the bounds).
//  - Ops that are piecewise constant (Floor, Ceil, Round, Sign), comparisons and casts to
//    non-float types have no rule: the autodiff pass never lets a gradient flow through them
//    (passes/autodiff.h, IsNonDifferentiable).
//  - Dropout needs its mask output when it can be active (see DropoutGrad below).
#include <cmath>
#include <string>
#include <vector>

#include "base/bfloat16.h"
#include "passes/grad/grad_rule.h"

namespace foundry {
namespace {

// A scalar constant of float type `t` (f32, f64, or bf16: v rounded to nearest even).
std::string Scalar(GradBuilder& b, double v, DType t, const std::string& hint) {
  if (t == DType::kFloat64) return b.Constant(Tensor::FromVector<double>(t, {}, {v}), hint);
  if (t == DType::kBFloat16)
    return b.Constant(Tensor::FromVector<uint16_t>(t, {}, {DoubleToBf16(v)}), hint);
  return b.Constant(Tensor::FromVector<float>(DType::kFloat32, {}, {static_cast<float>(v)}), hint);
}

StatusOr<std::string> CastTo(GradBuilder& b, const std::string& v, DType t) {
  return b.Emit1("Cast", {v}, {{"to", Attribute::Int(static_cast<int64_t>(t))}});
}

DType GradType(GradBuilder& b) { return b.graph().FindValue(b.OutputGrad(0))->dtype; }

// Sums `g` (output-shaped) down to input i's shape and declares it input i's gradient.
Status SetReduced(GradBuilder& b, size_t i, const std::string& g) {
  ASSIGN_OR_RETURN(std::string reduced, b.ReduceToShape(g, b.InputValue(i).shape));
  return b.SetInputGrad(i, reduced);
}

Status IdentityGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  return b.SetInputGrad(0, b.OutputGrad(0));
}

Status AddSubGrad(GradBuilder& b) {
  const std::string& dy = b.OutputGrad(0);
  if (b.NeedsInputGrad(0)) RETURN_IF_ERROR(SetReduced(b, 0, dy));
  if (b.NeedsInputGrad(1)) {
    if (b.fwd().op_type == "Add") return SetReduced(b, 1, dy);
    // Negate after reducing: the reduced tensor is never larger.
    ASSIGN_OR_RETURN(std::string reduced, b.ReduceToShape(dy, b.InputValue(1).shape));
    ASSIGN_OR_RETURN(std::string neg, b.Emit1("Neg", {reduced}));
    RETURN_IF_ERROR(b.SetInputGrad(1, neg));
  }
  return Status::Ok();
}

// Y = A * B: dA = dY * B, dB = dY * A.
Status MulGrad(GradBuilder& b) {
  const std::string& dy = b.OutputGrad(0);
  const Node& f = b.fwd();
  for (size_t i = 0; i < 2; ++i) {
    if (!b.NeedsInputGrad(i)) continue;
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {dy, f.inputs[1 - i]}));
    RETURN_IF_ERROR(SetReduced(b, i, g));
  }
  return Status::Ok();
}

// Y = A / B: dA = dY / B, dB = -dY * A / B^2 = -(dY / B) * Y.
Status DivGrad(GradBuilder& b) {
  const Node& f = b.fwd();
  ASSIGN_OR_RETURN(std::string t, b.Emit1("Div", {b.OutputGrad(0), f.inputs[1]}));
  if (b.NeedsInputGrad(0)) RETURN_IF_ERROR(SetReduced(b, 0, t));
  if (b.NeedsInputGrad(1)) {
    ASSIGN_OR_RETURN(std::string ty, b.Emit1("Mul", {t, f.outputs[0]}));
    ASSIGN_OR_RETURN(std::string reduced, b.ReduceToShape(ty, b.InputValue(1).shape));
    ASSIGN_OR_RETURN(std::string neg, b.Emit1("Neg", {reduced}));
    RETURN_IF_ERROR(b.SetInputGrad(1, neg));
  }
  return Status::Ok();
}

// Y = A ^ B: dA = dY * B * A^(B-1); dB = dY * Y * log(A) (float exponents only; NaN where
// A < 0, as in calculus). A constant exponent (x^2 of a norm) gets B and B-1 as constants.
Status PowGrad(GradBuilder& b) {
  const Node& f = b.fwd();
  const std::string& dy = b.OutputGrad(0);
  const DType t = b.InputValue(0).dtype;
  if (b.NeedsInputGrad(0)) {
    std::string exponent, exponent_m1;
    if (const Tensor* c = b.InputValue(1).data.get()) {
      Tensor e(t, c->shape()), em1(t, c->shape());
      for (int64_t i = 0; i < c->numel(); ++i) {
        if (t == DType::kFloat64) {
          e.data<double>()[i] = c->GetAsDouble(i);
          em1.data<double>()[i] = c->GetAsDouble(i) - 1;
        } else {
          e.data<float>()[i] = static_cast<float>(c->GetAsDouble(i));
          em1.data<float>()[i] = static_cast<float>(c->GetAsDouble(i) - 1);
        }
      }
      exponent = b.Constant(std::move(e), "exponent");
      exponent_m1 = b.Constant(std::move(em1), "exponent_minus_1");
    } else {
      exponent = f.inputs[1];
      if (b.InputValue(1).dtype != t) {
        ASSIGN_OR_RETURN(exponent, CastTo(b, exponent, t));
      }
      ASSIGN_OR_RETURN(exponent_m1, b.Emit1("Sub", {exponent, Scalar(b, 1, t, "one")}));
    }
    ASSIGN_OR_RETURN(std::string p, b.Emit1("Pow", {f.inputs[0], exponent_m1}));
    ASSIGN_OR_RETURN(std::string dyb, b.Emit1("Mul", {dy, exponent}));
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {dyb, p}));
    RETURN_IF_ERROR(SetReduced(b, 0, g));
  }
  if (b.NeedsInputGrad(1) && IsFloat(b.InputValue(1).dtype)) {
    ASSIGN_OR_RETURN(std::string log_a, b.Emit1("Log", {f.inputs[0]}));
    ASSIGN_OR_RETURN(std::string dyy, b.Emit1("Mul", {dy, f.outputs[0]}));
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {dyy, log_a}));
    if (b.InputValue(1).dtype != t) {
      ASSIGN_OR_RETURN(g, CastTo(b, g, b.InputValue(1).dtype));
    }
    RETURN_IF_ERROR(SetReduced(b, 1, g));
  }
  return Status::Ok();
}

// Y = fmod(A, B) = A - trunc(A / B) * B: dA = dY, dB = -dY * trunc(A / B) = -dY * (A - Y) / B.
Status ModGrad(GradBuilder& b) {
  const Node& f = b.fwd();
  const std::string& dy = b.OutputGrad(0);
  if (b.NeedsInputGrad(0)) RETURN_IF_ERROR(SetReduced(b, 0, dy));
  if (b.NeedsInputGrad(1)) {
    ASSIGN_OR_RETURN(std::string diff, b.Emit1("Sub", {f.inputs[0], f.outputs[0]}));
    ASSIGN_OR_RETURN(std::string quotient, b.Emit1("Div", {diff, f.inputs[1]}));
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {dy, quotient}));
    ASSIGN_OR_RETURN(std::string reduced, b.ReduceToShape(g, b.InputValue(1).shape));
    ASSIGN_OR_RETURN(std::string neg, b.Emit1("Neg", {reduced}));
    RETURN_IF_ERROR(b.SetInputGrad(1, neg));
  }
  return Status::Ok();
}

// Min/Max of two operands, torch's rule (derivatives.yaml, maximum and minimum), for Max:
//   dA = where(A == B, dY / 2, dY) masked to 0 where A < B;  dB the same, masked where A > B
// (Min swaps the masks). dY / 2 and dY * 0.5 are the same IEEE result. A NaN operand makes both
// comparisons false, so both operands receive dY, as in torch. The rule reads the two operands
// and never Y: a clamp against a constant, OPT's torch.max(scores + mask, finfo.min), keeps only
// its input for the backward where the rule through Y kept the input and the output.
Status BinaryMinMaxGrad(GradBuilder& b) {
  const Node& f = b.fwd();
  if (!b.NeedsInputGrad(0) && !b.NeedsInputGrad(1)) return Status::Ok();
  const bool is_max = f.op_type == "Max";
  const std::string& dy = b.OutputGrad(0);
  const DType t = GradType(b);
  ASSIGN_OR_RETURN(std::string tie, b.Emit1("Equal", {f.inputs[0], f.inputs[1]}));
  ASSIGN_OR_RETURN(std::string half, b.Emit1("Mul", {dy, Scalar(b, 0.5, t, "half")}));
  ASSIGN_OR_RETURN(std::string shared, b.Emit1("Where", {tie, half, dy}));
  const std::string zero = Scalar(b, 0, t, "zero");
  for (size_t i = 0; i < 2; ++i) {
    if (!b.NeedsInputGrad(i)) continue;
    // Operand 0 of Max loses where A < B, operand 1 where A > B; Min the other way round.
    const char* loses = is_max == (i == 0) ? "Less" : "Greater";
    ASSIGN_OR_RETURN(std::string lost, b.Emit1(loses, {f.inputs[0], f.inputs[1]}));
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Where", {lost, zero, shared}));
    RETURN_IF_ERROR(SetReduced(b, i, g));
  }
  return Status::Ok();
}

// Min/Max of one or of three and more operands: input i receives dY where it is the first input
// equal to Y. `rest` carries the part of dY not yet routed; the last input takes whatever is
// left.
Status MinMaxGrad(GradBuilder& b) {
  const Node& f = b.fwd();
  const size_t n = f.inputs.size();
  if (n == 2) return BinaryMinMaxGrad(b);
  size_t last_needed = n;
  for (size_t i = 0; i < n; ++i)
    if (b.NeedsInputGrad(i)) last_needed = i;
  if (last_needed == n) return Status::Ok();
  std::string rest = b.OutputGrad(0);
  const std::string zero = Scalar(b, 0, GradType(b), "zero");
  for (size_t i = 0; i <= last_needed; ++i) {
    if (i == n - 1) return SetReduced(b, i, rest);
    ASSIGN_OR_RETURN(std::string is_arg, b.Emit1("Equal", {f.inputs[i], f.outputs[0]}));
    if (b.NeedsInputGrad(i)) {
      ASSIGN_OR_RETURN(std::string g, b.Emit1("Where", {is_arg, rest, zero}));
      RETURN_IF_ERROR(SetReduced(b, i, g));
    }
    if (i < last_needed) {
      ASSIGN_OR_RETURN(rest, b.Emit1("Where", {is_arg, zero, rest}));
    }
  }
  return Status::Ok();
}

Status SumGrad(GradBuilder& b) {
  for (size_t i = 0; i < b.fwd().inputs.size(); ++i)
    if (b.NeedsInputGrad(i)) RETURN_IF_ERROR(SetReduced(b, i, b.OutputGrad(0)));
  return Status::Ok();
}

Status MeanGrad(GradBuilder& b) {
  const size_t n = b.fwd().inputs.size();
  const std::string scale = Scalar(b, 1.0 / static_cast<double>(n), GradType(b), "inv_count");
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {b.OutputGrad(0), scale}));
  for (size_t i = 0; i < n; ++i)
    if (b.NeedsInputGrad(i)) RETURN_IF_ERROR(SetReduced(b, i, g));
  return Status::Ok();
}

// Y = Where(C, X1, X2): dX1 = Where(C, dY, 0), dX2 = Where(C, 0, dY).
Status WhereGrad(GradBuilder& b) {
  const Node& f = b.fwd();
  const std::string& dy = b.OutputGrad(0);
  if (!b.NeedsInputGrad(1) && !b.NeedsInputGrad(2)) return Status::Ok();
  const std::string zero = Scalar(b, 0, GradType(b), "zero");
  if (b.NeedsInputGrad(1)) {
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Where", {f.inputs[0], dy, zero}));
    RETURN_IF_ERROR(SetReduced(b, 1, g));
  }
  if (b.NeedsInputGrad(2)) {
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Where", {f.inputs[0], zero, dy}));
    RETURN_IF_ERROR(SetReduced(b, 2, g));
  }
  return Status::Ok();
}

// dX = dY * factor, factor built by `make` from the forward node.
template <class Make>
Status Scaled(GradBuilder& b, Make make) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string factor, make());
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {b.OutputGrad(0), factor}));
  return b.SetInputGrad(0, g);
}

Status NegGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Neg", {b.OutputGrad(0)}));
  return b.SetInputGrad(0, g);
}

Status AbsGrad(GradBuilder& b) {
  return Scaled(b, [&] { return b.Emit1("Sign", {b.fwd().inputs[0]}); });
}

// Y = sqrt(X): dX = dY / Y * 0.5.
Status SqrtGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string t, b.Emit1("Div", {b.OutputGrad(0), b.fwd().outputs[0]}));
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Mul", {t, Scalar(b, 0.5, GradType(b), "half")}));
  return b.SetInputGrad(0, g);
}

// Y = 1 / X: dX = -dY * Y^2.
Status ReciprocalGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const std::string& y = b.fwd().outputs[0];
  ASSIGN_OR_RETURN(std::string y2, b.Emit1("Mul", {y, y}));
  ASSIGN_OR_RETURN(std::string t, b.Emit1("Mul", {b.OutputGrad(0), y2}));
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Neg", {t}));
  return b.SetInputGrad(0, g);
}

Status ExpGrad(GradBuilder& b) {
  return Scaled(b, [&]() -> StatusOr<std::string> { return b.fwd().outputs[0]; });
}

Status LogGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Div", {b.OutputGrad(0), b.fwd().inputs[0]}));
  return b.SetInputGrad(0, g);
}

// erf'(x) = 2/sqrt(pi) * exp(-x^2).
Status ErfGrad(GradBuilder& b) {
  return Scaled(b, [&]() -> StatusOr<std::string> {
    const std::string& x = b.fwd().inputs[0];
    ASSIGN_OR_RETURN(std::string x2, b.Emit1("Mul", {x, x}));
    ASSIGN_OR_RETURN(std::string neg, b.Emit1("Neg", {x2}));
    ASSIGN_OR_RETURN(std::string e, b.Emit1("Exp", {neg}));
    return b.Emit1("Mul", {e, Scalar(b, 1.1283791670955126, GradType(b), "two_over_sqrt_pi")});
  });
}

Status SinGrad(GradBuilder& b) {
  return Scaled(b, [&] { return b.Emit1("Cos", {b.fwd().inputs[0]}); });
}

Status CosGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string s, b.Emit1("Sin", {b.fwd().inputs[0]}));
  ASSIGN_OR_RETURN(std::string t, b.Emit1("Mul", {b.OutputGrad(0), s}));
  ASSIGN_OR_RETURN(std::string g, b.Emit1("Neg", {t}));
  return b.SetInputGrad(0, g);
}

// softplus'(x) = sigmoid(x).
Status SoftplusGrad(GradBuilder& b) {
  return Scaled(b, [&] { return b.Emit1("Sigmoid", {b.fwd().inputs[0]}); });
}

// One com.microsoft (dY, operand) -> dX op.
Status ActivationGrad(GradBuilder& b, const std::string& op, const std::string& operand) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  ASSIGN_OR_RETURN(std::string g, b.Emit1(op, {b.OutputGrad(0), operand}, {}, "com.microsoft"));
  return b.SetInputGrad(0, g);
}
// Relu's output, not its input: Y = X < 0 ? 0 : X is > 0 exactly where X > 0 (0, -0 and NaN
// pass through unchanged and are not > 0), so the gradient has the same bits, and an MLP's
// fc1 output need not be kept beside the activation fc2 saves (Relu may then even run in place).
Status ReluGrad(GradBuilder& b) { return ActivationGrad(b, "ReluGrad", b.fwd().outputs[0]); }
Status SigmoidGrad(GradBuilder& b) { return ActivationGrad(b, "SigmoidGrad", b.fwd().outputs[0]); }
Status TanhGrad(GradBuilder& b) { return ActivationGrad(b, "TanhGrad", b.fwd().outputs[0]); }
Status GeluGrad(GradBuilder& b) { return ActivationGrad(b, "GeluGrad", b.fwd().inputs[0]); }
Status FastGeluGrad(GradBuilder& b) { return ActivationGrad(b, "FastGeluGrad", b.fwd().inputs[0]); }

// QuickGelu (SiLU when alpha = 1, canonicalize's fusion of Mul(x, Sigmoid(x))): one fused
// gradient reading X only, where the unfused pair kept X and the Sigmoid's output.
Status QuickGeluGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0)) return Status::Ok();
  const Node& f = b.fwd();
  ASSIGN_OR_RETURN(
      std::string g,
      b.Emit1("QuickGeluGrad", {b.OutputGrad(0), f.inputs[0]},
              {{"alpha", Attribute::Float(f.GetFloat("alpha", 1.702f))}}, "com.microsoft"));
  return b.SetInputGrad(0, g);
}

// Float -> float casts pass the gradient back in the input's type; other casts stop it.
Status CastGrad(GradBuilder& b) {
  const DType in = b.InputValue(0).dtype;
  const DType out = b.OutputValue(0).dtype;
  if (!b.NeedsInputGrad(0) || !IsFloat(in) || !IsFloat(out)) return Status::Ok();
  if (in == out) return b.SetInputGrad(0, b.OutputGrad(0));
  ASSIGN_OR_RETURN(std::string g, CastTo(b, b.OutputGrad(0), in));
  return b.SetInputGrad(0, g);
}

// Y = clip(X, lo, hi): dX = dY where lo <= X <= hi (PyTorch passes 1 at the bounds);
// dlo = dY where X < lo, dhi = dY where X > hi (summed: the bounds are scalars).
Status ClipGrad(GradBuilder& b) {
  const Node& f = b.fwd();
  const std::string& dy = b.OutputGrad(0);
  const DType t = GradType(b);
  std::string lo, hi;
  if (f.HasInput(1))
    lo = f.inputs[1];
  else if (f.HasAttr("min"))
    lo = Scalar(b, f.GetFloat("min", 0), t, "min");
  if (f.HasInput(2))
    hi = f.inputs[2];
  else if (f.HasAttr("max"))
    hi = Scalar(b, f.GetFloat("max", 0), t, "max");
  const std::string& x = f.inputs[0];
  if (lo.empty() && hi.empty()) return IdentityGrad(b);
  const std::string zero = Scalar(b, 0, t, "zero");
  if (b.NeedsInputGrad(0)) {
    std::string mask;
    if (!lo.empty()) {
      ASSIGN_OR_RETURN(mask, b.Emit1("GreaterOrEqual", {x, lo}));
    }
    if (!hi.empty()) {
      ASSIGN_OR_RETURN(std::string below_hi, b.Emit1("LessOrEqual", {x, hi}));
      if (mask.empty()) {
        mask = below_hi;
      } else {
        ASSIGN_OR_RETURN(mask, b.Emit1("And", {mask, below_hi}));
      }
    }
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Where", {mask, dy, zero}));
    RETURN_IF_ERROR(b.SetInputGrad(0, g));
  }
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!b.NeedsInputGrad(i) || !f.HasInput(i)) continue;
    ASSIGN_OR_RETURN(std::string outside, b.Emit1(i == 1 ? "Less" : "Greater", {x, f.inputs[i]}));
    ASSIGN_OR_RETURN(std::string g, b.Emit1("Where", {outside, dy, zero}));
    RETURN_IF_ERROR(SetReduced(b, i, g));
  }
  return Status::Ok();
}

// Whether constant input i of the forward node is known and satisfies `pred`.
template <class Pred>
bool ConstantIs(GradBuilder& b, size_t i, Pred pred) {
  if (!b.fwd().HasInput(i)) return false;
  const Tensor* c = b.InputValue(i).data.get();
  return c && c->numel() == 1 && pred(c->GetAsDouble(0));
}

// Dropout: dX = DropoutGrad(dY, mask, ratio, training_mode), reading the forward's mask output.
// A Dropout that is never active (no training_mode input, or a constant false one, or a constant
// ratio of 0) is the identity. An active one must have its mask output: the rule cannot add one
// to the forward node, so the autodiff pass gives every Dropout a mask output before it runs.
// (The mask is reproducible from Philox, so a recompute regenerates it bit for bit.)
Status DropoutGrad(GradBuilder& b) {
  if (!b.NeedsInputGrad(0) || !b.HasOutputGrad(0)) return Status::Ok();
  const Node& f = b.fwd();
  const bool inactive = !f.HasInput(2) || ConstantIs(b, 2, [](double v) { return v == 0; }) ||
                        ConstantIs(b, 1, [](double v) { return v == 0; });
  if (inactive) return IdentityGrad(b);
  if (!f.HasOutput(1))
    return Error(f.Describe() +
                 " has no mask output; give every training Dropout a mask output before "
                 "differentiating");
  std::vector<std::string> inputs = {b.OutputGrad(0), f.outputs[1],
                                     f.HasInput(1) ? f.inputs[1] : "", f.inputs[2]};
  ASSIGN_OR_RETURN(std::string g, b.Emit1("DropoutGrad", inputs, {}, "com.microsoft"));
  return b.SetInputGrad(0, g);
}

}  // namespace

void RegisterElementwiseGradRules(GradRuleTable& table) {
  table.Add("", "Add", AddSubGrad);
  table.Add("", "Sub", AddSubGrad);
  table.Add("", "Mul", MulGrad);
  table.Add("", "Div", DivGrad);
  table.Add("", "Pow", PowGrad);
  table.Add("", "Mod", ModGrad);
  table.Add("", "Min", MinMaxGrad);
  table.Add("", "Max", MinMaxGrad);
  table.Add("", "Sum", SumGrad);
  table.Add("", "Mean", MeanGrad);
  table.Add("", "Where", WhereGrad);

  table.Add("", "Identity", IdentityGrad);
  table.Add("", "Neg", NegGrad);
  table.Add("", "Abs", AbsGrad);
  table.Add("", "Sqrt", SqrtGrad);
  table.Add("", "Reciprocal", ReciprocalGrad);
  table.Add("", "Exp", ExpGrad);
  table.Add("", "Log", LogGrad);
  table.Add("", "Erf", ErfGrad);
  table.Add("", "Sin", SinGrad);
  table.Add("", "Cos", CosGrad);
  table.Add("", "Softplus", SoftplusGrad);
  table.Add("", "Relu", ReluGrad);
  table.Add("", "Sigmoid", SigmoidGrad);
  table.Add("", "Tanh", TanhGrad);
  table.Add("com.microsoft", "Gelu", GeluGrad);
  table.Add("com.microsoft", "FastGelu", FastGeluGrad);
  table.Add("com.microsoft", "QuickGelu", QuickGeluGrad);

  table.Add("", "Cast", CastGrad);
  table.Add("", "CastLike", CastGrad);
  table.Add("", "Clip", ClipGrad);
  table.Add("", "Dropout", DropoutGrad);
}

}  // namespace foundry
