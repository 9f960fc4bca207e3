// Gradient rules of the math family: every rule is checked against central finite differences
// (CheckGradients, tolerance derivation in tests/support/grad_check.h) on shapes with broadcasting,
// 1-D operands and sizes that are multiples of nothing; a few tests also pin the structure the
// rules emit (one flattened GEMM for a linear layer's weight, no transposed copies).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "compiler/op_schema.h"
#include "passes/grad/grad_rule.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// The forward node under test is named "fwd" (its backward nodes: "fwd_Grad/...").
Node FwdNode(const std::string& op, std::vector<std::string> inputs,
             std::vector<std::string> outputs, std::map<std::string, Attribute> attrs = {},
             const std::string& domain = "") {
  return MakeNode(op, std::move(inputs), std::move(outputs), std::move(attrs), domain, "fwd");
}

constexpr char kMs[] = "com.microsoft";

Tensor I64(Shape shape, std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, std::move(shape), v);
}

// Values spaced 0.05 apart in a seeded order: far enough apart that a 1e-2 perturbation never
// changes which element is the max or min.
Tensor DistinctTensor(Shape shape, uint64_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::vector<int64_t> order(t.numel());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = -1.0f + 0.05f * static_cast<float>(order[i]);
  return t;
}

#define EXPECT_GRADS_OK(...)                  \
  do {                                        \
    Status _st = CheckGradients(__VA_ARGS__); \
    EXPECT_TRUE(_st.ok()) << _st.message();   \
  } while (0)

// Runs a rule on a one-node graph and returns what it emitted (or the rule's error).
struct Emitted {
  Graph graph;
  std::vector<Node> nodes;
  std::vector<std::string> input_grads;
};

StatusOr<Emitted> EmitGrads(const Node& node, const std::map<std::string, Tensor>& inputs,
                            const std::map<std::string, Tensor>& constants, std::vector<bool> needs,
                            std::vector<bool> output_has_grad) {
  Emitted e;
  Graph& g = e.graph;
  auto declare = [&](const std::string& name, const Tensor& t, bool constant) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.rank_known = true;
    if (constant) v.data = std::make_shared<const Tensor>(t);
  };
  for (const auto& [name, t] : inputs) declare(name, t, false);
  for (const auto& [name, t] : constants) declare(name, t, true);
  g.nodes.push_back(node);
  RETURN_IF_ERROR(InferAndSetTypes(g, g.nodes[0]));
  std::vector<std::string> output_grads;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (i >= output_has_grad.size() || !output_has_grad[i]) {
      output_grads.push_back("");
      continue;
    }
    std::string name = node.outputs[i] + "_grad";
    Value& dv = g.GetOrAddValue(name);
    dv = *g.FindValue(node.outputs[i]);
    dv.name = name;
    output_grads.push_back(name);
  }
  const GradFn* rule = GradRules().Find(node.domain, node.op_type);
  if (!rule) return Error("no rule");
  GradBuilder b(g, g.nodes[0], output_grads, needs, e.nodes);
  RETURN_IF_ERROR((*rule)(b));
  e.input_grads = b.input_grads();
  return e;
}

int CountOps(const std::vector<Node>& nodes, const std::string& op) {
  return static_cast<int>(
      std::count_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.op_type == op; }));
}

// ============================== matrix products ==============================

struct MatMulCase {
  Shape a, b;
};

class MatMulGradShapes : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(MatMulGradShapes, MatchesFiniteDifferences) {
  const MatMulCase& c = GetParam();
  EXPECT_GRADS_OK(FwdNode("MatMul", {"a", "b"}, {"y"}),
                  {{"a", RandomTensor(c.a, 1)}, {"b", RandomTensor(c.b, 2)}});
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatMulGradShapes,
    ::testing::Values(MatMulCase{{3, 5}, {5, 7}}, MatMulCase{{2, 3, 5}, {5, 7}},
                      MatMulCase{{5}, {5, 7}}, MatMulCase{{3, 5}, {5}}, MatMulCase{{5}, {5}},
                      MatMulCase{{2, 1, 3, 4}, {5, 4, 6}}, MatMulCase{{7}, {2, 7, 3}},
                      MatMulCase{{2, 3, 7}, {7}}, MatMulCase{{1, 3, 5}, {2, 5, 7}},
                      MatMulCase{{3, 5}, {2, 5, 7}}, MatMulCase{{2, 3, 5}, {2, 5, 7}}));

struct FusedCase {
  Shape a, b;
  bool ta, tb;
  float alpha;
};

class FusedMatMulGrad : public ::testing::TestWithParam<FusedCase> {};

TEST_P(FusedMatMulGrad, MatchesFiniteDifferences) {
  const FusedCase& c = GetParam();
  Node n = FwdNode("FusedMatMul", {"a", "b"}, {"y"},
                   {{"transA", Attribute::Int(c.ta)},
                    {"transB", Attribute::Int(c.tb)},
                    {"alpha", Attribute::Float(c.alpha)}},
                   kMs);
  EXPECT_GRADS_OK(n, {{"a", RandomTensor(c.a, 3)}, {"b", RandomTensor(c.b, 4)}});
}

INSTANTIATE_TEST_SUITE_P(Variants, FusedMatMulGrad,
                         ::testing::Values(FusedCase{{5, 3}, {5, 7}, true, false, 1.0f},
                                           FusedCase{{3, 5}, {7, 5}, false, true, 1.0f},
                                           FusedCase{{5, 3}, {7, 5}, true, true, 0.5f},
                                           FusedCase{{2, 5, 3}, {7, 5}, true, true, 1.0f},
                                           FusedCase{{2, 3, 4}, {6, 4}, false, true, -0.5f},
                                           FusedCase{{1, 4, 3}, {2, 4, 6}, true, false, 2.0f},
                                           FusedCase{{2, 3, 4}, {2, 6, 4}, false, true, 1.0f}));

// A linear layer [B,S,D] x [D,N]: dW is one GEMM over the B*S flattened rows (no batched product,
// no ReduceSum), and dX one FusedMatMul against W with transB (no Transpose of W).
TEST(MatMulGradTest, LinearLayerWeightGradientIsOneFlattenedGemm) {
  Node n = FwdNode("MatMul", {"x", "w"}, {"y"});
  auto e = EmitGrads(n, {{"x", RandomTensor({2, 3, 4}, 1)}, {"w", RandomTensor({4, 6}, 2)}}, {},
                     {false, true}, {true});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(CountOps(e->nodes, "ReduceSum"), 0);
  EXPECT_EQ(CountOps(e->nodes, "Transpose"), 0);
  ASSERT_EQ(CountOps(e->nodes, "FusedMatMul"), 1);
  const Node& mm = *std::find_if(e->nodes.begin(), e->nodes.end(),
                                 [](const Node& x) { return x.op_type == "FusedMatMul"; });
  EXPECT_EQ(mm.GetInt("transA", 0), 1);
  EXPECT_EQ(e->graph.FindValue(mm.inputs[0])->shape, (Shape{6, 4}));
  EXPECT_EQ(e->graph.FindValue(mm.inputs[1])->shape, (Shape{6, 6}));
  EXPECT_EQ(mm.outputs[0], e->input_grads[1]);
  EXPECT_EQ(e->graph.FindValue(e->input_grads[1])->shape, (Shape{4, 6}));
  // Gradient nodes are named after the forward node and keep its scope.
  EXPECT_EQ(mm.name.rfind("fwd_Grad/FusedMatMul_", 0), 0u) << mm.name;

  auto dx = EmitGrads(n, {{"x", RandomTensor({2, 3, 4}, 1)}, {"w", RandomTensor({4, 6}, 2)}}, {},
                      {true, false}, {true});
  ASSERT_TRUE(dx.ok()) << dx.status().message();
  ASSERT_EQ(dx->nodes.size(), 1u);
  EXPECT_EQ(dx->nodes[0].op_type, "FusedMatMul");
  EXPECT_EQ(dx->nodes[0].GetInt("transB", 0), 1);
}

TEST(MatMulGradTest, SymbolicShapesAreAnError) {
  Graph g;
  for (const char* name : {"a", "b"}) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = DType::kFloat32;
    v.rank_known = true;
    v.shape = name[0] == 'a' ? Shape{-1, 3, 4} : Shape{4, 5};
  }
  g.nodes.push_back(FwdNode("MatMul", {"a", "b"}, {"y"}));
  ASSERT_TRUE(InferAndSetTypes(g, g.nodes[0]).ok());
  Value& dy = g.GetOrAddValue("dy");
  dy = *g.FindValue("y");
  dy.name = "dy";
  std::vector<Node> emitted;
  GradBuilder b(g, g.nodes[0], {"dy"}, {true, true}, emitted);
  Status st = (*GradRules().Find("", "MatMul"))(b);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "autodiff: gradient rule of MatMul node 'fwd': needs the static shape of 'a', which is "
            "f32[?,3,4]; bind symbolic dimensions with --dim");
}

struct GemmCase {
  bool ta, tb;
  float alpha, beta;
  Shape c;
  bool has_c;
};

class GemmGrad : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmGrad, MatchesFiniteDifferences) {
  const GemmCase& gc = GetParam();
  int64_t m = 3, k = 5, n = 7;
  std::map<std::string, Tensor> in = {{"a", RandomTensor(gc.ta ? Shape{k, m} : Shape{m, k}, 5)},
                                      {"b", RandomTensor(gc.tb ? Shape{n, k} : Shape{k, n}, 6)}};
  std::vector<std::string> names = {"a", "b"};
  if (gc.has_c) {
    in["c"] = RandomTensor(gc.c, 7);
    names.push_back("c");
  }
  Node node = FwdNode("Gemm", names, {"y"},
                      {{"transA", Attribute::Int(gc.ta)},
                       {"transB", Attribute::Int(gc.tb)},
                       {"alpha", Attribute::Float(gc.alpha)},
                       {"beta", Attribute::Float(gc.beta)}});
  EXPECT_GRADS_OK(node, in);
}

INSTANTIATE_TEST_SUITE_P(Attrs, GemmGrad,
                         ::testing::Values(GemmCase{false, false, 1.0f, 1.0f, {}, false},
                                           GemmCase{true, false, 1.0f, 1.0f, {3, 7}, true},
                                           GemmCase{false, true, 0.5f, 2.0f, {7}, true},
                                           GemmCase{true, true, -1.5f, 0.25f, {3, 1}, true},
                                           GemmCase{false, false, 1.0f, 0.5f, {}, true}));

// ============================== softmax ==============================

TEST(SoftmaxGradTest, MatchesFiniteDifferences) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int64_t axis : {-1, 1, 0}) {
      Node n = FwdNode(op, {"x"}, {"y"}, {{"axis", Attribute::Int(axis)}});
      EXPECT_GRADS_OK(n, {{"x", RandomTensor({3, 4, 5}, 8, -2.f, 2.f)}});
    }
    EXPECT_GRADS_OK(FwdNode(op, {"x"}, {"y"}), {{"x", RandomTensor({2, 7}, 9, -2.f, 2.f)}});
  }
}

// ============================== reductions ==============================

TEST(ReduceGradTest, SumAndMeanMatchFiniteDifferences) {
  Tensor x = RandomTensor({3, 5, 7}, 10);
  for (const char* op : {"ReduceSum", "ReduceMean"}) {
    for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {-1, 0}, {0, 1, 2}}) {
      for (bool keepdims : {true, false}) {
        std::string what = std::string(op) + " keepdims=" + std::to_string(keepdims);
        Node by_input = FwdNode(op, {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(keepdims)}});
        Status st = CheckGradients(by_input, {{"x", x}},
                                   {{"axes", I64({static_cast<int64_t>(axes.size())}, axes)}});
        EXPECT_TRUE(st.ok()) << what << " (axes input): " << st.message();
        Node by_attr =
            FwdNode(op, {"x"}, {"y"},
                    {{"axes", Attribute::Ints(axes)}, {"keepdims", Attribute::Int(keepdims)}});
        st = CheckGradients(by_attr, {{"x", x}});
        EXPECT_TRUE(st.ok()) << what << " (axes attr): " << st.message();
      }
    }
    // No axes: everything; no axes with noop_with_empty_axes: identity.
    EXPECT_GRADS_OK(FwdNode(op, {"x"}, {"y"}, {{"keepdims", Attribute::Int(0)}}), {{"x", x}});
    EXPECT_GRADS_OK(
        FwdNode(op, {"x", "axes"}, {"y"}, {{"noop_with_empty_axes", Attribute::Int(1)}}),
        {{"x", x}}, {{"axes", I64({0}, {})}});
  }
}

TEST(ReduceGradTest, MaxAndMinMatchFiniteDifferences) {
  Tensor x = DistinctTensor({3, 4, 5}, 11);
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {-1, 0}, {0, 1, 2}}) {
      for (bool keepdims : {true, false}) {
        Node n = FwdNode(op, {"x"}, {"y"},
                         {{"axes", Attribute::Ints(axes)}, {"keepdims", Attribute::Int(keepdims)}});
        Status st = CheckGradients(n, {{"x", x}});
        EXPECT_TRUE(st.ok()) << op << ": " << st.message();
      }
    }
  }
}

// Ties share the gradient evenly, as torch.amax's backward does.
TEST(ReduceGradTest, MaxSplitsTheGradientAmongTies) {
  Node n = FwdNode("ReduceMax", {"x"}, {"y"},
                   {{"axes", Attribute::Ints({1})}, {"keepdims", Attribute::Int(0)}});
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {2, 4}, {1, 3, 3, 2, 5, 0, 5, 5});
  auto e = EmitGrads(n, {{"x", x}}, {}, {true}, {true});
  ASSERT_TRUE(e.ok()) << e.status().message();
  Graph& g = e->graph;
  for (const Node& node : e->nodes) g.nodes.push_back(node);
  g.inputs = {"x", "y_grad"};
  g.outputs = {e->input_grads[0]};
  Tensor dy = Tensor::FromVector<float>(DType::kFloat32, {2}, {1.0f, 3.0f});
  auto out = Interpret(g, {{"x", x}, {"y_grad", dy}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const Tensor& dx = out->at(e->input_grads[0]);
  std::vector<float> got(dx.data<float>(), dx.data<float>() + 8);
  EXPECT_EQ(got, (std::vector<float>{0, 0.5f, 0.5f, 0, 1, 0, 1, 1}));
}

// ============================== normalizations ==============================

// Random shapes, every axis (negative ones too) and all four exclusive/reverse variants; the axis
// as i64 and as i32, 0-D and one-element.
TEST(CumSumGradTest, MatchesFiniteDifferencesInEveryMode) {
  std::mt19937_64 rng(77);
  const std::vector<Shape> shapes = {{9}, {4, 6}, {3, 5, 2}, {2, 3, 1, 4}};
  for (const Shape& shape : shapes) {
    const int64_t r = static_cast<int64_t>(shape.size());
    for (int64_t axis = -r; axis < r; ++axis)
      for (int64_t exclusive : {0, 1})
        for (int64_t reverse : {0, 1}) {
          Node n = FwdNode(
              "CumSum", {"x", "axis"}, {"y"},
              {{"exclusive", Attribute::Int(exclusive)}, {"reverse", Attribute::Int(reverse)}});
          Tensor a = rng() % 2 ? I64({}, {axis})
                               : Tensor::FromVector<int32_t>(DType::kInt32, {1},
                                                             {static_cast<int32_t>(axis)});
          Status st = CheckGradients(n, {{"x", RandomTensor(shape, rng())}}, {{"axis", a}});
          EXPECT_TRUE(st.ok()) << ShapeToString(shape) << " axis " << axis << " exclusive "
                               << exclusive << " reverse " << reverse << ": " << st.message();
        }
  }
}

TEST(CumSumGradTest, RuleIsCumSumWithReverseFlipped) {
  Graph g;
  Value& x = g.GetOrAddValue("x");
  x.dtype = DType::kFloat32;
  x.shape = {2, 5};
  Value& dy = g.GetOrAddValue("dy");
  dy.dtype = DType::kFloat32;
  dy.shape = {2, 5};
  Value& axis = g.GetOrAddValue("axis");
  axis.dtype = DType::kInt64;
  axis.shape = {};
  axis.data = std::make_shared<const Tensor>(I64({}, {-1}));
  g.initializers.push_back("axis");
  for (int64_t reverse : {0, 1}) {
    Node f = FwdNode("CumSum", {"x", "axis"}, {"y"},
                     {{"exclusive", Attribute::Int(1)}, {"reverse", Attribute::Int(reverse)}});
    ASSERT_TRUE(InferAndSetTypes(g, f).ok());
    std::vector<Node> emitted;
    GradBuilder b(g, f, {"dy"}, {true, false}, emitted);
    ASSERT_TRUE((*GradRules().Find("", "CumSum"))(b).ok());
    ASSERT_EQ(emitted.size(), 1u);
    EXPECT_EQ(emitted[0].op_type, "CumSum");
    EXPECT_EQ(emitted[0].inputs, (std::vector<std::string>{"dy", "axis"}));
    EXPECT_EQ(emitted[0].GetInt("exclusive", -1), 1);
    EXPECT_EQ(emitted[0].GetInt("reverse", -1), 1 - reverse);
  }
}

TEST(LayerNormGradTest, MatchesFiniteDifferences) {
  GradCheckOptions opt;
  opt.no_grad_outputs = {"mean", "inv"};
  // Decent variance per row keeps the normalisation well-conditioned for central differences.
  Tensor x = RandomTensor({3, 5, 7}, 12, -2.f, 3.f);
  for (int64_t axis : {-1, 1}) {
    Shape norm(x.shape().begin() + (axis < 0 ? 2 : axis), x.shape().end());
    for (bool with_bias : {true, false}) {
      std::vector<std::string> ins = {"x", "scale"};
      std::map<std::string, Tensor> feeds = {{"x", x}, {"scale", RandomTensor(norm, 13)}};
      if (with_bias) {
        ins.push_back("bias");
        feeds["bias"] = RandomTensor(norm, 14);
      }
      Node n = FwdNode("LayerNormalization", ins, {"y", "mean", "inv"},
                       {{"axis", Attribute::Int(axis)}});
      Status st = CheckGradients(n, feeds, {}, opt);
      EXPECT_TRUE(st.ok()) << "axis " << axis << (with_bias ? " bias: " : ": ") << st.message();
    }
  }
}

TEST(LayerNormGradTest, MissingSavedStatisticsIsAnError) {
  Node n = FwdNode("LayerNormalization", {"x", "scale"}, {"y"});
  auto e = EmitGrads(n, {{"x", RandomTensor({2, 3}, 1)}, {"scale", RandomTensor({3}, 2)}}, {},
                     {true, true}, {true});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(),
            "autodiff: gradient rule of LayerNormalization node 'fwd': the node has no "
            "Mean/InvStdDev outputs (outputs 1 and 2); the autodiff pass must add them before "
            "differentiating");
  Node s = FwdNode("SimplifiedLayerNormalization", {"x", "scale"}, {"y"}, {}, kMs);
  auto es = EmitGrads(s, {{"x", RandomTensor({2, 3}, 1)}, {"scale", RandomTensor({3}, 2)}}, {},
                      {true, true}, {true});
  ASSERT_FALSE(es.ok());
  EXPECT_EQ(es.status().message(),
            "autodiff: gradient rule of SimplifiedLayerNormalization node 'fwd': the node has no "
            "inv_std_var output (output 1); the autodiff pass must add it before "
            "differentiating");
}

TEST(SimplifiedLayerNormGradTest, MatchesFiniteDifferences) {
  GradCheckOptions opt;
  opt.no_grad_outputs = {"inv"};
  Tensor x = RandomTensor({3, 5, 7}, 15, -2.f, 2.f);
  for (int64_t axis : {-1, 1}) {
    Shape norm(x.shape().begin() + (axis < 0 ? 2 : axis), x.shape().end());
    Node n = FwdNode("SimplifiedLayerNormalization", {"x", "scale"}, {"y", "inv"},
                     {{"axis", Attribute::Int(axis)}, {"epsilon", Attribute::Float(1e-5f)}}, kMs);
    Status st = CheckGradients(n, {{"x", x}, {"scale", RandomTensor(norm, 16)}}, {}, opt);
    EXPECT_TRUE(st.ok()) << "axis " << axis << ": " << st.message();
  }
}

// ============================== softmax cross-entropy ==============================

TEST(SoftmaxCrossEntropyGradTest, MatchesFiniteDifferences) {
  struct Case {
    Shape scores;
    std::vector<int64_t> labels;
    std::string reduction;
    bool weights;
    bool labels_constant;
    bool log_prob_grad;  // whether log_prob also gets an incoming gradient
  };
  std::vector<Case> cases = {
      {{4, 5}, {1, -100, 4, 0}, "mean", false, true, false},
      {{4, 5}, {1, -100, 4, 0}, "mean", true, false, false},
      {{4, 5}, {1, 2, -100, 3}, "sum", true, true, true},
      {{4, 5}, {1, -100, 4, 0}, "none", false, false, false},
      {{2, 5, 3}, {0, 1, -100, 4, 3, 2}, "mean", false, true, true},
      {{2, 5, 3}, {0, 1, -100, 4, 3, 2}, "none", true, true, false},
      {{3, 4}, {-100, -100, -100}, "mean", false, true, false},  // every target ignored
  };
  for (const Case& c : cases) {
    Shape lshape = c.scores;
    lshape.erase(lshape.begin() + 1);
    std::map<std::string, Tensor> inputs = {{"scores", RandomTensor(c.scores, 17, -2.f, 2.f)}};
    std::map<std::string, Tensor> constants;
    (c.labels_constant ? constants : inputs)["labels"] = I64(lshape, c.labels);
    std::vector<std::string> ins = {"scores", "labels"};
    if (c.weights) {
      ins.push_back("w");
      constants["w"] = RandomTensor({c.scores[1]}, 18, 0.5f, 1.5f);
    }
    Node n = FwdNode(
        "SoftmaxCrossEntropyLoss", ins, {"loss", "log_prob"},
        {{"reduction", Attribute::String(c.reduction)}, {"ignore_index", Attribute::Int(-100)}});
    GradCheckOptions opt;
    opt.wrt = {"scores"};
    if (!c.log_prob_grad) opt.no_grad_outputs = {"log_prob"};
    Status st = CheckGradients(n, inputs, constants, opt);
    EXPECT_TRUE(st.ok()) << c.reduction << " " << ShapeToString(c.scores) << ": " << st.message();
  }
}

TEST(SoftmaxCrossEntropyGradTest, EmitsOrtsFusedGradient) {
  Node n = FwdNode("SoftmaxCrossEntropyLoss", {"scores", "labels"}, {"loss", "log_prob"},
                   {{"ignore_index", Attribute::Int(-100)}});
  auto e = EmitGrads(n, {{"scores", RandomTensor({4, 5}, 1)}}, {{"labels", I64({4}, {0, 1, 2, 3})}},
                     {true, false}, {true, false});
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(e->nodes.size(), 1u);
  const Node& g = e->nodes[0];
  EXPECT_EQ(g.domain, kMs);
  EXPECT_EQ(g.op_type, "SoftmaxCrossEntropyLossGrad");
  EXPECT_EQ(g.inputs, (std::vector<std::string>{"loss_grad", "log_prob", "labels"}));
  EXPECT_EQ(g.GetString("reduction", ""), "mean");
  EXPECT_EQ(g.GetInt("ignore_index", 0), -100);
  Node no_lp = FwdNode("SoftmaxCrossEntropyLoss", {"scores", "labels"}, {"loss"});
  auto bad = EmitGrads(no_lp, {{"scores", RandomTensor({4, 5}, 1)}},
                       {{"labels", I64({4}, {0, 1, 2, 3})}}, {true, false}, {true});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "autodiff: gradient rule of SoftmaxCrossEntropyLoss node 'fwd': the node has no "
            "log_prob output (output 1); the autodiff pass must add it before differentiating");
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef EXPECT_GRADS_OK
