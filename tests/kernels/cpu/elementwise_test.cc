// Elementwise CPU kernels against references computed here independently: broadcasting by
// explicit index arithmetic (not the kernels' collapsed-stride plan), math through std::, Philox
// against Random123's published known answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "compiler/op_schema.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/philox.h"
#include "kernels/cpu/vmath.h"
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

// Runs one node on named inputs; returns output 0.
Tensor Run1(const Node& node, const std::map<std::string, Tensor>& inputs) {
  auto outs = RunSingleNode(node, inputs);
  EXPECT_TRUE(outs.ok()) << outs.status().message();
  return outs.ok() ? (*outs)[0] : Tensor();
}

std::string RunError(const Node& node, const std::map<std::string, Tensor>& inputs,
                     const std::map<std::string, Tensor>& constants = {}) {
  auto outs = RunSingleNode(node, inputs, constants);
  return outs.ok() ? "ok" : outs.status().message();
}

template <class T>
Tensor Make(DType t, Shape shape, std::vector<T> values) {
  return Tensor::FromVector<T>(t, std::move(shape), values);
}
Tensor F32(Shape shape, std::vector<float> v) { return Make<float>(DType::kFloat32, shape, v); }
Tensor I64(Shape shape, std::vector<int64_t> v) { return Make<int64_t>(DType::kInt64, shape, v); }
Tensor Bool(Shape shape, std::vector<uint8_t> v) { return Make<uint8_t>(DType::kBool, shape, v); }

template <class T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Offset of output element `flat` in an operand of shape `s` broadcast to `out`.
int64_t BroadcastOffset(const Shape& out, const Shape& s, int64_t flat) {
  int64_t offset = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1, j = static_cast<int64_t>(s.size()) - 1;
       d >= 0; --d, --j) {
    const int64_t coord = flat % out[d];
    flat /= out[d];
    if (j < 0) continue;
    if (s[j] != 1) offset += coord * stride;
    stride *= s[j];
  }
  return offset;
}

Shape BroadcastOf(const Shape& a, const Shape& b) {
  auto s = BroadcastShapes(a, b);
  EXPECT_TRUE(s.ok());
  return *s;
}

const std::vector<std::pair<Shape, Shape>> kBroadcastCases = {
    {{3, 1, 5}, {4, 1}},
    {{}, {2, 3}},
    {{2, 3}, {}},
    {{2, 3}, {3}},
    {{6, 7}, {6, 7}},
    {{1}, {5, 1, 1}},
    {{2, 1, 3, 1}, {1, 4, 1, 5}},
    {{4, 1}, {4, 6}},
    {{2, 0, 3}, {3}},
};

// ----------------------------------------------------------------------------------- Philox

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  // Random123 kat_vectors, philox4x32 with 10 rounds: counter, key -> output.
  struct Kat {
    Philox4 ctr;
    uint32_t k0, k1;
    Philox4 expected;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    Philox4 r = Philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.expected.v[i]) << i;
  }
}

TEST(PhiloxTest, ElementDrawIsALaneOfItsBlock) {
  const uint64_t seed = 0x1234567890abcdefull, key = 0xfedcba0987654321ull;
  // Element e reads lane e % 4 of block e / 4, whose counter holds (e / 4, node key).
  Philox4 block =
      Philox4x32_10(Philox4{{5, 0, static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)}},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(PhiloxRandom(seed, key, 20 + lane), block.v[lane]);
  EXPECT_NE(PhiloxRandom(seed, key, 0), PhiloxRandom(seed, key + 1, 0));
  EXPECT_NE(PhiloxRandom(seed, key, 0), PhiloxRandom(seed + 1, key, 0));
  EXPECT_EQ(PhiloxBitsToUniform(0xffffffffu), 1.0f - 1.0f / 16777216.0f);
  EXPECT_EQ(PhiloxBitsToUniform(0xffu), 0.0f);
}

// ----------------------------------------------------------------------------------- binary

struct FloatBinaryCase {
  const char* op;
  std::function<float(float, float)> ref;
  float lo, hi;  // input range
};

TEST(ElementwiseKernelTest, FloatBinaryOpsBroadcastLikeNumpy) {
  const std::vector<FloatBinaryCase> cases = {
      {"Add", [](float a, float b) { return a + b; }, -2, 2},
      {"Sub", [](float a, float b) { return a - b; }, -2, 2},
      {"Mul", [](float a, float b) { return a * b; }, -2, 2},
      {"Div", [](float a, float b) { return a / b; }, 0.5f, 2},
      {"Pow", [](float a, float b) { return std::pow(a, b); }, 0.5f, 2},
      {"Min", [](float a, float b) { return std::fmin(a, b); }, -2, 2},
      {"Max", [](float a, float b) { return std::fmax(a, b); }, -2, 2},
  };
  uint64_t seed = 1;
  for (const auto& c : cases) {
    for (const auto& [sa, sb] : kBroadcastCases) {
      Tensor a = RandomTensor(sa, ++seed, c.lo, c.hi);
      Tensor b = RandomTensor(sb, ++seed, c.lo, c.hi);
      Tensor y = Run1(EwNode(c.op, {"a", "b"}), {{"a", a}, {"b", b}});
      const Shape out = BroadcastOf(sa, sb);
      ASSERT_EQ(y.shape(), out) << c.op;
      for (int64_t i = 0; i < y.numel(); ++i) {
        float want = c.ref(a.data<float>()[BroadcastOffset(out, sa, i)],
                           b.data<float>()[BroadcastOffset(out, sb, i)]);
        ASSERT_EQ(y.data<float>()[i], want)
            << c.op << " " << ShapeToString(sa) << " " << ShapeToString(sb) << " at " << i;
      }
    }
  }
}

TEST(ElementwiseKernelTest, LargeBiasAddTakesTheContiguousRuns) {
  // [128, 1000] + [1000] and * [128, 1]: the layouts of a bias add and a row scale.
  Tensor x = RandomTensor({128, 1000}, 3), bias = RandomTensor({1000}, 4),
         row = RandomTensor({128, 1}, 5);
  Tensor s = Run1(EwNode("Add", {"x", "b"}), {{"x", x}, {"b", bias}});
  Tensor m = Run1(EwNode("Mul", {"x", "r"}), {{"x", x}, {"r", row}});
  for (int64_t i = 0; i < 128; ++i)
    for (int64_t j = 0; j < 1000; ++j) {
      ASSERT_EQ(s.data<float>()[i * 1000 + j],
                x.data<float>()[i * 1000 + j] + bias.data<float>()[j]);
      ASSERT_EQ(m.data<float>()[i * 1000 + j],
                x.data<float>()[i * 1000 + j] * row.data<float>()[i]);
    }
}

TEST(ElementwiseKernelTest, IntegerArithmetic) {
  Tensor a = I64({2, 3}, {-7, 7, 9, -9, 0, 5});
  Tensor b = I64({3}, {2, -3, 4});
  std::map<std::string, Tensor> in = {{"a", a}, {"b", b}};
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Add", {"a", "b"}), in)),
            (std::vector<int64_t>{-5, 4, 13, -7, -3, 9}));
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Sub", {"a", "b"}), in)),
            (std::vector<int64_t>{-9, 10, 5, -11, 3, 1}));
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Mul", {"a", "b"}), in)),
            (std::vector<int64_t>{-14, -21, 36, -18, 0, 20}));
  // Division truncates toward zero (C, ONNX Runtime).
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Div", {"a", "b"}), in)),
            (std::vector<int64_t>{-3, -2, 2, -4, 0, 1}));
  // Mod: the remainder has the divisor's sign (Python %), or the dividend's with fmod=1.
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Mod", {"a", "b"}), in)),
            (std::vector<int64_t>{1, -2, 1, 1, 0, 1}));
  EXPECT_EQ(
      Values<int64_t>(Run1(EwNode("Mod", {"a", "b"}, {"y"}, {{"fmod", Attribute::Int(1)}}), in)),
      (std::vector<int64_t>{-1, 1, 1, -1, 0, 1}));
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Max", {"a", "b"}), in)),
            (std::vector<int64_t>{2, 7, 9, 2, 0, 5}));
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Pow", {"a", "b"}), in)),
            (std::vector<int64_t>{49, 0, 6561, 81, 0, 625}));
  // Overflow wraps instead of being undefined.
  Tensor big = I64({1}, {std::numeric_limits<int64_t>::max()});
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Add", {"a", "b"}), {{"a", big}, {"b", I64({1}, {1})}})),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));

  Tensor i32a = Make<int32_t>(DType::kInt32, {2, 1}, {10, -10});
  Tensor i32b = Make<int32_t>(DType::kInt32, {3}, {1, 2, 3});
  Tensor s = Run1(EwNode("Sub", {"a", "b"}), {{"a", i32a}, {"b", i32b}});
  EXPECT_EQ(s.dtype(), DType::kInt32);
  EXPECT_EQ(Values<int32_t>(s), (std::vector<int32_t>{9, 8, 7, -11, -12, -13}));
}

TEST(ElementwiseKernelTest, IntegerDivisionByZeroIsAnError) {
  Node div = EwNode("Div", {"a", "b"});
  EXPECT_EQ(RunError(div, {{"a", I64({2}, {1, 2})}, {"b", I64({2}, {1, 0})}}),
            "Div node 'Div_node': integer division by zero");
  Node mod = EwNode("Mod", {"a", "b"});
  EXPECT_EQ(RunError(mod, {{"a", I64({2}, {1, 2})}, {"b", I64({}, {0})}}),
            "Mod node 'Mod_node': integer modulo by zero");
}

TEST(ElementwiseKernelTest, FloatModIsFmod) {
  Tensor a = F32({4}, {5.5f, -5.5f, 5.5f, -5.5f});
  Tensor b = F32({4}, {2.f, 2.f, -2.f, -2.f});
  Node mod = EwNode("Mod", {"a", "b"}, {"y"}, {{"fmod", Attribute::Int(1)}});
  EXPECT_EQ(Values<float>(Run1(mod, {{"a", a}, {"b", b}})),
            (std::vector<float>{1.5f, -1.5f, 1.5f, -1.5f}));
  EXPECT_EQ(RunError(EwNode("Mod", {"a", "b"}), {{"a", a}, {"b", b}}),
            "Mod node 'Mod_node': floating-point Mod needs attribute fmod=1 (C fmod semantics)");
}

TEST(ElementwiseKernelTest, PowTakesIntegerExponents) {
  Tensor x = F32({2, 2}, {1.5f, -2.f, 0.5f, 3.f});
  Tensor e = I64({2}, {2, 3});
  Tensor y = Run1(EwNode("Pow", {"x", "e"}), {{"x", x}, {"e", e}});
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  EXPECT_EQ(Values<float>(y), (std::vector<float>{2.25f, -8.f, 0.25f, 27.f}));
  Tensor ei = Make<int32_t>(DType::kInt32, {}, {-1});
  EXPECT_EQ(Values<float>(Run1(EwNode("Pow", {"x", "e"}), {{"x", x}, {"e", ei}})),
            (std::vector<float>{std::pow(1.5f, -1.f), -0.5f, 2.f, std::pow(3.f, -1.f)}));
}

TEST(ElementwiseKernelTest, ComparisonsGiveBool) {
  Tensor a = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = F32({3}, {2, 2, 7});
  std::map<std::string, Tensor> in = {{"a", a}, {"b", b}};
  auto run = [&](const char* op) {
    Tensor y = Run1(EwNode(op, {"a", "b"}), in);
    EXPECT_EQ(y.dtype(), DType::kBool);
    return Values<uint8_t>(y);
  };
  EXPECT_EQ(run("Equal"), (std::vector<uint8_t>{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(run("Less"), (std::vector<uint8_t>{1, 0, 1, 0, 0, 1}));
  EXPECT_EQ(run("Greater"), (std::vector<uint8_t>{0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(run("LessOrEqual"), (std::vector<uint8_t>{1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(run("GreaterOrEqual"), (std::vector<uint8_t>{0, 1, 0, 1, 1, 0}));
  // int64 and bool operands; NaN compares unequal.
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("Equal", {"a", "b"}),
                                 {{"a", I64({3}, {1, -1, 5})}, {"b", I64({}, {-1})}})),
            (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("Equal", {"a", "b"}),
                                 {{"a", Bool({3}, {1, 0, 1})}, {"b", Bool({3}, {1, 1, 0})}})),
            (std::vector<uint8_t>{1, 0, 0}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("Equal", {"a", "b"}),
                                 {{"a", F32({1}, {nan})}, {"b", F32({1}, {nan})}})),
            (std::vector<uint8_t>{0}));
}

TEST(ElementwiseKernelTest, LogicalOps) {
  Tensor a = Bool({2, 2}, {0, 0, 1, 1});
  Tensor b = Bool({2}, {0, 1});
  std::map<std::string, Tensor> in = {{"a", a}, {"b", b}};
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("And", {"a", "b"}), in)),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("Or", {"a", "b"}), in)),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("Xor", {"a", "b"}), in)),
            (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("Not", {"a"}), in)), (std::vector<uint8_t>{1, 1, 0, 0}));
}

TEST(ElementwiseKernelTest, VariadicOpsCombineInInputOrder) {
  Tensor a = RandomTensor({3, 1, 5}, 11), b = RandomTensor({4, 1}, 12), c = RandomTensor({5}, 13);
  std::map<std::string, Tensor> in = {{"a", a}, {"b", b}, {"c", c}};
  const Shape out = {3, 4, 5};
  Tensor sum = Run1(EwNode("Sum", {"a", "b", "c"}), in);
  Tensor mean = Run1(EwNode("Mean", {"a", "b", "c"}), in);
  Tensor mx = Run1(EwNode("Max", {"a", "b", "c"}), in);
  Tensor mn = Run1(EwNode("Min", {"c", "b", "a"}), in);
  ASSERT_EQ(sum.shape(), out);
  for (int64_t i = 0; i < sum.numel(); ++i) {
    float x = a.data<float>()[BroadcastOffset(out, a.shape(), i)];
    float y = b.data<float>()[BroadcastOffset(out, b.shape(), i)];
    float z = c.data<float>()[BroadcastOffset(out, c.shape(), i)];
    ASSERT_EQ(sum.data<float>()[i], (x + y) + z);
    ASSERT_EQ(mean.data<float>()[i], ((x + y) + z) / 3.f);
    ASSERT_EQ(mx.data<float>()[i], std::max({x, y, z}));
    ASSERT_EQ(mn.data<float>()[i], std::min({x, y, z}));
  }
  // One input: a (broadcast-free) copy.
  EXPECT_TRUE(Run1(EwNode("Sum", {"a"}), in).BitwiseEqual(a));
  // NaN propagates through Max/Min, as in numpy and torch.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor m =
      Run1(EwNode("Max", {"a", "b"}), {{"a", F32({2}, {nan, 1})}, {"b", F32({2}, {0, nan})}});
  EXPECT_TRUE(std::isnan(m.data<float>()[0]) && std::isnan(m.data<float>()[1]));
}

// ----------------------------------------------------------------------------------- unary

// Exact ops equal libm's float result; the transcendental ones (kernels/cpu/vmath.h) are within
// vmath's bound of the double result rounded to float.
TEST(ElementwiseKernelTest, FloatUnaryOpsMatchStdMath) {
  struct Case {
    const char* op;
    std::function<float(float)> ref;
    float lo, hi;
    int ulps = 0;
  };
  const std::vector<Case> cases = {
      {"Neg", [](float x) { return -x; }, -3, 3},
      {"Abs", [](float x) { return std::fabs(x); }, -3, 3},
      {"Sqrt", [](float x) { return std::sqrt(x); }, 0, 9},
      {"Reciprocal", [](float x) { return 1.f / x; }, 0.1f, 3},
      {"Exp", [](float x) { return static_cast<float>(std::exp(double{x})); }, -10, 10, 1},
      {"Log", [](float x) { return std::log(x); }, 0.01f, 10},
      {"Erf", [](float x) { return static_cast<float>(std::erf(double{x})); }, -4, 4, 2},
      {"Tanh", [](float x) { return static_cast<float>(std::tanh(double{x})); }, -6, 6, 1},
      // The f32 formula (exp(-x) overflows to inf below -88: sigmoid 0) on the correctly rounded
      // exp: vmath's exp ulp, carried through the sum and the quotient.
      {"Sigmoid", [](float x) { return 1.f / (1.f + static_cast<float>(std::exp(-double{x}))); },
       -100, 100, 2},
      {"Relu", [](float x) { return x > 0 ? x : 0.f; }, -3, 3},
      {"Sin", [](float x) { return std::sin(x); }, -7, 7},
      {"Cos", [](float x) { return std::cos(x); }, -7, 7},
      {"Floor", [](float x) { return std::floor(x); }, -5, 5},
      {"Ceil", [](float x) { return std::ceil(x); }, -5, 5},
      {"Sign", [](float x) { return x > 0   ? 1.f
                                    : x < 0 ? -1.f
                                            : 0.f; }, -3, 3},
  };
  uint64_t seed = 100;
  for (const auto& c : cases) {
    Tensor x = RandomTensor({7, 13}, ++seed, c.lo, c.hi);
    Tensor y = Run1(EwNode(c.op, {"x"}), {{"x", x}});
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float got = y.data<float>()[i], want = c.ref(x.data<float>()[i]);
      if (c.ulps == 0) {
        ASSERT_EQ(got, want) << c.op << " at " << i;
      } else {
        ASSERT_LE(vmath::UlpDistance(got, want), c.ulps)
            << c.op << " at " << i << ": " << got << " vs " << want;
      }
    }
  }
  // Softplus: log(1 + e^x), checked in double (the kernel avoids overflow for large x).
  Tensor x = F32({5}, {-30.f, -1.f, 0.f, 2.f, 100.f});
  Tensor y = Run1(EwNode("Softplus", {"x"}), {{"x", x}});
  for (int i = 0; i < 5; ++i) {
    double xi = x.data<float>()[i];
    double want = xi > 30 ? xi : std::log1p(std::exp(xi));
    EXPECT_NEAR(y.data<float>()[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << i;
  }
}

TEST(ElementwiseKernelTest, IntegerUnaryOps) {
  Tensor x = I64({4}, {-3, 0, 5, std::numeric_limits<int64_t>::min()});
  std::map<std::string, Tensor> in = {{"x", x}};
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Neg", {"x"}), in)),
            (std::vector<int64_t>{3, 0, -5, std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Abs", {"x"}), in)),
            (std::vector<int64_t>{3, 0, 5, std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Sign", {"x"}), in)), (std::vector<int64_t>{-1, 0, 1, -1}));
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Relu", {"x"}), in)), (std::vector<int64_t>{0, 0, 5, 0}));
}

TEST(ElementwiseKernelTest, NanAndInfTests) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::map<std::string, Tensor> in = {{"x", F32({4}, {1.f, inf, -inf, nan})}};
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("IsNaN", {"x"}), in)), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(Values<uint8_t>(Run1(EwNode("IsInf", {"x"}), in)), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(Values<uint8_t>(
                Run1(EwNode("IsInf", {"x"}, {"y"}, {{"detect_positive", Attribute::Int(0)}}), in)),
            (std::vector<uint8_t>{0, 0, 1, 0}));
  Tensor r = Run1(EwNode("Relu", {"x"}), in);
  EXPECT_TRUE(std::isnan(r.data<float>()[3]));
}

TEST(ElementwiseKernelTest, IdentityCopiesAnyType) {
  Tensor i = I64({3}, {1, -2, 3});
  EXPECT_TRUE(Run1(EwNode("Identity", {"x"}), {{"x", i}}).BitwiseEqual(i));
  Tensor b = Bool({2}, {1, 0});
  EXPECT_TRUE(Run1(EwNode("Identity", {"x"}), {{"x", b}}).BitwiseEqual(b));
}

// ----------------------------------------------------------------------------------- Where

TEST(ElementwiseKernelTest, WhereBroadcastsAllThreeOperands) {
  Tensor c = Bool({2, 1}, {1, 0});
  Tensor x = F32({1, 3}, {1, 2, 3});
  Tensor y = F32({}, {-1});
  EXPECT_EQ(Values<float>(
                Run1(EwNode("Where", {"c", "x", "y"}, {"out"}), {{"c", c}, {"x", x}, {"y", y}})),
            (std::vector<float>{1, 2, 3, -1, -1, -1}));
  Tensor cc = Bool({3}, {0, 1, 0});
  Tensor xi = I64({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor yi = I64({2, 1}, {-1, -2});
  EXPECT_EQ(Values<int64_t>(
                Run1(EwNode("Where", {"c", "x", "y"}, {"out"}), {{"c", cc}, {"x", xi}, {"y", yi}})),
            (std::vector<int64_t>{-1, 2, -1, -2, 5, -2}));
}

// ----------------------------------------------------------------------------------- Cast

Tensor CastTo(const Tensor& x, DType to) {
  return Run1(EwNode("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(static_cast<int64_t>(to))}}),
              {{"x", x}});
}

TEST(ElementwiseKernelTest, CastConvertsLikeNumpyAstype) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor f = F32({7}, {-2.7f, -0.5f, -0.f, 0.f, 0.5f, 2.7f, nan});
  EXPECT_EQ(Values<int64_t>(CastTo(f, DType::kInt64)),
            (std::vector<int64_t>{-2, 0, 0, 0, 0, 2, 0}));
  EXPECT_EQ(Values<int32_t>(CastTo(f, DType::kInt32)),
            (std::vector<int32_t>{-2, 0, 0, 0, 0, 2, 0}));
  EXPECT_EQ(Values<uint8_t>(CastTo(f, DType::kBool)), (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(Values<double>(CastTo(f, DType::kFloat64))[0], static_cast<double>(-2.7f));

  Tensor b = Bool({3}, {1, 0, 1});
  EXPECT_EQ(Values<float>(CastTo(b, DType::kFloat32)), (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(Values<int64_t>(CastTo(b, DType::kInt64)), (std::vector<int64_t>{1, 0, 1}));

  Tensor i = I64({4}, {-1, 0, 300, (int64_t{1} << 32) + 7});
  EXPECT_EQ(Values<int32_t>(CastTo(i, DType::kInt32)), (std::vector<int32_t>{-1, 0, 300, 7}));
  EXPECT_EQ(Values<uint8_t>(CastTo(i, DType::kUint8)), (std::vector<uint8_t>{255, 0, 44, 7}));
  EXPECT_EQ(Values<int8_t>(CastTo(i, DType::kInt8)), (std::vector<int8_t>{-1, 0, 44, 7}));
  EXPECT_EQ(Values<uint8_t>(CastTo(i, DType::kBool)), (std::vector<uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(Values<float>(CastTo(i, DType::kFloat32)),
            (std::vector<float>{-1.f, 0.f, 300.f, 4294967303.f}));

  Tensor d = Make<double>(DType::kFloat64, {2}, {0.1, 1e300});
  EXPECT_EQ(Values<float>(CastTo(d, DType::kFloat32)),
            (std::vector<float>{0.1f, std::numeric_limits<float>::infinity()}));

  Tensor u = Make<uint8_t>(DType::kUint8, {2}, {200, 3});
  EXPECT_EQ(Values<int64_t>(CastTo(u, DType::kInt64)), (std::vector<int64_t>{200, 3}));
  Tensor s = Make<int8_t>(DType::kInt8, {2}, {-100, 3});
  EXPECT_EQ(Values<float>(CastTo(s, DType::kFloat32)), (std::vector<float>{-100.f, 3.f}));

  // CastLike takes the type of its second input.
  Tensor y = Run1(EwNode("CastLike", {"x", "t"}), {{"x", f}, {"t", I64({1}, {0})}});
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(Values<int64_t>(y), (std::vector<int64_t>{-2, 0, 0, 0, 0, 2, 0}));
}

// ----------------------------------------------------------------------------------- Clip

TEST(ElementwiseKernelTest, ClipBoundsFromInputsOrAttributes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = F32({5}, {-2.f, -1.f, 0.f, 1.5f, nan});
  std::map<std::string, Tensor> in = {{"x", x}, {"lo", F32({}, {-1.f})}, {"hi", F32({}, {1.f})}};
  Tensor both = Run1(EwNode("Clip", {"x", "lo", "hi"}), in);
  EXPECT_EQ(Values<float>(both)[0], -1.f);
  EXPECT_EQ(Values<float>(both)[3], 1.f);
  EXPECT_TRUE(std::isnan(Values<float>(both)[4]));
  EXPECT_EQ(Values<float>(Run1(EwNode("Clip", {"x", "", "hi"}), in))[0], -2.f);
  EXPECT_EQ(Values<float>(Run1(EwNode("Clip", {"x", "lo"}), in))[3], 1.5f);
  Node attrs = EwNode("Clip", {"x"}, {"y"},
                      {{"min", Attribute::Float(-0.5f)}, {"max", Attribute::Float(0.5f)}});
  EXPECT_EQ(Values<float>(Run1(attrs, in))[0], -0.5f);
  EXPECT_EQ(Values<float>(Run1(attrs, in))[3], 0.5f);
  Tensor xi = I64({4}, {-5, 0, 5, 10});
  EXPECT_EQ(Values<int64_t>(Run1(EwNode("Clip", {"x", "lo", "hi"}),
                                 {{"x", xi}, {"lo", I64({}, {0})}, {"hi", I64({}, {6})}})),
            (std::vector<int64_t>{0, 0, 5, 6}));
  EXPECT_EQ(RunError(EwNode("Clip", {"x", "lo"}), {{"x", x}, {"lo", F32({2}, {0, 1})}}),
            "Clip node 'Clip_node': min 'lo' must be a scalar, has shape [2]");
}

// ----------------------------------------------------------------------------------- Dropout

struct DropoutResult {
  Tensor y, mask;
};

DropoutResult RunDropout(const Tensor& x, float ratio, bool training_mode, uint64_t seed,
                         uint64_t node_key, bool ctx_training = true) {
  Node n = EwNode("Dropout", {"x", "r", "t"}, {"y", "mask"});
  Tensor r = F32({}, {ratio});
  Tensor t = Bool({}, {static_cast<uint8_t>(training_mode)});
  DropoutResult res{Tensor(x.dtype(), x.shape()), Tensor(DType::kBool, x.shape())};
  std::vector<const Tensor*> ins = {&x, &r, &t};
  std::vector<Tensor*> outs = {&res.y, &res.mask};
  KernelContext ctx;
  ctx.seed = seed;
  ctx.node_key = node_key;
  ctx.training = ctx_training;
  Status st = RunCpuKernel(n, ins, outs, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  return res;
}

TEST(DropoutKernelTest, MaskIsAFunctionOfSeedNodeAndElement) {
  const int64_t n = 100003;  // not a multiple of the 4-element Philox block
  Tensor x = RandomTensor({n}, 21, 0.5f, 1.5f);
  const float ratio = 0.3f;
  DropoutResult a = RunDropout(x, ratio, true, 7, 1001);
  DropoutResult again = RunDropout(x, ratio, true, 7, 1001);
  DropoutResult other_node = RunDropout(x, ratio, true, 7, 1002);
  DropoutResult other_seed = RunDropout(x, ratio, true, 8, 1001);
  EXPECT_TRUE(a.mask.BitwiseEqual(again.mask));
  EXPECT_TRUE(a.y.BitwiseEqual(again.y));
  EXPECT_FALSE(a.mask.BitwiseEqual(other_node.mask));
  EXPECT_FALSE(a.mask.BitwiseEqual(other_seed.mask));

  const float scale = 1.f / (1.f - ratio);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = a.mask.data<bool>()[i];
    // The documented draw: keep iff uniform(bits of element i) >= ratio.
    ASSERT_EQ(keep, PhiloxBitsToUniform(PhiloxRandom(7, 1001, i)) >= ratio) << i;
    ASSERT_EQ(a.y.data<float>()[i], keep ? x.data<float>()[i] * scale : 0.f) << i;
    kept += keep;
  }
  // Binomial(n, 0.7): standard deviation sqrt(n * 0.21) ~ 145; allow 5 of them.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 5 * std::sqrt(n * 0.21));
}

TEST(DropoutKernelTest, InactiveDropoutIsTheIdentityWithAFullMask) {
  Tensor x = RandomTensor({3, 17}, 22);
  for (const DropoutResult& r : {RunDropout(x, 0.f, true, 1, 2), RunDropout(x, 0.5f, false, 1, 2),
                                 RunDropout(x, 0.5f, true, 1, 2, /*ctx_training=*/false)}) {
    EXPECT_TRUE(r.y.BitwiseEqual(x));
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_TRUE(r.mask.data<bool>()[i]);
  }
  // No training_mode input (opset 12 default false): inference.
  Tensor y = Run1(EwNode("Dropout", {"x", "r"}), {{"x", x}, {"r", F32({}, {0.5f})}});
  EXPECT_TRUE(y.BitwiseEqual(x));
}

TEST(DropoutKernelTest, RatioOutsideUnitIntervalIsRejected) {
  Tensor x = RandomTensor({4}, 23);
  EXPECT_EQ(RunError(EwNode("Dropout", {"x", "r", "t"}), {{"x", x}},
                     {{"r", F32({}, {1.f})}, {"t", Bool({}, {1})}}),
            "Dropout node 'Dropout_node': ratio 1.000000 is outside [0, 1)");
  EXPECT_EQ(RunError(EwNode("Dropout", {"x", "r", "t"}),
                     {{"x", x}, {"r", F32({}, {1.f})}, {"t", Bool({}, {1})}}),
            "Dropout node 'Dropout_node': ratio 1.000000 is outside [0, 1)");
}

TEST(DropoutKernelTest, DropoutGradScalesByTheForwardMask) {
  Tensor x = RandomTensor({1000}, 24);
  DropoutResult fwd = RunDropout(x, 0.25f, true, 3, 4);
  Tensor dy = RandomTensor({1000}, 25);
  Node g = EwNode("DropoutGrad", {"dy", "mask", "r", "t"}, {"dx"}, {}, "com.microsoft");
  Tensor dx =
      Run1(g, {{"dy", dy}, {"mask", fwd.mask}, {"r", F32({}, {0.25f})}, {"t", Bool({}, {1})}});
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(dx.data<float>()[i],
              fwd.mask.data<bool>()[i] ? dy.data<float>()[i] * (1.f / 0.75f) : 0.f);
  // Not training: dX = dY.
  Tensor all = Bool({1000}, std::vector<uint8_t>(1000, 1));
  Tensor id = Run1(EwNode("DropoutGrad", {"dy", "mask"}, {"dx"}, {}, "com.microsoft"),
                   {{"dy", dy}, {"mask", all}});
  EXPECT_TRUE(id.BitwiseEqual(dy));
}

// ----------------------------------------------------------------------------------- GELU

// Gelu must equal torch's exported decompositions, run through these same kernels, bit for bit:
// the canonicalization pass fuses them into it and promises unchanged numbers. Form half_last is
// torch 1.13 TorchScript's order, half_first torch 2.6 dynamo's (and, the same bits, Hugging
// Face's (x·0.5)·a). x sweeps every binade, subnormals to 2^127, and the infinities.
TEST(GeluKernelTest, BitwiseEqualToTheExportedDecompositions) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[20011]
  const sqrt2 : f32[] = [1.4142135381698608]
  const one : f32[] = [1.0]
  const half : f32[] = [0.5]
  d = Div(x, sqrt2)
  e = Erf(d)
  a = Add(e, one)
  m = Mul(x, a)
  y = Mul(m, half)
  ha = Mul(half, a)
  y_dynamo = Mul(x, ha)
  hx = Mul(x, half)
  y_hf = Mul(hx, a)
  fused = com.microsoft::Gelu(x)
  fused_last = com.microsoft::Gelu(x) {form="half_last"}
  fused_first = com.microsoft::Gelu(x) {form="half_first"}
  output y
  output y_dynamo
  output y_hf
  output fused
  output fused_last
  output fused_first
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->FindValue("sqrt2")->data->data<float>()[0], static_cast<float>(std::sqrt(2.0)));
  for (const Node& n : g->nodes) ASSERT_TRUE(InferAndSetTypes(*g, n).ok()) << n.name;
  Tensor x = RandomTensor({20011}, 31, -8.f, 8.f);
  const float kInf = std::numeric_limits<float>::infinity();
  const float kMax = std::numeric_limits<float>::max();
  // clang-format off
  std::vector<float> specials = {0.f, -0.f, 1e-30f, -1e-30f, 30.f, -30.f, 3e38f, -3e38f,
                                 kInf, -kInf, 1e-45f, -1e-45f, kMax, -kMax};
  // clang-format on
  for (int e = -149; e < 127; ++e)
    for (float m : {1.f, 1.37f, -1.f, -1.37f, 1.9999999f}) specials.push_back(std::ldexp(m, e));
  std::copy(specials.begin(), specials.end(), x.data<float>());
  auto out = Interpret(*g, {{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_TRUE(out->at("y").BitwiseEqual(out->at("fused")));
  EXPECT_TRUE(out->at("y").BitwiseEqual(out->at("fused_last")));
  EXPECT_TRUE(out->at("y_dynamo").BitwiseEqual(out->at("fused_first")));
  EXPECT_TRUE(out->at("y_hf").BitwiseEqual(out->at("fused_first")));
  // The forms differ where x·2 overflows: 3e38 and FLT_MAX (half_last gives inf).
  EXPECT_FALSE(out->at("y").BitwiseEqual(out->at("fused_first")));
  EXPECT_EQ(out->at("fused_first").data<float>()[6], 3e38f);
  EXPECT_TRUE(std::isinf(out->at("fused").data<float>()[6]));

  auto bad = RunSingleNode(
      EwNode("Gelu", {"x"}, {"y"}, {{"form", Attribute::String("tanh")}}, "com.microsoft"),
      {{"x", x}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "Gelu node 'Gelu_node': unknown form 'tanh' (expected \"half_last\" or "
            "\"half_first\")");
}

// FastGelu's gelu_new form, (x·0.5)·A, is also torch 2.6 dynamo's F.gelu(approximate='tanh'),
// x·(0.5·A), bit for bit: A = tanh + 1 is 0 or at least 2^-24, so 0.5·A is exact, and A is 1
// wherever x·0.5 is inexact. Over every binade, subnormals to FLT_MAX, and the infinities.
TEST(FastGeluKernelTest, GeluNewFormIsDynamosTanhGeluBitwise) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[4096]
  const three : f32[] = [3.0]
  const c : f32[] = [0.044714998453855515]
  const k : f32[] = [0.7978845834732056]
  const one : f32[] = [1.0]
  const half : f32[] = [0.5]
  p = Pow(x, three)
  u = Mul(c, p)
  v = Add(x, u)
  w = Mul(k, v)
  t = Tanh(w)
  a = Add(t, one)
  h = Mul(half, a)
  y = Mul(x, h)
  fused = com.microsoft::FastGelu(x) {form="gelu_new"}
  output y
  output fused
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (const Node& n : g->nodes) ASSERT_TRUE(InferAndSetTypes(*g, n).ok()) << n.name;
  Tensor x = RandomTensor({4096}, 39, -8.f, 8.f);
  const float kInf = std::numeric_limits<float>::infinity();
  const float kMax = std::numeric_limits<float>::max();
  std::vector<float> specials = {0.f, -0.f, kInf, -kInf, 1e-45f, -1e-45f, kMax, -kMax};
  for (int e = -149; e < 128; ++e)
    for (float m : {1.f, 1.37f, -1.f, -1.37f, 1.9999999f}) specials.push_back(std::ldexp(m, e));
  std::copy(specials.begin(), specials.end(), x.data<float>());
  auto out = Interpret(*g, {{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_TRUE(out->at("y").BitwiseEqual(out->at("fused")));
}

TEST(GeluKernelTest, GeluAndGeluGradMatchDoubleReferences) {
  Tensor x = RandomTensor({997}, 32, -6.f, 6.f);
  Tensor dy = RandomTensor({997}, 33);
  Tensor y = Run1(EwNode("Gelu", {"x"}, {"y"}, {}, "com.microsoft"), {{"x", x}});
  Tensor dx =
      Run1(EwNode("GeluGrad", {"dy", "x"}, {"dx"}, {}, "com.microsoft"), {{"dy", dy}, {"x", x}});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    const double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    EXPECT_NEAR(y.data<float>()[i], v * cdf, 1e-6 * (1 + std::fabs(v * cdf))) << i;
    const double want = dy.data<float>()[i] * (cdf + v * pdf);
    EXPECT_NEAR(dx.data<float>()[i], want, 1e-6 * (1 + std::fabs(want))) << i;
  }
}

// Tanh GELU against the formula in double: both forms within a few f32 ulps, and the gradient.
TEST(FastGeluKernelTest, FastGeluAndFastGeluGradMatchDoubleReferences) {
  Tensor x = RandomTensor({997}, 34, -6.f, 6.f);
  Tensor dy = RandomTensor({997}, 35);
  const double k = std::sqrt(2 / M_PI), c = 0.044715;
  for (const char* form : {"gelu_new", "torch_tanh"}) {
    Tensor y =
        Run1(EwNode("FastGelu", {"x"}, {"y"}, {{"form", Attribute::String(form)}}, "com.microsoft"),
             {{"x", x}});
    Tensor dx = Run1(EwNode("FastGeluGrad", {"dy", "x"}, {"dx"}, {}, "com.microsoft"),
                     {{"dy", dy}, {"x", x}});
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.data<float>()[i];
      const double t = std::tanh(k * (v + c * v * v * v));
      const double want_y = 0.5 * v * (1 + t);
      EXPECT_NEAR(y.data<float>()[i], want_y, 1e-6 * (1 + std::fabs(want_y))) << form << i;
      const double want =
          dy.data<float>()[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v));
      EXPECT_NEAR(dx.data<float>()[i], want, 1e-6 * (1 + std::fabs(want))) << form << i;
    }
  }
  auto bad = RunSingleNode(
      EwNode("FastGelu", {"x"}, {"y"}, {{"form", Attribute::String("erf")}}, "com.microsoft"),
      {{"x", x}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "FastGelu node 'FastGelu_node': unknown form 'erf' (expected \"torch_tanh\" or "
            "\"gelu_new\")");
}

// QuickGelu x·sigmoid(alpha·x) and its gradient against the formula in double, at SiLU's alpha = 1
// and at ONNX Runtime's default 1.702 (no attribute); and at alpha = 1 bit for bit the Sigmoid
// kernel followed by the Mul kernel, in f32 and f64, from exp's underflow to its overflow.
TEST(QuickGeluKernelTest, MatchesDoubleReferencesAndSigmoidThenMulBitwise) {
  Tensor x = RandomTensor({997}, 36, -8.f, 8.f);
  Tensor dy = RandomTensor({997}, 37);
  for (float alpha : {1.f, 1.702f}) {
    std::map<std::string, Attribute> attrs;
    if (alpha == 1.f) attrs["alpha"] = Attribute::Float(1.f);
    Tensor y = Run1(EwNode("QuickGelu", {"x"}, {"y"}, attrs, "com.microsoft"), {{"x", x}});
    Tensor dx = Run1(EwNode("QuickGeluGrad", {"dy", "x"}, {"dx"}, attrs, "com.microsoft"),
                     {{"dy", dy}, {"x", x}});
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.data<float>()[i];
      const double s = 1 / (1 + std::exp(-static_cast<double>(alpha) * v));
      EXPECT_NEAR(y.data<float>()[i], v * s, 1e-6 * (1 + std::fabs(v * s))) << alpha << " " << i;
      const double want = dy.data<float>()[i] * s * (1 + alpha * v * (1 - s));
      EXPECT_NEAR(dx.data<float>()[i], want, 1e-6 * (1 + std::fabs(want))) << alpha << " " << i;
    }
  }
  const float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {0.f,   -0.f,   1e-40f, -1e-40f, 87.f, 89.f, -87.f,
                                -89.f, -104.f, -200.f, 200.f,   kInf, -kInf};
  Tensor wide = RandomTensor({4096}, 38, -120.f, 120.f);
  std::copy(special.begin(), special.end(), wide.data<float>());
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Tensor in(t, wide.shape());
    for (int64_t i = 0; i < wide.numel(); ++i) {
      if (t == DType::kFloat32)
        in.data<float>()[i] = wide.data<float>()[i];
      else
        in.data<double>()[i] = wide.data<float>()[i];
    }
    const Tensor s = Run1(EwNode("Sigmoid", {"x"}, {"s"}), {{"x", in}});
    const Tensor xs = Run1(EwNode("Mul", {"x", "s"}, {"y"}), {{"x", in}, {"s", s}});
    const Tensor sx = Run1(EwNode("Mul", {"s", "x"}, {"y"}), {{"x", in}, {"s", s}});
    const Tensor q =
        Run1(EwNode("QuickGelu", {"x"}, {"y"}, {{"alpha", Attribute::Float(1.f)}}, "com.microsoft"),
             {{"x", in}});
    EXPECT_TRUE(q.BitwiseEqual(xs)) << DTypeName(t);
    EXPECT_TRUE(q.BitwiseEqual(sx)) << DTypeName(t);
  }
}

// ai.onnx Gelu (opset 20) is com.microsoft Gelu ("none") and FastGelu gelu_new ("tanh") bit for
// bit, in f32 and f64: canonicalize renames it into those ops and promises unchanged numbers.
TEST(OnnxGeluKernelTest, BitwiseEqualToComMicrosoftGeluAndFastGelu) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor r = RandomTensor({20011}, 36, -8.f, 8.f);
    const float specials[] = {0.f, -0.f, 1e-30f, -1e-30f, 30.f, -30.f, 3e38f, -3e38f};
    for (int i = 0; i < 8; ++i) r.data<float>()[i] = specials[i];
    Tensor x(dt, r.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (dt == DType::kFloat32)
        x.data<float>()[i] = r.data<float>()[i];
      else
        x.data<double>()[i] = r.data<float>()[i];
    }
    Tensor erf = Run1(EwNode("Gelu", {"x"}, {"y"}), {{"x", x}});
    Tensor erf_ms = Run1(EwNode("Gelu", {"x"}, {"y"}, {}, "com.microsoft"), {{"x", x}});
    EXPECT_TRUE(erf.BitwiseEqual(erf_ms)) << DTypeName(dt);
    EXPECT_TRUE(
        Run1(EwNode("Gelu", {"x"}, {"y"}, {{"approximate", Attribute::String("none")}}), {{"x", x}})
            .BitwiseEqual(erf_ms));
    Tensor tanh = Run1(EwNode("Gelu", {"x"}, {"y"}, {{"approximate", Attribute::String("tanh")}}),
                       {{"x", x}});
    Tensor fast = Run1(EwNode("FastGelu", {"x"}, {"y"}, {{"form", Attribute::String("gelu_new")}},
                              "com.microsoft"),
                       {{"x", x}});
    EXPECT_TRUE(tanh.BitwiseEqual(fast)) << DTypeName(dt);
    EXPECT_FALSE(tanh.BitwiseEqual(erf)) << DTypeName(dt);
  }
  auto bad =
      RunSingleNode(EwNode("Gelu", {"x"}, {"y"}, {{"approximate", Attribute::String("fast")}}),
                    {{"x", F32({2}, {1, 2})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "Gelu node 'Gelu_node': attribute 'approximate' must be \"none\" or \"tanh\", got "
            "\"fast\"");
}

// Against the function body ONNX gives Gelu (onnx/defs/math/defs.cc, opset 20), run through these
// same kernels: the erf form is bitwise equal below 2^127, where the body's 0.5·x first keeps
// x·2 from overflowing; the tanh form is bitwise equal once the body's k = Sqrt(0.63661977236f),
// one ulp below sqrt(2/pi), is the correctly rounded constant FastGelu (and torch) use.
TEST(OnnxGeluKernelTest, EqualToTheOnnxFunctionBodyExceptWhereDocumented) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[20011]
  const two : f32[] = [2.0]
  const one : f32[] = [1.0]
  const half : f32[] = [0.5]
  const three : f32[] = [3.0]
  const c0 : f32[] = [0.044715]
  const two_over_pi : f32[] = [0.63661977236]
  const k : f32[] = [0.7978845834732056]
  sqrt_two = Sqrt(two)
  d = Div(x, sqrt_two)
  e = Erf(d)
  phi = Add(one, e)
  half_x = Mul(half, x)
  body = Mul(half_x, phi)
  erf_gelu = Gelu(x)
  cube = Pow(x, three)
  c_cube = Mul(c0, cube)
  inner = Add(x, c_cube)
  spec_k = Sqrt(two_over_pi)
  u = Mul(k, inner)
  t = Tanh(u)
  phi_t = Add(one, t)
  body_t = Mul(half_x, phi_t)
  tanh_gelu = Gelu(x) {approximate="tanh"}
  output body
  output erf_gelu
  output spec_k
  output body_t
  output tanh_gelu
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (const Node& n : g->nodes) ASSERT_TRUE(InferAndSetTypes(*g, n).ok()) << n.name;
  Tensor x = RandomTensor({20011}, 37, -8.f, 8.f);
  const float specials[] = {0.f, -0.f, 1e-30f, -1e-30f, 30.f, -30.f, 1e38f, -3e38f};
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = specials[i];
  auto out = Interpret(*g, {{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_TRUE(out->at("body").BitwiseEqual(out->at("erf_gelu")));
  EXPECT_TRUE(out->at("body_t").BitwiseEqual(out->at("tanh_gelu")));
  const float spec_k = out->at("spec_k").data<float>()[0];
  EXPECT_EQ(std::nextafter(spec_k, 1.f), static_cast<float>(std::sqrt(2 / M_PI)));
  // The one erf-form difference: x >= 2^127, where x·2 overflows.
  x.data<float>()[0] = std::ldexp(1.f, 127);
  out = Interpret(*g, {{"x", x}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->at("body").data<float>()[0], std::ldexp(1.f, 127));
  EXPECT_TRUE(std::isinf(out->at("erf_gelu").data<float>()[0]));
}

TEST(ActivationGradKernelTest, ReluSigmoidTanhGrads) {
  Tensor x = F32({5}, {-2.f, -0.5f, 0.f, 0.5f, 2.f});
  Tensor dy = F32({5}, {1.f, 2.f, 3.f, 4.f, 5.f});
  auto grad = [&](const char* op, const Tensor& v) {
    return Values<float>(
        Run1(EwNode(op, {"dy", "v"}, {"dx"}, {}, "com.microsoft"), {{"dy", dy}, {"v", v}}));
  };
  EXPECT_EQ(grad("ReluGrad", x), (std::vector<float>{0, 0, 0, 4, 5}));
  Tensor s = F32({5}, {0.1f, 0.25f, 0.5f, 0.75f, 0.9f});
  std::vector<float> sg = grad("SigmoidGrad", s);
  std::vector<float> tg = grad("TanhGrad", s);
  for (int i = 0; i < 5; ++i) {
    const float v = s.data<float>()[i], d = dy.data<float>()[i];
    EXPECT_EQ(sg[i], d * v * (1.f - v));
    EXPECT_EQ(tg[i], d * (1.f - v * v));
  }
  EXPECT_EQ(RunError(EwNode("ReluGrad", {"dy", "v"}, {"dx"}, {}, "com.microsoft"),
                     {{"dy", dy}, {"v", F32({4}, {0, 0, 0, 0})}}),
            "ReluGrad node 'ReluGrad_node': inputs 'dy' [5] and 'v' [4] must have the same shape");
}

// ----------------------------------------------------------------------------------- errors

TEST(ElementwiseSchemaTest, ErrorsNameTheNodeAndTheProblem) {
  Tensor f = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(RunError(EwNode("Add", {"a", "b"}), {{"a", f}, {"b", I64({3}, {1, 2, 3})}}),
            "Add node 'Add_node': inputs 'a' (f32) and 'b' (i64) must have the same element type");
  EXPECT_EQ(RunError(EwNode("Mul", {"a", "b"}), {{"a", f}, {"b", F32({2}, {1, 2})}}),
            "Mul node 'Mul_node': input 'b' of shape [2] does not broadcast with 'a' [2,3]");
  EXPECT_EQ(RunError(EwNode("Sum", {"a", "b", "c"}),
                     {{"a", f}, {"b", F32({1, 3}, {1, 2, 3})}, {"c", F32({4}, {1, 2, 3, 4})}}),
            "Sum node 'Sum_node': input 'c' of shape [4] does not broadcast with the shape [2,3] "
            "of the inputs before it");
  EXPECT_EQ(
      RunError(EwNode("Sqrt", {"a"}), {{"a", I64({1}, {4})}}),
      "Sqrt node 'Sqrt_node': input 'a' has element type i64; expected one of f32, f64, bf16");
  EXPECT_EQ(RunError(EwNode("And", {"a", "b"}), {{"a", f}, {"b", f}}),
            "And node 'And_node': input 'a' has element type f32; expected one of bool");
  EXPECT_EQ(RunError(EwNode("Where", {"c", "a", "b"}), {{"c", f}, {"a", f}, {"b", f}}),
            "Where node 'Where_node': input 'c' has element type f32; expected one of bool");
  EXPECT_EQ(RunError(EwNode("Cast", {"a"}), {{"a", f}}),
            "Cast node 'Cast_node': attribute 'to' is required");
  EXPECT_EQ(RunError(EwNode("Cast", {"a"}, {"y"}, {{"to", Attribute::Int(10)}}), {{"a", f}}),
            "Cast node 'Cast_node': cannot cast to element type 10; supported: f32, u8, i8, i32, "
            "i64, bool, f64, bf16");
}

}  // namespace
}  // namespace foundry
