// Every threaded CPU kernel gives the same bits at 1, 2, 3 and 4 threads (kernels/cpu/parallel.h:
// chunks fixed by the shape, each writing only its own outputs). Shapes are odd and large enough
// to span several chunks: 67 x 1031 elements are three chunks of kElementGrain (32768); rows of
// 257 make chunks of 127 rows, 301 rows three of them.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr char kMs[] = "com.microsoft";

struct Case {
  std::string label;
  Node node;
  std::map<std::string, Tensor> inputs;
  std::map<std::string, Tensor> constants;  // shape operands, axes, indices
};

Tensor I64(Shape s, std::vector<int64_t> v) { return Tensor::FromVector(DType::kInt64, s, v); }

// `n` indices in [0, dim), repeats included (the scatter-adds must sum them in order).
Tensor Indices(int64_t n, int64_t dim, uint64_t seed) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>((i * 7919 + seed * 31) % dim);
  return I64({n}, v);
}

Attribute Str(const char* s) { return Attribute::String(s); }

std::vector<Case> Cases() {
  const Shape big = {67, 1031};
  const Tensor x = RandomTensor(big, 1, -5.f, 5.f), dy = RandomTensor(big, 2);
  const Tensor x2 = RandomTensor(big, 3), x3 = RandomTensor(big, 4);
  const Tensor row = RandomTensor({1031}, 5), col = RandomTensor({67, 1}, 6);
  const Tensor pos = RandomTensor(big, 7, 0.5f, 2.f);
  std::vector<Case> c;
  for (const char* op : {"Exp", "Erf", "Tanh", "Sigmoid", "Relu", "Neg", "Sqrt", "Softplus"})
    c.push_back({op, MakeNode(op, {"x"}), {{"x", op == std::string("Sqrt") ? pos : x}}, {}});
  c.push_back({"Gelu_ms", MakeNode("Gelu", {"x"}, {"y"}, {}, kMs), {{"x", x}}, {}});
  c.push_back({"Gelu_onnx_tanh", MakeNode("Gelu", {"x"}, {"y"}, {{"approximate", Str("tanh")}}),
               {{"x", x}}, {}});
  c.push_back({"FastGelu", MakeNode("FastGelu", {"x"}, {"y"}, {}, kMs), {{"x", x}}, {}});
  c.push_back({"QuickGelu", MakeNode("QuickGelu", {"x"}, {"y"}, {}, kMs), {{"x", x}}, {}});
  for (const char* op : {"GeluGrad", "FastGeluGrad", "QuickGeluGrad", "ReluGrad", "SigmoidGrad",
                         "TanhGrad"})
    c.push_back({op, MakeNode(op, {"dy", "x"}, {"y"}, {}, kMs), {{"dy", dy}, {"x", x}}, {}});
  c.push_back({"Add", MakeNode("Add", {"a", "b"}), {{"a", x}, {"b", x2}}, {}});
  c.push_back({"Add_bias", MakeNode("Add", {"a", "b"}), {{"a", x}, {"b", row}}, {}});
  c.push_back({"Mul_column", MakeNode("Mul", {"a", "b"}), {{"a", col}, {"b", x}}, {}});
  c.push_back({"Sub_outer", MakeNode("Sub", {"a", "b"}), {{"a", col}, {"b", row}}, {}});
  c.push_back({"Div", MakeNode("Div", {"a", "b"}), {{"a", x}, {"b", pos}}, {}});
  c.push_back(
      {"Sum3", MakeNode("Sum", {"a", "b", "c"}), {{"a", x}, {"b", x2}, {"c", x3}}, {}});
  c.push_back({"Sum_broadcast", MakeNode("Sum", {"a", "b", "c"}),
               {{"a", x}, {"b", row}, {"c", col}}, {}});
  c.push_back({"Where", MakeNode("Where", {"c", "a", "b"}),
               {{"c", [&] {
                  Tensor m(DType::kBool, big);
                  for (int64_t i = 0; i < m.numel(); ++i) m.data<bool>()[i] = (i * 13) % 7 < 3;
                  return m;
                }()},
                {"a", x},
                {"b", row}},
               {}});
  c.push_back({"Cast", MakeNode("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(11)}}), {{"x", x}}, {}});
  c.push_back({"Dropout",
               MakeNode("Dropout", {"x", "ratio", "training"}, {"y", "mask"}),
               {{"x", x}},
               {{"ratio", Tensor::FromVector(DType::kFloat32, {}, std::vector<float>{0.3f})},
                {"training", [] {
                  Tensor t(DType::kBool, {});
                  t.data<bool>()[0] = true;
                  return t;
                }()}}});

  // Rows of 257 (RowGrain: 127 rows per chunk) and lanes along a non-last axis.
  const Tensor r = RandomTensor({301, 257}, 8, -4.f, 4.f), dr = RandomTensor({301, 257}, 9);
  const Tensor lanes = RandomTensor({5, 257, 61}, 10, -4.f, 4.f);
  c.push_back({"Softmax", MakeNode("Softmax", {"x"}), {{"x", r}}, {}});
  c.push_back({"LogSoftmax", MakeNode("LogSoftmax", {"x"}), {{"x", r}}, {}});
  c.push_back({"Softmax_axis1",
               MakeNode("Softmax", {"x"}, {"y"}, {{"axis", Attribute::Int(1)}}), {{"x", lanes}}, {}});
  c.push_back({"SoftmaxGrad", MakeNode("SoftmaxGrad_13", {"dy", "y"}, {"dx"}, {}, kMs),
               {{"dy", dr}, {"y", r}}, {}});
  c.push_back({"LogSoftmaxGrad", MakeNode("LogSoftmaxGrad_13", {"dy", "y"}, {"dx"}, {}, kMs),
               {{"dy", dr}, {"y", RandomTensor({301, 257}, 11, -6.f, -0.1f)}}, {}});
  const Tensor scale = RandomTensor({257}, 12), bias = RandomTensor({257}, 13);
  c.push_back({"LayerNorm",
               MakeNode("LayerNormalization", {"x", "s", "b"}, {"y", "mean", "inv"}),
               {{"x", r}, {"s", scale}, {"b", bias}}, {}});
  c.push_back({"LayerNormGrad",
               MakeNode("LayerNormalizationGrad", {"dy", "x", "s", "mean", "inv"},
                        {"dx", "ds", "db"}, {}, kMs),
               {{"dy", dr},
                {"x", r},
                {"s", scale},
                {"mean", RandomTensor({301, 1}, 14)},
                {"inv", RandomTensor({301, 1}, 15, 0.5f, 2.f)}},
               {}});
  c.push_back({"SimplifiedLayerNorm",
               MakeNode("SimplifiedLayerNormalization", {"x", "s"}, {"y", "inv"}, {}, kMs),
               {{"x", r}, {"s", scale}}, {}});
  c.push_back({"ReduceSum_leading",
               MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(0)}}),
               {{"x", r}}, {{"axes", I64({1}, {0})}}});
  c.push_back({"ReduceMean_trailing", MakeNode("ReduceMean", {"x"}, {"y"}, {{"axes", Attribute::Ints({-1})}}),
               {{"x", r}}, {}});
  c.push_back({"ReduceMax_middle", MakeNode("ReduceMax", {"x"}, {"y"}, {{"axes", Attribute::Ints({1})}}),
               {{"x", lanes}}, {}});
  c.push_back({"CumSum", MakeNode("CumSum", {"x", "axis"}), {{"x", lanes}}, {{"axis", I64({}, {1})}}});

  // Cross-entropy over 37 rows of 3001 classes (10 rows per chunk), one label ignored.
  const Tensor scores = RandomTensor({37, 3001}, 16, -8.f, 8.f);
  std::vector<int64_t> lab(37);
  for (int64_t i = 0; i < 37; ++i) lab[i] = (i * 977) % 3001;
  lab[4] = -100;
  const Tensor labels = I64({37}, lab);
  for (const char* red : {"mean", "sum", "none"})
    c.push_back({std::string("SoftmaxCrossEntropy_") + red,
                 MakeNode("SoftmaxCrossEntropyLoss", {"s", "l"}, {"loss", "lp"},
                          {{"reduction", Str(red)}, {"ignore_index", Attribute::Int(-100)}}),
                 {{"s", scores}}, {{"l", labels}}});
  c.push_back({"SoftmaxCrossEntropyGrad",
               MakeNode("SoftmaxCrossEntropyLossGrad", {"dy", "lp", "l"}, {"ds"},
                        {{"ignore_index", Attribute::Int(-100)}}, kMs),
               {{"dy", Tensor::FromVector(DType::kFloat32, {}, std::vector<float>{0.7f})},
                {"lp", RandomTensor({37, 3001}, 17, -12.f, -0.5f)}},
               {{"l", labels}}});

  // Moving elements: 67 x 37 x 29 (71891 elements).
  const Tensor t3 = RandomTensor({67, 37, 29}, 18);
  c.push_back({"Transpose", MakeNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints({2, 0, 1})}}),
               {{"x", t3}}, {}});
  c.push_back({"Transpose_inner", MakeNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints({1, 0, 2})}}),
               {{"x", t3}}, {}});
  c.push_back({"Slice", MakeNode("Slice", {"x", "st", "en", "ax"}), {{"x", t3}},
               {{"st", I64({2}, {3, 1})}, {"en", I64({2}, {60, 28})}, {"ax", I64({2}, {0, 2})}}});
  c.push_back({"SliceGrad", MakeNode("SliceGrad", {"dy", "shape", "st", "en", "ax"}, {"dx"}, {}, kMs),
               {{"dy", RandomTensor({57, 37, 27}, 19)}},
               {{"shape", I64({3}, {67, 37, 29})},
                {"st", I64({2}, {3, 1})},
                {"en", I64({2}, {60, 28})},
                {"ax", I64({2}, {0, 2})}}});
  c.push_back({"Concat", MakeNode("Concat", {"a", "b"}, {"y"}, {{"axis", Attribute::Int(1)}}),
               {{"a", t3}, {"b", RandomTensor({67, 5, 29}, 20)}}, {}});
  const Tensor table = RandomTensor({1000, 129}, 21);
  c.push_back({"Gather", MakeNode("Gather", {"t", "i"}), {{"t", table}}, {{"i", Indices(517, 1000, 1)}}});
  c.push_back({"GatherGrad", MakeNode("GatherGrad", {"shape", "i", "dy"}, {"dx"}, {}, kMs),
               {{"dy", RandomTensor({517, 129}, 22)}},
               {{"shape", I64({2}, {1000, 129})}, {"i", Indices(517, 1000, 2)}}});
  return c;
}

class ThreadInvarianceTest : public testing::TestWithParam<Case> {
 protected:
  void TearDown() override { SetCpuThreads(1); }
};

TEST_P(ThreadInvarianceTest, SameBitsAtOneToFourThreads) {
  const Case& c = GetParam();
  SetCpuThreads(1);
  auto one = RunSingleNode(c.node, c.inputs, c.constants);
  ASSERT_TRUE(one.ok()) << one.status().message();
  for (int threads = 2; threads <= 4; ++threads) {
    SetCpuThreads(threads);
    auto many = RunSingleNode(c.node, c.inputs, c.constants);
    ASSERT_TRUE(many.ok()) << many.status().message();
    ASSERT_EQ(many->size(), one->size());
    for (size_t k = 0; k < one->size(); ++k)
      EXPECT_TRUE((*many)[k].BitwiseEqual((*one)[k]))
          << c.label << " output " << k << " at " << threads << " threads";
  }
  SetCpuThreads(1);
}

INSTANTIATE_TEST_SUITE_P(Kernels, ThreadInvarianceTest, testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace foundry
