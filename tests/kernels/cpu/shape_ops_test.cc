// Shape-op kernels and their shape inference against hand-computed results (small cases from the
// ONNX spec's edge cases) and against naive index-arithmetic references (random shapes).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>

#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

Tensor F32(Shape s, std::vector<float> v) { return Tensor::FromVector(DType::kFloat32, s, v); }
Tensor I64(Shape s, std::vector<int64_t> v) { return Tensor::FromVector(DType::kInt64, s, v); }
Tensor I32(Shape s, std::vector<int32_t> v) { return Tensor::FromVector(DType::kInt32, s, v); }
Tensor Bool(Shape s, std::vector<uint8_t> v) { return Tensor::FromVector(DType::kBool, s, v); }
Tensor Ints(std::vector<int64_t> v) { return I64({static_cast<int64_t>(v.size())}, v); }

// 0, 1, 2, ... as f32.
Tensor Iota(Shape s) {
  Tensor t(DType::kFloat32, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

Tensor IotaI64(Shape s) {
  Tensor t(DType::kInt64, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = 1000 + i;
  return t;
}

template <class T>
std::vector<T> Vals(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Runs the node (types inferred, constants visible to inference) and returns output `k`.
Tensor Exec(const Node& n, const std::map<std::string, Tensor>& inputs,
            const std::map<std::string, Tensor>& constants = {}, size_t k = 0) {
  auto r = RunSingleNode(n, inputs, constants);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? (*r)[k] : Tensor();
}

std::string RunError(const Node& n, const std::map<std::string, Tensor>& inputs,
                     const std::map<std::string, Tensor>& constants = {}) {
  auto r = RunSingleNode(n, inputs, constants);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

// Shape inference alone, on values described by (dtype, shape, optional data).
struct In {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  bool rank_known = true;
  std::shared_ptr<const Tensor> data;
};
In Var(const std::string& name, DType dtype, Shape shape, bool rank_known = true) {
  In in;
  in.name = name;
  in.dtype = dtype;
  in.shape = std::move(shape);
  in.rank_known = rank_known;
  return in;
}
In Const(const std::string& name, Tensor t) {
  In in = Var(name, t.dtype(), t.shape());
  in.data = std::make_shared<const Tensor>(std::move(t));
  return in;
}

StatusOr<std::vector<TypeInfo>> Infer(const Node& n, const std::vector<In>& ins) {
  Graph g;
  for (const auto& in : ins) {
    Value& v = g.GetOrAddValue(in.name);
    v.dtype = in.dtype;
    v.shape = in.shape;
    v.rank_known = in.rank_known;
    v.data = in.data;
  }
  return InferNodeTypes(g, n);
}

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

std::vector<int64_t> Unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t k = static_cast<int64_t>(s.size()) - 1; k >= 0; --k) {
    idx[k] = flat % s[k];
    flat /= s[k];
  }
  return idx;
}

// --- creation and inspection ---

TEST(ShapeOpsKernelTest, ConstantFromEachAttribute) {
  Tensor v = F32({2, 2}, {1, 2, 3, 4});
  Tensor t = Exec(MakeNode("Constant", {}, {"y"}, {{"value", Attribute::FromTensor(v)}}), {});
  EXPECT_TRUE(t.BitwiseEqual(v));
  t = Exec(MakeNode("Constant", {}, {"y"}, {{"value_floats", Attribute::Floats({1.5f, -2})}}), {});
  EXPECT_EQ(t.shape(), Shape({2}));
  EXPECT_EQ(Vals<float>(t), (std::vector<float>{1.5f, -2}));
  t = Exec(MakeNode("Constant", {}, {"y"}, {{"value_int", Attribute::Int(7)}}), {});
  EXPECT_EQ(t.dtype(), DType::kInt64);
  EXPECT_EQ(t.shape(), Shape({}));
  EXPECT_EQ(Vals<int64_t>(t), (std::vector<int64_t>{7}));
  t = Exec(MakeNode("Constant", {}, {"y"}, {{"value_ints", Attribute::Ints({3, 4})}}), {});
  EXPECT_EQ(Vals<int64_t>(t), (std::vector<int64_t>{3, 4}));
  t = Exec(MakeNode("Constant", {}, {"y"}, {{"value_float", Attribute::Float(0.5f)}}), {});
  EXPECT_EQ(Vals<float>(t), (std::vector<float>{0.5f}));
  EXPECT_EQ(RunError(MakeNode("Constant", {}, {"y"}), {}),
            "Constant node 'n': needs one of the attributes value, value_float, value_floats, "
            "value_int, value_ints (sparse_value and string constants are not supported)");
}

TEST(ShapeOpsKernelTest, ShapeWithStartEndAndSize) {
  Tensor x = Iota({2, 3, 4, 5});
  EXPECT_EQ(Vals<int64_t>(Exec(MakeNode("Shape", {"x"}, {"y"}), {{"x", x}})),
            (std::vector<int64_t>{2, 3, 4, 5}));
  Node n =
      MakeNode("Shape", {"x"}, {"y"}, {{"start", Attribute::Int(1)}, {"end", Attribute::Int(-1)}});
  EXPECT_EQ(Vals<int64_t>(Exec(n, {{"x", x}})), (std::vector<int64_t>{3, 4}));
  // Out-of-range start/end clamp.
  n = MakeNode("Shape", {"x"}, {"y"},
               {{"start", Attribute::Int(-10)}, {"end", Attribute::Int(10)}});
  EXPECT_EQ(Vals<int64_t>(Exec(n, {{"x", x}})), (std::vector<int64_t>{2, 3, 4, 5}));
  n = MakeNode("Shape", {"x"}, {"y"}, {{"start", Attribute::Int(3)}, {"end", Attribute::Int(1)}});
  EXPECT_EQ(Exec(n, {{"x", x}}).shape(), Shape({0}));
  Tensor s = Exec(MakeNode("Size", {"x"}, {"y"}), {{"x", x}});
  EXPECT_EQ(s.shape(), Shape({}));
  EXPECT_EQ(Vals<int64_t>(s), (std::vector<int64_t>{120}));
}

// Constant folding runs Shape/Size on a shape-only placeholder (no bytes behind the shape).
TEST(ShapeOpsKernelTest, SizeReadsOnlyTheShape) {
  Tensor placeholder(DType::kFloat32, {0, 0});
  placeholder.Reshape({4, 5});
  Tensor y(DType::kInt64, {});
  const Tensor* ins[] = {&placeholder};
  Tensor* outs[] = {&y};
  ASSERT_TRUE(RunCpuKernel(MakeNode("Size", {"x"}, {"y"}), ins, outs, {}).ok());
  EXPECT_EQ(*y.data<int64_t>(), 20);
}

TEST(ShapeOpsKernelTest, ConstantOfShape) {
  Tensor t = Exec(MakeNode("ConstantOfShape", {"s"}, {"y"}), {}, {{"s", Ints({2, 3})}});
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  EXPECT_EQ(Vals<float>(t), std::vector<float>(6, 0.f));
  Node n =
      MakeNode("ConstantOfShape", {"s"}, {"y"}, {{"value", Attribute::FromTensor(I64({1}, {-7}))}});
  t = Exec(n, {}, {{"s", Ints({3})}});
  EXPECT_EQ(Vals<int64_t>(t), (std::vector<int64_t>{-7, -7, -7}));
  // An empty shape makes a scalar.
  t = Exec(n, {}, {{"s", Ints({})}});
  EXPECT_EQ(t.shape(), Shape({}));
  EXPECT_EQ(Vals<int64_t>(t), (std::vector<int64_t>{-7}));
  // Without the constant shape only the rank is known.
  auto types = Infer(n, {Var("s", DType::kInt64, {2})});
  ASSERT_TRUE(types.ok()) << types.status().message();
  EXPECT_EQ((*types)[0].shape, Shape({-1, -1}));
}

TEST(ShapeOpsKernelTest, Range) {
  Node n = MakeNode("Range", {"a", "b", "d"}, {"y"});
  Tensor t = Exec(
      n, {}, {{"a", Tensor::Scalar(1)}, {"b", Tensor::Scalar(2)}, {"d", Tensor::Scalar(0.25f)}});
  EXPECT_EQ(Vals<float>(t), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
  // ceil((5 - 1) / 2) = 2, the limit is excluded.
  t = Exec(n, {}, {{"a", Tensor::Scalar(1)}, {"b", Tensor::Scalar(5)}, {"d", Tensor::Scalar(2)}});
  EXPECT_EQ(Vals<float>(t), (std::vector<float>{1, 3}));
  t = Exec(n, {},
           {{"a", Tensor::ScalarInt64(10)},
            {"b", Tensor::ScalarInt64(4)},
            {"d", Tensor::ScalarInt64(-3)}});
  EXPECT_EQ(Vals<int64_t>(t), (std::vector<int64_t>{10, 7}));
  t = Exec(n, {}, {{"a", I32({}, {10})}, {"b", I32({}, {6})}, {"d", I32({}, {-3})}});
  EXPECT_EQ(Vals<int32_t>(t), (std::vector<int32_t>{10, 7}));
  // Empty: the limit is behind the start.
  t = Exec(n, {}, {{"a", Tensor::Scalar(5)}, {"b", Tensor::Scalar(1)}, {"d", Tensor::Scalar(1)}});
  EXPECT_EQ(t.shape(), Shape({0}));
  t = Exec(n, {},
           {{"a", Tensor::ScalarInt64(3)},
            {"b", Tensor::ScalarInt64(3)},
            {"d", Tensor::ScalarInt64(1)}});
  EXPECT_EQ(t.shape(), Shape({0}));
  EXPECT_EQ(RunError(n, {},
                     {{"a", Tensor::ScalarInt64(0)},
                      {"b", Tensor::ScalarInt64(3)},
                      {"d", Tensor::ScalarInt64(0)}}),
            "Range node 'n': delta must not be 0");
  // Not constant: length unknown.
  auto types = Infer(
      n, {Var("a", DType::kInt64, {}), Var("b", DType::kInt64, {}), Var("d", DType::kInt64, {})});
  ASSERT_TRUE(types.ok());
  EXPECT_EQ((*types)[0].shape, Shape({-1}));
}

// --- reshaping ---

TEST(ShapeOpsKernelTest, ReshapeZeroCopiesAndMinusOneInfers) {
  Node n = MakeNode("Reshape", {"x", "s"}, {"y"});
  Tensor x = Iota({2, 3, 4});
  Tensor y = Exec(n, {{"x", x}}, {{"s", Ints({0, -1})}});
  EXPECT_EQ(y.shape(), Shape({2, 12}));
  EXPECT_EQ(Vals<float>(y), Vals<float>(x));
  EXPECT_EQ(Exec(n, {{"x", x}}, {{"s", Ints({-1, 0, 2})}}).shape(), Shape({4, 3, 2}));
  EXPECT_EQ(Exec(n, {{"x", x}}, {{"s", Ints({4, 0, 2})}}).shape(), Shape({4, 3, 2}));
  // allowzero: a 0 is a real empty dimension.
  Node az = MakeNode("Reshape", {"x", "s"}, {"y"}, {{"allowzero", Attribute::Int(1)}});
  EXPECT_EQ(Exec(az, {{"x", Iota({0, 3})}}, {{"s", Ints({3, 0})}}).shape(), Shape({3, 0}));
}

TEST(ShapeOpsKernelTest, ReshapeErrorsNameNodeAndShapes) {
  Node n = MakeNode("Reshape", {"x", "s"}, {"y"});
  EXPECT_EQ(RunError(n, {{"x", Iota({2, 3})}}, {{"s", Ints({4, 2})}}),
            "Reshape node 'n': cannot reshape a tensor of shape [2,3] (6 elements) to shape "
            "[4,2] (8 elements)");
  EXPECT_EQ(RunError(n, {{"x", Iota({2, 3})}}, {{"s", Ints({4, -1})}}),
            "Reshape node 'n': cannot reshape a tensor of shape [2,3] (6 elements) to shape "
            "[4,-1]: 6 is not a multiple of 4");
  EXPECT_EQ(RunError(n, {{"x", Iota({2, 3})}}, {{"s", Ints({-1, -1})}}),
            "Reshape node 'n': shape [-1,-1] has more than one -1");
  // The kernel checks a run-time shape the same way (the shape input is not a constant here).
  Tensor x = Iota({2, 3}), s = Ints({4, 2});
  Tensor y(DType::kFloat32, {4, 2});
  const Tensor* ins[] = {&x, &s};
  Tensor* outs[] = {&y};
  Status st = RunCpuKernel(n, ins, outs, {});
  EXPECT_EQ(st.message(),
            "Reshape node 'n': cannot reshape a tensor of shape [2,3] (6 elements) to shape "
            "[4,2] (8 elements)");
}

TEST(ShapeOpsKernelTest, ReshapeInferenceWithSymbolicDims) {
  Node n = MakeNode("Reshape", {"x", "s"}, {"y"});
  // [batch, seq, 768] -> [0, 0, 12, -1]: batch and seq are copied, the -1 is 64.
  auto t = Infer(n, {Var("x", DType::kFloat32, {-1, -1, 768}), Const("s", Ints({0, 0, 12, -1}))});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)[0].shape, Shape({-1, -1, 12, 64}));
  // [batch, 12, 64] -> [0, -1]: the -1 is 768 although batch is unknown.
  t = Infer(n, {Var("x", DType::kFloat32, {-1, 12, 64}), Const("s", Ints({0, -1}))});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, Shape({-1, 768}));
  // [batch, seq, 768] -> [-1, 768]: undecidable.
  t = Infer(n, {Var("x", DType::kFloat32, {-1, -1, 768}), Const("s", Ints({-1, 768}))});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, Shape({-1, 768}));
  // Shape not constant yet: the rank comes from its length.
  t = Infer(n, {Var("x", DType::kFloat32, {2, 3}), Var("s", DType::kInt64, {3})});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE((*t)[0].rank_known);
  EXPECT_EQ((*t)[0].shape, Shape({-1, -1, -1}));
  t = Infer(n, {Var("x", DType::kFloat32, {2, 3}), Var("s", DType::kInt64, {}, false)});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)[0].rank_known);
}

TEST(ShapeOpsKernelTest, Flatten) {
  Tensor x = Iota({2, 3, 4});
  EXPECT_EQ(Exec(MakeNode("Flatten", {"x"}, {"y"}), {{"x", x}}).shape(), Shape({2, 12}));
  Node n = MakeNode("Flatten", {"x"}, {"y"}, {{"axis", Attribute::Int(0)}});
  EXPECT_EQ(Exec(n, {{"x", x}}).shape(), Shape({1, 24}));
  n = MakeNode("Flatten", {"x"}, {"y"}, {{"axis", Attribute::Int(-1)}});
  Tensor y = Exec(n, {{"x", x}});
  EXPECT_EQ(y.shape(), Shape({6, 4}));
  EXPECT_EQ(Vals<float>(y), Vals<float>(x));
  n = MakeNode("Flatten", {"x"}, {"y"}, {{"axis", Attribute::Int(3)}});
  EXPECT_EQ(Exec(n, {{"x", x}}).shape(), Shape({24, 1}));
}

TEST(ShapeOpsKernelTest, SqueezeAndUnsqueeze) {
  Tensor x = Iota({1, 3, 1, 2});
  // No axes: every 1 goes.
  EXPECT_EQ(Exec(MakeNode("Squeeze", {"x"}, {"y"}), {{"x", x}}).shape(), Shape({3, 2}));
  Node n = MakeNode("Squeeze", {"x", "a"}, {"y"});
  Tensor y = Exec(n, {{"x", x}}, {{"a", Ints({-2})}});
  EXPECT_EQ(y.shape(), Shape({1, 3, 2}));
  EXPECT_EQ(Vals<float>(y), Vals<float>(x));
  // Opset <= 12: axes as an attribute.
  n = MakeNode("Squeeze", {"x"}, {"y"}, {{"axes", Attribute::Ints({0})}});
  EXPECT_EQ(Exec(n, {{"x", x}}).shape(), Shape({3, 1, 2}));
  EXPECT_EQ(RunError(MakeNode("Squeeze", {"x", "a"}, {"y"}), {{"x", x}}, {{"a", Ints({1})}}),
            "Squeeze node 'n': cannot squeeze axis 1 of size 3 (input shape [1,3,1,2])");
  // A symbolic dim might be 1: without axes the rank is unknown.
  auto t = Infer(MakeNode("Squeeze", {"x"}, {"y"}), {Var("x", DType::kFloat32, {-1, 1, 4})});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)[0].rank_known);

  Node u = MakeNode("Unsqueeze", {"x", "a"}, {"y"});
  Tensor z = Iota({3, 2});
  EXPECT_EQ(Exec(u, {{"x", z}}, {{"a", Ints({-1, 0})}}).shape(), Shape({1, 3, 2, 1}));
  EXPECT_EQ(Exec(u, {{"x", z}}, {{"a", Ints({3, 1})}}).shape(), Shape({3, 1, 2, 1}));
  u = MakeNode("Unsqueeze", {"x"}, {"y"}, {{"axes", Attribute::Ints({1})}});
  EXPECT_EQ(Exec(u, {{"x", z}}).shape(), Shape({3, 1, 2}));
  EXPECT_EQ(RunError(MakeNode("Unsqueeze", {"x", "a"}, {"y"}), {{"x", z}}, {{"a", Ints({1, -3})}}),
            "Unsqueeze node 'n': axis -3 appears twice in axes [1,-3]");
}

// --- moving elements ---

TEST(ShapeOpsKernelTest, TransposeMatchesNaiveReference) {
  for (auto [shape, perm] :
       std::vector<std::pair<Shape, std::vector<int64_t>>>{{{2, 3, 4}, {1, 0, 2}},
                                                           {{3, 5, 7}, {2, 0, 1}},
                                                           {{2, 3, 5, 7}, {0, 2, 3, 1}},
                                                           {{6, 1}, {1, 0}},
                                                           {{5}, {0}}}) {
    Tensor x = RandomTensor(shape, 3);
    Tensor y =
        Exec(MakeNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints(perm)}}), {{"x", x}});
    Shape out;
    for (int64_t p : perm) out.push_back(shape[p]);
    ASSERT_EQ(y.shape(), out);
    std::vector<int64_t> st = Strides(shape);
    for (int64_t e = 0; e < y.numel(); ++e) {
      std::vector<int64_t> i = Unravel(e, out);
      int64_t src = 0;
      for (size_t k = 0; k < perm.size(); ++k) src += i[k] * st[perm[k]];
      ASSERT_EQ(y.data<float>()[e], x.data<float>()[src]);
    }
  }
  // Default: reverse the axes.
  Tensor y = Exec(MakeNode("Transpose", {"x"}, {"y"}), {{"x", Iota({2, 3})}});
  EXPECT_EQ(y.shape(), Shape({3, 2}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(RunError(MakeNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints({0, 0})}}),
                     {{"x", Iota({2, 3})}}),
            "Transpose node 'n': perm [0,0] is not a permutation of the 2 axes of the input");
}

TEST(ShapeOpsKernelTest, ExpandIsBidirectional) {
  Node n = MakeNode("Expand", {"x", "s"}, {"y"});
  // [3,1] with [2,1,4] -> [2,3,4].
  Tensor y = Exec(n, {{"x", F32({3, 1}, {1, 2, 3})}}, {{"s", Ints({2, 1, 4})}});
  ASSERT_EQ(y.shape(), Shape({2, 3, 4}));
  for (int64_t e = 0; e < y.numel(); ++e) EXPECT_EQ(y.data<float>()[e], 1 + (e / 4) % 3);
  // A 1 in `shape` keeps the input's dimension, and a shorter shape is fine.
  y = Exec(n, {{"x", Iota({3, 4})}}, {{"s", Ints({1, 1})}});
  EXPECT_EQ(y.shape(), Shape({3, 4}));
  EXPECT_EQ(Vals<float>(y), Vals<float>(Iota({3, 4})));
  y = Exec(n, {{"x", Iota({2, 1, 3})}}, {{"s", Ints({4, 1})}});
  ASSERT_EQ(y.shape(), Shape({2, 4, 3}));
  EXPECT_EQ(y.data<float>()[3 * 3 + 2], 2.f);
  EXPECT_EQ(y.data<float>()[12 + 3], 3.f);
  EXPECT_EQ(RunError(n, {{"x", Iota({3, 2})}}, {{"s", Ints({4, 4})}}),
            "Expand node 'n': cannot expand input of shape [3,2] to [4,4]: shapes [3,2] and "
            "[4,4] do not broadcast");
}

TEST(ShapeOpsKernelTest, TileMatchesNaiveReference) {
  for (auto [shape, reps] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{2, 3}, {2, 1}}, {{2, 3}, {1, 3}}, {{3, 1, 2}, {2, 3, 2}}, {{4}, {0}}}) {
    Tensor x = RandomTensor(shape, 5);
    Tensor y = Exec(MakeNode("Tile", {"x", "r"}, {"y"}), {{"x", x}}, {{"r", Ints(reps)}});
    Shape out;
    for (size_t k = 0; k < shape.size(); ++k) out.push_back(shape[k] * reps[k]);
    ASSERT_EQ(y.shape(), out);
    std::vector<int64_t> st = Strides(shape);
    for (int64_t e = 0; e < y.numel(); ++e) {
      std::vector<int64_t> i = Unravel(e, out);
      int64_t src = 0;
      for (size_t k = 0; k < shape.size(); ++k) src += (i[k] % shape[k]) * st[k];
      ASSERT_EQ(y.data<float>()[e], x.data<float>()[src]);
    }
  }
}

TEST(ShapeOpsKernelTest, ConcatNegativeAxisUnevenInputs) {
  Node n = MakeNode("Concat", {"a", "b", "c"}, {"y"}, {{"axis", Attribute::Int(-1)}});
  Tensor y = Exec(
      n,
      {{"a", Iota({2, 1})}, {"b", F32({2, 3}, {10, 11, 12, 13, 14, 15})}, {"c", F32({2, 0}, {})}});
  EXPECT_EQ(y.shape(), Shape({2, 4}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{0, 10, 11, 12, 1, 13, 14, 15}));
  n = MakeNode("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::Int(0)}});
  y = Exec(n, {{"a", Iota({1, 2})}, {"b", Iota({2, 2})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{0, 1, 0, 1, 2, 3}));
  EXPECT_EQ(RunError(n, {{"a", Iota({1, 2})}, {"b", Iota({2, 3})}}),
            "Concat node 'n': input 1 has shape [2,3], which differs from input 0 outside axis 0");
}

TEST(ShapeOpsKernelTest, SplitEqualUnevenAndExplicit) {
  Tensor x = Iota({2, 7});
  // Three outputs of an axis of 7: ceil(7/3) = 3, 3, and the smaller last chunk 1 (opset 18).
  Node n = MakeNode("Split", {"x"}, {"a", "b", "c"}, {{"axis", Attribute::Int(1)}});
  auto r = RunSingleNode(n, {{"x", x}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].shape(), Shape({2, 3}));
  EXPECT_EQ((*r)[2].shape(), Shape({2, 1}));
  EXPECT_EQ(Vals<float>((*r)[1]), (std::vector<float>{3, 4, 5, 10, 11, 12}));
  EXPECT_EQ(Vals<float>((*r)[2]), (std::vector<float>{6, 13}));
  // num_outputs (opset 18) and an uneven 8 / 3 -> 3, 3, 2.
  n = MakeNode("Split", {"x"}, {"a", "b", "c"},
               {{"axis", Attribute::Int(-1)}, {"num_outputs", Attribute::Int(3)}});
  r = RunSingleNode(n, {{"x", Iota({8})}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Vals<float>((*r)[2]), (std::vector<float>{6, 7}));
  // Explicit sizes (opset 13 input), including an empty piece.
  n = MakeNode("Split", {"x", "s"}, {"a", "b", "c"}, {{"axis", Attribute::Int(1)}});
  r = RunSingleNode(n, {{"x", x}}, {{"s", Ints({2, 0, 5})}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[1].shape(), Shape({2, 0}));
  EXPECT_EQ(Vals<float>((*r)[0]), (std::vector<float>{0, 1, 7, 8}));
  EXPECT_EQ(Vals<float>((*r)[2]), (std::vector<float>{2, 3, 4, 5, 6, 9, 10, 11, 12, 13}));
  EXPECT_EQ(RunError(n, {{"x", x}}, {{"s", Ints({2, 2, 2})}}),
            "Split node 'n': split [2,2,2] sums to 6 but axis 1 has size 7");
  EXPECT_EQ(RunError(MakeNode("Split", {"x"}, {"a", "b", "c", "d"}), {{"x", Iota({5})}}),
            "Split node 'n': cannot split a dimension of size 5 into 4 pieces of at most 2");
}

TEST(ShapeOpsKernelTest, SliceEdgeCases) {
  Tensor x = Iota({3, 4});
  Node n = MakeNode("Slice", {"x", "s", "e", "a", "p"}, {"y"});
  auto slice = [&](std::vector<int64_t> s, std::vector<int64_t> e, std::vector<int64_t> a,
                   std::vector<int64_t> p) {
    return Exec(n, {{"x", x}}, {{"s", Ints(s)}, {"e", Ints(e)}, {"a", Ints(a)}, {"p", Ints(p)}});
  };
  // x[:, ::-1]
  Tensor y = slice({-1}, {kMin}, {1}, {-1});
  EXPECT_EQ(y.shape(), Shape({3, 4}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}));
  // x[2:0:-1, 3:-5:-2] with out-of-range ends: rows 2, 1; columns 3, 1.
  y = slice({2, 3}, {0, -5}, {0, 1}, {-1, -2});
  EXPECT_EQ(y.shape(), Shape({2, 2}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{11, 9, 7, 5}));
  // Ends past the end (INT64_MAX) clamp; negative axes.
  y = slice({1}, {kMax}, {-2}, {1});
  EXPECT_EQ(y.shape(), Shape({2, 4}));
  EXPECT_EQ(y.data<float>()[0], 4.f);
  // Starts past the end give an empty slice.
  y = slice({10}, {20}, {1}, {1});
  EXPECT_EQ(y.shape(), Shape({3, 0}));
  // Steps > 1 that do not divide the length: columns 0, 3.
  y = slice({0}, {kMax}, {1}, {3});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{0, 3, 4, 7, 8, 11}));
  // Default axes and steps.
  y = Exec(MakeNode("Slice", {"x", "s", "e"}, {"y"}), {{"x", x}},
           {{"s", Ints({1, -3})}, {"e", Ints({-1, 3})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{5, 6}));
  // Opset 1: attributes.
  y = Exec(MakeNode("Slice", {"x"}, {"y"},
                    {{"starts", Attribute::Ints({1})},
                     {"ends", Attribute::Ints({3})},
                     {"axes", Attribute::Ints({1})}}),
           {{"x", x}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(RunError(n, {{"x", x}},
                     {{"s", Ints({0})}, {"e", Ints({1})}, {"a", Ints({0})}, {"p", Ints({0})}}),
            "Slice node 'n': steps must not be 0 (axis 0)");
  // Non-constant bounds: only the sliced axes become unknown.
  auto t = Infer(n, {Var("x", DType::kFloat32, {-1, 4}), Var("s", DType::kInt64, {1}),
                     Var("e", DType::kInt64, {1}), Const("a", Ints({0})), Const("p", Ints({1}))});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, Shape({-1, 4}));
}

TEST(ShapeOpsKernelTest, GatherNegativeIndicesAndAxes) {
  Tensor data = Iota({3, 4});
  Node n = MakeNode("Gather", {"d", "i"}, {"y"});
  Tensor y = Exec(n, {{"d", data}, {"i", I64({2, 2}, {0, -1, 2, 1})}});
  EXPECT_EQ(y.shape(), Shape({2, 2, 4}));
  EXPECT_EQ(Vals<float>(y),
            (std::vector<float>{0, 1, 2, 3, 8, 9, 10, 11, 8, 9, 10, 11, 4, 5, 6, 7}));
  n = MakeNode("Gather", {"d", "i"}, {"y"}, {{"axis", Attribute::Int(-1)}});
  y = Exec(n, {{"d", data}, {"i", I32({3}, {-4, 3, 1})}});
  EXPECT_EQ(y.shape(), Shape({3, 3}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{0, 3, 1, 4, 7, 5, 8, 11, 9}));
  // A scalar index drops the axis.
  y = Exec(n, {{"d", data}, {"i", I64({}, {2})}});
  EXPECT_EQ(y.shape(), Shape({3}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{2, 6, 10}));
  EXPECT_EQ(
      RunError(MakeNode("Gather", {"d", "i"}, {"y"}), {{"d", data}, {"i", I64({3}, {0, 3, 1})}}),
      "Gather node 'n': indices[1] = 3 is out of range for axis 0 of size 3");
  EXPECT_EQ(RunError(MakeNode("Gather", {"d", "i"}, {"y"}), {{"d", data}, {"i", I64({1}, {-4})}}),
            "Gather node 'n': indices[0] = -4 is out of range for axis 0 of size 3");
}

TEST(ShapeOpsKernelTest, GatherElements) {
  Node n = MakeNode("GatherElements", {"d", "i"}, {"y"}, {{"axis", Attribute::Int(1)}});
  Tensor y = Exec(n, {{"d", F32({2, 2}, {1, 2, 3, 4})}, {"i", I64({2, 2}, {0, 0, -1, 0})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 1, 4, 3}));
  n = MakeNode("GatherElements", {"d", "i"}, {"y"}, {{"axis", Attribute::Int(0)}});
  y = Exec(n, {{"d", Iota({3, 3})}, {"i", I64({2, 3}, {1, 2, 0, 2, 0, 0})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{3, 7, 2, 6, 1, 2}));
  EXPECT_EQ(RunError(n, {{"d", Iota({3, 3})}, {"i", I64({1, 1}, {5})}}),
            "GatherElements node 'n': indices[0] = 5 is out of range for axis 0 of size 3");
}

TEST(ShapeOpsKernelTest, GatherNDSpecExamples) {
  // The five examples of the ONNX operator documentation.
  Tensor d2 = I32({2, 2}, {0, 1, 2, 3});
  Tensor d3 = I32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Node n = MakeNode("GatherND", {"d", "i"}, {"y"});
  Tensor y = Exec(n, {{"d", d2}, {"i", I64({2, 2}, {0, 0, 1, 1})}});
  EXPECT_EQ(y.shape(), Shape({2}));
  EXPECT_EQ(Vals<int32_t>(y), (std::vector<int32_t>{0, 3}));
  y = Exec(n, {{"d", d2}, {"i", I64({2, 1}, {1, 0})}});
  EXPECT_EQ(y.shape(), Shape({2, 2}));
  EXPECT_EQ(Vals<int32_t>(y), (std::vector<int32_t>{2, 3, 0, 1}));
  y = Exec(n, {{"d", d3}, {"i", I64({2, 2}, {0, 1, 1, 0})}});
  EXPECT_EQ(y.shape(), Shape({2, 2}));
  EXPECT_EQ(Vals<int32_t>(y), (std::vector<int32_t>{2, 3, 4, 5}));
  y = Exec(n, {{"d", d3}, {"i", I64({2, 1, 2}, {0, 1, 1, 0})}});
  EXPECT_EQ(y.shape(), Shape({2, 1, 2}));
  EXPECT_EQ(Vals<int32_t>(y), (std::vector<int32_t>{2, 3, 4, 5}));
  Node b1 = MakeNode("GatherND", {"d", "i"}, {"y"}, {{"batch_dims", Attribute::Int(1)}});
  y = Exec(b1, {{"d", d3}, {"i", I64({2, 1}, {1, 0})}});
  EXPECT_EQ(y.shape(), Shape({2, 2}));
  EXPECT_EQ(Vals<int32_t>(y), (std::vector<int32_t>{2, 3, 4, 5}));
}

// A GatherND case: data shape, the indices' shape without its last axis, tuple length k, b.
struct GatherNDCase {
  Shape data;
  Shape lead;
  int64_t k, b;
};

const std::vector<GatherNDCase> kGatherNDCases = {
    {{5}, {3}, 1, 0},
    {{4, 3}, {7}, 2, 0},
    {{4, 3}, {2, 3}, 1, 0},
    {{3, 5, 2}, {4}, 2, 0},
    {{3, 5, 2}, {3, 4}, 1, 1},
    {{3, 5, 2}, {3, 2}, 2, 1},
    {{2, 3, 4, 5}, {2, 3}, 1, 2},
    {{2, 3, 4, 5}, {2, 3, 2}, 2, 2},
    {{6, 1, 3}, {0}, 2, 0},
    {{2, 7, 3}, {2, 9}, 1, 1},  // rotary cos[position_ids]: [B, S, D] by [B, S', 1]
};

// Random indices in [-dim, dim) for each tuple position (batch axes are not indexed).
Tensor NDIndices(const GatherNDCase& c, DType dt, uint64_t seed) {
  Shape shape = c.lead;
  shape.push_back(c.k);
  Tensor t(dt, shape);
  std::mt19937_64 rng(seed);
  for (int64_t e = 0; e < t.numel(); ++e) {
    const int64_t dim = c.data[c.b + e % c.k];
    const int64_t v = static_cast<int64_t>(rng() % (2 * dim)) - dim;
    if (dt == DType::kInt64)
      t.data<int64_t>()[e] = v;
    else
      t.data<int32_t>()[e] = static_cast<int32_t>(v);
  }
  return t;
}

// The data offset output element `flat` of GatherND reads, from coordinates: the output index is
// (batch..., tuple..., slice...); the data index (batch..., the tuple's k values, slice...).
int64_t NDSource(const GatherNDCase& c, const Tensor& idx, const Shape& out, int64_t flat) {
  const std::vector<int64_t> o = Unravel(flat, out);
  const size_t lead = c.lead.size();
  std::vector<int64_t> at(o.begin(), o.begin() + lead);
  at.push_back(0);
  std::vector<int64_t> d(o.begin(), o.begin() + c.b);
  for (int64_t j = 0; j < c.k; ++j) {
    at.back() = j;
    int64_t pos = 0;
    const std::vector<int64_t> st = Strides(idx.shape());
    for (size_t a = 0; a < at.size(); ++a) pos += at[a] * st[a];
    int64_t v = idx.GetAsInt64(pos);
    d.push_back(v < 0 ? v + c.data[c.b + j] : v);
  }
  d.insert(d.end(), o.begin() + lead, o.end());
  const std::vector<int64_t> ds = Strides(c.data);
  int64_t off = 0;
  for (size_t a = 0; a < d.size(); ++a) off += d[a] * ds[a];
  return off;
}

Shape NDOutShape(const GatherNDCase& c) {
  Shape out = c.lead;
  out.insert(out.end(), c.data.begin() + c.b + c.k, c.data.end());
  return out;
}

TEST(ShapeOpsKernelTest, GatherNDMatchesACoordinateReference) {
  uint64_t seed = 100;
  for (const GatherNDCase& c : kGatherNDCases)
    for (DType it : {DType::kInt64, DType::kInt32}) {
      Node n = MakeNode("GatherND", {"d", "i"}, {"y"}, {{"batch_dims", Attribute::Int(c.b)}});
      Tensor x = RandomTensor(c.data, ++seed);
      Tensor idx = NDIndices(c, it, ++seed);
      Tensor y = Exec(n, {{"d", x}, {"i", idx}});
      const Shape out = NDOutShape(c);
      ASSERT_EQ(y.shape(), out) << ShapeToString(c.data) << " b " << c.b;
      Tensor want(DType::kFloat32, out);
      for (int64_t e = 0; e < want.numel(); ++e)
        want.data<float>()[e] = x.data<float>()[NDSource(c, idx, out, e)];
      EXPECT_TRUE(y.BitwiseEqual(want)) << ShapeToString(c.data) << " b " << c.b;
      // Constant indices (as after folding) give the same result.
      EXPECT_TRUE(Exec(n, {{"d", x}}, {{"i", idx}}).BitwiseEqual(want));
    }
  // Any element type moves: i64 data.
  GatherNDCase c{{3, 4}, {5}, 1, 0};
  Tensor x = IotaI64({3, 4});
  Tensor idx = NDIndices(c, DType::kInt64, 7);
  Tensor y = Exec(MakeNode("GatherND", {"d", "i"}, {"y"}), {{"d", x}, {"i", idx}});
  for (int64_t e = 0; e < y.numel(); ++e)
    EXPECT_EQ(y.data<int64_t>()[e], x.data<int64_t>()[NDSource(c, idx, {5, 4}, e)]);
}

TEST(ShapeOpsKernelTest, GatherNDErrors) {
  Tensor x = Iota({2, 3, 4});
  Node n = MakeNode("GatherND", {"d", "i"}, {"y"});
  EXPECT_EQ(RunError(n, {{"d", x}, {"i", I64({2, 2}, {0, 1, 1, 3})}}),
            "GatherND node 'n': indices[3] = 3 is out of range for axis 1 of size 3");
  EXPECT_EQ(RunError(n, {{"d", x}, {"i", I64({1, 1}, {-3})}}),
            "GatherND node 'n': indices[0] = -3 is out of range for axis 0 of size 2");
  Node b1 = MakeNode("GatherND", {"d", "i"}, {"y"}, {{"batch_dims", Attribute::Int(1)}});
  EXPECT_EQ(RunError(b1, {{"d", x}, {"i", I64({2, 1}, {0, 4})}}),
            "GatherND node 'n': indices[1] = 4 is out of range for axis 1 of size 3");
  // Shape errors come from inference, before any kernel runs.
  auto infer_error = [](const Node& node, const Shape& data, const Shape& idx,
                        DType it = DType::kInt64) {
    auto r = Infer(node, {Var("d", DType::kFloat32, data), Var("i", it, idx)});
    EXPECT_FALSE(r.ok());
    return r.ok() ? "" : r.status().message();
  };
  EXPECT_EQ(infer_error(n, {2, 3}, {4, 3}),
            "GatherND node 'n': indices [4,3] have tuples of 3 values; with batch_dims 0 and "
            "data [2,3] a tuple holds 1 to 2");
  EXPECT_EQ(infer_error(n, {2, 3}, {4, 0}),
            "GatherND node 'n': indices [4,0] have tuples of 0 values; with batch_dims 0 and "
            "data [2,3] a tuple holds 1 to 2");
  EXPECT_EQ(infer_error(b1, {2, 3}, {3, 1}),
            "GatherND node 'n': batch axis 0 differs: data [2,3], indices [3,1]");
  EXPECT_EQ(infer_error(b1, {2, 3}, {2}),
            "GatherND node 'n': batch_dims 1 must be in [0, 1), the smaller rank of data [2,3] "
            "and indices [2]");
  EXPECT_EQ(
      infer_error(MakeNode("GatherND", {"d", "i"}, {"y"}, {{"batch_dims", Attribute::Int(-1)}}),
                  {2, 3}, {2, 1}),
      "GatherND node 'n': batch_dims must be >= 0, got -1");
  EXPECT_EQ(infer_error(n, {2, 3}, {}), "GatherND node 'n': indices must have rank >= 1");
  EXPECT_EQ(infer_error(n, {}, {1}),
            "GatherND node 'n': data and indices must have rank >= 1; got [] and [1]");
  EXPECT_EQ(infer_error(n, {2, 3}, {2, 1}, DType::kFloat32),
            "GatherND node 'n': input 'indices' must be int64 or int32, got f32");
  // Symbolic dimensions stay symbolic; an unknown tuple length leaves the rank unknown.
  auto t = Infer(b1, {Var("d", DType::kFloat32, {-1, 5, 7}), Var("i", DType::kInt64, {2, -1, 1})});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)[0].shape, Shape({2, -1, 7}));
  t = Infer(n, {Var("d", DType::kFloat32, {4, 5}), Var("i", DType::kInt64, {2, -1})});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE((*t)[0].rank_known);
}

TEST(ShapeOpsKernelTest, Trilu) {
  Tensor x = Iota({2, 3, 4});
  auto ref = [&](bool upper, int64_t k) {
    std::vector<float> v = Vals<float>(x);
    for (int64_t e = 0; e < x.numel(); ++e) {
      int64_t i = (e / 4) % 3, j = e % 4;
      if (upper ? j - i < k : j - i > k) v[e] = 0;
    }
    return v;
  };
  for (int64_t upper : {0, 1})
    for (int64_t k : {-4, -1, 0, 2, 5}) {
      Node n = MakeNode("Trilu", {"x", "k"}, {"y"}, {{"upper", Attribute::Int(upper)}});
      EXPECT_EQ(Vals<float>(Exec(n, {{"x", x}}, {{"k", Tensor::ScalarInt64(k)}})), ref(upper, k))
          << "upper " << upper << " k " << k;
    }
  EXPECT_EQ(Vals<float>(Exec(MakeNode("Trilu", {"x"}, {"y"}), {{"x", x}})), ref(true, 0));
}

TEST(ShapeOpsKernelTest, PadModes) {
  Tensor x = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  Node n = MakeNode("Pad", {"x", "p", "v"}, {"y"});
  Tensor y = Exec(n, {{"x", x}}, {{"p", Ints({1, 0, 0, 2})}, {"v", Tensor::Scalar(9)}});
  EXPECT_EQ(y.shape(), Shape({3, 5}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 4, 5, 6, 9, 9}));
  // Negative pads crop.
  y = Exec(MakeNode("Pad", {"x", "p"}, {"y"}), {{"x", x}}, {{"p", Ints({0, -1, 0, 1})}});
  EXPECT_EQ(y.shape(), Shape({2, 3}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{2, 3, 0, 5, 6, 0}));
  Node r = MakeNode("Pad", {"x", "p"}, {"y"}, {{"mode", Attribute::String("reflect")}});
  y = Exec(r, {{"x", x}}, {{"p", Ints({0, 2, 0, 2})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{3, 2, 1, 2, 3, 2, 1, 6, 5, 4, 5, 6, 5, 4}));
  Node e = MakeNode("Pad", {"x", "p"}, {"y"}, {{"mode", Attribute::String("edge")}});
  y = Exec(e, {{"x", x}}, {{"p", Ints({1, 1, 0, 0})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 1, 2, 3, 1, 1, 2, 3, 4, 4, 5, 6}));
  // Opset 18 axes.
  Node a = MakeNode("Pad", {"x", "p", "", "a"}, {"y"});
  y = Exec(a, {{"x", x}}, {{"p", Ints({1, 1})}, {"a", Ints({-1})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{0, 1, 2, 3, 0, 0, 4, 5, 6, 0}));
  EXPECT_EQ(RunError(MakeNode("Pad", {"x", "p"}, {"y"}), {{"x", x}}, {{"p", Ints({1, 1})}}),
            "Pad node 'n': pads has 2 values; a rank-2 input needs 4");
}

TEST(ShapeOpsKernelTest, OneHotAndScatterND) {
  Node n = MakeNode("OneHot", {"i", "d", "v"}, {"y"});
  Tensor y = Exec(n, {{"i", I64({3}, {0, -1, 5})}},
                  {{"d", Tensor::ScalarInt64(3)}, {"v", F32({2}, {0, 1})}});
  EXPECT_EQ(y.shape(), Shape({3, 3}));
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0}));
  n = MakeNode("OneHot", {"i", "d", "v"}, {"y"}, {{"axis", Attribute::Int(0)}});
  y = Exec(n, {{"i", I64({2}, {1, 0})}}, {{"d", Tensor::ScalarInt64(2)}, {"v", F32({2}, {-1, 7})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{-1, 7, 7, -1}));

  Node s = MakeNode("ScatterND", {"x", "i", "u"}, {"y"});
  y = Exec(s, {{"x", Iota({4, 2})}, {"u", F32({2, 2}, {-1, -2, -3, -4})}},
           {{"i", I64({2, 1}, {2, 0})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{-3, -4, 2, 3, -1, -2, 6, 7}));
  s = MakeNode("ScatterND", {"x", "i", "u"}, {"y"}, {{"reduction", Attribute::String("add")}});
  y = Exec(s, {{"x", Iota({4})}, {"u", F32({3}, {10, 20, 30})}}, {{"i", I64({3, 1}, {1, 1, -1})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{0, 31, 2, 33}));
}

// The examples of the ONNX operator documentation (opsets 11, 16, 18) and the deprecated Scatter.
TEST(ShapeOpsKernelTest, ScatterElementsSpecExamples) {
  Node n = MakeNode("ScatterElements", {"x", "i", "u"}, {"y"});
  Tensor y = Exec(n, {{"x", F32({3, 3}, std::vector<float>(9, 0.f))},
                      {"i", I64({2, 3}, {1, 0, 2, 0, 2, 1})},
                      {"u", F32({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f})}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f}));
  Node s = MakeNode("Scatter", {"x", "i", "u"}, {"y"});
  EXPECT_TRUE(y.BitwiseEqual(Exec(s, {{"x", F32({3, 3}, std::vector<float>(9, 0.f))},
                                      {"i", I64({2, 3}, {1, 0, 2, 0, 2, 1})},
                                      {"u", F32({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f})}})));

  const Tensor x = F32({1, 5}, {1, 2, 3, 4, 5});
  const Tensor u = F32({1, 2}, {1.1f, 2.1f});
  auto with = [](std::string red, int64_t axis) {
    std::map<std::string, Attribute> a = {{"axis", Attribute::Int(axis)}};
    if (!red.empty()) a["reduction"] = Attribute::String(red);
    return MakeNode("ScatterElements", {"x", "i", "u"}, {"y"}, a);
  };
  y = Exec(with("", 1), {{"x", x}, {"i", I64({1, 2}, {1, 3})}, {"u", u}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 1.1f, 3, 2.1f, 5}));
  // Negative indices count from the back; int32 indices; axis -1 is axis 1 here.
  y = Exec(with("none", -1), {{"x", x}, {"i", I32({1, 2}, {1, -3})}, {"u", u}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 1.1f, 2.1f, 4, 5}));
  // A repeated index combines its updates with the element in index order.
  const Tensor dup = I64({1, 2}, {1, 1});
  y = Exec(with("add", 1), {{"x", x}, {"i", dup}, {"u", u}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 2.0f + 1.1f + 2.1f, 3, 4, 5}));
  y = Exec(with("mul", 1), {{"x", x}, {"i", dup}, {"u", u}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 2.0f * 1.1f * 2.1f, 3, 4, 5}));
  y = Exec(with("max", 1), {{"x", x}, {"i", dup}, {"u", u}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 2.1f, 3, 4, 5}));
  y = Exec(with("min", 1), {{"x", x}, {"i", dup}, {"u", u}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 1.1f, 3, 4, 5}));
  // Without a reduction the last of the repeated updates stays (ONNX leaves it undefined).
  y = Exec(with("none", 1), {{"x", x}, {"i", dup}, {"u", u}});
  EXPECT_EQ(Vals<float>(y), (std::vector<float>{1, 2.1f, 3, 4, 5}));
}

// Every axis of a rank-3 tensor, indices smaller than data on the other axes and longer on the
// scatter axis (so positions repeat), both index types, against a coordinate-by-coordinate
// reference that applies the updates in index order.
TEST(ShapeOpsKernelTest, ScatterElementsMatchesACoordinateReference) {
  const Shape data = {4, 5, 3};
  std::mt19937_64 rng(7);
  for (int64_t axis : {0, 1, 2, -1})
    for (const char* red : {"none", "add", "mul", "max", "min"})
      for (DType it : {DType::kInt64, DType::kInt32}) {
        const int64_t a = axis < 0 ? axis + 3 : axis;
        Shape ishape = {3, 4, 2};
        ishape[a] = 7;
        Tensor idx(it, ishape);
        for (int64_t e = 0; e < idx.numel(); ++e) {
          const int64_t v = static_cast<int64_t>(rng() % (2 * data[a])) - data[a];
          if (it == DType::kInt64)
            idx.data<int64_t>()[e] = v;
          else
            idx.data<int32_t>()[e] = static_cast<int32_t>(v);
        }
        Tensor x = RandomTensor(data, rng());
        Tensor u = RandomTensor(ishape, rng());
        Tensor want = x;
        const std::string r = red;
        for (int64_t e = 0; e < idx.numel(); ++e) {
          std::vector<int64_t> pos = Unravel(e, ishape);
          int64_t v = idx.GetAsInt64(e);
          pos[a] = v < 0 ? v + data[a] : v;
          int64_t off = 0;
          for (int64_t k = 0; k < 3; ++k) off += pos[k] * Strides(data)[k];
          float& d = want.data<float>()[off];
          const float s = u.data<float>()[e];
          d = r == "none"  ? s
              : r == "add" ? d + s
              : r == "mul" ? d * s
              : r == "max" ? std::max(d, s)
                           : std::min(d, s);
        }
        Node n = MakeNode("ScatterElements", {"x", "i", "u"}, {"y"},
                          {{"axis", Attribute::Int(axis)}, {"reduction", Attribute::String(red)}});
        Tensor y = Exec(n, {{"x", x}, {"i", idx}, {"u", u}});
        EXPECT_TRUE(y.BitwiseEqual(want)) << "axis " << axis << " " << red << " " << DTypeName(it);
      }
}

TEST(ShapeOpsKernelTest, ScatterElementsIntegerDataAndErrors) {
  // int64 data with mul, int32 data with max; bool moves with no reduction.
  Node mul = MakeNode("ScatterElements", {"x", "i", "u"}, {"y"},
                      {{"reduction", Attribute::String("mul")}});
  Tensor y = Exec(
      mul, {{"x", I64({3}, {2, 3, 5})}, {"i", I64({3}, {0, 0, -1})}, {"u", I64({3}, {7, 11, 13})}});
  EXPECT_EQ(Vals<int64_t>(y), (std::vector<int64_t>{154, 3, 65}));
  Node max = MakeNode("ScatterElements", {"x", "i", "u"}, {"y"},
                      {{"axis", Attribute::Int(1)}, {"reduction", Attribute::String("max")}});
  y = Exec(
      max,
      {{"x", I32({2, 2}, {5, -5, 0, 9})}, {"i", I32({2, 1}, {1, 0})}, {"u", I32({2, 1}, {-1, 4})}});
  EXPECT_EQ(Vals<int32_t>(y), (std::vector<int32_t>{5, -1, 4, 9}));
  Node none = MakeNode("ScatterElements", {"x", "i", "u"}, {"y"});
  y = Exec(none, {{"x", Bool({3}, {0, 0, 0})}, {"i", I64({1}, {-2})}, {"u", Bool({1}, {1})}});
  EXPECT_EQ(Vals<uint8_t>(y), (std::vector<uint8_t>{0, 1, 0}));

  // Out-of-range index: the node, the element, the axis and its size.
  Node n = MakeNode("ScatterElements", {"x", "i", "u"}, {"y"}, {{"axis", Attribute::Int(1)}});
  EXPECT_EQ(
      RunError(n, {{"x", Iota({2, 5})}, {"i", I64({2, 2}, {0, 4, -5, 5})}, {"u", Iota({2, 2})}}),
      "ScatterElements node 'n': indices[3] = 5 is out of range for axis 1 of size 5");
  EXPECT_EQ(RunError(n, {{"x", Iota({2, 5})}, {"i", I32({1, 1}, {-6})}, {"u", Iota({1, 1})}}),
            "ScatterElements node 'n': indices[0] = -6 is out of range for axis 1 of size 5");
  // Shape errors, found by inference.
  EXPECT_EQ(RunError(n, {{"x", Iota({2, 5})}, {"i", I64({2}, {0, 1})}, {"u", Iota({2})}}),
            "ScatterElements node 'n': data [2,5] and indices [2] must have the same rank");
  EXPECT_EQ(RunError(n, {{"x", Iota({2, 5})}, {"i", I64({1, 2}, {0, 1})}, {"u", Iota({2, 1})}}),
            "ScatterElements node 'n': updates [2,1] and indices [1,2] must have the same shape");
  EXPECT_EQ(RunError(n, {{"x", Iota({2, 5})}, {"i", I64({3, 1}, {0, 1, 2})}, {"u", Iota({3, 1})}}),
            "ScatterElements node 'n': indices [3,1] exceed data [2,5] on axis 0");
  EXPECT_EQ(RunError(MakeNode("ScatterElements", {"x", "i", "u"}, {"y"},
                              {{"reduction", Attribute::String("mean")}}),
                     {{"x", Iota({2})}, {"i", I64({1}, {0})}, {"u", Iota({1})}}),
            "ScatterElements node 'n': reduction 'mean' is not supported");
  EXPECT_EQ(RunError(MakeNode("ScatterElements", {"x", "i", "u"}, {"y"},
                              {{"reduction", Attribute::String("add")}}),
                     {{"x", Bool({2}, {0, 1})}, {"i", I64({1}, {0})}, {"u", Bool({1}, {1})}}),
            "ScatterElements node 'n': reduction 'add' is not supported for bool");
  EXPECT_EQ(RunError(MakeNode("Scatter", {"x", "i", "u"}, {"y"},
                              {{"reduction", Attribute::String("add")}}),
                     {{"x", Iota({2})}, {"i", I64({1}, {0})}, {"u", Iota({1})}}),
            "Scatter node 'n': Scatter has no attribute 'reduction' (ScatterElements has, from "
            "opset 16)");
}

// --- non-float data passes through unchanged ---

TEST(ShapeOpsKernelTest, Int64AndBoolPassThrough) {
  Tensor xi = IotaI64({2, 3});
  Tensor xb = Bool({2, 3}, {1, 0, 0, 1, 1, 0});
  for (const Tensor& x : {xi, xb}) {
    SCOPED_TRACE(std::string(DTypeName(x.dtype())));
    Tensor y = Exec(MakeNode("Reshape", {"x", "s"}, {"y"}), {}, {{"x", x}, {"s", Ints({3, 2})}});
    EXPECT_EQ(y.dtype(), x.dtype());
    EXPECT_EQ(std::memcmp(y.raw(), x.raw(), x.nbytes()), 0);

    y = Exec(MakeNode("Transpose", {"x"}, {"y"}), {}, {{"x", x}});
    ASSERT_EQ(y.shape(), Shape({3, 2}));
    Tensor back = Exec(MakeNode("Transpose", {"x"}, {"y"}), {}, {{"x", y}});
    EXPECT_TRUE(back.BitwiseEqual(x));

    y = Exec(MakeNode("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::Int(0)}}), {},
             {{"a", x}, {"b", x}});
    EXPECT_EQ(y.shape(), Shape({4, 3}));
    EXPECT_EQ(std::memcmp(y.raw(), x.raw(), x.nbytes()), 0);
    EXPECT_EQ(std::memcmp(static_cast<const char*>(y.raw()) + x.nbytes(), x.raw(), x.nbytes()), 0);

    y = Exec(MakeNode("Slice", {"x", "s", "e", "a"}, {"y"}), {},
             {{"x", x}, {"s", Ints({1})}, {"e", Ints({2})}, {"a", Ints({0})}});
    EXPECT_EQ(y.shape(), Shape({1, 3}));
    EXPECT_EQ(
        std::memcmp(y.raw(), static_cast<const char*>(x.raw()) + x.nbytes() / 2, x.nbytes() / 2),
        0);

    y = Exec(MakeNode("Gather", {"x", "i"}, {"y"}), {}, {{"x", x}, {"i", I64({2}, {1, 0})}});
    Tensor sw = Exec(MakeNode("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::Int(0)}}), {},
                     {{"a", Exec(MakeNode("Slice", {"x", "s", "e"}, {"y"}), {},
                                 {{"x", x}, {"s", Ints({1})}, {"e", Ints({2})}})},
                      {"b", Exec(MakeNode("Slice", {"x", "s", "e"}, {"y"}), {},
                                 {{"x", x}, {"s", Ints({0})}, {"e", Ints({1})}})}});
    EXPECT_TRUE(y.BitwiseEqual(sw));

    y = Exec(MakeNode("Expand", {"x", "s"}, {"y"}), {}, {{"x", x}, {"s", Ints({2, 1, 1})}});
    EXPECT_EQ(y.shape(), Shape({2, 2, 3}));
    EXPECT_EQ(std::memcmp(static_cast<const char*>(y.raw()) + x.nbytes(), x.raw(), x.nbytes()), 0);
  }
}

// --- com.microsoft gradient ops ---

TEST(ShapeOpsKernelTest, GatherGradSumsRepeatedRowsInIndexOrder) {
  // Embedding lookup: data [V=5, D=3], indices [B=2, S=4] with repeats.
  Tensor idx = I64({2, 4}, {1, 3, 1, 0, -1, 3, 3, 1});
  Tensor dy = RandomTensor({2, 4, 3}, 11);
  Node n = MakeNode("GatherGrad", {"s", "i", "dy"}, {"dx"}, {{"axis", Attribute::Int(0)}},
                    "com.microsoft");
  Tensor dx = Exec(n, {{"dy", dy}}, {{"s", Ints({5, 3})}, {"i", idx}});
  ASSERT_EQ(dx.shape(), Shape({5, 3}));
  std::vector<float> want(15, 0.f);
  for (int64_t j = 0; j < 8; ++j) {
    int64_t row = idx.data<int64_t>()[j];
    if (row < 0) row += 5;
    for (int64_t d = 0; d < 3; ++d) want[row * 3 + d] += dy.data<float>()[j * 3 + d];
  }
  EXPECT_EQ(Vals<float>(dx), want);  // bitwise: the same order of additions
  // Every run gives the same bits.
  for (int rep = 0; rep < 3; ++rep)
    EXPECT_TRUE(Exec(n, {{"dy", dy}}, {{"s", Ints({5, 3})}, {"i", idx}}).BitwiseEqual(dx));
  // Axis 1.
  Node n1 = MakeNode("GatherGrad", {"s", "i", "dy"}, {"dx"}, {{"axis", Attribute::Int(1)}},
                     "com.microsoft");
  dx =
      Exec(n1, {{"dy", F32({2, 2}, {1, 2, 3, 4})}}, {{"s", Ints({2, 3})}, {"i", I64({2}, {2, 2})}});
  EXPECT_EQ(Vals<float>(dx), (std::vector<float>{0, 0, 3, 0, 0, 7}));
}

// Zeros, then each tuple's dY slice added in tuple order: repeated tuples accumulate.
TEST(ShapeOpsKernelTest, GatherNDGradSumsRepeatedTuplesInOrder) {
  uint64_t seed = 200;
  for (GatherNDCase c : kGatherNDCases) {
    // Indices drawn from a small range so that tuples repeat.
    Shape ishape = c.lead;
    ishape.push_back(c.k);
    Tensor idx(DType::kInt64, ishape);
    std::mt19937_64 rng(++seed);
    for (int64_t e = 0; e < idx.numel(); ++e) {
      const int64_t dim = c.data[c.b + e % c.k];
      idx.data<int64_t>()[e] = rng() % 2 ? static_cast<int64_t>(rng() % std::min<int64_t>(dim, 2))
                                         : -dim + static_cast<int64_t>(rng() % dim);
    }
    const Shape out = NDOutShape(c);
    Tensor dy = RandomTensor(out, ++seed);
    Node n = MakeNode("GatherNDGrad", {"s", "i", "dy"}, {"dx"},
                      {{"batch_dims", Attribute::Int(c.b)}}, "com.microsoft");
    Tensor dx = Exec(n, {{"dy", dy}}, {{"s", Ints(c.data)}, {"i", idx}});
    ASSERT_EQ(dx.shape(), c.data);
    std::vector<float> want(NumElements(c.data), 0.f);
    for (int64_t e = 0; e < dy.numel(); ++e)  // row-major over dY is tuple order
      want[NDSource(c, idx, out, e)] += dy.data<float>()[e];
    EXPECT_EQ(Vals<float>(dx), want) << ShapeToString(c.data) << " b " << c.b;
  }
  // Two tuples naming the same row: dX holds their sum.
  Node n = MakeNode("GatherNDGrad", {"s", "i", "dy"}, {"dx"}, {}, "com.microsoft");
  Tensor dx = Exec(n, {{"dy", F32({3, 2}, {1, 2, 3, 4, 5, 6})}},
                   {{"s", Ints({2, 2})}, {"i", I64({3, 1}, {1, -1, 0})}});
  EXPECT_EQ(Vals<float>(dx), (std::vector<float>{5, 6, 4, 6}));
  EXPECT_EQ(RunError(n, {{"dy", F32({2, 2}, {1, 2, 3, 4})}},
                     {{"s", Ints({2, 2})}, {"i", I64({3, 1}, {1, 0, 1})}}),
            "GatherNDGrad node 'n': dY has shape [2,2] but GatherND of [2,2] with indices "
            "[3,1] gives [3,2]");
  EXPECT_EQ(
      RunError(n, {{"dy", F32({1, 2}, {1, 2})}}, {{"s", Ints({2, 2})}, {"i", I64({1, 1}, {2})}}),
      "GatherNDGrad node 'n': indices[0] = 2 is out of range for axis 0 of size 2");
}

TEST(ShapeOpsKernelTest, SliceGradAndGatherElementsGrad) {
  Node n = MakeNode("SliceGrad", {"dy", "sh", "s", "e", "a", "p"}, {"dx"}, {}, "com.microsoft");
  Tensor dx = Exec(n, {{"dy", F32({2, 2}, {1, 2, 3, 4})}},
                   {{"sh", Ints({3, 4})},
                    {"s", Ints({2, 3})},
                    {"e", Ints({0, -5})},
                    {"a", Ints({0, 1})},
                    {"p", Ints({-1, -2})}});
  // The forward read rows 2, 1 and columns 3, 1.
  EXPECT_EQ(Vals<float>(dx), (std::vector<float>{0, 0, 0, 0, 0, 4, 0, 3, 0, 2, 0, 1}));
  Node g = MakeNode("GatherElementsGrad", {"dy", "sh", "i"}, {"dx"}, {{"axis", Attribute::Int(1)}},
                    "com.microsoft");
  dx = Exec(g, {{"dy", F32({2, 2}, {1, 2, 3, 4})}},
            {{"sh", Ints({2, 3})}, {"i", I64({2, 2}, {0, 0, -1, 1})}});
  EXPECT_EQ(Vals<float>(dx), (std::vector<float>{3, 0, 0, 0, 4, 3}));
}

// Before folding, data inputs may have unknown ranks and shape operands unknown values:
// inference must answer (with unknowns), not fail or crash.
TEST(ShapeOpsKernelTest, InferenceToleratesUnknownInputs) {
  const In x = Var("x", DType::kFloat32, {}, false);
  const In i = Var("i", DType::kInt64, {}, false);
  const In j = Var("j", DType::kInt64, {}, false);
  const In k = Var("k", DType::kInt64, {}, false);
  std::map<std::string, Attribute> axis0 = {{"axis", Attribute::Int(0)}};
  std::vector<std::pair<Node, std::vector<In>>> cases = {
      {MakeNode("Shape", {"x"}, {"y"}), {x}},
      {MakeNode("Size", {"x"}, {"y"}), {x}},
      {MakeNode("ConstantOfShape", {"i"}, {"y"}), {i}},
      {MakeNode("Range", {"i", "j", "k"}, {"y"}), {i, j, k}},
      {MakeNode("Reshape", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("Flatten", {"x"}, {"y"}), {x}},
      {MakeNode("Squeeze", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("Unsqueeze", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("Transpose", {"x"}, {"y"}), {x}},
      {MakeNode("Expand", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("Tile", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("Concat", {"x", "x"}, {"y"}, axis0), {x}},
      {MakeNode("Split", {"x", "i"}, {"a", "b"}), {x, i}},
      {MakeNode("Slice", {"x", "i", "j"}, {"y"}), {x, i, j}},
      {MakeNode("Gather", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("GatherElements", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("GatherND", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("Trilu", {"x"}, {"y"}), {x}},
      {MakeNode("Pad", {"x", "i"}, {"y"}), {x, i}},
      {MakeNode("OneHot", {"i", "j", "x"}, {"y"}), {i, j, x}},
      {MakeNode("ScatterND", {"x", "i", "x"}, {"y"}), {x, i}},
      {MakeNode("ScatterElements", {"x", "i", "x"}, {"y"}), {x, i}},
      {MakeNode("SliceGrad", {"x", "i", "j", "k"}, {"y"}, {}, "com.microsoft"), {x, i, j, k}},
      {MakeNode("GatherGrad", {"i", "j", "x"}, {"y"}, {}, "com.microsoft"), {x, i, j}},
      {MakeNode("GatherElementsGrad", {"x", "i", "j"}, {"y"}, {}, "com.microsoft"), {x, i, j}},
      {MakeNode("GatherNDGrad", {"i", "j", "x"}, {"y"}, {}, "com.microsoft"), {x, i, j}},
  };
  for (const auto& [node, ins] : cases) {
    auto t = Infer(node, ins);
    EXPECT_TRUE(t.ok()) << node.op_type << ": " << t.status().message();
  }
  // Known input shapes, unknown shape operands: ranks are kept where they are decidable.
  const In x23 = Var("x", DType::kFloat32, {2, 3});
  auto t = Infer(MakeNode("Tile", {"x", "i"}, {"y"}), {x23, Var("i", DType::kInt64, {2})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, Shape({-1, -1}));
  t = Infer(MakeNode("Unsqueeze", {"x", "i"}, {"y"}), {x23, Var("i", DType::kInt64, {1})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, Shape({-1, -1, -1}));
  t = Infer(MakeNode("Expand", {"x", "i"}, {"y"}), {x23, Var("i", DType::kInt64, {3})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, Shape({-1, 2, 3}));
  t = Infer(MakeNode("Split", {"x", "i"}, {"a", "b"}, {{"axis", Attribute::Int(1)}}),
            {x23, Var("i", DType::kInt64, {2})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[1].shape, Shape({2, -1}));
}

TEST(ShapeOpsKernelTest, EveryOpHasSchemaAndKernel) {
  for (const char* op :
       {"Constant", "Shape",   "Size",      "ConstantOfShape", "Range",           "Reshape",
        "Flatten",  "Squeeze", "Unsqueeze", "Transpose",       "Expand",          "Tile",
        "Concat",   "Split",   "Slice",     "Gather",          "GatherElements",  "GatherND",
        "Trilu",    "Pad",     "OneHot",    "ScatterND",       "ScatterElements", "Scatter"}) {
    EXPECT_NE(OpSchemas().Find("", op), nullptr) << op;
    EXPECT_NE(CpuKernels().Find("", op), nullptr) << op;
  }
  for (const char* op : {"SliceGrad", "GatherGrad", "GatherElementsGrad", "GatherNDGrad"}) {
    EXPECT_NE(OpSchemas().Find("com.microsoft", op), nullptr) << op;
    EXPECT_NE(CpuKernels().Find("com.microsoft", op), nullptr) << op;
  }
}

}  // namespace
}  // namespace foundry
