// The CUDA math kernels (kernels/cuda/math.cu) against the CPU reference, op by op
// (CompareCudaWithCpu: atol + rtol * |cpu|), on shapes that are not multiples of the block sizes
// (1, 7, 255, 257, 1000+), with broadcasting, transposes and every reduction axis combination; plus
// determinism (the same inputs give the same bits twice). Skipped without a GPU.
//
// Tolerances: the GPU sums in a different order than the CPU (a block tree vs a sequential loop),
// both in double for everything but the GEMMs, so the f32 outputs agree to a few ulps: 1e-5 /
// 1e-5. cuBLAS and OpenBLAS both sum GEMMs in fp32 in different orders: error ~ k * u * |a||b|,
// about 1e-5 for k ~ 100 on [-1, 1] inputs, hence 1e-4 / 1e-4 for the matmuls.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/support/cuda_check.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr char kMs[] = "com.microsoft";

Tensor I64(Shape shape, std::vector<int64_t> v) {
  return Tensor::FromVector<int64_t>(DType::kInt64, std::move(shape), v);
}

#define EXPECT_MATCHES_CPU(...)                   \
  do {                                            \
    Status st_ = CompareCudaWithCpu(__VA_ARGS__); \
    EXPECT_TRUE(st_.ok()) << st_.message();       \
  } while (0)

// ============================== matrix products ==============================

TEST(CudaMathTest, MatMulShapesBroadcastingAndTransposes) {
  FOUNDRY_REQUIRE_GPU();
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{3, 5}, {5, 7}, false, false},
      {{1, 1}, {1, 1}, false, false},
      {{2, 3, 5}, {5, 7}, false, false},
      {{5}, {5, 7}, false, false},
      {{3, 5}, {5}, false, false},
      {{5}, {5}, false, false},
      {{7}, {2, 7, 3}, false, false},
      {{2, 3, 7}, {7}, false, false},
      {{2, 1, 3, 4}, {5, 4, 6}, false, false},
      {{1, 3, 5}, {2, 5, 7}, false, false},
      {{3, 5}, {2, 5, 7}, false, false},
      {{2, 1, 4, 5}, {1, 3, 5, 6}, false, false},
      {{3, 4, 1, 6, 5}, {4, 1, 5, 7}, false, false},
      {{3, 0}, {0, 4}, false, false},
      {{3, 67, 45}, {45, 33}, false, false},
      {{257, 255}, {255, 129}, false, false},
      {{4, 1000, 64}, {64, 1001}, false, false},
      {{2, 5, 3}, {7, 5}, true, true},
      {{1, 4, 3}, {2, 4, 6}, true, false},
      {{2, 3, 45, 67}, {2, 3, 33, 45}, true, true},
      {{12, 257, 64}, {12, 257, 64}, false, true},  // attention scores q k^T
      {{12, 64, 257}, {12, 257, 64}, true, false},
  };
  for (const Case& c : cases) {
    Tensor a = RandomTensor(c.a, 1), b = RandomTensor(c.b, 2);
    std::map<std::string, Tensor> in = {{"a", a}, {"b", b}};
    std::string what = ShapeToString(c.a) + " x " + ShapeToString(c.b);
    if (!c.ta && !c.tb) {
      Status st = CompareCudaWithCpu(MakeNode("MatMul", {"a", "b"}, {"y"}), in, {}, 1e-4, 1e-4);
      EXPECT_TRUE(st.ok()) << what << ": " << st.message();
    }
    Node fused = MakeNode("FusedMatMul", {"a", "b"}, {"y"},
                          {{"transA", Attribute::Int(c.ta)},
                           {"transB", Attribute::Int(c.tb)},
                           {"alpha", Attribute::Float(0.5f)}},
                          kMs);
    Status st = CompareCudaWithCpu(fused, in, {}, 1e-4, 1e-4);
    EXPECT_TRUE(st.ok()) << what << " fused: " << st.message();
  }
}

TEST(CudaMathTest, GemmVariants) {
  FOUNDRY_REQUIRE_GPU();
  struct Case {
    bool ta, tb;
    float alpha, beta;
    Shape c;
    bool has_c;
  };
  for (const Case& gc : std::vector<Case>{{false, false, 1.f, 1.f, {}, false},
                                          {true, false, 1.f, 1.f, {257, 255}, true},
                                          {false, true, 0.5f, 2.f, {255}, true},
                                          {true, true, -1.5f, 0.25f, {257, 1}, true},
                                          {false, false, 1.f, 1.f, {}, true},
                                          {false, false, 2.f, 0.f, {1, 255}, true}}) {
    const int64_t m = 257, k = 100, n = 255;
    Tensor a = RandomTensor(gc.ta ? Shape{k, m} : Shape{m, k}, 11);
    Tensor b = RandomTensor(gc.tb ? Shape{n, k} : Shape{k, n}, 12);
    std::map<std::string, Tensor> in = {{"a", a}, {"b", b}};
    std::vector<std::string> names = {"a", "b"};
    if (gc.has_c) {
      in["c"] = RandomTensor(gc.c, 13);
      names.push_back("c");
    }
    Node node = MakeNode("Gemm", names, {"y"},
                         {{"transA", Attribute::Int(gc.ta)},
                          {"transB", Attribute::Int(gc.tb)},
                          {"alpha", Attribute::Float(gc.alpha)},
                          {"beta", Attribute::Float(gc.beta)}});
    EXPECT_MATCHES_CPU(node, in, {}, 1e-4, 1e-4);
  }
}

TEST(CudaMathTest, MatMulWithTf32StaysClose) {
  FOUNDRY_REQUIRE_GPU();
  // TF32 keeps 10 mantissa bits: a k = 64 product of [-1, 1] inputs is within ~1e-2.
  Tensor a = RandomTensor({4, 100, 64}, 3), b = RandomTensor({64, 70}, 4);
  Node n = MakeNode("MatMul", {"a", "b"}, {"y"});
  auto cpu = RunSingleNode(n, {{"a", a}, {"b", b}});
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  auto gpu = RunSingleNodeOnCuda(n, {{"a", a}, {"b", b}}, {}, *cpu, /*tf32=*/true);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  for (int64_t i = 0; i < (*cpu)[0].numel(); ++i)
    ASSERT_NEAR((*gpu)[0].data<float>()[i], (*cpu)[0].data<float>()[i], 5e-2) << i;
  // Without tf32 the same product matches tightly (RunSingleNodeOnCuda makes a fresh handle, so
  // this does not check that the math mode is restored on a shared handle).
  EXPECT_MATCHES_CPU(n, {{"a", a}, {"b", b}}, {}, 1e-4, 1e-4);
}

// ============================== softmax ==============================

TEST(CudaMathTest, SoftmaxAndGradsOnEveryAxis) {
  FOUNDRY_REQUIRE_GPU();
  for (Shape s : {Shape{3, 5, 7}, Shape{2, 1000}, Shape{7, 257}, Shape{255, 3}, Shape{1, 1},
                  Shape{2, 3, 1025}}) {
    Tensor x = RandomTensor(s, 21, -4.f, 4.f), dy = RandomTensor(s, 22);
    for (int64_t axis = -1; axis < static_cast<int64_t>(s.size()); ++axis) {
      std::string what = ShapeToString(s) + " axis " + std::to_string(axis);
      for (const char* op : {"Softmax", "LogSoftmax"}) {
        Node n = MakeNode(op, {"x"}, {"y"}, {{"axis", Attribute::Int(axis)}});
        Status st = CompareCudaWithCpu(n, {{"x", x}});
        EXPECT_TRUE(st.ok()) << what << ": " << st.message();
        auto y = RunSingleNode(n, {{"x", x}});
        ASSERT_TRUE(y.ok());
        std::string grad = std::string(op) + "Grad_13";
        Node g = MakeNode(grad, {"dy", "y"}, {"dx"}, {{"axis", Attribute::Int(axis)}}, kMs);
        st = CompareCudaWithCpu(g, {{"dy", dy}, {"y", (*y)[0]}});
        EXPECT_TRUE(st.ok()) << what << " " << grad << ": " << st.message();
      }
    }
  }
}

// ============================== reductions ==============================

TEST(CudaMathTest, ReductionsOverEveryAxisCombination) {
  FOUNDRY_REQUIRE_GPU();
  for (Shape s :
       {Shape{3, 5, 7}, Shape{2, 257, 3}, Shape{1000, 7}, Shape{7, 1000}, Shape{1, 255}}) {
    Tensor x = RandomTensor(s, 41, 0.9f, 1.1f);
    const int rank = static_cast<int>(s.size());
    for (int mask = 1; mask < (1 << rank); ++mask) {
      std::vector<int64_t> axes;
      for (int d = 0; d < rank; ++d)
        if (mask & (1 << d)) axes.push_back(d);
      for (bool keepdims : {true, false}) {
        for (const char* op :
             {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"}) {
          std::string what = std::string(op) + " " + ShapeToString(s) + " axes " +
                             ShapeToString(axes) + " keepdims " + std::to_string(keepdims);
          Node by_input =
              MakeNode(op, {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(keepdims)}});
          Status st = CompareCudaWithCpu(
              by_input, {{"x", x}}, {{"axes", I64({static_cast<int64_t>(axes.size())}, axes)}});
          EXPECT_TRUE(st.ok()) << what << ": " << st.message();
        }
      }
    }
  }
  // Axes as an attribute, all axes, the noop, rank 0, integers.
  Tensor x = RandomTensor({3, 257}, 42);
  EXPECT_MATCHES_CPU(MakeNode("ReduceSum", {"x"}, {"y"}, {{"axes", Attribute::Ints({-1})}}),
                     {{"x", x}});
  EXPECT_MATCHES_CPU(MakeNode("ReduceMean", {"x"}, {"y"}, {{"keepdims", Attribute::Int(0)}}),
                     {{"x", x}});
  EXPECT_MATCHES_CPU(
      MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"noop_with_empty_axes", Attribute::Int(1)}}),
      {{"x", x}}, {{"axes", I64({0}, {})}});
  EXPECT_MATCHES_CPU(MakeNode("ReduceSum", {"x"}, {"y"}), {{"x", Tensor::Scalar(2.5f)}});
  Tensor xi = I64({3, 4}, {1, -2, 3, 4, 5, -6, 7, 8, -9, 10, 11, 12});
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})
    EXPECT_MATCHES_CPU(MakeNode(op, {"x"}, {"y"}, {{"axes", Attribute::Ints({0})}}), {{"x", xi}});
}

TEST(CudaMathTest, ReduceAxesMustBeAConstant) {
  FOUNDRY_REQUIRE_GPU();
  Tensor x = RandomTensor({3, 5}, 43);
  Node n = MakeNode("ReduceSum", {"x", "axes"}, {"y"});
  auto cpu = RunSingleNode(n, {{"x", x}}, {{"axes", I64({1}, {1})}});
  ASSERT_TRUE(cpu.ok());
  auto gpu = RunSingleNodeOnCuda(n, {{"x", x}, {"axes", I64({1}, {1})}}, {}, *cpu);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().message(),
            "ReduceSum node 'n': input 1 ('axes') must be a constant on the cuda backend; fold it "
            "at compile time");
}

// ============================== running sums ==============================

// One thread per line, sequential as on the CPU: compared exactly (atol = rtol = 0).
TEST(CudaMathTest, CumSumIsBitwiseTheCpus) {
  FOUNDRY_REQUIRE_GPU();
  for (const Shape& shape : std::vector<Shape>{{4, 2049}, {3, 257, 5}, {70000}})
    for (int64_t axis : {int64_t{0}, int64_t{-1}})
      for (int64_t exclusive : {0, 1})
        for (int64_t reverse : {0, 1}) {
          Node n = MakeNode(
              "CumSum", {"x", "a"}, {"y"},
              {{"exclusive", Attribute::Int(exclusive)}, {"reverse", Attribute::Int(reverse)}});
          Status st = CompareCudaWithCpu(n, {{"x", RandomTensor(shape, 44)}},
                                         {{"a", I64({}, {axis})}}, 0, 0);
          EXPECT_TRUE(st.ok()) << ShapeToString(shape) << " axis " << axis << ": " << st.message();
        }
  // OPT's positions: a cumsum of an int64 attention mask.
  Tensor mask(DType::kInt64, {8, 1000});
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<int64_t>()[i] = (i * 7919) % 5 != 0;
  EXPECT_MATCHES_CPU(MakeNode("CumSum", {"x", "a"}, {"y"}), {{"x", mask}}, {{"a", I64({}, {1})}}, 0,
                     0);
  // The axis at run time is refused with the error every shape-like argument gets.
  Node n = MakeNode("CumSum", {"x", "a"}, {"y"});
  Tensor x = RandomTensor({3, 5}, 45);
  auto cpu = RunSingleNode(n, {{"x", x}}, {{"a", I64({}, {1})}});
  ASSERT_TRUE(cpu.ok());
  auto gpu = RunSingleNodeOnCuda(n, {{"x", x}, {"a", I64({}, {1})}}, {}, *cpu);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().message(),
            "CumSum node 'n': input 1 ('axis') must be a constant on the cuda backend; fold it at "
            "compile time");
}

// ============================== normalizations ==============================

TEST(CudaMathTest, LayerNormAndRmsNormForwardAndBackward) {
  FOUNDRY_REQUIRE_GPU();
  for (Shape s : {Shape{3, 5, 7}, Shape{4, 1000}, Shape{1000, 17}, Shape{2, 257}, Shape{1, 1},
                  Shape{7, 255}, Shape{33, 768}}) {
    for (int64_t axis : {int64_t{1}, static_cast<int64_t>(s.size()) - 1}) {
      int64_t rows = 1;
      for (int64_t i = 0; i < axis; ++i) rows *= s[i];
      Shape norm(s.begin() + axis, s.end());
      Tensor x = RandomTensor(s, 51, -2.f, 3.f), scale = RandomTensor(norm, 52),
             bias = RandomTensor(norm, 53), dy = RandomTensor(s, 54);
      std::string what = ShapeToString(s) + " axis " + std::to_string(axis);
      Node ln = MakeNode("LayerNormalization", {"x", "scale", "bias"}, {"y", "mean", "inv"},
                         {{"axis", Attribute::Int(axis)}, {"epsilon", Attribute::Float(1e-3f)}});
      Status st = CompareCudaWithCpu(ln, {{"x", x}, {"scale", scale}, {"bias", bias}});
      EXPECT_TRUE(st.ok()) << what << ": " << st.message();
      Node ln_nobias =
          MakeNode("LayerNormalization", {"x", "scale"}, {"y"}, {{"axis", Attribute::Int(axis)}});
      st = CompareCudaWithCpu(ln_nobias, {{"x", x}, {"scale", scale}});
      EXPECT_TRUE(st.ok()) << what << " no bias: " << st.message();
      auto fwd = RunSingleNode(ln, {{"x", x}, {"scale", scale}, {"bias", bias}});
      ASSERT_TRUE(fwd.ok());
      Node lng = MakeNode("LayerNormalizationGrad", {"dy", "x", "scale", "mean", "inv"},
                          {"dx", "dscale", "dbias"}, {{"axis", Attribute::Int(axis)}}, kMs);
      st = CompareCudaWithCpu(
          lng, {{"dy", dy}, {"x", x}, {"scale", scale}, {"mean", (*fwd)[1]}, {"inv", (*fwd)[2]}},
          {}, 1e-5, 1e-4);
      EXPECT_TRUE(st.ok()) << what << " grad: " << st.message();

      Node rms =
          MakeNode("SimplifiedLayerNormalization", {"x", "scale"}, {"y", "inv"},
                   {{"axis", Attribute::Int(axis)}, {"epsilon", Attribute::Float(1e-5f)}}, kMs);
      st = CompareCudaWithCpu(rms, {{"x", x}, {"scale", scale}});
      EXPECT_TRUE(st.ok()) << what << " rms: " << st.message();
      auto rfwd = RunSingleNode(rms, {{"x", x}, {"scale", scale}});
      ASSERT_TRUE(rfwd.ok());
      Node rg = MakeNode("SimplifiedLayerNormalizationGrad", {"dy", "x", "scale", "inv"},
                         {"dx", "dscale"}, {{"axis", Attribute::Int(axis)}}, kMs);
      st = CompareCudaWithCpu(rg, {{"dy", dy}, {"x", x}, {"scale", scale}, {"inv", (*rfwd)[1]}}, {},
                              1e-5, 1e-4);
      EXPECT_TRUE(st.ok()) << what << " rms grad: " << st.message();
    }
  }
}

// ============================== softmax cross-entropy ==============================

TEST(CudaMathTest, CrossEntropyWithIgnoreIndex) {
  FOUNDRY_REQUIRE_GPU();
  struct Case {
    Shape scores;
    std::string reduction;
    bool weights;
    bool all_ignored;
  };
  for (const Case& c : std::vector<Case>{{{4, 5}, "mean", false, false},
                                         {{4, 5}, "mean", true, false},
                                         {{1000, 257}, "mean", false, false},
                                         {{300, 7}, "sum", true, false},
                                         {{7, 1001}, "none", false, false},
                                         {{2, 5, 3}, "mean", false, false},
                                         {{2, 5, 3}, "none", true, false},
                                         {{3, 4}, "mean", false, true}}) {
    Shape lshape = c.scores;
    lshape.erase(lshape.begin() + 1);
    std::vector<int64_t> lab(NumElements(lshape));
    for (size_t i = 0; i < lab.size(); ++i)
      lab[i] = c.all_ignored || i % 3 == 1 ? -100 : static_cast<int64_t>((i * 7 + 3) % c.scores[1]);
    Tensor scores = RandomTensor(c.scores, 71, -3.f, 3.f), labels = I64(lshape, lab);
    Tensor w = RandomTensor({c.scores[1]}, 72, 0.2f, 2.f);
    std::vector<std::string> ins = {"scores", "labels"};
    std::map<std::string, Tensor> feeds = {{"scores", scores}, {"labels", labels}};
    if (c.weights) {
      ins.push_back("w");
      feeds["w"] = w;
    }
    std::string what = c.reduction + " " + ShapeToString(c.scores);
    Node n = MakeNode(
        "SoftmaxCrossEntropyLoss", ins, {"loss", "log_prob"},
        {{"reduction", Attribute::String(c.reduction)}, {"ignore_index", Attribute::Int(-100)}});
    Status st = CompareCudaWithCpu(n, feeds);
    EXPECT_TRUE(st.ok()) << what << ": " << st.message();
    auto fwd = RunSingleNode(n, feeds);
    ASSERT_TRUE(fwd.ok());
    Tensor dy = c.reduction == "none" ? RandomTensor(lshape, 73) : Tensor::Scalar(1.5f);
    std::vector<std::string> gins = {"dy", "lp", "labels"};
    std::map<std::string, Tensor> gfeeds = {{"dy", dy}, {"lp", (*fwd)[1]}, {"labels", labels}};
    if (c.weights) {
      gins.push_back("w");
      gfeeds["w"] = w;
    }
    Node g = MakeNode(
        "SoftmaxCrossEntropyLossGrad", gins, {"d"},
        {{"reduction", Attribute::String(c.reduction)}, {"ignore_index", Attribute::Int(-100)}},
        kMs);
    st = CompareCudaWithCpu(g, gfeeds);
    EXPECT_TRUE(st.ok()) << what << " grad: " << st.message();
    Node nll = g;
    nll.domain = "foundry";
    nll.op_type = "NegativeLogLikelihoodLossGrad";
    st = CompareCudaWithCpu(nll, gfeeds);
    EXPECT_TRUE(st.ok()) << what << " nll grad: " << st.message();
  }
}

// ============================== determinism ==============================

void ExpectSameBitsTwice(const Node& n, const std::map<std::string, Tensor>& in) {
  auto cpu = RunSingleNode(n, in);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  auto a = RunSingleNodeOnCuda(n, in, {}, *cpu);
  auto b = RunSingleNodeOnCuda(n, in, {}, *cpu);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < a->size(); ++i)
    EXPECT_TRUE((*a)[i].BitwiseEqual((*b)[i])) << n.op_type << " output " << i;
}

TEST(CudaMathTest, GradientReductionsAreBitwiseDeterministic) {
  FOUNDRY_REQUIRE_GPU();
  Shape s = {2048, 769};
  Tensor x = RandomTensor(s, 81), dy = RandomTensor(s, 82), scale = RandomTensor({769}, 83);
  Tensor mean = RandomTensor({2048, 1}, 84), inv = RandomTensor({2048, 1}, 85, 0.5f, 2.f);
  ExpectSameBitsTwice(MakeNode("LayerNormalizationGrad", {"dy", "x", "scale", "mean", "inv"},
                               {"dx", "dscale", "dbias"}, {}, kMs),
                      {{"dy", dy}, {"x", x}, {"scale", scale}, {"mean", mean}, {"inv", inv}});
  ExpectSameBitsTwice(MakeNode("ReduceSum", {"x"}, {"y"}, {{"axes", Attribute::Ints({0})}}),
                      {{"x", x}});
  ExpectSameBitsTwice(MakeNode("ReduceSum", {"x"}, {"y"}, {{"axes", Attribute::Ints({1})}}),
                      {{"x", x}});
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef EXPECT_MATCHES_CPU
