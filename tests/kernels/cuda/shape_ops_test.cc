// The CUDA shape-op kernels against the CPU reference (kernels/cpu/shape_ops.cc) on a GPU: every
// op, several shapes including sizes that are not multiples of the 256-thread block, rank 0,
// broadcasting, negative axes / indices / steps. Data movement must be exact (atol = rtol = 0);
// the scatter-adds sum in the CPU's order, so they are compared exactly too. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tests/support/cuda_check.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
using TensorMap = std::map<std::string, Tensor>;

Tensor F32(Shape s, std::vector<float> v) { return Tensor::FromVector(DType::kFloat32, s, v); }
Tensor I64(Shape s, std::vector<int64_t> v) { return Tensor::FromVector(DType::kInt64, s, v); }
Tensor Ints(std::vector<int64_t> v) { return I64({static_cast<int64_t>(v.size())}, v); }
Tensor R(Shape s, uint64_t seed) { return RandomTensor(std::move(s), seed, -2.f, 2.f); }

Tensor Counting(DType t, Shape s) {
  Tensor x(t, std::move(s));
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (t == DType::kInt64) x.data<int64_t>()[i] = 1000 + i;
    if (t == DType::kInt32) x.data<int32_t>()[i] = static_cast<int32_t>(i % 1000 - 500);
    if (t == DType::kBool) x.data<uint8_t>()[i] = static_cast<uint8_t>(i % 3 == 0);
  }
  return x;
}

// Indices in [-dim, dim).
Tensor Idx(Shape s, int64_t dim, uint64_t seed, DType t = DType::kInt64) {
  Tensor r = RandomTensor(s, seed, 0.f, 1.f);
  Tensor x(t, std::move(s));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t v =
        std::min<int64_t>(static_cast<int64_t>(r.data<float>()[i] * 2 * dim), 2 * dim - 1) - dim;
    if (t == DType::kInt64)
      x.data<int64_t>()[i] = v;
    else
      x.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  return x;
}

Node Op(const std::string& op, std::vector<std::string> in,
        std::map<std::string, Attribute> attrs = {}, std::vector<std::string> out = {"y"},
        const std::string& domain = "") {
  return MakeNode(op, std::move(in), std::move(out), std::move(attrs), domain);
}

void ExpectSame(const Node& n, const TensorMap& inputs, const TensorMap& constants,
                const std::string& what) {
  Status s = CompareCudaWithCpu(n, inputs, constants, 0.0, 0.0);
  EXPECT_TRUE(s.ok()) << what << ": " << s.message();
}

TEST(CudaShapeOpsTest, ViewsAndCreation) {
  FOUNDRY_REQUIRE_GPU();
  Tensor x = R({2, 3, 257}, 1);
  ExpectSame(Op("Reshape", {"x", "s"}), {{"x", x}}, {{"s", Ints({-1, 257})}}, "Reshape");
  ExpectSame(Op("Flatten", {"x"}, {{"axis", Attribute::Int(2)}}), {{"x", x}}, {}, "Flatten");
  ExpectSame(Op("Unsqueeze", {"x", "a"}), {{"x", x}}, {{"a", Ints({0, -1})}}, "Unsqueeze");
  ExpectSame(Op("Squeeze", {"x", "a"}), {{"x", R({1, 1000, 1}, 2)}}, {{"a", Ints({0, 2})}},
             "Squeeze");
  ExpectSame(Op("Constant", {}, {{"value", Attribute::FromTensor(R({3, 5}, 3))}}), {}, {},
             "Constant small");
  ExpectSame(Op("Constant", {}, {{"value", Attribute::FromTensor(R({1000}, 4))}}), {}, {},
             "Constant large");
  ExpectSame(Op("Constant", {}, {{"value_ints", Attribute::Ints({1, -2, 3})}}), {}, {},
             "Constant ints");
  ExpectSame(Op("Shape", {"x"}, {{"start", Attribute::Int(-2)}}), {{"x", x}}, {}, "Shape");
  ExpectSame(Op("Size", {"x"}), {{"x", x}}, {}, "Size");
  ExpectSame(Op("ConstantOfShape", {"s"}), {}, {{"s", Ints({7, 300})}}, "ConstantOfShape 0");
  ExpectSame(Op("ConstantOfShape", {"s"}, {{"value", Attribute::FromTensor(I64({1}, {-9}))}}), {},
             {{"s", Ints({1025})}}, "ConstantOfShape i64");
  ExpectSame(
      Op("Range", {"a", "b", "c"}), {},
      {{"a", Tensor::Scalar(0.1f)}, {"b", Tensor::Scalar(300.f)}, {"c", Tensor::Scalar(0.7f)}},
      "Range f32");
  ExpectSame(Op("Range", {"a", "b", "c"}), {},
             {{"a", Tensor::ScalarInt64(3)},
              {"b", Tensor::ScalarInt64(-2000)},
              {"c", Tensor::ScalarInt64(-7)}},
             "Range i64");
}

TEST(CudaShapeOpsTest, StridedCopies) {
  FOUNDRY_REQUIRE_GPU();
  for (DType t : {DType::kFloat32, DType::kInt64, DType::kBool}) {
    auto X = [&](Shape s, uint64_t seed) {
      return t == DType::kFloat32 ? R(s, seed) : Counting(t, s);
    };
    ExpectSame(Op("Transpose", {"x"}, {{"perm", Attribute::Ints({0, 2, 1, 3})}}),
               {{"x", X({2, 257, 3, 64}, 1)}}, {}, "Transpose attention");
    ExpectSame(Op("Transpose", {"x"}), {{"x", X({1000, 7}, 2)}}, {}, "Transpose 2d");
    ExpectSame(Op("Transpose", {"x"}), {{"x", X({}, 3)}}, {}, "Transpose rank 0");
    ExpectSame(Op("Expand", {"x", "s"}), {{"x", X({3, 1}, 4)}}, {{"s", Ints({2, 3, 255})}},
               "Expand");
    ExpectSame(Op("Expand", {"x", "s"}), {{"x", X({1}, 5)}}, {{"s", Ints({1})}}, "Expand 1");
    ExpectSame(Op("Tile", {"x", "r"}), {{"x", X({7, 3}, 6)}}, {{"r", Ints({3, 43})}}, "Tile");
    ExpectSame(Op("Concat", {"a", "b", "c"}, {{"axis", Attribute::Int(-1)}}),
               {{"a", X({4, 255}, 7)}, {"b", X({4, 1}, 8)}, {"c", X({4, 257}, 9)}}, {}, "Concat");
    ExpectSame(Op("Split", {"x", "s"}, {{"axis", Attribute::Int(1)}}, {"a", "b", "c"}),
               {{"x", X({3, 1000}, 10)}}, {{"s", Ints({1, 742, 257})}}, "Split");
    ExpectSame(Op("Split", {"x"}, {{"axis", Attribute::Int(0)}}, {"a", "b"}),
               {{"x", X({7, 5}, 11)}}, {}, "Split equal");
    ExpectSame(Op("Slice", {"x", "s", "e", "a", "p"}), {{"x", X({6, 1000}, 12)}},
               {{"s", Ints({-1, 990})},
                {"e", Ints({kMin, 3})},
                {"a", Ints({0, -1})},
                {"p", Ints({-2, -3})}},
               "Slice negative steps");
    ExpectSame(Op("Slice", {"x", "s", "e"}), {{"x", X({6, 300}, 13)}},
               {{"s", Ints({1, 5})}, {"e", Ints({kMax, 262})}}, "Slice clamp");
  }
  ExpectSame(Op("SliceGrad", {"dy", "sh", "s", "e", "a", "p"}, {}, {"dx"}, "com.microsoft"),
             {{"dy", R({3, 330}, 14)}},
             {{"sh", Ints({6, 1000})},
              {"s", Ints({-1, 990})},
              {"e", Ints({kMin, 0})},
              {"a", Ints({0, 1})},
              {"p", Ints({-2, -3})}},
             "SliceGrad");
}

TEST(CudaShapeOpsTest, IndexingAndScatters) {
  FOUNDRY_REQUIRE_GPU();
  for (DType it : {DType::kInt64, DType::kInt32}) {
    ExpectSame(Op("Gather", {"x", "i"}),
               {{"x", R({1000, 33}, 1)}, {"i", Idx({4, 257}, 1000, 2, it)}}, {},
               "Gather embedding");
    ExpectSame(Op("Gather", {"x", "i"}, {{"axis", Attribute::Int(-1)}}),
               {{"x", R({3, 7, 10}, 3)}, {"i", Idx({}, 10, 4, it)}}, {}, "Gather scalar index");
    ExpectSame(Op("GatherElements", {"x", "i"}, {{"axis", Attribute::Int(1)}}),
               {{"x", R({5, 300}, 5)}, {"i", Idx({5, 257}, 300, 6, it)}}, {}, "GatherElements");
    // Embedding backward: 1000 rows, 2048 indices with repeats; an axis-1 case.
    ExpectSame(Op("GatherGrad", {"s", "i", "dy"}, {}, {"dx"}, "com.microsoft"),
               {{"dy", R({2, 1024, 33}, 7)}},
               {{"s", Ints({1000, 33})}, {"i", Idx({2, 1024}, 50, 8, it)}}, "GatherGrad");
    ExpectSame(
        Op("GatherGrad", {"s", "i", "dy"}, {{"axis", Attribute::Int(1)}}, {"dx"}, "com.microsoft"),
        {{"dy", R({3, 255, 2}, 9)}}, {{"s", Ints({3, 10, 2})}, {"i", Idx({255}, 10, 10, it)}},
        "GatherGrad axis 1");
    ExpectSame(Op("GatherElementsGrad", {"dy", "s", "i"}, {{"axis", Attribute::Int(0)}}, {"dx"},
                  "com.microsoft"),
               {{"dy", R({300, 7}, 11)}}, {{"s", Ints({10, 7})}, {"i", Idx({300, 7}, 10, 12, it)}},
               "GatherElementsGrad");
    // GatherND: rotary cos[position_ids] ([B, S, D] by [B, S', 1], batch_dims 1) and a k=2
    // lookup; GatherNDGrad with 2048 tuples over 300 rows (repeats) and k = 2.
    const std::map<std::string, Attribute> b1 = {{"batch_dims", Attribute::Int(1)}};
    ExpectSame(Op("GatherND", {"x", "i"}, b1),
               {{"x", R({2, 300, 33}, 20)}, {"i", Idx({2, 513, 1}, 300, 21, it)}}, {},
               "GatherND batch_dims 1");
    ExpectSame(Op("GatherND", {"x", "i"}),
               {{"x", R({6, 6, 257}, 22)}, {"i", Idx({300, 2}, 6, 23, it)}}, {}, "GatherND k=2");
    ExpectSame(Op("GatherNDGrad", {"s", "i", "dy"}, b1, {"dx"}, "com.microsoft"),
               {{"dy", R({2, 1024, 33}, 24)}},
               {{"s", Ints({2, 300, 33})}, {"i", Idx({2, 1024, 1}, 300, 25, it)}},
               "GatherNDGrad batch_dims 1");
    ExpectSame(Op("GatherNDGrad", {"s", "i", "dy"}, {}, {"dx"}, "com.microsoft"),
               {{"dy", R({300, 5}, 26)}}, {{"s", Ints({6, 6, 5})}, {"i", Idx({300, 2}, 6, 27, it)}},
               "GatherNDGrad k=2");
  }
  // The indices at run time (not constants): the same results.
  ExpectSame(Op("GatherGrad", {"s", "i", "dy"}, {}, {"dx"}, "com.microsoft"),
             {{"dy", R({4096, 8}, 13)}, {"i", Idx({4096}, 257, 14)}}, {{"s", Ints({257, 8})}},
             "GatherGrad run-time indices");
  ExpectSame(Op("GatherNDGrad", {"s", "i", "dy"}, {}, {"dx"}, "com.microsoft"),
             {{"dy", R({4096, 8}, 28)}, {"i", Idx({4096, 1}, 257, 29)}}, {{"s", Ints({257, 8})}},
             "GatherNDGrad run-time indices");
  for (const char* red : {"none", "add", "mul", "max", "min"})
    ExpectSame(Op("ScatterND", {"x", "i", "u"}, {{"reduction", Attribute::String(red)}}),
               {{"x", R({300, 5}, 15)}, {"u", R({1000, 5}, 16)}}, {{"i", Idx({1000, 1}, 300, 17)}},
               std::string("ScatterND ") + red);
  ExpectSame(Op("ScatterND", {"x", "i", "u"}), {{"x", R({4, 6, 3}, 18)}, {"u", R({5, 3}, 19)}},
             {{"i", I64({5, 2}, {0, 0, 3, 5, -1, -1, 0, 0, 2, 1})}}, "ScatterND k=2");
  // ScatterElements: 1000 updates into 300 positions of each column (repeats), every reduction,
  // both index types; an axis -1 case with indices narrower than data; run-time indices; int64
  // data and the deprecated Scatter.
  for (DType it : {DType::kInt64, DType::kInt32})
    for (const char* red : {"none", "add", "mul", "max", "min"})
      ExpectSame(Op("ScatterElements", {"x", "i", "u"}, {{"reduction", Attribute::String(red)}}),
                 {{"x", R({300, 5}, 30)}, {"u", R({1000, 5}, 31)}},
                 {{"i", Idx({1000, 5}, 300, 32, it)}},
                 std::string("ScatterElements ") + red + " " + std::string(DTypeName(it)));
  ExpectSame(Op("ScatterElements", {"x", "i", "u"},
                {{"axis", Attribute::Int(-1)}, {"reduction", Attribute::String("add")}}),
             {{"x", R({3, 7, 257}, 33)}, {"u", R({2, 5, 513}, 34)}},
             {{"i", Idx({2, 5, 513}, 257, 35)}}, "ScatterElements axis -1");
  ExpectSame(Op("ScatterElements", {"x", "i", "u"}, {{"axis", Attribute::Int(1)}}),
             {{"x", R({4, 300}, 36)}, {"u", R({4, 100}, 37)}, {"i", Idx({4, 100}, 300, 38)}}, {},
             "ScatterElements run-time indices");
  ExpectSame(Op("ScatterElements", {"x", "i", "u"}, {{"reduction", Attribute::String("add")}}),
             {{"x", Counting(DType::kInt64, {50, 3})}, {"u", Counting(DType::kInt64, {400, 3})}},
             {{"i", Idx({400, 3}, 50, 39)}}, "ScatterElements int64 add");
  ExpectSame(Op("Scatter", {"x", "i", "u"}, {{"axis", Attribute::Int(1)}}),
             {{"x", Counting(DType::kBool, {3, 9})}, {"u", Counting(DType::kBool, {3, 4})}},
             {{"i", Idx({3, 4}, 9, 40)}}, "Scatter bool");
}

TEST(CudaShapeOpsTest, MasksPaddingOneHot) {
  FOUNDRY_REQUIRE_GPU();
  for (int upper : {0, 1})
    for (int64_t k : {int64_t{0}, int64_t{-3}, int64_t{5}, kMax}) {
      ExpectSame(Op("Trilu", {"x", "k"}, {{"upper", Attribute::Int(upper)}}),
                 {{"x", R({2, 257, 255}, 1)}}, {{"k", Tensor::ScalarInt64(k)}}, "Trilu");
      ExpectSame(Op("Trilu", {"x", "k"}, {{"upper", Attribute::Int(upper)}}),
                 {{"x", R({7, 9}, 2)}, {"k", Tensor::ScalarInt64(k)}}, {}, "Trilu run-time k");
    }
  ExpectSame(Op("Trilu", {"x"}), {{"x", Counting(DType::kBool, {300, 300})}}, {}, "Trilu bool");
  for (const char* mode : {"constant", "edge", "reflect"})
    ExpectSame(Op("Pad", {"x", "p"}, {{"mode", Attribute::String(mode)}}), {{"x", R({3, 255}, 3)}},
               {{"p", Ints({1, 2, 2, 5})}}, std::string("Pad ") + mode);
  ExpectSame(Op("Pad", {"x", "p", "v", "a"}),
             {{"x", R({3, 4, 257}, 4)}, {"v", Tensor::Scalar(7.f)}},
             {{"p", Ints({-1, 3})}, {"a", Ints({-1})}}, "Pad value axes");
  ExpectSame(Op("OneHot", {"i", "d", "v"}), {{"i", Idx({4, 257}, 10, 5)}, {"v", F32({2}, {0, 1})}},
             {{"d", Tensor::ScalarInt64(10)}}, "OneHot");
  ExpectSame(Op("OneHot", {"i", "d", "v"}, {{"axis", Attribute::Int(0)}}),
             {{"i", Idx({1000}, 3, 6, DType::kInt32)}, {"v", F32({2}, {-1, 2})}},
             {{"d", Tensor::ScalarInt64(3)}}, "OneHot axis 0");
}

}  // namespace
}  // namespace foundry
