// The CUDA elementwise kernels' per-element math (kernels/cpu/elementwise_ops.h), run on the
// host with g++, against the CPU kernels (kernels/cpu/elementwise.cc via RunSingleNode) on random
// and edge inputs (0, -0, ±inf, NaN, huge, tiny, denormal, halves for Round). Needs no GPU.
//
// Every comparison is bitwise, except that any NaN equals any NaN (the sign and payload of a
// NaN made from inf - inf or 0 * inf follow operand order, which the compiler may commute;
// IEEE 754 leaves them open), and except the f32 ops built on exp, erf or tanh: the CPU computes
// those with its vectorised functions (kernels/cpu/vmath.h, within 2 ulp of libm's), the host math
// with libm, so they are compared with a tolerance (|cpu - host| <= 1e-5·|host| + 1e-6·scale,
// scale the inputs' magnitudes: libm's own ulp of erf is amplified as much in 1 + erf(x)). The functions copy the CPU's formulas and operation order, and on
// the host they call the same libm, so any difference is a transcription error. (On the device the
// transcendental functions are CUDA's and differ by an ulp or two; that is the GPU test's business,
// tests/kernels/cuda/elementwise_test.cc.) The kernels' host-side index arithmetic
// (ew::CollapseBroadcast, the variadic launches of at most 8 operands, Dropout's Philox blocks of
// four) is simulated here the way the kernels use it and checked against the CPU as well.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/op_schema.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cpu/kernel.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

template <class T>
DType DTypeFor() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DType::kFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::kInt64;
  if constexpr (std::is_same_v<T, bool>) return DType::kBool;
  if constexpr (std::is_same_v<T, uint8_t>) return DType::kUint8;
  if constexpr (std::is_same_v<T, int8_t>) return DType::kInt8;
  return DType::kUndefined;
}

template <class T>
Tensor Make(Shape shape, const std::vector<T>& v) {
  Tensor t(DTypeFor<T>(), std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];  // v may be a std::vector<bool>
  return t;
}

template <class T>
bool SameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
std::string Str(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(v));
    return buf;
  } else
    return std::to_string(v);
}

// Edge values followed by `n_random` uniform draws in [-4, 4).
template <class T>
std::vector<T> Values(int n_random, uint64_t seed) {
  std::vector<T> v;
  if constexpr (std::is_floating_point_v<T>) {
    const T inf = std::numeric_limits<T>::infinity();
    v = {T(0),
         T(-0.0),
         T(1),
         T(-1),
         T(0.5),
         T(-0.5),
         T(1.5),
         T(2.5),
         T(-2.5),
         T(3),
         inf,
         -inf,
         std::numeric_limits<T>::quiet_NaN(),
         T(1e30),
         T(-1e30),
         T(1e-30),
         T(-1e-30),
         std::numeric_limits<T>::denorm_min(),
         std::numeric_limits<T>::max(),
         std::numeric_limits<T>::lowest(),
         T(88.5),
         T(-88.5),
         T(100),
         T(-100),
         T(8388608.5),
         T(0.70710677),
         T(20),
         T(-20)};
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-4, 4);
    for (int i = 0; i < n_random; ++i) v.push_back(static_cast<T>(u(rng)));
  } else if constexpr (std::is_same_v<T, bool>) {
    v = {false, true};
  } else {
    v = {T(0),
         T(1),
         T(-1),
         T(2),
         T(-2),
         T(7),
         T(-7),
         T(3),
         std::numeric_limits<T>::max(),
         std::numeric_limits<T>::min(),
         T(std::numeric_limits<T>::max() - 1)};
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> u(-1000, 1000);
    for (int i = 0; i < n_random; ++i) v.push_back(static_cast<T>(u(rng)));
  }
  return v;
}

// Every pair of `a` x `b` as two flat operands.
template <class A, class B>
void Pairs(const std::vector<A>& a, const std::vector<B>& b, std::vector<A>* x, std::vector<B>* y) {
  for (A va : a)
    for (B vb : b) {
      x->push_back(va);
      y->push_back(vb);
    }
}

StatusOr<std::vector<Tensor>> Cpu(const Node& node, const std::map<std::string, Tensor>& inputs,
                                  const std::map<std::string, Tensor>& constants = {}) {
  return RunSingleNode(node, inputs, constants);
}

// Output `o` of the CPU run equals `expected` bit for bit.
// Whether f32 `c` is within the tolerance of the file comment of `e`, for inputs of `scale`.
bool Close(float c, float e, double scale) {
  if (c == e) return true;
  const double d = std::fabs(static_cast<double>(c) - static_cast<double>(e));
  return d <= 1e-5 * std::fabs(static_cast<double>(e)) + 1e-6 * scale;
}

// With `scale` (one per element), f32 results built on vmath's functions are compared by Close.
template <class R>
void ExpectBits(const Node& node, const Tensor& cpu, const std::vector<R>& expected,
                const std::string& what = "", const std::vector<double>* scale = nullptr) {
  ASSERT_EQ(cpu.numel(), static_cast<int64_t>(expected.size())) << node.op_type;
  ASSERT_EQ(DTypeFor<R>(), cpu.dtype()) << node.op_type;
  int bad = 0;
  for (size_t i = 0; i < expected.size() && bad < 5; ++i) {
    const R c = cpu.data<R>()[i];
    const R e = expected[i];
    if constexpr (std::is_floating_point_v<R>) {
      if (c != c && e != e) continue;  // NaN: sign and payload are not part of the contract
      if constexpr (std::is_same_v<R, float>) {
        if (scale && Close(c, e, (*scale)[i])) continue;
      }
    }
    if (!SameBits(c, e)) {
      ++bad;
      ADD_FAILURE() << node.domain << "::" << node.op_type << " " << what << " element " << i
                    << ": cpu " << Str(c) << ", host math " << Str(e);
    }
  }
}

// The ops whose f32 CPU kernel uses kernels/cpu/vmath.h (file comment).
bool UsesVmath(const std::string& op) {
  for (const char* v : {"Exp", "Erf", "Tanh", "Sigmoid", "Gelu", "FastGelu", "QuickGelu",
                        "GeluGrad", "FastGeluGrad", "QuickGeluGrad"})
    if (op == v) return true;
  return false;
}

double Magnitude(double v) { return std::isfinite(v) ? std::max(1.0, std::fabs(v)) : 1.0; }

template <class T, class R, class Op>
void CheckUnary(const std::string& op, Op fn, const std::string& domain = "",
                std::map<std::string, Attribute> attrs = {}) {
  const std::vector<T> x = Values<T>(300, 7);
  const Node node = MakeNode(op, {"x"}, {"y"}, attrs, domain, op + "_node");
  auto cpu = Cpu(node, {{"x", Make<T>({static_cast<int64_t>(x.size())}, x)}});
  ASSERT_TRUE(cpu.ok()) << op << ": " << cpu.status().message();
  std::vector<R> expected;
  std::vector<double> scale;
  for (T v : x) {
    expected.push_back(fn(v));
    scale.push_back(Magnitude(static_cast<double>(v)));
  }
  ExpectBits<R>(node, (*cpu)[0], expected, std::string(DTypeName(DTypeFor<T>())),
                UsesVmath(op) ? &scale : nullptr);
}

template <class A, class B, class R, class Op>
void CheckBinary(const std::string& op, Op fn, std::vector<A> a, std::vector<B> b,
                 const std::string& domain = "", std::map<std::string, Attribute> attrs = {}) {
  std::vector<A> x;
  std::vector<B> y;
  Pairs(a, b, &x, &y);
  const int64_t n = static_cast<int64_t>(x.size());
  const Node node = MakeNode(op, {"a", "b"}, {"y"}, attrs, domain, op + "_node");
  auto cpu = Cpu(node, {{"a", Make<A>({n}, x)}, {"b", Make<B>({n}, y)}});
  ASSERT_TRUE(cpu.ok()) << op << ": " << cpu.status().message();
  std::vector<R> expected;
  std::vector<double> scale;
  for (int64_t i = 0; i < n; ++i) {
    expected.push_back(fn(x[i], y[i]));
    if constexpr (std::is_floating_point_v<A> && std::is_floating_point_v<B>)
      scale.push_back(Magnitude(static_cast<double>(x[i])) * Magnitude(static_cast<double>(y[i])));
  }
  ExpectBits<R>(node, (*cpu)[0], expected, std::string(DTypeName(DTypeFor<A>())),
                UsesVmath(op) ? &scale : nullptr);
}

template <class A, class B, class R, class Op>
void CheckBinaryAll(const std::string& op, Op fn, const std::string& domain = "",
                    std::map<std::string, Attribute> attrs = {}) {
  CheckBinary<A, B, R>(op, fn, Values<A>(30, 1), Values<B>(30, 2), domain, attrs);
}

TEST(CudaElementwiseMathTest, FloatUnaryOpsEqualCpuBitwise) {
  auto all = [](auto tag) {
    using T = decltype(tag);
    CheckUnary<T, T>("Sqrt", ew::SqrtOp{});
    CheckUnary<T, T>("Reciprocal", ew::ReciprocalOp{});
    CheckUnary<T, T>("Exp", ew::ExpOp{});
    CheckUnary<T, T>("Log", ew::LogOp{});
    CheckUnary<T, T>("Erf", ew::ErfOp{});
    CheckUnary<T, T>("Tanh", ew::TanhOp{});
    CheckUnary<T, T>("Sigmoid", ew::SigmoidOp{});
    CheckUnary<T, T>("Sin", ew::SinOp{});
    CheckUnary<T, T>("Cos", ew::CosOp{});
    CheckUnary<T, T>("Floor", ew::FloorOp{});
    CheckUnary<T, T>("Ceil", ew::CeilOp{});
    CheckUnary<T, T>("Round", ew::RoundOp{});
    CheckUnary<T, T>("Softplus", ew::SoftplusOp{});
    CheckUnary<T, T>("Neg", ew::NegOp{});
    CheckUnary<T, T>("Abs", ew::AbsOp{});
    CheckUnary<T, T>("Sign", ew::SignOp{});
    CheckUnary<T, T>("Relu", ew::ReluOp{});
    CheckUnary<T, T>("Gelu", ew::GeluOp{}, "com.microsoft");
    CheckUnary<T, T>("Gelu", ew::GeluOp{true}, "com.microsoft",
                     {{"form", Attribute::String("half_first")}});
    CheckUnary<T, T>("FastGelu", ew::FastGeluOp{false}, "com.microsoft");
    CheckUnary<T, T>("FastGelu", ew::FastGeluOp{false}, "com.microsoft",
                     {{"form", Attribute::String("torch_tanh")}});
    CheckUnary<T, T>("FastGelu", ew::FastGeluOp{true}, "com.microsoft",
                     {{"form", Attribute::String("gelu_new")}});
    CheckUnary<T, T>("QuickGelu", ew::QuickGeluOp{}, "com.microsoft");
    CheckUnary<T, T>("QuickGelu", ew::QuickGeluOp{1.f}, "com.microsoft",
                     {{"alpha", Attribute::Float(1.f)}});
    // ai.onnx Gelu (opset 20): the same two element functions.
    CheckUnary<T, T>("Gelu", ew::GeluOp{});
    CheckUnary<T, T>("Gelu", ew::GeluOp{}, "", {{"approximate", Attribute::String("none")}});
    CheckUnary<T, T>("Gelu", ew::FastGeluOp{true}, "",
                     {{"approximate", Attribute::String("tanh")}});
    CheckUnary<T, bool>("IsNaN", ew::IsNaNOp{});
    for (int pos = 0; pos < 2; ++pos)
      for (int neg = 0; neg < 2; ++neg) {
        ew::IsInfOp op;
        op.positive = pos;
        op.negative = neg;
        CheckUnary<T, bool>(
            "IsInf", op, "",
            {{"detect_positive", Attribute::Int(pos)}, {"detect_negative", Attribute::Int(neg)}});
      }
  };
  all(float{});
  all(double{});
}

TEST(CudaElementwiseMathTest, IntegerAndBoolUnaryOpsEqualCpuBitwise) {
  auto all = [](auto tag) {
    using T = decltype(tag);
    CheckUnary<T, T>("Neg", ew::NegOp{});
    CheckUnary<T, T>("Abs", ew::AbsOp{});
    CheckUnary<T, T>("Sign", ew::SignOp{});
    CheckUnary<T, T>("Relu", ew::ReluOp{});
  };
  all(int32_t{});
  all(int64_t{});
  CheckUnary<bool, bool>("Not", ew::NotOp{});
}

TEST(CudaElementwiseMathTest, BinaryOpsEqualCpuBitwise) {
  auto numeric = [](auto tag) {
    using T = decltype(tag);
    CheckBinaryAll<T, T, T>("Add", ew::AddOp{});
    CheckBinaryAll<T, T, T>("Sub", ew::SubOp{});
    CheckBinaryAll<T, T, T>("Mul", ew::MulOp{});
    CheckBinaryAll<T, T, T>("Min", ew::MinOp{});
    CheckBinaryAll<T, T, T>("Max", ew::MaxOp{});
    CheckBinaryAll<T, T, bool>("Equal", ew::EqualOp{});
    CheckBinaryAll<T, T, bool>("Less", ew::LessOp{});
    CheckBinaryAll<T, T, bool>("Greater", ew::GreaterOp{});
    CheckBinaryAll<T, T, bool>("LessOrEqual", ew::LessOrEqualOp{});
    CheckBinaryAll<T, T, bool>("GreaterOrEqual", ew::GreaterOrEqualOp{});
    if constexpr (std::is_floating_point_v<T>) {
      CheckBinaryAll<T, T, T>("Div", ew::DivOp{});
      CheckBinaryAll<T, T, T>("Mod", ew::ModOp{true}, "", {{"fmod", Attribute::Int(1)}});
    } else {
      // Nonzero divisors: the CPU fails the node on a zero one.
      std::vector<T> b;
      for (T v : Values<T>(30, 2))
        if (v != 0) b.push_back(v);
      CheckBinary<T, T, T>("Div", ew::DivOp{}, Values<T>(30, 1), b);
      CheckBinary<T, T, T>("Mod", ew::ModOp{false}, Values<T>(30, 1), b);
      CheckBinary<T, T, T>("Mod", ew::ModOp{true}, Values<T>(30, 1), b, "",
                           {{"fmod", Attribute::Int(1)}});
    }
  };
  numeric(float{});
  numeric(double{});
  numeric(int32_t{});
  numeric(int64_t{});
  CheckBinaryAll<bool, bool, bool>("And", ew::AndOp{});
  CheckBinaryAll<bool, bool, bool>("Or", ew::OrOp{});
  CheckBinaryAll<bool, bool, bool>("Xor", ew::XorOp{});
  CheckBinaryAll<bool, bool, bool>("Equal", ew::EqualOp{});
}

TEST(CudaElementwiseMathTest, PowEqualsCpuBitwiseForEveryBaseAndExponentType) {
  auto with_base = [](auto base_tag) {
    using B = decltype(base_tag);
    auto with_exp = [](auto exp_tag) {
      using E = decltype(exp_tag);
      std::vector<E> e = Values<E>(10, 3);
      if constexpr (std::is_integral_v<E>) {
        e.resize(std::min<size_t>(e.size(), 8));  // no int64 max exponents: the loop is fine, but
        e.push_back(E(5));                        // keep the integer cases readable
        e.push_back(E(-3));
      }
      CheckBinary<B, E, B>("Pow", ew::PowOp{}, Values<B>(20, 4), e);
    };
    with_exp(float{});
    with_exp(double{});
    with_exp(int32_t{});
    with_exp(int64_t{});
  };
  with_base(float{});
  with_base(double{});
  with_base(int32_t{});
  with_base(int64_t{});
}

TEST(CudaElementwiseMathTest, ActivationGradientsEqualCpuBitwise) {
  auto all = [](auto tag) {
    using T = decltype(tag);
    const auto dy = Values<T>(20, 5), x = Values<T>(40, 6);
    CheckBinary<T, T, T>("GeluGrad", ew::GeluGradOp{}, dy, x, "com.microsoft");
    CheckBinary<T, T, T>("FastGeluGrad", ew::FastGeluGradOp{}, dy, x, "com.microsoft");
    CheckBinary<T, T, T>("QuickGeluGrad", ew::QuickGeluGradOp{}, dy, x, "com.microsoft");
    CheckBinary<T, T, T>("QuickGeluGrad", ew::QuickGeluGradOp{1.f}, dy, x, "com.microsoft",
                         {{"alpha", Attribute::Float(1.f)}});
    CheckBinary<T, T, T>("ReluGrad", ew::ReluGradOp{}, dy, x, "com.microsoft");
    CheckBinary<T, T, T>("SigmoidGrad", ew::SigmoidGradOp{}, dy, x, "com.microsoft");
    CheckBinary<T, T, T>("TanhGrad", ew::TanhGradOp{}, dy, x, "com.microsoft");
  };
  all(float{});
  all(double{});
}

TEST(CudaElementwiseMathTest, CastEqualsCpuBitwiseForEveryTypePair) {
  auto from = [](auto src_tag) {
    using S = decltype(src_tag);
    auto to = [](auto dst_tag) {
      using D = decltype(dst_tag);
      const std::vector<S> x = Values<S>(50, 8);
      const int64_t n = static_cast<int64_t>(x.size());
      const Node node =
          MakeNode("Cast", {"x"}, {"y"},
                   {{"to", Attribute::Int(static_cast<int64_t>(DTypeFor<D>()))}}, "", "Cast_node");
      auto cpu = Cpu(node, {{"x", Make<S>({n}, x)}});
      ASSERT_TRUE(cpu.ok()) << cpu.status().message();
      std::vector<D> expected;
      for (S v : x) expected.push_back(ew::CastOp<S, D>{}(v));
      ExpectBits<D>(
          node, (*cpu)[0], expected,
          std::string(DTypeName(DTypeFor<S>())) + "->" + std::string(DTypeName(DTypeFor<D>())));
    };
    to(float{});
    to(double{});
    to(int32_t{});
    to(int64_t{});
    to(bool{});
    to(uint8_t{});
    to(int8_t{});
  };
  from(float{});
  from(double{});
  from(int32_t{});
  from(int64_t{});
  from(bool{});
  from(uint8_t{});
  from(int8_t{});
}

TEST(CudaElementwiseMathTest, ClipEqualsCpuBitwiseWithInputAndAttributeBounds) {
  const std::vector<float> x = Values<float>(100, 9);
  const int64_t n = static_cast<int64_t>(x.size());
  struct Case {
    bool has_lo, has_hi;
    float lo, hi;
    bool as_attrs;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case& c : std::vector<Case>{{true, true, -1.f, 2.f, false},
                                         {true, false, -0.5f, 0, false},
                                         {false, true, 0, 0.25f, false},
                                         {true, true, 3.f, -3.f, false},  // min > max: max
                                         {true, true, nan, 1.f, false},
                                         {true, true, -2.f, 2.f, true},
                                         {false, false, 0, 0, false}}) {
    std::vector<std::string> inputs = {"x"};
    std::map<std::string, Tensor> feeds = {{"x", Make<float>({n}, x)}};
    std::map<std::string, Attribute> attrs;
    if (c.as_attrs) {
      attrs["min"] = Attribute::Float(c.lo);
      attrs["max"] = Attribute::Float(c.hi);
    } else {
      inputs.push_back(c.has_lo ? "lo" : "");
      inputs.push_back(c.has_hi ? "hi" : "");
      if (c.has_lo) feeds["lo"] = Tensor::Scalar(c.lo);
      if (c.has_hi) feeds["hi"] = Tensor::Scalar(c.hi);
    }
    const Node node = MakeNode("Clip", inputs, {"y"}, attrs, "", "Clip_node");
    auto cpu = Cpu(node, feeds);
    ASSERT_TRUE(cpu.ok()) << cpu.status().message();
    std::vector<float> expected;
    for (float v : x) expected.push_back(ew::ClipValue(v, c.has_lo, c.lo, c.has_hi, c.hi));
    ExpectBits<float>(node, (*cpu)[0], expected);
  }
}

TEST(CudaElementwiseMathTest, WhereEqualsCpuBitwise) {
  std::vector<float> x = Values<float>(20, 10), y = Values<float>(20, 11);
  ASSERT_EQ(x.size(), y.size());
  std::vector<uint8_t> cond;
  for (size_t i = 0; i < x.size(); ++i) cond.push_back((i * 7 + 3) % 3 == 0);
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor tc(DType::kBool, {n});
  std::memcpy(tc.raw(), cond.data(), cond.size());
  const Node node = MakeNode("Where", {"c", "x", "y"}, {"z"}, {}, "", "Where_node");
  auto cpu = Cpu(node, {{"c", tc}, {"x", Make<float>({n}, x)}, {"y", Make<float>({n}, y)}});
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  std::vector<float> expected;
  for (int64_t i = 0; i < n; ++i) expected.push_back(cond[i] ? x[i] : y[i]);
  ExpectBits<float>(node, (*cpu)[0], expected);
}

// ---------------------------------------------------------------------------------------------
// Index arithmetic: broadcasting through the collapsed shapes, as the kernels index.

// Offset of output element `flat` in an operand of shape `s` broadcast to `out` (numpy rules),
// written independently of the kernels' and the CPU's stride plans.
int64_t RefOffset(const Shape& out, const Shape& s, int64_t flat) {
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

const std::vector<std::vector<Shape>> kBroadcastCases = {
    {{3, 1, 5}, {4, 1}},
    {{}, {2, 3}},
    {{2, 3}, {}},
    {{2, 3}, {3}},
    {{4, 8, 16}, {16}},
    {{4, 8, 16}, {8, 1}},
    {{2, 1, 3, 1}, {1, 4, 1, 5}},
    {{1, 1}, {1}},
    {{7, 1, 1, 9}, {7, 5, 2, 9}},
    {{5, 6}, {5, 6}},
    {{1, 6}, {5, 1}},
    {{2, 3, 4}, {3, 1}, {2, 1, 4}},
    {{257}, {1}, {257}, {}},
    {{3, 1, 2}, {1}, {3, 4, 2}, {4, 1}, {1, 4, 2}}};

TEST(CudaElementwiseMathTest, CollapsedBroadcastIndexesEveryElementAsTheFullShapes) {
  for (const std::vector<Shape>& shapes : kBroadcastCases) {
    Shape out = shapes[0];
    for (size_t k = 1; k < shapes.size(); ++k) {
      auto s = BroadcastShapes(out, shapes[k]);
      ASSERT_TRUE(s.ok());
      out = *s;
    }
    std::vector<const Shape*> in;
    for (const Shape& s : shapes) in.push_back(&s);
    const ew::CollapsedBroadcast c = ew::CollapseBroadcast(out, in);
    ASSERT_EQ(NumElements(c.out), NumElements(out));
    ASSERT_LE(c.out.size(), out.size());
    for (size_t k = 0; k < shapes.size(); ++k) {
      ASSERT_EQ(c.in[k].size(), c.out.size());
      for (size_t d = 0; d < c.out.size(); ++d)
        ASSERT_TRUE(c.in[k][d] == c.out[d] || c.in[k][d] == 1)
            << ShapeToString(shapes[k]) << " -> " << ShapeToString(c.in[k]);
      for (int64_t i = 0; i < NumElements(out); ++i)
        ASSERT_EQ(RefOffset(c.out, c.in[k], i), RefOffset(out, shapes[k], i))
            << "operand " << ShapeToString(shapes[k]) << " of output " << ShapeToString(out)
            << ", element " << i;
    }
  }
  // A same-shape operand and a bias collapse to rank 1 and 2.
  const Shape a = {4, 8, 16}, bias = {16};
  const ew::CollapsedBroadcast c = ew::CollapseBroadcast(a, {&a, &bias});
  EXPECT_EQ(c.out, (Shape{32, 16}));
  EXPECT_EQ(c.in[0], (Shape{32, 16}));
  EXPECT_EQ(c.in[1], (Shape{1, 16}));
}

// The kernels' Sum/Min/Max/Mean as launched: operands broadcast through the collapsed shapes,
// at most 8 per launch, later launches folding the output so far with the next 7 inputs.
template <class Op>
std::vector<float> SimulateVariadic(const std::vector<Tensor>& in, const Shape& out, bool mean,
                                    Op op) {
  std::vector<const Shape*> shapes;
  for (const Tensor& t : in) shapes.push_back(&t.shape());
  const ew::CollapsedBroadcast c = ew::CollapseBroadcast(out, shapes);
  const int64_t n = NumElements(out);
  std::vector<float> y(n);
  size_t next = 0;
  while (next < in.size()) {
    const size_t first = next;
    const size_t end = std::min(in.size(), next + (next == 0 ? 8 : 7));
    for (int64_t i = 0; i < n; ++i) {
      float acc = first == 0 ? in[0].data<float>()[RefOffset(c.out, c.in[0], i)] : y[i];
      for (size_t k = first == 0 ? 1 : first; k < end; ++k)
        acc = op(acc, in[k].data<float>()[RefOffset(c.out, c.in[k], i)]);
      if (mean && end == in.size()) acc = acc / static_cast<float>(in.size());
      y[i] = acc;
    }
    next = end;
  }
  return y;
}

TEST(CudaElementwiseMathTest, BroadcastVariadicLaunchesEqualCpuBitwise) {
  for (const std::vector<Shape>& shapes : kBroadcastCases) {
    for (int reps : {1, 4}) {  // 4 copies of a 3-shape case: 12 inputs, two launches
      std::vector<Tensor> in;
      std::vector<std::string> names;
      std::map<std::string, Tensor> feeds;
      for (int r = 0; r < reps; ++r)
        for (const Shape& s : shapes) {
          names.push_back("x" + std::to_string(names.size()));
          in.push_back(RandomTensor(s, 100 + names.size(), -3, 3));
          feeds[names.back()] = in.back();
        }
      for (const std::string op : {"Sum", "Min", "Max", "Mean", "Add"}) {
        if (op == "Add" && in.size() != 2) continue;
        const Node node = MakeNode(op, names, {"y"}, {}, "", op + "_node");
        auto cpu = Cpu(node, feeds);
        ASSERT_TRUE(cpu.ok()) << op << ": " << cpu.status().message();
        const Shape& out = (*cpu)[0].shape();
        std::vector<float> expected = op == "Min" ? SimulateVariadic(in, out, false, ew::MinOp{})
                                      : op == "Max"
                                          ? SimulateVariadic(in, out, false, ew::MaxOp{})
                                          : SimulateVariadic(in, out, op == "Mean", ew::AddOp{});
        ExpectBits<float>(node, (*cpu)[0], expected, std::to_string(in.size()) + " inputs");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dropout: the mask and output from ew::DropoutQuad, one Philox block per call as the kernel's
// threads run it, equal the CPU kernel's for several seeds, node keys, ratios and sizes.

TEST(CudaElementwiseMathTest, DropoutQuadsEqualCpuMaskAndOutputBitwise) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{0x123456789abcdefULL}}) {
    for (uint64_t key : {uint64_t{0}, uint64_t{42}, uint64_t{0xfedcba9876543210ULL}}) {
      for (float ratio : {0.1f, 0.5f, 0.9f}) {
        for (int64_t n : {1, 7, 255, 257, 1001}) {
          const Node node =
              MakeNode("Dropout", {"x", "r", "t"}, {"y", "m"}, {}, "", "Dropout_node");
          Tensor x = RandomTensor({n}, seed + n, -2, 2);
          Tensor r = Tensor::Scalar(ratio);
          Tensor t = Make<bool>({}, {true});
          Tensor y(DType::kFloat32, {n}), m(DType::kBool, {n});
          std::vector<const Tensor*> ins = {&x, &r, &t};
          std::vector<Tensor*> outs = {&y, &m};
          KernelContext ctx;
          ctx.seed = seed;
          ctx.node_key = key;
          ctx.training = true;
          ASSERT_TRUE(RunCpuKernel(node, ins, outs, ctx).ok());

          const float scale = 1.f / (1.f - ratio);
          std::vector<float> hy(n);
          std::vector<uint8_t> hm(n, 0xA5);
          bool* mask = reinterpret_cast<bool*>(hm.data());
          for (int64_t b = 0; b < (n + 3) / 4; ++b)
            ew::DropoutQuad(seed, key, b, n, ratio, scale, x.data<float>(), hy.data(), mask);
          ExpectBits<float>(node, y, hy, "output");
          ASSERT_EQ(std::memcmp(m.raw(), hm.data(), n), 0)
              << "seed " << seed << " key " << key << " ratio " << ratio << " n " << n;

          // DropoutGrad with that mask and the forward's ratio.
          const Node grad = MakeNode("DropoutGrad", {"dy", "m", "r", "t"}, {"dx"}, {},
                                     "com.microsoft", "DropoutGrad_node");
          Tensor dy = RandomTensor({n}, seed + 2 * n, -1, 1);
          auto cpu = Cpu(grad, {{"dy", dy}, {"m", m}, {"r", r}, {"t", t}});
          ASSERT_TRUE(cpu.ok()) << cpu.status().message();
          std::vector<float> hdx;
          for (int64_t i = 0; i < n; ++i)
            hdx.push_back(ew::DropoutGradValue(dy.data<float>()[i], mask[i], scale));
          ExpectBits<float>(grad, (*cpu)[0], hdx);
        }
      }
    }
  }
}

// In place: the quad reads each element before writing it, so y == x gives the same bits.
TEST(CudaElementwiseMathTest, DropoutQuadInPlaceEqualsOutOfPlace) {
  const int64_t n = 1001;
  Tensor x = RandomTensor({n}, 3, -2, 2);
  std::vector<float> y(n), z(x.data<float>(), x.data<float>() + n);
  for (int64_t b = 0; b < (n + 3) / 4; ++b) {
    ew::DropoutQuad<float>(5, 6, b, n, 0.3f, 1.f / 0.7f, x.data<float>(), y.data(), nullptr);
    ew::DropoutQuad<float>(5, 6, b, n, 0.3f, 1.f / 0.7f, z.data(), z.data(), nullptr);
  }
  EXPECT_EQ(std::memcmp(y.data(), z.data(), n * sizeof(float)), 0);
}

}  // namespace
}  // namespace foundry
