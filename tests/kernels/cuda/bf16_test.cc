// bfloat16 on the GPU (kernels/cuda/kernel.h, "bfloat16"). Needs a GPU: every test skips
// here with the reason (and fails under FOUNDRY_REQUIRE_GPU=1, which scripts/gpu-check.sh sets).
//  - Cast to and from bf16 on the device gives the CPU's bits (the same conversion functions,
//    base/bfloat16.h) on a wide stride of float patterns, every bf16 pattern, NaN, inf and ties;
//  - each staged op family with bf16 operands against the CPU's bf16 kernel: bitwise where the
//    f32 CUDA kernel is bitwise with the CPU's (IEEE + - *, element moves), else that kernel's f32
//    tolerance plus one bf16 ulp on each bf16 output (the two f32 results may straddle a rounding
//    boundary);
//  - cuBLAS's bf16 products (MatMul, batched and broadcast; FusedMatMul with every transpose and
//    alpha; Gemm with a bf16 bias, an f32 output) within bf16 rounding of the double product of
//    the bf16 inputs, and the same bits twice;
//  - an amp_bf16 training plan of mpt_tiny on cuda against cpu: step-1 loss within 1e-2
//    relative, the run deterministic, --ckpt mptblock bitwise the plain plan, and the device
//    bytes the run allocates equal to the plan's cuda layout (staging included).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "base/bfloat16.h"
#include "runtime/cuda_backend.h"
#include "runtime/interpreter.h"
#include "runtime/trainer.h"
#include "tests/support/cuda_check.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/grad_check.h"
#include "tests/support/source_dir.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr char kMs[] = "com.microsoft";

Tensor ToBf16(const Tensor& f32) {
  Tensor t(DType::kBFloat16, f32.shape());
  FloatToBf16(f32.data<float>(), t.data<uint16_t>(), f32.numel());
  return t;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Element i as a double (Tensor::GetAsDouble has no bfloat16).
double ValueAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kBFloat16 ? Bf16ToFloat(t.data<uint16_t>()[i]) : t.GetAsDouble(i);
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Runs `node` on the GPU with outputs typed as on the CPU.
StatusOr<std::vector<Tensor>> OnGpu(const Node& node, const std::map<std::string, Tensor>& in,
                                    const std::map<std::string, Tensor>& constants,
                                    const std::vector<Tensor>& like) {
  return RunSingleNodeOnCuda(node, in, constants, like);
}

TEST(CudaBf16Test, CastGivesTheCpusBits) {
  FOUNDRY_REQUIRE_GPU();
  std::vector<float> v;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) v.push_back(FromBits(uint32_t(b)));
  for (uint32_t h = 0; h < 0x10000; h += 64)
    for (uint32_t low : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      v.push_back(FromBits((h << 16) | low));
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor all(DType::kBFloat16, {0x10000});
  for (uint32_t i = 0; i < 0x10000; ++i) all.data<uint16_t>()[i] = static_cast<uint16_t>(i);
  std::vector<double> d;
  for (int64_t i = 0; i < n; i += 7) {
    d.push_back(std::nextafter(static_cast<double>(v[i]), HUGE_VAL));
    d.push_back(std::nextafter(static_cast<double>(v[i]), -HUGE_VAL));
  }
  struct Case {
    Tensor x;
    DType to;
  };
  const std::vector<Case> cases = {
      {Tensor::FromVector<float>(DType::kFloat32, {n}, v), DType::kBFloat16},
      {Tensor::FromVector<double>(DType::kFloat64, {static_cast<int64_t>(d.size())}, d),
       DType::kBFloat16},
      {Tensor::FromVector<int64_t>(DType::kInt64, {4}, {0, 257, -259, (1 << 24) + 1}),
       DType::kBFloat16},
      {all, DType::kFloat32},
      {all, DType::kFloat64},
      {all, DType::kInt64},
      {all, DType::kBool},
      {all, DType::kBFloat16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(DTypeName(c.x.dtype())) + " -> " + std::string(DTypeName(c.to)));
    const Node node =
        MakeNode("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(static_cast<int64_t>(c.to))}});
    auto cpu = RunSingleNode(node, {{"x", c.x}});
    ASSERT_TRUE(cpu.ok()) << cpu.status().message();
    auto gpu = OnGpu(node, {{"x", c.x}}, {}, *cpu);
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    EXPECT_TRUE(SameBytes((*cpu)[0], (*gpu)[0]));
  }
}

struct Case {
  std::string label;
  Node node;
  std::map<std::string, Tensor> inputs;          // f32 values (rounded to bf16 where listed)
  std::vector<std::string> bf16;                 // the inputs given as bfloat16
  std::map<std::string, Tensor> constants = {};  // shape operands
  double atol = 0, rtol = 0;                     // the f32 kernel's tolerance; both 0: bitwise
};

Tensor Condition(const Tensor& r) {
  Tensor c(DType::kBool, r.shape());
  for (int64_t i = 0; i < r.numel(); ++i) c.data<bool>()[i] = r.data<float>()[i] > 0;
  return c;
}

std::vector<Case> StagedCases() {
  std::vector<Case> c;
  const Tensor x = RandomTensor({6, 24}, 1), y = RandomTensor({6, 24}, 2);
  const Tensor bias = RandomTensor({24}, 3);
  auto i64 = [](std::vector<int64_t> v) {
    return Tensor::FromVector<int64_t>(DType::kInt64, {static_cast<int64_t>(v.size())}, v);
  };
  // IEEE arithmetic, the same on both: bitwise.
  c.push_back({"add_bias", MakeNode("Add", {"x", "b"}), {{"x", x}, {"b", bias}}, {"x", "b"}});
  c.push_back({"mul", MakeNode("Mul", {"x", "y"}, {"z"}), {{"x", x}, {"y", y}}, {"x", "y"}});
  c.push_back({"sub", MakeNode("Sub", {"x", "y"}, {"z"}), {{"x", x}, {"y", y}}, {"x", "y"}});
  c.push_back({"where",
               MakeNode("Where", {"c", "x", "y"}, {"z"}),
               {{"c", Condition(RandomTensor({6, 24}, 4))}, {"x", x}, {"y", y}},
               {"x", "y"}});
  // Element moves (TakesBf16AsIs: no staging on either backend).
  c.push_back({"transpose",
               MakeNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints({1, 0})}}),
               {{"x", x}},
               {"x"}});
  c.push_back({"concat",
               MakeNode("Concat", {"x", "y"}, {"z"}, {{"axis", Attribute::Int(1)}}),
               {{"x", x}, {"y", y}},
               {"x", "y"}});
  c.push_back({"slice",
               MakeNode("Slice", {"x", "st", "en"}, {"y"}),
               {{"x", x}},
               {"x"},
               {{"st", i64({1})}, {"en", i64({5})}}});
  c.push_back({"gather",
               MakeNode("Gather", {"x", "i"}, {"y"}, {{"axis", Attribute::Int(0)}}),
               {{"x", x}, {"i", i64({5, 0, 2, 2})}},
               {"x"}});
  c.push_back({"reshape",
               MakeNode("Reshape", {"x", "s"}, {"y"}),
               {{"x", x}},
               {"x"},
               {{"s", i64({3, 48})}}});
  c.push_back({"expand",
               MakeNode("Expand", {"b", "s"}, {"y"}),
               {{"b", bias}},
               {"b"},
               {{"s", i64({5, 24})}}});
  c.push_back({"split",
               MakeNode("Split", {"x", "s"}, {"y0", "y1"}, {{"axis", Attribute::Int(1)}}),
               {{"x", x}},
               {"x"},
               {{"s", i64({10, 14})}}});
  // Transcendentals and sums: the f32 tests' tolerances.
  c.push_back({"gelu",
               MakeNode("Gelu", {"x"}, {"y"}, {}, kMs),
               {{"x", RandomTensor({7, 33}, 6, -4, 4)}},
               {"x"},
               {},
               1e-6,
               1e-5});
  c.push_back({"gelugrad",
               MakeNode("GeluGrad", {"dy", "x"}, {"dx"}, {}, kMs),
               {{"dy", RandomTensor({7, 33}, 7)}, {"x", RandomTensor({7, 33}, 8, -4, 4)}},
               {"dy", "x"},
               {},
               1e-6,
               1e-5});
  c.push_back({"softmax",
               MakeNode("Softmax", {"x"}, {"y"}, {{"axis", Attribute::Int(-1)}}),
               {{"x", RandomTensor({5, 300}, 9, -6, 6)}},
               {"x"},
               {},
               1e-5,
               1e-5});
  c.push_back({"reducesum",
               MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(0)}}),
               {{"x", RandomTensor({16, 24}, 10)}},
               {"x"},
               {{"axes", i64({0})}},
               1e-5,
               1e-5});
  c.push_back({"layernorm",
               MakeNode("LayerNormalization", {"x", "s", "b"}, {"y", "mean", "inv"},
                        {{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(1e-5f)}}),
               {{"x", RandomTensor({6, 96}, 11)},
                {"s", RandomTensor({96}, 12)},
                {"b", RandomTensor({96}, 13)}},
               {"x", "s", "b"},
               {},
               1e-5,
               1e-5});
  c.push_back({"rmsnorm",
               MakeNode("SimplifiedLayerNormalization", {"x", "s"}, {"y", "inv"},
                        {{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(1e-5f)}}, kMs),
               {{"x", RandomTensor({6, 96}, 14)}, {"s", RandomTensor({96}, 15)}},
               {"x", "s"},
               {},
               1e-5,
               1e-5});
  const std::map<std::string, Attribute> attn = {{"scale", Attribute::Float(0.25f)},
                                                 {"causal", Attribute::Int(1)},
                                                 {"k_transposed", Attribute::Int(0)}};
  // Against the CPU (each within 1e-5 of a double reference in the f32 tests): 2e-5.
  c.push_back({"attention",
               MakeNode("Attention", {"q", "k", "v"}, {"o", "lse"}, attn, "foundry"),
               {{"q", RandomTensor({1, 2, 37, 16}, 16)},
                {"k", RandomTensor({1, 2, 37, 16}, 17)},
                {"v", RandomTensor({1, 2, 37, 16}, 18)}},
               {"q", "k", "v"},
               {},
               2e-5,
               2e-5});
  return c;
}

// |gpu - cpu| <= atol + rtol·|cpu| (+ one bf16 ulp at |cpu| for a bf16 output); both 0: the same
// bytes. Returns "" or the first mismatch.
std::string Mismatch(const Tensor& cpu, const Tensor& gpu, double atol, double rtol) {
  if (cpu.dtype() != gpu.dtype() || cpu.shape() != gpu.shape()) return "type or shape differs";
  if (atol == 0 && rtol == 0)
    return SameBytes(cpu, gpu) ? "" : "not bitwise (first difference at element " + [&] {
      const size_t es = DTypeSize(cpu.dtype());
      for (int64_t i = 0; i < cpu.numel(); ++i)
        if (std::memcmp(static_cast<const char*>(cpu.raw()) + i * es,
                        static_cast<const char*>(gpu.raw()) + i * es, es) != 0)
          return std::to_string(i) + ": cpu " + std::to_string(ValueAt(cpu, i)) + ", cuda " +
                 std::to_string(ValueAt(gpu, i));
      return std::string("?");
    }() + ")";
  const bool bf16 = cpu.dtype() == DType::kBFloat16;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double a = ValueAt(cpu, i), b = ValueAt(gpu, i);
    const double tol = atol + rtol * std::fabs(a) + (bf16 ? std::ldexp(std::fabs(a), -7) : 0.0);
    if (!(a == b || std::fabs(a - b) <= tol))
      return "element " + std::to_string(i) + ": cpu " + std::to_string(a) + ", cuda " +
             std::to_string(b) + " (tolerance " + std::to_string(tol) + ")";
  }
  return "";
}

class CudaBf16StagedTest : public testing::TestWithParam<Case> {};

TEST_P(CudaBf16StagedTest, MatchesTheCpuBf16Kernel) {
  FOUNDRY_REQUIRE_GPU();
  const Case& c = GetParam();
  std::map<std::string, Tensor> in;
  for (const auto& [name, t] : c.inputs) {
    const bool narrow = std::count(c.bf16.begin(), c.bf16.end(), name) > 0;
    in[name] = narrow ? ToBf16(t) : t;
  }
  auto cpu = RunSingleNode(c.node, in, c.constants);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  bool any_bf16 = false;
  for (const Tensor& t : *cpu) any_bf16 |= t.dtype() == DType::kBFloat16;
  EXPECT_TRUE(any_bf16) << "the case has no bf16 output";
  auto gpu = OnGpu(c.node, in, c.constants, *cpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  for (size_t k = 0; k < cpu->size(); ++k)
    EXPECT_EQ(Mismatch((*cpu)[k], (*gpu)[k], c.atol, c.rtol), "") << "output " << k;
  auto again = OnGpu(c.node, in, c.constants, *cpu);
  ASSERT_TRUE(again.ok());
  for (size_t k = 0; k < cpu->size(); ++k)
    EXPECT_TRUE(SameBytes((*gpu)[k], (*again)[k])) << "output " << k << " differs run to run";

  // The backward of the fused attention, on the forward's bf16 O and f32 LSE.
  if (c.label == "attention") {
    std::map<std::string, Tensor> gin = in;
    gin["dout"] = ToBf16(RandomTensor({1, 2, 37, 16}, 19));
    gin["o"] = (*cpu)[0];
    gin["lse"] = (*cpu)[1];
    const Node g = MakeNode("AttentionGrad", {"dout", "q", "k", "v", "o", "lse"},
                            {"dq", "dk", "dv"}, c.node.attrs, "foundry");
    auto gc = RunSingleNode(g, gin);
    ASSERT_TRUE(gc.ok()) << gc.status().message();
    auto gg = OnGpu(g, gin, {}, *gc);
    ASSERT_TRUE(gg.ok()) << gg.status().message();
    for (size_t k = 0; k < 3; ++k)
      EXPECT_EQ(Mismatch((*gc)[k], (*gg)[k], 2e-5, 2e-5), "") << "AttentionGrad output " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaBf16StagedTest, testing::ValuesIn(StagedCases()),
                         [](const auto& info) { return info.param.label; });

// ---------------------------------------------------------------------------------------------
// cuBLAS bf16 products against double.

struct Product {
  std::string label;
  Node node;
  Shape a, b;
  Shape c = {};  // empty: none
  DType y = DType::kBFloat16;
};

// The product as the node defines it, in double, on the bf16 inputs; mag: the sum of |terms|.
void Reference(const Product& p, const Tensor& a, const Tensor& b, const Tensor* c, const Shape& ys,
               std::vector<double>* ref, std::vector<double>* mag, int64_t* k_out) {
  const bool ta = p.node.GetInt("transA", 0) != 0, tb = p.node.GetInt("transB", 0) != 0;
  const double alpha = p.node.GetFloat("alpha", 1.0f), beta = p.node.GetFloat("beta", 1.0f);
  const int ra = static_cast<int>(a.rank()), rb = static_cast<int>(b.rank());
  const int64_t m = ys[ys.size() - 2], n = ys.back();
  const int64_t k = ta ? a.shape()[ra - 2] : a.shape()[ra - 1];
  *k_out = k;
  int64_t batches = 1;
  for (size_t i = 0; i + 2 < ys.size(); ++i) batches *= ys[i];
  const int64_t a_mat = a.shape()[ra - 2] * a.shape()[ra - 1];
  const int64_t b_mat = b.shape()[rb - 2] * b.shape()[rb - 1];
  const int64_t a_batches = a.numel() / a_mat, b_batches = b.numel() / b_mat;
  auto av = [&](int64_t bt, int64_t i, int64_t kk) {
    const int64_t base = (bt % a_batches) * a_mat;
    return static_cast<double>(
        Bf16ToFloat(a.data<uint16_t>()[base + (ta ? kk * m + i : i * k + kk)]));
  };
  auto bv = [&](int64_t bt, int64_t kk, int64_t j) {
    const int64_t base = (bt % b_batches) * b_mat;
    return static_cast<double>(
        Bf16ToFloat(b.data<uint16_t>()[base + (tb ? j * k + kk : kk * n + j)]));
  };
  ref->assign(batches * m * n, 0);
  mag->assign(batches * m * n, 0);
  for (int64_t bt = 0; bt < batches; ++bt)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, g = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double t = av(bt, i, kk) * bv(bt, kk, j);
          s += t;
          g += std::fabs(t);
        }
        double y = alpha * s, gm = std::fabs(alpha) * g;
        if (c) {
          const Shape& cs = c->shape();
          const int64_t ci = cs.size() == 2 && cs[0] != 1 ? i : 0;
          const int64_t cj = cs.back() != 1 ? j : 0;
          const double cv =
              Bf16ToFloat(c->data<uint16_t>()[ci * (cs.size() == 2 ? cs[1] : 0) + cj]);
          y += beta * cv;
          gm += std::fabs(beta * cv);
        }
        (*ref)[(bt * m + i) * n + j] = y;
        (*mag)[(bt * m + i) * n + j] = gm;
      }
}

TEST(CudaBf16Test, CublasProductsWithinBf16RoundingOfDouble) {
  FOUNDRY_REQUIRE_GPU();
  auto fused = [](int ta, int tb, float alpha) {
    return MakeNode("FusedMatMul", {"a", "b"}, {"y"},
                    {{"transA", Attribute::Int(ta)},
                     {"transB", Attribute::Int(tb)},
                     {"alpha", Attribute::Float(alpha)}},
                    kMs);
  };
  const std::vector<Product> products = {
      {"matmul", MakeNode("MatMul", {"a", "b"}, {"y"}), {8, 64}, {64, 12}},
      {"matmul_ragged", MakeNode("MatMul", {"a", "b"}, {"y"}), {33, 70}, {70, 17}},
      {"matmul_f32_out",
       MakeNode("MatMul", {"a", "b"}, {"y"}),
       {8, 64},
       {64, 12},
       {},
       DType::kFloat32},
      {"matmul_broadcast_b", MakeNode("MatMul", {"a", "b"}, {"y"}), {2, 3, 8, 64}, {64, 12}},
      {"matmul_batched", MakeNode("MatMul", {"a", "b"}, {"y"}), {4, 8, 64}, {4, 64, 12}},
      {"matmul_broadcast_a", MakeNode("MatMul", {"a", "b"}, {"y"}), {8, 64}, {3, 64, 12}},
      {"fused_nn", fused(0, 0, 0.5f), {3, 9, 40}, {3, 40, 11}},
      {"fused_tn", fused(1, 0, 1.0f), {3, 40, 9}, {3, 40, 11}},
      {"fused_nt", fused(0, 1, 2.0f), {3, 9, 40}, {3, 11, 40}},
      {"fused_tt", fused(1, 1, -0.25f), {3, 40, 9}, {11, 40}},
      {"gemm_bias_row",
       MakeNode("Gemm", {"a", "b", "c"}, {"y"}, {{"transB", Attribute::Int(1)}}),
       {8, 40},
       {24, 40},
       {24}},
      {"gemm_full_c_alpha_beta",
       MakeNode("Gemm", {"a", "b", "c"}, {"y"},
                {{"transA", Attribute::Int(1)},
                 {"alpha", Attribute::Float(0.5f)},
                 {"beta", Attribute::Float(2.0f)}}),
       {40, 8},
       {40, 24},
       {8, 24}},
      {"gemm_no_c", MakeNode("Gemm", {"a", "b"}, {"y"}), {8, 40}, {40, 24}},
      {"gemm_bf16_c_f32_out",
       MakeNode("Gemm", {"a", "b", "c"}, {"y"}),
       {8, 40},
       {40, 24},
       {1, 24},
       DType::kFloat32},
  };
  int seed = 100;
  for (const Product& p : products) {
    SCOPED_TRACE(p.label);
    std::map<std::string, Tensor> in = {{"a", ToBf16(RandomTensor(p.a, ++seed))},
                                        {"b", ToBf16(RandomTensor(p.b, ++seed))}};
    if (!p.c.empty()) in["c"] = ToBf16(RandomTensor(p.c, ++seed));
    // The output's shape from the CPU run (the graph's types); its dtype the case's.
    auto cpu = RunSingleNode(p.node, in);
    ASSERT_TRUE(cpu.ok()) << cpu.status().message();
    const Shape ys = (*cpu)[0].shape();
    std::vector<Tensor> like;
    like.emplace_back(p.y, ys);
    auto gpu = OnGpu(p.node, in, {}, like);
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    auto again = OnGpu(p.node, in, {}, like);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(SameBytes((*gpu)[0], (*again)[0])) << "differs run to run";
    std::vector<double> ref, mag;
    int64_t k = 0;
    Reference(p, in.at("a"), in.at("b"), p.c.empty() ? nullptr : &in.at("c"), ys, &ref, &mag, &k);
    ASSERT_EQ(static_cast<int64_t>(ref.size()), (*gpu)[0].numel());
    int bad = 0;
    for (size_t e = 0; e < ref.size(); ++e) {
      const double got = ValueAt((*gpu)[0], static_cast<int64_t>(e));
      // f32 accumulation: (k + 2) roundings of at most 2^-23 of the magnitudes (2^-24 rounding
      // to nearest; tensor cores may truncate); a bf16 output rounded once more (2^-8 relative).
      double tol = (k + 2) * std::ldexp(mag[e], -23);
      if (p.y == DType::kBFloat16) tol += std::ldexp(std::fabs(ref[e]), -8);
      if (std::fabs(got - ref[e]) > tol && bad++ < 5)
        ADD_FAILURE() << "element " << e << ": cuda " << got << ", double " << ref[e]
                      << " (tolerance " << tol << ")";
    }
    EXPECT_EQ(bad, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// An amp_bf16 training plan on cuda.

TrainerOptions Options(const std::vector<std::string>& feeds, const std::string& device) {
  TrainerOptions o;  // AdamW, lr 1e-3
  o.optimizer.weight_decay = 0.01;
  o.seed = 5;
  o.feeds = feeds;
  o.device = device;
  return o;
}

struct AmpRun {
  std::vector<float> losses;
  std::map<std::string, Tensor> weights;
};

StatusOr<AmpRun> Train(const LoadedPlan& plan, const std::vector<std::string>& feeds,
                       const std::string& device, int steps) {
  ASSIGN_OR_RETURN(auto t, Trainer::Create(plan, Options(feeds, device)));
  AmpRun r;
  for (int i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(StepReport s, t->Step());
    r.losses.push_back(s.loss);
  }
  r.weights = t->parameters();
  return r;
}

TEST(CudaBf16TrainingTest, MptTinyAmpBf16OnCudaMatchesCpu) {
  FOUNDRY_REQUIRE_GPU();
  auto f = FixtureOf(SourceDir() / "models/fixtures", CkptCase{"mpt_tiny", "model.onnx", {}, {}});
  ASSERT_TRUE(f.ok()) << f.status().message();
  auto plan = CompileFixture(f->dir / "model.onnx", f->feeds, std::vector<std::string>{},
                             Precision::kAmpBf16);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  constexpr int kSteps = 5;
  auto cpu = Train(*plan, f->feeds, "cpu", kSteps);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  auto gpu = Train(*plan, f->feeds, "cuda", kSteps);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  for (int i = 0; i < kSteps; ++i)
    EXPECT_NEAR(gpu->losses[i], cpu->losses[i], 1e-2 * std::fabs(cpu->losses[i]))
        << "step " << i + 1;
  std::cout << "mpt_tiny amp_bf16: step-1 loss cpu " << cpu->losses[0] << " cuda " << gpu->losses[0]
            << "; step " << kSteps << " cpu " << cpu->losses.back() << " cuda "
            << gpu->losses.back() << "\n";

  auto again = Train(*plan, f->feeds, "cuda", kSteps);
  ASSERT_TRUE(again.ok()) << again.status().message();
  auto targets = ParseCkptArg("mptblock");
  ASSERT_TRUE(targets.ok());
  auto ck = CompileFixture(f->dir / "model.onnx", f->feeds, std::vector<CkptTarget>{*targets},
                           nullptr, Precision::kAmpBf16);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  auto ckpt = Train(*ck, f->feeds, "cuda", kSteps);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  for (const AmpRun* other : {&*again, &*ckpt}) {
    const char* what = other == &*again ? "a second cuda run" : "--ckpt mptblock";
    for (int i = 0; i < kSteps; ++i)
      ASSERT_EQ(std::memcmp(&gpu->losses[i], &other->losses[i], 4), 0)
          << what << " step " << i + 1 << ": " << gpu->losses[i] << " vs " << other->losses[i];
    for (const auto& [name, w] : gpu->weights)
      EXPECT_TRUE(w.BitwiseEqual(other->weights.at(name))) << what << ": " << name;
  }
}

TEST(CudaBf16TrainingTest, PlannedDeviceBytesAreMeasured) {
  FOUNDRY_REQUIRE_GPU();
  auto cuda = GetCudaBackend();
  ASSERT_TRUE(cuda.ok()) << cuda.status().message();
  const Backend* backend = *cuda;
  auto f = FixtureOf(SourceDir() / "models/fixtures", CkptCase{"mpt_tiny", "model.onnx", {}, {}});
  ASSERT_TRUE(f.ok());
  auto plan = CompileFixture(f->dir / "model.onnx", f->feeds, std::vector<std::string>{},
                             Precision::kAmpBf16);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const MemorySnapshot before = backend->Bytes();
  auto t = Trainer::Create(*plan, Options(f->feeds, "cuda"));
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_TRUE((*t)->Step().ok());
  const MemorySnapshot after = backend->Bytes();
  const MemoryPlan& mp = (*t)->memory_plan();
  const BackendLayout* layout = mp.Layout("cuda");
  ASSERT_NE(layout, nullptr);
  auto live = [&](MemoryClass c) { return after[c].live - before[c].live; };
  EXPECT_EQ(live(MemoryClass::kArena), layout->arena_bytes);
  EXPECT_EQ(live(MemoryClass::kParameter), mp.outside[MemoryClass::kParameter]);
  EXPECT_EQ(live(MemoryClass::kGradient), mp.outside[MemoryClass::kGradient]);
  EXPECT_EQ(live(MemoryClass::kOptimizerState), mp.outside[MemoryClass::kOptimizerState]);
  std::cout << "mpt_tiny amp_bf16: cuda arena " << layout->arena_bytes
            << " bytes planned and allocated\n";
}

}  // namespace
}  // namespace foundry
