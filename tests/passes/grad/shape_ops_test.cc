// Finite-difference checks of every shape-op gradient rule (CheckGradients: L = sum <dY, Y> with
// random dY), over shapes that are not multiples of anything, negative axes and broadcasting; plus
// the structure of what some rules emit.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <tuple>

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

Tensor Ints(std::vector<int64_t> v) {
  return Tensor::FromVector(DType::kInt64, {static_cast<int64_t>(v.size())}, v);
}

#define EXPECT_GRAD_OK(...)                   \
  do {                                        \
    Status _st = CheckGradients(__VA_ARGS__); \
    EXPECT_TRUE(_st.ok()) << _st.message();   \
  } while (0)

TEST(ShapeOpsGradTest, Reshape) {
  Node n = FwdNode("Reshape", {"x", "s"}, {"y"});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({2, 3, 5}, 1)}}, {{"s", Ints({0, -1})}});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({7, 3}, 2)}}, {{"s", Ints({3, 1, 7})}});
}

TEST(ShapeOpsGradTest, FlattenSqueezeUnsqueeze) {
  EXPECT_GRAD_OK(FwdNode("Flatten", {"x"}, {"y"}, {{"axis", Attribute::Int(-1)}}),
                 {{"x", RandomTensor({2, 3, 5}, 3)}});
  EXPECT_GRAD_OK(FwdNode("Squeeze", {"x", "a"}, {"y"}), {{"x", RandomTensor({3, 1, 5, 1}, 4)}},
                 {{"a", Ints({-1, 1})}});
  EXPECT_GRAD_OK(FwdNode("Squeeze", {"x"}, {"y"}), {{"x", RandomTensor({1, 5, 1}, 5)}});
  EXPECT_GRAD_OK(FwdNode("Unsqueeze", {"x", "a"}, {"y"}), {{"x", RandomTensor({3, 5}, 6)}},
                 {{"a", Ints({0, -1})}});
}

TEST(ShapeOpsGradTest, Transpose) {
  EXPECT_GRAD_OK(FwdNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints({2, 0, 3, 1})}}),
                 {{"x", RandomTensor({2, 3, 5, 7}, 7)}});
  EXPECT_GRAD_OK(FwdNode("Transpose", {"x"}, {"y"}), {{"x", RandomTensor({3, 5, 2}, 8)}});
}

TEST(ShapeOpsGradTest, ExpandSumsOverBroadcastAxes) {
  Node n = FwdNode("Expand", {"x", "s"}, {"y"});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({3, 1}, 9)}}, {{"s", Ints({2, 3, 5})}});
  // Bidirectional: the 1 in `shape` keeps the input's 4, the input's 1 grows to 3.
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({4, 1}, 10)}}, {{"s", Ints({1, 3})}});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({2, 3}, 11)}}, {{"s", Ints({2, 3})}});
}

TEST(ShapeOpsGradTest, TileSumsOverCopies) {
  Node n = FwdNode("Tile", {"x", "r"}, {"y"});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({2, 3}, 12)}}, {{"r", Ints({3, 2})}});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({3, 1, 2}, 13)}}, {{"r", Ints({1, 4, 1})}});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({3, 2}, 14)}}, {{"r", Ints({1, 1})}});
}

TEST(ShapeOpsGradTest, Concat) {
  Node n = FwdNode("Concat", {"a", "b", "c"}, {"y"}, {{"axis", Attribute::Int(-2)}});
  std::map<std::string, Tensor> in = {{"a", RandomTensor({2, 1, 3}, 15)},
                                      {"b", RandomTensor({2, 4, 3}, 16)},
                                      {"c", RandomTensor({2, 2, 3}, 17)}};
  EXPECT_GRAD_OK(n, in);
  GradCheckOptions only_b;
  only_b.wrt = {"b"};
  EXPECT_GRAD_OK(n, in, {}, only_b);
}

TEST(ShapeOpsGradTest, Split) {
  // Uneven equal split (7 -> 3, 3, 1), explicit sizes, num_outputs.
  EXPECT_GRAD_OK(FwdNode("Split", {"x"}, {"a", "b", "c"}, {{"axis", Attribute::Int(1)}}),
                 {{"x", RandomTensor({2, 7}, 18)}});
  EXPECT_GRAD_OK(FwdNode("Split", {"x", "s"}, {"a", "b"}, {{"axis", Attribute::Int(-1)}}),
                 {{"x", RandomTensor({3, 5}, 19)}}, {{"s", Ints({1, 4})}});
  EXPECT_GRAD_OK(FwdNode("Split", {"x"}, {"a", "b"},
                         {{"axis", Attribute::Int(0)}, {"num_outputs", Attribute::Int(2)}}),
                 {{"x", RandomTensor({5, 2}, 20)}});
}

// An output no gradient reaches contributes zeros of its shape to the Concat.
TEST(ShapeOpsGradTest, SplitWithMissingOutputGradient) {
  Graph g;
  auto add = [&](const std::string& name, Shape s) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = DType::kFloat32;
    v.shape = s;
    v.rank_known = true;
  };
  add("x", {2, 5});
  add("dy0", {2, 2});
  g.inputs = {"x", "dy0"};
  g.nodes.push_back(FwdNode("Split", {"x", "s"}, {"y0", "y1"}, {{"axis", Attribute::Int(1)}}));
  Value& s = g.GetOrAddValue("s");
  s.dtype = DType::kInt64;
  s.shape = {2};
  s.rank_known = true;
  s.data = std::make_shared<const Tensor>(Ints({2, 3}));
  g.initializers = {"s"};
  ASSERT_TRUE(InferAndSetTypes(g, g.nodes[0]).ok());
  std::vector<Node> emitted;
  GradBuilder b(g, g.nodes[0], {"dy0", ""}, {true, false}, emitted);
  Status st = (*GradRules().Find("", "Split"))(b);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_FALSE(b.input_grads()[0].empty());
  bool has_zeros = false;
  for (const Node& e : emitted) has_zeros |= e.op_type == "ConstantOfShape";
  EXPECT_TRUE(has_zeros);
  for (auto& e : emitted) g.nodes.push_back(e);
  g.outputs = {b.input_grads()[0]};
  Tensor dy0 = RandomTensor({2, 2}, 21);
  auto out = Interpret(g, {{"x", RandomTensor({2, 5}, 22)}, {"dy0", dy0}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const Tensor& dx = out->at(b.input_grads()[0]);
  ASSERT_EQ(dx.shape(), Shape({2, 5}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 5; ++c)
      EXPECT_EQ(dx.data<float>()[r * 5 + c], c < 2 ? dy0.data<float>()[r * 2 + c] : 0.f);
}

TEST(ShapeOpsGradTest, SliceEmitsSliceGrad) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  Node n = FwdNode("Slice", {"x", "s", "e", "a", "p"}, {"y"});
  // Negative steps, out-of-range bounds, negative axes.
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({5, 7}, 23)}},
                 {{"s", Ints({-1, 1})},
                  {"e", Ints({kMin, kMax})},
                  {"a", Ints({-1, 0})},
                  {"p", Ints({-2, 2})}});
  EXPECT_GRAD_OK(FwdNode("Slice", {"x", "s", "e"}, {"y"}), {{"x", RandomTensor({4, 6, 3}, 24)}},
                 {{"s", Ints({1, -4})}, {"e", Ints({3, 100})}});
  EXPECT_GRAD_OK(FwdNode("Slice", {"x"}, {"y"},
                         {{"starts", Attribute::Ints({1})},
                          {"ends", Attribute::Ints({-1})},
                          {"axes", Attribute::Ints({1})}}),
                 {{"x", RandomTensor({3, 5}, 25)}});
}

TEST(ShapeOpsGradTest, PadConstantMode) {
  Node n = FwdNode("Pad", {"x", "p", "v"}, {"y"});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({3, 5}, 26)}},
                 {{"p", Ints({1, 0, 2, 3})}, {"v", Tensor::Scalar(0.5f)}});
  // Negative pads crop in the forward, so the gradient pads back with zeros.
  EXPECT_GRAD_OK(FwdNode("Pad", {"x", "p"}, {"y"}), {{"x", RandomTensor({4, 5}, 27)}},
                 {{"p", Ints({-1, 2, 0, -2})}});
  EXPECT_GRAD_OK(FwdNode("Pad", {"x", "p", "", "a"}, {"y"}), {{"x", RandomTensor({2, 3, 4}, 28)}},
                 {{"p", Ints({1, 2})}, {"a", Ints({-2})}});
}

TEST(ShapeOpsGradTest, PadReflectHasNoRule) {
  Node n = FwdNode("Pad", {"x", "p"}, {"y"}, {{"mode", Attribute::String("reflect")}});
  Status st = CheckGradients(n, {{"x", RandomTensor({3, 4}, 34)}}, {{"p", Ints({0, 1, 0, 1})}});
  EXPECT_EQ(st.message(),
            "gradient rule of Pad node 'fwd': mode 'reflect' has no gradient rule (only "
            "'constant' does)");
}

TEST(ShapeOpsGradTest, GatherEmbeddingLookup) {
  // data [V=7, D=5], indices [B=3, S=4] with repeats and negative indices.
  Node n = FwdNode("Gather", {"w", "i"}, {"y"});
  Tensor idx =
      Tensor::FromVector<int64_t>(DType::kInt64, {3, 4}, {0, 3, 3, 6, -1, 2, 0, 0, 5, -7, 3, 1});
  EXPECT_GRAD_OK(n, {{"w", RandomTensor({7, 5}, 29)}}, {{"i", idx}});
  EXPECT_GRAD_OK(FwdNode("Gather", {"w", "i"}, {"y"}, {{"axis", Attribute::Int(-1)}}),
                 {{"w", RandomTensor({3, 4}, 30)}},
                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {2}, {-1, 3})}});
}

TEST(ShapeOpsGradTest, GatherElements) {
  Node n = FwdNode("GatherElements", {"x", "i"}, {"y"}, {{"axis", Attribute::Int(1)}});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({3, 4}, 31)}},
                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {3, 2}, {0, 0, 3, -1, 2, 1})}});
}

// Random shapes and batch_dims, tuples drawn from few positions so that many repeat (their
// gradients accumulate), negative indices included; int32 indices once.
TEST(ShapeOpsGradTest, GatherNDWithRepeatedTuples) {
  struct Case {
    Shape data, lead;
    int64_t k, b;
    DType it;
  };
  const std::vector<Case> cases = {
      {{5, 3}, {7}, 1, 0, DType::kInt64},       {{4, 3, 2}, {2, 5}, 2, 0, DType::kInt64},
      {{3, 4, 5}, {3, 6}, 1, 1, DType::kInt32}, {{2, 3, 4, 3}, {2, 3, 4}, 1, 2, DType::kInt64},
      {{2, 5, 3}, {2, 4}, 2, 1, DType::kInt64}, {{2, 6, 4}, {2, 9}, 1, 1, DType::kInt64},
  };
  std::mt19937_64 rng(41);
  for (const Case& c : cases) {
    Shape shape = c.lead;
    shape.push_back(c.k);
    Tensor idx(c.it, shape);
    int repeats = 0;
    for (int64_t e = 0; e < idx.numel(); ++e) {
      const int64_t dim = c.data[c.b + e % c.k];
      // Half the draws from {0, -dim}: the same position twice, once from the back.
      int64_t v = rng() % 2 ? (rng() % 2 ? 0 : -dim) : static_cast<int64_t>(rng() % dim);
      repeats += v == 0 || v == -dim;
      if (c.it == DType::kInt64)
        idx.data<int64_t>()[e] = v;
      else
        idx.data<int32_t>()[e] = static_cast<int32_t>(v);
    }
    ASSERT_GE(repeats, 2);
    Node n = FwdNode("GatherND", {"x", "i"}, {"y"}, {{"batch_dims", Attribute::Int(c.b)}});
    EXPECT_GRAD_OK(n, {{"x", RandomTensor(c.data, rng())}}, {{"i", idx}});
  }
}

// Reduction none: the scattered positions of data get no gradient, the updates get dY there.
// Indices distinct (duplicates are undefined in ONNX), negative ones and both index types.
TEST(ShapeOpsGradTest, ScatterNDOverwrite) {
  Node n = FwdNode("ScatterND", {"x", "i", "u"}, {"y"});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({5, 3}, 51)}, {"u", RandomTensor({3, 3}, 52)}},
                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {3, 1}, {2, -1, 0})}});
  EXPECT_GRAD_OK(
      n, {{"x", RandomTensor({4, 3, 2}, 53)}, {"u", RandomTensor({2, 2, 2}, 54)}},
      {{"i", Tensor::FromVector<int32_t>(DType::kInt32, {2, 2, 2}, {0, 0, 3, -1, -2, 1, 1, 2})}});
  // Only the updates, or only the data, trained.
  GradCheckOptions only_u;
  only_u.wrt = {"u"};
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({5, 3}, 55)}, {"u", RandomTensor({2, 3}, 56)}},
                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {2, 1}, {4, 1})}}, only_u);
  GradCheckOptions only_x;
  only_x.wrt = {"x"};
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({5, 3}, 57)}, {"u", RandomTensor({2, 3}, 58)}},
                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {2, 1}, {4, 1})}}, only_x);
}

// Reduction add with repeated tuples: data passes through, every update gets its position's dY.
TEST(ShapeOpsGradTest, ScatterNDAddWithRepeatedTuples) {
  Node n = FwdNode("ScatterND", {"x", "i", "u"}, {"y"}, {{"reduction", Attribute::String("add")}});
  EXPECT_GRAD_OK(n, {{"x", RandomTensor({4, 3}, 59)}, {"u", RandomTensor({5, 3}, 60)}},
                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {5, 1}, {1, 1, -3, 0, 3})}});
  EXPECT_GRAD_OK(
      n, {{"x", RandomTensor({3, 4}, 61)}, {"u", RandomTensor({4}, 62)}},
      {{"i", Tensor::FromVector<int32_t>(DType::kInt32, {4, 2}, {0, 1, 0, 1, -1, -1, 2, 3})}});
}

TEST(ShapeOpsGradTest, ScatterElementsOverwriteAndAdd) {
  // axis 1 and -1 (the same axis), indices narrower than data on axis 0, distinct positions.
  for (int64_t axis : {1, -1}) {
    Node n = FwdNode("ScatterElements", {"x", "i", "u"}, {"y"}, {{"axis", Attribute::Int(axis)}});
    EXPECT_GRAD_OK(
        n, {{"x", RandomTensor({3, 5}, 63)}, {"u", RandomTensor({2, 3}, 64)}},
        {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {2, 3}, {0, 4, -3, 1, -1, 3})}});
  }
  // Axis 0 with int32 indices; the opset-9 Scatter is the same op.
  for (const char* op : {"ScatterElements", "Scatter"}) {
    Node n = FwdNode(op, {"x", "i", "u"}, {"y"});
    EXPECT_GRAD_OK(
        n, {{"x", RandomTensor({4, 3}, 65)}, {"u", RandomTensor({2, 3}, 66)}},
        {{"i", Tensor::FromVector<int32_t>(DType::kInt32, {2, 3}, {3, 0, -1, 1, 2, 0})}});
  }
  // Reduction add: repeated positions (column 1 of row 0 three times, -4 = 0 on axis 1).
  Node add = FwdNode("ScatterElements", {"x", "i", "u"}, {"y"},
                     {{"axis", Attribute::Int(1)}, {"reduction", Attribute::String("add")}});
  EXPECT_GRAD_OK(add, {{"x", RandomTensor({2, 4}, 67)}, {"u", RandomTensor({2, 5}, 68)}},
                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {2, 5},
                                                    {1, 1, -3, 0, -4, 3, 3, 3, 2, -1})}});
}

// What the rules emit: reduction none scatters zeros (ConstantOfShape of the updates' shape) into
// dY with the forward op and gathers dY for the updates; add hands dY straight to data.
TEST(ShapeOpsGradTest, ScatterRulesEmitAScatterOfZerosAndAGather) {
  for (const char* red : {"none", "add"}) {
    Graph g;
    for (auto [name, dt, shape] :
         {std::tuple<const char*, DType, Shape>{"x", DType::kFloat32, {4, 6}},
          {"i", DType::kInt64, {4, 2}},
          {"u", DType::kFloat32, {4, 2}},
          {"dy", DType::kFloat32, {4, 6}}}) {
      Value& v = g.GetOrAddValue(name);
      v.dtype = dt;
      v.shape = shape;
      v.rank_known = true;
    }
    g.nodes.push_back(
        FwdNode("ScatterElements", {"x", "i", "u"}, {"y"},
                {{"axis", Attribute::Int(-1)}, {"reduction", Attribute::String(red)}}));
    ASSERT_TRUE(InferAndSetTypes(g, g.nodes[0]).ok());
    std::vector<Node> emitted;
    GradBuilder b(g, g.nodes[0], {"dy"}, {true, false, true}, emitted);
    Status st = (*GradRules().Find("", "ScatterElements"))(b);
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<std::string> ops;
    for (const Node& n : emitted) ops.push_back(n.op_type);
    EXPECT_TRUE(b.input_grads()[1].empty());  // indices never get a gradient
    if (std::string(red) == "add") {
      EXPECT_EQ(ops, (std::vector<std::string>{"GatherElements"}));
      EXPECT_EQ(b.input_grads()[0], "dy");
    } else {
      ASSERT_EQ(ops,
                (std::vector<std::string>{"ConstantOfShape", "ScatterElements", "GatherElements"}));
      EXPECT_EQ(g.FindValue(emitted[0].inputs[0])->data->ToInt64Vector(),
                std::vector<int64_t>({4, 2}));
      EXPECT_EQ(emitted[1].inputs[0], "dy");
      EXPECT_EQ(emitted[1].inputs[1], "i");
      EXPECT_EQ(emitted[1].inputs[2], emitted[0].outputs[0]);
      EXPECT_EQ(emitted[1].GetInt("axis", 0), -1);
      EXPECT_EQ(emitted[1].GetString("reduction", "none"), "none");
      EXPECT_EQ(b.input_grads()[0], emitted[1].outputs[0]);
      EXPECT_EQ(g.FindValue(b.input_grads()[0])->shape, Shape({4, 6}));
    }
    const Node& gather = emitted.back();
    EXPECT_EQ(gather.inputs, (std::vector<std::string>{"dy", "i"}));
    EXPECT_EQ(gather.GetInt("axis", 0), -1);
    EXPECT_EQ(b.input_grads()[2], gather.outputs[0]);
    EXPECT_EQ(g.FindValue(b.input_grads()[2])->shape, Shape({4, 2}));
  }
}

// mul, max and min have no rule; the refusal names the node and the reduction. Nothing is refused
// when no input of the node needs a gradient.
TEST(ShapeOpsGradTest, ScatterReductionsWithoutAGradientAreRefused) {
  for (const char* op : {"ScatterND", "ScatterElements"})
    for (const char* red : {"mul", "max", "min"}) {
      // ScatterND's updates are a row of data, ScatterElements' one element.
      const Shape u = std::string(op) == "ScatterND" ? Shape{1, 2} : Shape{1, 1};
      Node n = FwdNode(op, {"x", "i", "u"}, {"y"}, {{"reduction", Attribute::String(red)}});
      Status st = CheckGradients(n, {{"x", RandomTensor({3, 2}, 69)}, {"u", RandomTensor(u, 70)}},
                                 {{"i", Tensor::FromVector<int64_t>(DType::kInt64, {1, 1}, {1})}});
      EXPECT_EQ(st.message(),
                std::string("gradient rule of ") + op + " node 'fwd': reduction '" + red +
                    "' has no gradient in foundry; only 'none' and 'add' do (keep the "
                    "node off the path from the trained parameters to the loss, e.g. "
                    "--freeze)");
    }
  Graph g;
  for (const char* name : {"x", "u", "dy"}) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = DType::kFloat32;
    v.shape = {3};
    v.rank_known = true;
  }
  Value& i = g.GetOrAddValue("i");
  i.dtype = DType::kInt64;
  i.shape = {3};
  i.rank_known = true;
  g.nodes.push_back(FwdNode("ScatterElements", {"x", "i", "u"}, {"y"},
                            {{"reduction", Attribute::String("max")}}));
  ASSERT_TRUE(InferAndSetTypes(g, g.nodes[0]).ok());
  std::vector<Node> emitted;
  GradBuilder b(g, g.nodes[0], {"dy"}, {false, false, false}, emitted);
  EXPECT_TRUE((*GradRules().Find("", "ScatterElements"))(b).ok());
  EXPECT_TRUE(emitted.empty());
}

TEST(ShapeOpsGradTest, Trilu) {
  EXPECT_GRAD_OK(FwdNode("Trilu", {"x", "k"}, {"y"}, {{"upper", Attribute::Int(0)}}),
                 {{"x", RandomTensor({2, 3, 5}, 32)}}, {{"k", Tensor::ScalarInt64(1)}});
  EXPECT_GRAD_OK(FwdNode("Trilu", {"x"}, {"y"}), {{"x", RandomTensor({4, 3}, 33)}});
}

TEST(ShapeOpsGradTest, ShapeProducersHaveNoRule) {
  for (const char* op : {"Constant", "Shape", "Size", "ConstantOfShape", "Range"})
    EXPECT_EQ(GradRules().Find("", op), nullptr) << op;
}

TEST(ShapeOpsGradTest, GatherRuleEmitsComMicrosoftGatherGrad) {
  Graph g;
  Value& w = g.GetOrAddValue("w");
  w.dtype = DType::kFloat32;
  w.shape = {7, 5};
  w.rank_known = true;
  Value& i = g.GetOrAddValue("i");
  i.dtype = DType::kInt64;
  i.shape = {2, 3};
  i.rank_known = true;
  Value& dy = g.GetOrAddValue("dy");
  dy.dtype = DType::kFloat32;
  dy.shape = {2, 3, 5};
  dy.rank_known = true;
  g.nodes.push_back(FwdNode("Gather", {"w", "i"}, {"y"}));
  ASSERT_TRUE(InferAndSetTypes(g, g.nodes[0]).ok());
  std::vector<Node> emitted;
  GradBuilder b(g, g.nodes[0], {"dy"}, {true, false}, emitted);
  ASSERT_TRUE((*GradRules().Find("", "Gather"))(b).ok());
  ASSERT_EQ(emitted.size(), 1u);  // GatherGrad; the table's shape is a constant, not a node
  EXPECT_EQ(emitted[0].op_type, "GatherGrad");
  EXPECT_EQ(emitted[0].domain, "com.microsoft");
  EXPECT_TRUE(g.IsInitializer(emitted[0].inputs[0]));
  EXPECT_EQ(g.FindValue(emitted[0].inputs[0])->data->ToInt64Vector(), std::vector<int64_t>({7, 5}));
  EXPECT_EQ(emitted[0].inputs[1], "i");
  EXPECT_EQ(emitted[0].inputs[2], "dy");
  EXPECT_EQ(emitted[0].name, "fwd_Grad/GatherGrad_1");
  EXPECT_EQ(g.FindValue(b.input_grads()[0])->shape, Shape({7, 5}));
}

TEST(ShapeOpsGradTest, GatherNDRuleEmitsComMicrosoftGatherNDGrad) {
  Graph g;
  for (auto [name, dt, shape] :
       {std::tuple<const char*, DType, Shape>{"x", DType::kFloat32, {2, 4, 3}},
        {"i", DType::kInt64, {2, 5, 1}},
        {"dy", DType::kFloat32, {2, 5, 3}}}) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = dt;
    v.shape = shape;
    v.rank_known = true;
  }
  g.nodes.push_back(FwdNode("GatherND", {"x", "i"}, {"y"}, {{"batch_dims", Attribute::Int(1)}}));
  ASSERT_TRUE(InferAndSetTypes(g, g.nodes[0]).ok());
  std::vector<Node> emitted;
  GradBuilder b(g, g.nodes[0], {"dy"}, {true, false}, emitted);
  ASSERT_TRUE((*GradRules().Find("", "GatherND"))(b).ok());
  ASSERT_EQ(emitted.size(), 1u);
  EXPECT_EQ(emitted[0].op_type, "GatherNDGrad");
  EXPECT_EQ(emitted[0].domain, "com.microsoft");
  EXPECT_EQ(emitted[0].GetInt("batch_dims", -1), 1);
  EXPECT_EQ(g.FindValue(emitted[0].inputs[0])->data->ToInt64Vector(),
            std::vector<int64_t>({2, 4, 3}));
  EXPECT_EQ(emitted[0].inputs[1], "i");
  EXPECT_EQ(emitted[0].inputs[2], "dy");
  EXPECT_EQ(g.FindValue(b.input_grads()[0])->shape, Shape({2, 4, 3}));
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef EXPECT_GRAD_OK
