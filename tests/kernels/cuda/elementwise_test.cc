// The CUDA elementwise kernels against the CPU reference, every op, on several shapes (rank 0,
// empty, sizes that are not multiples of the 256-thread block, broadcasting), plus Dropout's mask
// bitwise, in-place runs and the host-side errors. Needs a GPU (skips without one).
//
// Tolerance: 0 (bitwise; NaN matches any NaN) for the ops whose device arithmetic is IEEE-rounded
// as the CPU's (+ - * /, sqrt, comparisons, casts, rounding, selects, Dropout, the products of the
// activation gradients without a libm call). The ops that call a transcendental function differ
// by CUDA's libm error (expf, erff, tanhf, sinf, powf: 1-4 ulp), compounded for the composite
// GELU forms and their gradients: |cuda - cpu| <= 1e-6 + rtol·|cpu| with rtol 1e-6 for one call
// (8 ulp) and 1e-5 for the composites.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/op_schema.h"
#include "runtime/interpreter.h"
#include "tests/support/cuda_check.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

const std::vector<Shape> kShapes = {{}, {0}, {1}, {7}, {255}, {257}, {3, 347}, {2, 3, 4, 5}};
const std::vector<std::pair<Shape, Shape>> kBroadcast = {
    {{3, 1, 5}, {4, 1}},          {{}, {2, 3}},         {{2, 3}, {}},
    {{4, 8, 16}, {16}},           {{257, 3}, {257, 1}}, {{0, 3}, {3}},
    {{2, 1, 3, 1}, {1, 4, 1, 5}}, {{1, 1000}, {7, 1}}};

// Random values of `dtype` with edge values (0, -0, ±inf, NaN, huge, tiny) first, for floats.
Tensor Input(DType dtype, const Shape& shape, uint64_t seed) {
  Tensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  const double edges[] = {0.0,
                          -0.0,
                          1.0,
                          -1.0,
                          0.5,
                          2.5,
                          -2.5,
                          std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN(),
                          1e30,
                          -1e30,
                          1e-30,
                          20.0,
                          -90.0};
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = (i < 15 && t.numel() > 30) ? edges[i] : u(rng);
    switch (dtype) {
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(x);
        break;
      case DType::kFloat64:
        t.data<double>()[i] = x;
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = static_cast<int32_t>(u(rng) * 100);
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = static_cast<int64_t>(u(rng) * 100);
        break;
      case DType::kBool:
        t.data<bool>()[i] = u(rng) > 0;
        break;
      default:
        break;
    }
  }
  return t;
}

// CPU vs CUDA, every output: equal bits, or both NaN, or (rtol > 0, both finite) within
// 1e-6 + rtol·|cpu|.
Status Compare(const Node& node, const std::map<std::string, Tensor>& inputs,
               const std::map<std::string, Tensor>& constants, double rtol) {
  ASSIGN_OR_RETURN(std::vector<Tensor> cpu, RunSingleNode(node, inputs, constants));
  ASSIGN_OR_RETURN(std::vector<Tensor> gpu, RunSingleNodeOnCuda(node, inputs, constants, cpu));
  for (size_t o = 0; o < cpu.size(); ++o) {
    if (node.outputs[o].empty()) continue;
    const Tensor& a = cpu[o];
    const Tensor& b = gpu[o];
    const size_t size = DTypeSize(a.dtype());
    for (int64_t i = 0; i < a.numel(); ++i) {
      if (std::memcmp(static_cast<const char*>(a.raw()) + i * size,
                      static_cast<const char*>(b.raw()) + i * size, size) == 0)
        continue;
      const bool is_float = a.dtype() == DType::kFloat32 || a.dtype() == DType::kFloat64;
      const double x = a.GetAsDouble(i), y = b.GetAsDouble(i);
      if (is_float && std::isnan(x) && std::isnan(y)) continue;
      if (is_float && rtol > 0 && std::isfinite(x) && std::isfinite(y) &&
          std::fabs(x - y) <= 1e-6 + rtol * std::fabs(x))
        continue;
      char buf[160];
      std::snprintf(buf, sizeof buf, " output %zu element %lld of %lld: cpu %.9g, cuda %.9g", o,
                    static_cast<long long>(i), static_cast<long long>(a.numel()), x, y);
      return Error(node.Describe() + buf);
    }
  }
  return Status::Ok();
}

struct UnaryCase {
  std::string op, domain;
  std::vector<DType> dtypes;
  double rtol;
  std::map<std::string, Attribute> attrs = {};
};

const std::vector<DType> kFloat = {DType::kFloat32, DType::kFloat64};
const std::vector<DType> kNumeric = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                     DType::kInt64};

TEST(CudaElementwiseTest, UnaryOpsMatchCpu) {
  FOUNDRY_REQUIRE_GPU();
  const std::vector<UnaryCase> cases = {
      {"Neg", "", kNumeric, 0},
      {"Abs", "", kNumeric, 0},
      {"Sign", "", kNumeric, 0},
      {"Relu", "", kNumeric, 0},
      {"Sqrt", "", kFloat, 0},
      {"Reciprocal", "", kFloat, 0},
      {"Floor", "", kFloat, 0},
      {"Ceil", "", kFloat, 0},
      {"Round", "", kFloat, 0},
      {"IsNaN", "", kFloat, 0},
      {"IsInf", "", kFloat, 0},
      {"Identity", "", kNumeric, 0},
      {"Exp", "", kFloat, 1e-6},
      {"Log", "", kFloat, 1e-6},
      {"Erf", "", kFloat, 1e-6},
      {"Tanh", "", kFloat, 1e-6},
      {"Sigmoid", "", kFloat, 1e-6},
      {"Sin", "", kFloat, 1e-6},
      {"Cos", "", kFloat, 1e-6},
      {"Softplus", "", kFloat, 1e-6},
      {"Gelu", "com.microsoft", kFloat, 1e-5},
      {"Gelu", "com.microsoft", kFloat, 1e-5, {{"form", Attribute::String("half_first")}}},
      {"FastGelu", "com.microsoft", kFloat, 1e-5},
      {"FastGelu", "com.microsoft", kFloat, 1e-5, {{"form", Attribute::String("gelu_new")}}},
      {"QuickGelu", "com.microsoft", kFloat, 1e-6},
      {"QuickGelu", "com.microsoft", kFloat, 1e-6, {{"alpha", Attribute::Float(1.f)}}},
      {"Gelu", "", kFloat, 1e-5},
      {"Gelu", "", kFloat, 1e-5, {{"approximate", Attribute::String("tanh")}}},
      {"IsInf", "", kFloat, 0, {{"detect_negative", Attribute::Int(0)}}},
      {"Not", "", {DType::kBool}, 0}};
  for (const UnaryCase& c : cases)
    for (DType t : c.dtypes)
      for (const Shape& s : kShapes) {
        const Node node = MakeNode(c.op, {"x"}, {"y"}, c.attrs, c.domain, c.op + "_node");
        Status st = Compare(node, {{"x", Input(t, s, 1)}}, {}, c.rtol);
        EXPECT_TRUE(st.ok()) << DTypeName(t) << " " << ShapeToString(s) << ": " << st.message();
      }
}

TEST(CudaElementwiseTest, BinaryOpsMatchCpuWithBroadcasting) {
  FOUNDRY_REQUIRE_GPU();
  struct Case {
    std::string op;
    std::vector<DType> dtypes;
    double rtol;
    std::map<std::string, Attribute> attrs = {};
  };
  const std::vector<Case> cases = {{"Add", kNumeric, 0},
                                   {"Sub", kNumeric, 0},
                                   {"Mul", kNumeric, 0},
                                   {"Div", kFloat, 0},
                                   {"Min", kNumeric, 0},
                                   {"Max", kNumeric, 0},
                                   {"Sum", kNumeric, 0},
                                   {"Mean", kFloat, 0},
                                   {"Equal", kNumeric, 0},
                                   {"Less", kNumeric, 0},
                                   {"Greater", kNumeric, 0},
                                   {"LessOrEqual", kNumeric, 0},
                                   {"GreaterOrEqual", kNumeric, 0},
                                   {"Pow", kFloat, 1e-5},
                                   {"Mod", kFloat, 0, {{"fmod", Attribute::Int(1)}}},
                                   {"And", {DType::kBool}, 0},
                                   {"Or", {DType::kBool}, 0},
                                   {"Xor", {DType::kBool}, 0}};
  std::vector<std::pair<Shape, Shape>> shapes = kBroadcast;
  for (const Shape& s : kShapes) shapes.push_back({s, s});
  for (const Case& c : cases)
    for (DType t : c.dtypes)
      for (const auto& [sa, sb] : shapes) {
        const Node node = MakeNode(c.op, {"a", "b"}, {"y"}, c.attrs, "", c.op + "_node");
        Status st = Compare(node, {{"a", Input(t, sa, 2)}, {"b", Input(t, sb, 3)}}, {}, c.rtol);
        EXPECT_TRUE(st.ok()) << DTypeName(t) << " " << ShapeToString(sa) << " " << ShapeToString(sb)
                             << ": " << st.message();
      }
}

TEST(CudaElementwiseTest, IntegerDivAndModMatchCpuAndAConstantZeroDivisorFails) {
  FOUNDRY_REQUIRE_GPU();
  Tensor a = Tensor::FromVector<int64_t>(DType::kInt64, {6}, {7, -7, 7, -7, 9, INT64_MIN});
  Tensor b = Tensor::FromVector<int64_t>(DType::kInt64, {6}, {2, 2, -2, -2, 3, -1});
  for (const char* op : {"Div", "Mod"})
    for (int fmod : {0, 1}) {
      if (std::string(op) == "Div" && fmod) continue;
      const Node node = MakeNode(op, {"a", "b"}, {"y"}, {{"fmod", Attribute::Int(fmod)}}, "",
                                 std::string(op) + "_node");
      Status st = Compare(node, {{"a", a}, {"b", b}}, {}, 0);
      EXPECT_TRUE(st.ok()) << st.message();
    }
  Tensor zero = Tensor::FromVector<int64_t>(DType::kInt64, {2}, {3, 0});
  const Node div = MakeNode("Div", {"a", "z"}, {"y"}, {}, "", "Div_node");
  auto r =
      RunSingleNodeOnCuda(div, {{"a", Tensor::FromVector<int64_t>(DType::kInt64, {2}, {1, 2})}},
                          {{"z", zero}}, {Tensor(DType::kInt64, {2})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("integer division by zero"), std::string::npos)
      << r.status().message();
}

TEST(CudaElementwiseTest, VariadicOpsMatchCpuWithManyBroadcastInputs) {
  FOUNDRY_REQUIRE_GPU();
  // 11 inputs: two launches (8, then the output so far with the remaining 3).
  const std::vector<Shape> shapes = {{3, 1, 257}, {1},    {4, 257},    {},       {3, 4, 257}, {257},
                                     {3, 1, 1},   {4, 1}, {3, 4, 257}, {1, 257}, {3, 4, 1}};
  for (const char* op : {"Sum", "Min", "Max", "Mean"})
    for (size_t count : {size_t{1}, size_t{3}, size_t{8}, size_t{9}, size_t{11}}) {
      std::vector<std::string> names;
      std::map<std::string, Tensor> feeds;
      for (size_t k = 0; k < count; ++k) {
        names.push_back("x" + std::to_string(k));
        feeds[names.back()] = Input(DType::kFloat32, shapes[k], 10 + k);
      }
      const Node node = MakeNode(op, names, {"y"}, {}, "", std::string(op) + "_node");
      Status st = Compare(node, feeds, {}, 0);
      EXPECT_TRUE(st.ok()) << op << " x" << count << ": " << st.message();
    }
}

TEST(CudaElementwiseTest, ActivationGradientsMatchCpu) {
  FOUNDRY_REQUIRE_GPU();
  const std::vector<std::pair<std::string, double>> cases = {
      {"GeluGrad", 1e-5}, {"FastGeluGrad", 1e-5}, {"QuickGeluGrad", 1e-5},
      {"ReluGrad", 0},    {"SigmoidGrad", 0},     {"TanhGrad", 0}};
  for (const auto& [op, rtol] : cases)
    for (DType t : kFloat)
      for (const Shape& s : kShapes) {
        const Node node = MakeNode(op, {"dy", "x"}, {"dx"}, {}, "com.microsoft", op + "_node");
        Status st = Compare(node, {{"dy", Input(t, s, 4)}, {"x", Input(t, s, 5)}}, {}, rtol);
        EXPECT_TRUE(st.ok()) << op << " " << ShapeToString(s) << ": " << st.message();
      }
}

TEST(CudaElementwiseTest, WhereCastClipMatchCpu) {
  FOUNDRY_REQUIRE_GPU();
  for (const auto& [sa, sb] : kBroadcast) {
    const Node node = MakeNode("Where", {"c", "x", "y"}, {"z"}, {}, "", "Where_node");
    for (DType t : {DType::kFloat32, DType::kInt64, DType::kBool}) {
      Status st = Compare(
          node, {{"c", Input(DType::kBool, sa, 6)}, {"x", Input(t, sb, 7)}, {"y", Input(t, sa, 8)}},
          {}, 0);
      EXPECT_TRUE(st.ok()) << ShapeToString(sa) << " " << ShapeToString(sb) << ": " << st.message();
    }
  }
  const std::vector<DType> all = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64,
                                  DType::kBool};
  for (DType from : all)
    for (DType to : all)
      for (const Shape& s : {Shape{}, Shape{1000}}) {
        const Node node =
            MakeNode("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(static_cast<int64_t>(to))}}, "",
                     "Cast_node");
        Status st = Compare(node, {{"x", Input(from, s, 9)}}, {}, 0);
        EXPECT_TRUE(st.ok()) << DTypeName(from) << "->" << DTypeName(to) << ": " << st.message();
      }
  for (const Shape& s : kShapes) {
    const Node inputs = MakeNode("Clip", {"x", "lo", "hi"}, {"y"}, {}, "", "Clip_node");
    Status st = Compare(inputs,
                        {{"x", Input(DType::kFloat32, s, 11)},
                         {"lo", Tensor::Scalar(-0.5f)},
                         {"hi", Tensor::Scalar(1.25f)}},
                        {}, 0);
    EXPECT_TRUE(st.ok()) << st.message();
    const Node lo_only = MakeNode("Clip", {"x", "lo"}, {"y"}, {}, "", "Clip_node");
    st = Compare(lo_only, {{"x", Input(DType::kFloat32, s, 12)}}, {{"lo", Tensor::Scalar(0.f)}}, 0);
    EXPECT_TRUE(st.ok()) << st.message();
    const Node attrs = MakeNode("Clip", {"x"}, {"y"},
                                {{"min", Attribute::Float(-1.f)}, {"max", Attribute::Float(1.f)}},
                                "", "Clip_node");
    st = Compare(attrs, {{"x", Input(DType::kFloat32, s, 13)}}, {}, 0);
    EXPECT_TRUE(st.ok()) << st.message();
  }
}

TEST(CudaElementwiseTest, DropoutMaskAndGradientEqualCpuBitwise) {
  FOUNDRY_REQUIRE_GPU();
  for (float ratio : {0.f, 0.1f, 0.5f, 0.9f})
    for (bool training : {false, true})
      for (const Shape& s : kShapes) {
        const Node node = MakeNode("Dropout", {"x", "r", "t"}, {"y", "m"}, {}, "", "Dropout_node");
        std::map<std::string, Tensor> constants = {
            {"r", Tensor::Scalar(ratio)},
            {"t", Tensor::FromVector<uint8_t>(DType::kBool, {}, {static_cast<uint8_t>(training)})}};
        Status st = Compare(node, {{"x", Input(DType::kFloat32, s, 14)}}, constants, 0);
        EXPECT_TRUE(st.ok()) << ratio << " " << ShapeToString(s) << ": " << st.message();
        const Node grad = MakeNode("DropoutGrad", {"dy", "m", "r", "t"}, {"dx"}, {},
                                   "com.microsoft", "DropoutGrad_node");
        st = Compare(grad,
                     {{"dy", Input(DType::kFloat32, s, 15)}, {"m", Input(DType::kBool, s, 16)}},
                     constants, 0);
        EXPECT_TRUE(st.ok()) << ratio << " " << ShapeToString(s) << ": " << st.message();
      }
  // A ratio computed at run time is an error naming the node and the input.
  const Node node = MakeNode("Dropout", {"x", "r"}, {"y"}, {}, "", "Dropout_node");
  auto r = RunSingleNodeOnCuda(node,
                               {{"x", Input(DType::kFloat32, {4}, 1)}, {"r", Tensor::Scalar(0.5f)}},
                               {}, {Tensor(DType::kFloat32, {4})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 1 ('ratio') must be a constant on the cuda backend"),
            std::string::npos)
      << r.status().message();
}

#ifdef FOUNDRY_HAVE_CUDA
// Runs `node` on the device with output 0 in the buffer of input `alias` (as the planner does for
// in_place_inputs) and returns output 0.
StatusOr<Tensor> RunInPlace(const Node& node, const std::vector<Tensor>& inputs, size_t alias,
                            const std::map<size_t, Tensor>& constants = {}) {
  ASSIGN_OR_RETURN(cuda::StreamAndBlas sb, cuda::CreateStreamAndBlas());
  std::vector<void*> ptrs;
  std::vector<Tensor> dev(inputs.size());
  std::vector<const Tensor*> in(inputs.size()), host_constants(inputs.size(), nullptr);
  Status status = Status::Ok();
  for (size_t i = 0; i < inputs.size() && status.ok(); ++i) {
    void* p = nullptr;
    status = cuda::DeviceAlloc(inputs[i].nbytes() + 1, &p, sb.stream, "input");
    if (!status.ok()) break;
    ptrs.push_back(p);
    status = cuda::CopyToDevice(p, inputs[i].raw(), inputs[i].nbytes(), sb.stream, "input");
    dev[i] = Tensor::View(inputs[i].dtype(), inputs[i].shape(), p);
    in[i] = &dev[i];
    if (auto it = constants.find(i); it != constants.end()) host_constants[i] = &it->second;
  }
  Tensor result(inputs[alias].dtype(), inputs[alias].shape());
  if (status.ok()) {
    Tensor out = Tensor::View(inputs[alias].dtype(), inputs[alias].shape(), dev[alias].raw());
    std::vector<Tensor*> outs = {&out};
    CudaKernelContext ctx;
    ctx.base.node_key = NodeKey(node);
    ctx.base.constant_inputs = host_constants;
    ctx.stream = sb.stream;
    ctx.cublas = sb.cublas;
    status = RunCudaKernel(node, in, outs, ctx);
    if (status.ok())
      status = cuda::CopyToHost(result.raw(), out.raw(), result.nbytes(), sb.stream, "out");
  }
  for (void* p : ptrs) cuda::DeviceFree(p);
  cuda::DestroyStreamAndBlas(sb);
  RETURN_IF_ERROR(status);
  return result;
}
#endif

TEST(CudaElementwiseTest, InPlaceRunsEqualOutOfPlace) {
  FOUNDRY_REQUIRE_GPU();
#ifdef FOUNDRY_HAVE_CUDA
  struct Case {
    std::string op, domain;
    std::vector<Shape> shapes;
    size_t alias;
  };
  const std::vector<Case> cases = {{"Add", "", {{4, 257}, {257}}, 0},
                                   {"Mul", "", {{257}, {4, 257}}, 1},
                                   {"Sum", "", {{1}, {3, 300}, {300}, {3, 300}}, 3},
                                   {"Sigmoid", "", {{1000}}, 0},
                                   {"Gelu", "com.microsoft", {{1000}}, 0},
                                   {"GeluGrad", "com.microsoft", {{1000}, {1000}}, 1},
                                   {"SigmoidGrad", "com.microsoft", {{1000}, {1000}}, 0}};
  for (const Case& c : cases) {
    std::vector<std::string> names;
    std::vector<Tensor> inputs;
    std::map<std::string, Tensor> feeds;
    for (size_t k = 0; k < c.shapes.size(); ++k) {
      names.push_back("x" + std::to_string(k));
      inputs.push_back(RandomTensor(c.shapes[k], 20 + k, -2, 2));
      feeds[names.back()] = inputs.back();
    }
    const Node node = MakeNode(c.op, names, {"y"}, {}, c.domain, c.op + "_node");
    auto cpu = RunSingleNode(node, feeds);
    ASSERT_TRUE(cpu.ok()) << cpu.status().message();
    auto gpu = RunSingleNodeOnCuda(node, feeds, {}, *cpu);
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    auto in_place = RunInPlace(node, inputs, c.alias);
    ASSERT_TRUE(in_place.ok()) << in_place.status().message();
    EXPECT_TRUE(in_place->BitwiseEqual((*gpu)[0])) << c.op << " aliasing input " << c.alias;
  }
  // Dropout in place: the same mask decisions and values as out of place.
  const Node drop = MakeNode("Dropout", {"x", "r", "t"}, {"y"}, {}, "", "Dropout_node");
  Tensor x = RandomTensor({1001}, 3, -2, 2), r = Tensor::Scalar(0.3f);
  Tensor t = Tensor::FromVector<uint8_t>(DType::kBool, {}, {1});
  auto cpu = RunSingleNode(drop, {{"x", x}}, {{"r", r}, {"t", t}});
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  auto in_place = RunInPlace(drop, {x, r, t}, 0, {{1, r}, {2, t}});
  ASSERT_TRUE(in_place.ok()) << in_place.status().message();
  EXPECT_TRUE(in_place->BitwiseEqual((*cpu)[0]));
#endif
}

}  // namespace
}  // namespace foundry
