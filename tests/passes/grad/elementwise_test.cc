// Gradient rules of the elementwise family: every rule against central finite differences
// (CheckGradients, tolerance derivation in tests/support/grad_check.h) on random shapes with
// broadcasting, with inputs kept away from kinks; plus the exact routing at ties and bounds, which
// finite differences cannot see, and the rules that deliberately give no gradient.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>

#include "compiler/op_schema.h"
#include "passes/grad/grad_rule.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Nodes named after their op ("Div_node"), as the error messages below quote them.
Node EwNode(const std::string& op, std::vector<std::string> inputs,
            std::vector<std::string> outputs = {"y"}, std::map<std::string, Attribute> attrs = {},
            const std::string& domain = "") {
  return MakeNode(op, std::move(inputs), std::move(outputs), std::move(attrs), domain,
                  op + "_node");
}

#define EXPECT_GRADS_OK(...)                  \
  do {                                        \
    Status _st = CheckGradients(__VA_ARGS__); \
    EXPECT_TRUE(_st.ok()) << _st.message();   \
  } while (0)

// Values on a grid of step 0.1 shifted by `offset`: two tensors with different offsets never
// come within |offset difference| of each other, so Min/Max/Relu/Clip stay away from their kinks
// under the 1e-2 finite-difference step.
Tensor GridTensor(Shape shape, uint64_t seed, float offset, int lo = -10, int hi = 10) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng) * 0.1f + offset;
  return t;
}

Tensor Scalar(float v) { return Tensor::Scalar(v); }
Tensor BoolScalar(bool v) { return Tensor::FromVector<uint8_t>(DType::kBool, {}, {v}); }

const std::vector<std::pair<Shape, Shape>> kShapes = {
    {{3, 1, 5}, {4, 1}}, {{}, {3, 4}},     {{3, 4}, {}},
    {{2, 3}, {2, 3}},    {{2, 3, 4}, {4}}, {{5}, {2, 1}},
};

TEST(ElementwiseGradTest, AddSubMulDivBroadcast) {
  uint64_t seed = 1;
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const auto& [sa, sb] : kShapes) {
      Tensor a = RandomTensor(sa, ++seed);
      Tensor b = std::string(op) == "Div" ? RandomTensor(sb, ++seed, 0.5f, 1.5f)
                                          : RandomTensor(sb, ++seed);
      SCOPED_TRACE(std::string(op) + " " + ShapeToString(sa) + " " + ShapeToString(sb));
      EXPECT_GRADS_OK(EwNode(op, {"a", "b"}), {{"a", a}, {"b", b}});
    }
  }
  // Only one side differentiated.
  GradCheckOptions only_b;
  only_b.wrt = {"b"};
  EXPECT_GRADS_OK(EwNode("Div", {"a", "b"}),
                  {{"a", RandomTensor({3, 4}, 90)}, {"b", RandomTensor({4}, 91, 0.5f, 1.5f)}}, {},
                  only_b);
}

TEST(ElementwiseGradTest, PowBaseAndExponent) {
  uint64_t seed = 10;
  for (const auto& [sa, sb] : kShapes) {
    SCOPED_TRACE(ShapeToString(sa) + " " + ShapeToString(sb));
    EXPECT_GRADS_OK(EwNode("Pow", {"a", "b"}), {{"a", RandomTensor(sa, ++seed, 0.5f, 2.f)},
                                                {"b", RandomTensor(sb, ++seed, -2.f, 2.f)}});
  }
  // Constant exponents (the x^2 of a norm), float and integer, and a run-time integer exponent.
  Tensor x = RandomTensor({4, 5}, 20, -2.f, 2.f);
  EXPECT_GRADS_OK(EwNode("Pow", {"x", "e"}), {{"x", x}}, {{"e", Scalar(2.f)}});
  EXPECT_GRADS_OK(EwNode("Pow", {"x", "e"}), {{"x", x}}, {{"e", Tensor::ScalarInt64(3)}});
  EXPECT_GRADS_OK(EwNode("Pow", {"x", "e"}),
                  {{"x", RandomTensor({4, 5}, 21, 0.5f, 2.f)},
                   {"e", Tensor::FromVector<int64_t>(DType::kInt64, {5}, {0, 1, 2, 3, -1})}});
}

TEST(ElementwiseGradTest, MinMaxAwayFromTies) {
  for (const char* op : {"Min", "Max"}) {
    for (const auto& [sa, sb] : kShapes) {
      SCOPED_TRACE(std::string(op) + " " + ShapeToString(sa) + " " + ShapeToString(sb));
      EXPECT_GRADS_OK(EwNode(op, {"a", "b"}),
                      {{"a", GridTensor(sa, 30, 0.f)}, {"b", GridTensor(sb, 31, 0.05f)}});
    }
    EXPECT_GRADS_OK(EwNode(op, {"a", "b", "c"}), {{"a", GridTensor({3, 1, 5}, 32, 0.f)},
                                                  {"b", GridTensor({4, 1}, 33, 0.03f)},
                                                  {"c", GridTensor({5}, 34, 0.06f)}});
    EXPECT_GRADS_OK(EwNode(op, {"a"}), {{"a", RandomTensor({3}, 35)}});
  }
}

TEST(ElementwiseGradTest, SumAndMean) {
  std::map<std::string, Tensor> in = {{"a", RandomTensor({3, 1, 5}, 40)},
                                      {"b", RandomTensor({4, 1}, 41)},
                                      {"c", RandomTensor({}, 42)}};
  EXPECT_GRADS_OK(EwNode("Sum", {"a", "b", "c"}), in);
  EXPECT_GRADS_OK(EwNode("Mean", {"a", "b", "c"}), in);
  EXPECT_GRADS_OK(EwNode("Sum", {"a"}), in);
}

TEST(ElementwiseGradTest, WhereRoutesToTheSelectedBranch) {
  Tensor cond = Tensor::FromVector<uint8_t>(DType::kBool, {3, 1}, {1, 0, 1});
  EXPECT_GRADS_OK(EwNode("Where", {"c", "x", "y"}, {"out"}),
                  {{"x", RandomTensor({1, 4}, 50)}, {"y", RandomTensor({}, 51)}}, {{"c", cond}});
  EXPECT_GRADS_OK(EwNode("Where", {"c", "x", "y"}, {"out"}),
                  {{"x", RandomTensor({3, 4}, 52)}, {"y", RandomTensor({2, 3, 4}, 53)}},
                  {{"c", cond}});
}

TEST(ElementwiseGradTest, UnaryOps) {
  struct Case {
    const char* op;
    float lo, hi;
    const char* domain = "";
  };
  const Case cases[] = {
      {"Neg", -2, 2},
      {"Sqrt", 0.5f, 2},
      {"Reciprocal", 0.5f, 2},
      {"Exp", -2, 2},
      {"Log", 0.5f, 2},
      {"Erf", -2, 2},
      {"Tanh", -2, 2},
      {"Sigmoid", -3, 3},
      {"Sin", -3, 3},
      {"Cos", -3, 3},
      {"Softplus", -3, 3},
      {"Identity", -2, 2},
      {"Gelu", -3, 3, "com.microsoft"},
  };
  uint64_t seed = 60;
  for (const Case& c : cases) {
    for (const Shape& s : {Shape{}, Shape{7}, Shape{3, 1, 5}}) {
      SCOPED_TRACE(std::string(c.op) + " " + ShapeToString(s));
      EXPECT_GRADS_OK(EwNode(c.op, {"x"}, {"y"}, {}, c.domain),
                      {{"x", RandomTensor(s, ++seed, c.lo, c.hi)}});
    }
  }
  for (const char* form : {"gelu_new", "torch_tanh"}) {
    SCOPED_TRACE(form);
    EXPECT_GRADS_OK(
        EwNode("FastGelu", {"x"}, {"y"}, {{"form", Attribute::String(form)}}, "com.microsoft"),
        {{"x", RandomTensor({3, 1, 5}, 69, -3.f, 3.f)}});
  }
  // QuickGelu: SiLU (alpha = 1, what canonicalize writes) and ONNX Runtime's default 1.702.
  EXPECT_GRADS_OK(
      EwNode("QuickGelu", {"x"}, {"y"}, {{"alpha", Attribute::Float(1.f)}}, "com.microsoft"),
      {{"x", RandomTensor({3, 1, 5}, 73, -4.f, 4.f)}});
  EXPECT_GRADS_OK(EwNode("QuickGelu", {"x"}, {"y"}, {}, "com.microsoft"),
                  {{"x", RandomTensor({7}, 74, -4.f, 4.f)}});
  EXPECT_GRADS_OK(EwNode("Reciprocal", {"x"}), {{"x", RandomTensor({6}, 70, -2.f, -0.5f)}});
  // Kinked ops, on grids that stay 0.05 away from the kink at 0.
  EXPECT_GRADS_OK(EwNode("Abs", {"x"}), {{"x", GridTensor({4, 6}, 71, 0.05f)}});
  EXPECT_GRADS_OK(EwNode("Relu", {"x"}), {{"x", GridTensor({4, 6}, 72, 0.05f)}});
}

TEST(ElementwiseGradTest, CastFloatToFloatPassesThrough) {
  Node cast = EwNode("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(1)}});
  EXPECT_GRADS_OK(cast, {{"x", RandomTensor({3, 4}, 80)}});
}

TEST(ElementwiseGradTest, ClipAwayFromTheBounds) {
  // Bounds at +-0.5 and x on the grid 0.1 k + 0.05: no x within 0.05 of a bound.
  Tensor x = GridTensor({4, 6}, 81, 0.05f);
  EXPECT_GRADS_OK(EwNode("Clip", {"x", "lo", "hi"}), {{"x", x}},
                  {{"lo", Scalar(-0.5f)}, {"hi", Scalar(0.5f)}});
  EXPECT_GRADS_OK(EwNode("Clip", {"x", "", "hi"}), {{"x", x}}, {{"hi", Scalar(0.5f)}});
  EXPECT_GRADS_OK(EwNode("Clip", {"x", "lo"}), {{"x", x}}, {{"lo", Scalar(-0.5f)}});
  EXPECT_GRADS_OK(EwNode("Clip", {"x"}, {"y"},
                         {{"min", Attribute::Float(-0.5f)}, {"max", Attribute::Float(0.5f)}}),
                  {{"x", x}});
  // Bounds that are run-time float values get gradients too.
  EXPECT_GRADS_OK(EwNode("Clip", {"x", "lo", "hi"}),
                  {{"x", x}, {"lo", Scalar(-0.5f)}, {"hi", Scalar(0.5f)}});
}

TEST(ElementwiseGradTest, DropoutTrainingIsLinearInItsInput) {
  Node d = EwNode("Dropout", {"x", "r", "t"}, {"y", "mask"});
  EXPECT_GRADS_OK(d, {{"x", RandomTensor({5, 37}, 90)}},
                  {{"r", Scalar(0.3f)}, {"t", BoolScalar(true)}});
  // Ratio and training mode as run-time values.
  EXPECT_GRADS_OK(d, {{"x", RandomTensor({5, 37}, 91)}, {"t", BoolScalar(true)}},
                  {{"r", Scalar(0.5f)}});
}

TEST(ElementwiseGradTest, FloatModTruncatedQuotient) {
  // a / b in (1.07, 1.9): the truncated quotient is 1 everywhere near the inputs.
  EXPECT_GRADS_OK(
      EwNode("Mod", {"a", "b"}, {"y"}, {{"fmod", Attribute::Int(1)}}),
      {{"a", RandomTensor({3, 4}, 95, 3.2f, 3.8f)}, {"b", RandomTensor({4}, 96, 2.f, 3.f)}});
}

// ---------------------------------------------------------------------------------------------
// Exact checks at the points finite differences cannot judge, and rules that give no gradient.

struct Backward {
  std::vector<Node> emitted;
  std::vector<std::string> input_grads;
  std::map<std::string, Tensor> values;  // input name -> its gradient
};

// Runs `node`'s rule with dY = `dy` on output 0 and evaluates the input gradients.
StatusOr<Backward> RunRule(const Node& node, const std::map<std::string, Tensor>& inputs,
                           const std::map<std::string, Tensor>& constants, const Tensor& dy) {
  Graph g;
  auto declare = [&](const std::string& name, const Tensor& t, bool constant) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.rank_known = true;
    if (constant) {
      v.data = std::make_shared<const Tensor>(t);
      g.initializers.push_back(name);
    } else {
      g.inputs.push_back(name);
    }
  };
  for (const auto& [name, t] : constants) declare(name, t, true);
  for (const auto& [name, t] : inputs) declare(name, t, false);
  declare("dy", dy, false);
  g.nodes.push_back(node);
  RETURN_IF_ERROR(InferAndSetTypes(g, g.nodes[0]));
  std::vector<bool> needs;
  for (const auto& in : node.inputs)
    needs.push_back(inputs.count(in) && IsFloat(inputs.at(in).dtype()));
  std::vector<std::string> out_grads(node.outputs.size());
  out_grads[0] = "dy";
  Backward result;
  GradBuilder b(g, g.nodes[0], out_grads, needs, result.emitted);
  const GradFn* rule = GradRules().Find(node.domain, node.op_type);
  if (!rule) return Error("no rule");
  RETURN_IF_ERROR((*rule)(b));
  result.input_grads = b.input_grads();
  for (const auto& e : result.emitted) g.nodes.push_back(e);
  for (const auto& gname : result.input_grads)
    if (!gname.empty()) g.outputs.push_back(gname);
  std::map<std::string, Tensor> feeds = inputs;
  feeds["dy"] = dy;
  ASSIGN_OR_RETURN(auto outs, Interpret(g, feeds));
  for (size_t i = 0; i < node.inputs.size(); ++i)
    if (!result.input_grads[i].empty())
      result.values[node.inputs[i]] = outs.at(result.input_grads[i]);
  return result;
}

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(ElementwiseGradTest, MaxOfThreeTiesGoToTheFirstInput) {
  Tensor a = Tensor::FromVector<float>(DType::kFloat32, {4}, {1, 2, 3, 4});
  Tensor b = Tensor::FromVector<float>(DType::kFloat32, {4}, {1, 5, 3, 0});
  Tensor c = Tensor::FromVector<float>(DType::kFloat32, {4}, {1, 5, 0, 4});
  Tensor dy = Tensor::FromVector<float>(DType::kFloat32, {4}, {10, 20, 30, 40});
  auto r = RunRule(EwNode("Max", {"a", "b", "c"}), {{"a", a}, {"b", b}, {"c", c}}, {}, dy);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Floats(r->values.at("a")), (std::vector<float>{10, 0, 30, 40}));
  EXPECT_EQ(Floats(r->values.at("b")), (std::vector<float>{0, 20, 0, 0}));
  EXPECT_EQ(Floats(r->values.at("c")), (std::vector<float>{0, 0, 0, 0}));
}

// Two operands: torch.maximum / torch.minimum's rule. Expected values printed by torch 1.13:
//   a = [1, 2, 3, nan, 5], b = [1, 3, 2, 1, nan], dY = [10, 20, 30, 40, 50]
//   max: a.grad = [5, 0, 30, 40, 50], b.grad = [5, 20, 0, 40, 50]
//   min: a.grad = [5, 20, 0, 40, 50], b.grad = [5, 0, 30, 40, 50]
// (a tie splits dY in halves; a NaN on either side gives both operands dY).
TEST(ElementwiseGradTest, BinaryMinMaxTiesSplitTheGradientAsTorch) {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = Tensor::FromVector<float>(DType::kFloat32, {5}, {1, 2, 3, kNan, 5});
  Tensor b = Tensor::FromVector<float>(DType::kFloat32, {5}, {1, 3, 2, 1, kNan});
  Tensor dy = Tensor::FromVector<float>(DType::kFloat32, {5}, {10, 20, 30, 40, 50});
  auto mx = RunRule(EwNode("Max", {"a", "b"}), {{"a", a}, {"b", b}}, {}, dy);
  ASSERT_TRUE(mx.ok()) << mx.status().message();
  EXPECT_EQ(Floats(mx->values.at("a")), (std::vector<float>{5, 0, 30, 40, 50}));
  EXPECT_EQ(Floats(mx->values.at("b")), (std::vector<float>{5, 20, 0, 40, 50}));
  auto mn = RunRule(EwNode("Min", {"a", "b"}), {{"a", a}, {"b", b}}, {}, dy);
  ASSERT_TRUE(mn.ok()) << mn.status().message();
  EXPECT_EQ(Floats(mn->values.at("a")), (std::vector<float>{5, 20, 0, 40, 50}));
  EXPECT_EQ(Floats(mn->values.at("b")), (std::vector<float>{5, 0, 30, 40, 50}));
}

// OPT's clamp, torch.max(scores + mask, finfo(f32).min) exported as Max(x, c): masked positions
// are x == c exactly (finfo.min absorbs any small score) and get dY / 2, as in torch. The rule
// reads x and the constant only, never the output, so the backward keeps one tensor of the
// forward. Also with the constant first (Min here) and broadcast over a [2, 3] dY.
TEST(ElementwiseGradTest, ClampAgainstAConstantReadsOnlyItsInput) {
  const float kLowest = std::numeric_limits<float>::lowest();
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {2, 3},
                                       {kLowest, 0.25f, -1.f, kLowest, kLowest, 3.f});
  Tensor dy = Tensor::FromVector<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  auto r = RunRule(EwNode("Max", {"x", "c"}), {{"x", x}}, {{"c", Scalar(kLowest)}}, dy);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Floats(r->values.at("x")), (std::vector<float>{0.5f, 2, 3, 2, 2.5f, 6}));
  std::set<std::string> read;
  for (const Node& n : r->emitted) read.insert(n.inputs.begin(), n.inputs.end());
  EXPECT_TRUE(read.count("x"));
  EXPECT_FALSE(read.count("y")) << "the clamp's output is read by its gradient";

  Tensor v = Tensor::FromVector<float>(DType::kFloat32, {2, 3}, {-1, 0.5f, 0.5f, 2, 0.5f, 0.f});
  auto m = RunRule(EwNode("Min", {"c", "v"}), {{"v", v}}, {{"c", Scalar(0.5f)}}, dy);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(Floats(m->values.at("v")), (std::vector<float>{1, 1, 1.5f, 0, 2.5f, 6}));
  for (const Node& n : m->emitted)
    for (const auto& in : n.inputs) EXPECT_NE(in, "y") << n.op_type;
}

TEST(ElementwiseGradTest, ClipPassesTheGradientAtTheBounds) {
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {5}, {-2, -1, 0, 1, 2});
  Tensor dy = Tensor::FromVector<float>(DType::kFloat32, {5}, {1, 2, 3, 4, 5});
  auto r = RunRule(EwNode("Clip", {"x", "lo", "hi"}), {{"x", x}},
                   {{"lo", Scalar(-1)}, {"hi", Scalar(1)}}, dy);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Floats(r->values.at("x")), (std::vector<float>{0, 2, 3, 4, 0}));
}

TEST(ElementwiseGradTest, ActivationsEmitOnnxRuntimeGradientOps) {
  Tensor x = RandomTensor({3}, 100);
  Tensor dy = RandomTensor({3}, 101);
  const std::pair<const char*, const char*> cases[] = {
      {"Relu", "ReluGrad"}, {"Sigmoid", "SigmoidGrad"},   {"Tanh", "TanhGrad"},
      {"Gelu", "GeluGrad"}, {"FastGelu", "FastGeluGrad"}, {"QuickGelu", "QuickGeluGrad"}};
  for (const auto& [op, grad] : cases) {
    const bool ms = std::string(op) == "Gelu" || std::string(op) == "FastGelu" ||
                    std::string(op) == "QuickGelu";
    Node n = EwNode(op, {"x"}, {"y"}, {}, ms ? "com.microsoft" : "");
    auto r = RunRule(n, {{"x", x}}, {}, dy);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->emitted.size(), 1u) << op;
    EXPECT_EQ(r->emitted[0].op_type, grad);
    EXPECT_EQ(r->emitted[0].domain, "com.microsoft");
    // GeluGrad, FastGeluGrad and QuickGeluGrad read X; ReluGrad, SigmoidGrad and TanhGrad Y.
    const std::string g = grad;
    EXPECT_EQ(r->emitted[0].inputs[1],
              g == "GeluGrad" || g == "FastGeluGrad" || g == "QuickGeluGrad" ? "x" : "y");
  }
  // QuickGeluGrad carries the forward's alpha (ONNX Runtime's default when it has none).
  for (float alpha : {1.f, 0.5f}) {
    auto r = RunRule(
        EwNode("QuickGelu", {"x"}, {"y"}, {{"alpha", Attribute::Float(alpha)}}, "com.microsoft"),
        {{"x", x}}, {}, dy);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->emitted[0].GetFloat("alpha", 0.f), alpha);
  }
  auto r = RunRule(EwNode("QuickGelu", {"x"}, {"y"}, {}, "com.microsoft"), {{"x", x}}, {}, dy);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->emitted[0].GetFloat("alpha", 0.f), 1.702f);
}

// ReluGrad reads Relu's output; the gradient must have the bits of "dY where X > 0" at every
// value where Y > 0 and X > 0 could differ: zeros of both signs, subnormals, infinities, NaN.
TEST(ElementwiseGradTest, ReluGradientFromTheOutputHasTheInputsBits) {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  const float kDenorm = std::numeric_limits<float>::denorm_min();
  const std::vector<float> xs = {-kInf,   -3.5f,  -kDenorm, -0.f, 0.f,
                                 kDenorm, 1e-38f, 2.f,      kInf, kNan};
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {10}, xs);
  Tensor dy = RandomTensor({10}, 102);
  auto r = RunRule(EwNode("Relu", {"x"}), {{"x", x}}, {}, dy);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->emitted.size(), 1u);
  EXPECT_EQ(r->emitted[0].inputs, (std::vector<std::string>{"dy", "y"}));
  Tensor want(DType::kFloat32, {10});
  for (int i = 0; i < 10; ++i) want.data<float>()[i] = xs[i] > 0.f ? dy.data<float>()[i] : 0.f;
  EXPECT_TRUE(r->values.at("x").BitwiseEqual(want))
      << testing::PrintToString(Floats(r->values.at("x")));
}

// Piecewise-constant ops (Floor, Ceil, Round, Sign) have no rule: the autodiff pass stops the
// gradient before them (tests/passes/autodiff_test.cc).
TEST(ElementwiseGradTest, IntegerCastsGiveNoGradient) {
  Tensor x = RandomTensor({3}, 110);
  auto r = RunRule(EwNode("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(7)}}), {{"x", x}}, {},
                   Tensor::FromVector<int64_t>(DType::kInt64, {3}, {1, 2, 3}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->input_grads[0].empty());
  // f32 -> f64: the gradient is cast back to f32.
  Tensor dy64 = Tensor::FromVector<double>(DType::kFloat64, {3}, {0.5, -1.5, 2.25});
  auto back =
      RunRule(EwNode("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(11)}}), {{"x", x}}, {}, dy64);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(Floats(back->values.at("x")), (std::vector<float>{0.5f, -1.5f, 2.25f}));
}

TEST(ElementwiseGradTest, DropoutNeedsItsMaskOnlyWhenActive) {
  Tensor x = RandomTensor({4}, 120);
  Tensor dy = RandomTensor({4}, 121);
  // Active without a mask output: the autodiff pass must expose the mask first.
  auto missing = RunRule(EwNode("Dropout", {"x", "r", "t"}, {"y"}), {{"x", x}},
                         {{"r", Scalar(0.1f)}, {"t", BoolScalar(true)}}, dy);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "Dropout node 'Dropout_node' has no mask output; give every training "
            "Dropout a mask output before differentiating");
  // Inactive (no training_mode, training_mode false, ratio 0): the gradient is dY itself.
  const std::vector<std::pair<std::vector<std::string>, std::map<std::string, Tensor>>> inactive = {
      {{"x", "r"}, {{"r", Scalar(0.1f)}}},
      {{"x", "r", "t"}, {{"r", Scalar(0.1f)}, {"t", BoolScalar(false)}}},
      {{"x", "r", "t"}, {{"r", Scalar(0.f)}, {"t", BoolScalar(true)}}}};
  for (const auto& [inputs, constants] : inactive) {
    auto r = RunRule(EwNode("Dropout", inputs, {"y"}), {{"x", x}}, constants, dy);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->input_grads[0], "dy");
  }
  // Active with a mask: one com.microsoft DropoutGrad reading the forward's mask, ratio, mode.
  auto active = RunRule(EwNode("Dropout", {"x", "r", "t"}, {"y", "m"}), {{"x", x}},
                        {{"r", Scalar(0.1f)}, {"t", BoolScalar(true)}}, dy);
  ASSERT_TRUE(active.ok()) << active.status().message();
  ASSERT_EQ(active->emitted.size(), 1u);
  EXPECT_EQ(active->emitted[0].op_type, "DropoutGrad");
  EXPECT_EQ(active->emitted[0].inputs, (std::vector<std::string>{"dy", "m", "r", "t"}));
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef EXPECT_GRADS_OK
