// bfloat16 on the CUDA backend, checked on the host (no GPU needed; the GPU half is
// tests/kernels/cuda/bf16_test.cc):
//  - the device's per-element conversions (the Cast kernel's ew::FromBf16Op / ToBf16Op, the
//    staging kernels' Bf16ToFloat / FloatToBf16) are base/bfloat16.h's functions: replayed here
//    with g++ on a wide stride of float bit patterns plus every special class (NaN, inf, ties,
//    subnormals, overflow), they give the CPU Cast kernel's bits;
//  - the workspace figures: a staged op's CUDA figure holds exactly the CPU's staging bytes (the
//    f32 copies) on top of its own kernel's; a matrix product with bfloat16 A and B holds only
//    cuBLAS's workspace (no staging); an element move holds nothing extra, on both backends (one
//    TakesBf16AsIs list);
//  - every fixture compiled with --precision amp_bf16: each node with a bfloat16 operand has a
//    CUDA path (a kernel, and direct or staged), and the cuda layout plans for each node exactly
//    the workspace RunCudaKernel will demand (planned == measured for the staging bytes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "kernels/cpu/collective.h"
#include "kernels/cpu/elementwise_ops.h"
#include "kernels/cpu/kernel.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/grad_check.h"
#include "tests/support/source_dir.h"
#include "tests/support/test_util.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Float bit patterns: a stride over all 2^32 (an odd stride, so every low-bit pattern comes up),
// and around every 64th bfloat16 value the exact tie, one below and one above it, and the
// truncation itself; plus NaNs of both signs and payloads, infinities, zeros, the largest finite
// values (and the values that round past them), subnormals.
std::vector<float> FloatCases() {
  std::vector<float> v;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) v.push_back(FromBits(uint32_t(b)));
  for (uint32_t h = 0; h < 0x10000; h += 64)
    for (uint32_t low : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      v.push_back(FromBits((h << 16) | low));
  for (uint32_t b : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u,
                     0x7FBFFFFFu, 0x7F7F7FFFu, 0x7F7F8000u, 0x7F7FFFFFu, 0xFF7F8000u, 0x00000001u,
                     0x80000001u, 0x00008000u, 0x00018000u, 0x007FFFFFu, 0x00000000u, 0x80000000u})
    v.push_back(FromBits(b));
  return v;
}

StatusOr<Tensor> Cast(const Tensor& x, DType to) {
  ASSIGN_OR_RETURN(std::vector<Tensor> y,
                   RunSingleNode(MakeNode("Cast", {"x"}, {"y"},
                                          {{"to", Attribute::Int(static_cast<int64_t>(to))}}),
                                 {{"x", x}}));
  return y[0];
}

bool SameBf16(uint16_t a, uint16_t b) {
  // Any NaN pattern the CPU writes, the device writes too (same function): bitwise, NaNs included.
  return a == b;
}

TEST(CudaBf16HostTest, CastOpsAreTheCpuCastBitwise) {
  const std::vector<float> v = FloatCases();
  const int64_t n = static_cast<int64_t>(v.size());
  ASSERT_GT(n, 1000000);
  const Tensor f = Tensor::FromVector<float>(DType::kFloat32, {n}, v);
  // f32 -> bf16: ToBf16Op<float> is FloatToBf16.
  auto h = Cast(f, DType::kBFloat16);
  ASSERT_TRUE(h.ok()) << h.status().message();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t dev = ew::ToBf16Op<float>{}(v[i]);
    if (!SameBf16(dev, h->data<uint16_t>()[i]) && bad++ < 5)
      ADD_FAILURE() << "f32 -> bf16 of bits 0x" << std::hex <<
          [&] {
            uint32_t b;
            std::memcpy(&b, &v[i], 4);
            return b;
          }() << ": cpu 0x"
                    << h->data<uint16_t>()[i] << ", device function 0x" << dev;
  }
  EXPECT_EQ(bad, 0);
  // Ties went to even: 1 + 2^-8 (exactly halfway between 1 and 1 + 2^-7) is 1.
  EXPECT_EQ(ew::ToBf16Op<float>{}(1.00390625f), 0x3F80);
  EXPECT_EQ(ew::ToBf16Op<float>{}(FromBits(0x7F7F8000u)), 0x7F80);  // past the largest: inf

  // bf16 -> f32 / f64 / i64 / bool, on every bfloat16 pattern.
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) all[i] = static_cast<uint16_t>(i);
  Tensor hb(DType::kBFloat16, {0x10000});
  std::memcpy(hb.raw(), all.data(), all.size() * 2);
  auto f32 = Cast(hb, DType::kFloat32);
  auto f64 = Cast(hb, DType::kFloat64);
  auto i64 = Cast(hb, DType::kInt64);
  auto b = Cast(hb, DType::kBool);
  ASSERT_TRUE(f32.ok() && f64.ok() && i64.ok() && b.ok());
  for (uint32_t i = 0; i < 0x10000; ++i) {
    const float w = ew::FromBf16Op<float>{}(all[i]);
    ASSERT_EQ(std::memcmp(&w, f32->data<float>() + i, 4), 0) << std::hex << i;
    const double d = ew::FromBf16Op<double>{}(all[i]);
    ASSERT_EQ(std::memcmp(&d, f64->data<double>() + i, 8), 0) << std::hex << i;
    ASSERT_EQ(ew::FromBf16Op<int64_t>{}(all[i]), i64->data<int64_t>()[i]) << std::hex << i;
    ASSERT_EQ(ew::FromBf16Op<bool>{}(all[i]), b->data<bool>()[i]) << std::hex << i;
    // Widening then rounding gives the pattern back (NaNs quieted).
    const uint16_t back = FloatToBf16(Bf16ToFloat(all[i]));
    EXPECT_EQ(back, std::isnan(w) ? (all[i] | 0x0040) : all[i]) << std::hex << i;
  }

  // f64 and i64 -> bf16 round once (DoubleToBf16, written for the device with bit operations).
  std::vector<double> d;
  for (float x : v) {
    d.push_back(x);
    d.push_back(std::nextafter(static_cast<double>(x), HUGE_VAL));
    d.push_back(std::nextafter(static_cast<double>(x), -HUGE_VAL));
  }
  d.push_back(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));  // just above a tie: rounds up
  d.push_back(1e300);
  d.push_back(-1e300);
  d.push_back(1e-300);
  const int64_t nd = static_cast<int64_t>(d.size());
  auto dh = Cast(Tensor::FromVector<double>(DType::kFloat64, {nd}, d), DType::kBFloat16);
  ASSERT_TRUE(dh.ok());
  bad = 0;
  for (int64_t i = 0; i < nd; ++i) {
    const uint16_t dev = ew::ToBf16Op<double>{}(d[i]);
    if (!SameBf16(dev, dh->data<uint16_t>()[i]) && bad++ < 5)
      ADD_FAILURE() << "f64 -> bf16 of " << d[i] << ": cpu 0x" << std::hex
                    << dh->data<uint16_t>()[i] << ", device function 0x" << dev;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(ew::ToBf16Op<double>{}(d[nd - 4]), 0x3F81);
  std::vector<int64_t> ints = {0,
                               1,
                               -1,
                               257,
                               259,
                               -259,
                               1 << 24,
                               (1 << 24) + 1,
                               std::numeric_limits<int64_t>::max(),
                               std::numeric_limits<int64_t>::min()};
  auto ih = Cast(Tensor::FromVector<int64_t>(DType::kInt64, {10}, ints), DType::kBFloat16);
  ASSERT_TRUE(ih.ok());
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(ew::ToBf16Op<int64_t>{}(ints[i]), ih->data<uint16_t>()[i]) << ints[i];
}

#ifdef FOUNDRY_HAVE_CUDA

struct Operand {
  std::string name;
  DType dtype;
  Shape shape;
};

Graph GraphOf(const Node& node, const std::vector<Operand>& inputs,
              const std::map<std::string, Tensor>& constants = {}) {
  Graph g;
  for (const Operand& o : inputs) {
    Value& v = g.GetOrAddValue(o.name);
    v.dtype = o.dtype;
    v.shape = o.shape;
    v.rank_known = true;
    if (auto it = constants.find(o.name); it != constants.end())
      v.data = std::make_shared<const Tensor>(it->second);
    g.inputs.push_back(o.name);
  }
  g.nodes.push_back(node);
  Status st = InferAndSetTypes(g, g.nodes[0]);
  EXPECT_TRUE(st.ok()) << node.op_type << ": " << st.message();
  return g;
}

// The graph with every bfloat16 value made f32: what the staged kernel runs on.
Graph Widened(Graph g) {
  std::vector<std::string> names;
  for (const auto& [name, v] : g.values())
    if (v.dtype == DType::kBFloat16) names.push_back(name);
  for (const std::string& name : names) g.FindValue(name)->dtype = DType::kFloat32;
  return g;
}

// Sum over the node's bfloat16 operands of the f32 copy's bytes, 256-rounded: the staging
// figure, written out here rather than taken from the library.
int64_t StagingBytes(const Graph& g, const Node& n) {
  int64_t bytes = 0;
  for (const auto* side : {&n.inputs, &n.outputs})
    for (const std::string& name : *side) {
      const Value* v = name.empty() ? nullptr : g.FindValue(name);
      if (v && v->dtype == DType::kBFloat16) bytes += (NumElements(v->shape) * 4 + 255) / 256 * 256;
    }
  return bytes;
}

bool IsProduct(const Node& n) {
  return n.op_type == "MatMul" || n.op_type == "Gemm" || n.op_type == "FusedMatMul";
}

TEST(CudaBf16HostTest, StagedOpsPlanTheCpusStagingBytes) {
  constexpr char kMs[] = "com.microsoft";
  const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
  struct Case {
    Node node;
    std::vector<Operand> in;
    std::map<std::string, Tensor> constants = {};
  };
  const Tensor axes = Tensor::FromVector<int64_t>(DType::kInt64, {1}, {0});
  std::vector<Case> cases = {
      {MakeNode("Add", {"x", "b"}), {{"x", bf, {6, 24}}, {"b", bf, {24}}}},
      {MakeNode("Mul", {"x", "y"}), {{"x", bf, {7, 33}}, {"y", bf, {7, 33}}}},
      {MakeNode("Gelu", {"x"}, {"y"}, {}, kMs), {{"x", bf, {7, 33}}}},
      {MakeNode("GeluGrad", {"dy", "x"}, {"dx"}, {}, kMs),
       {{"dy", bf, {7, 33}}, {"x", bf, {7, 33}}}},
      {MakeNode("Softmax", {"x"}, {"y"}, {{"axis", Attribute::Int(-1)}}), {{"x", bf, {5, 50}}}},
      {MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(0)}}),
       {{"x", bf, {16, 24}}, {"axes", DType::kInt64, {1}}},
       {{"axes", axes}}},
      {MakeNode("LayerNormalization", {"x", "s", "b"}, {"y", "mean", "inv"},
                {{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(1e-5f)}}),
       {{"x", bf, {6, 32}}, {"s", bf, {32}}, {"b", bf, {32}}}},
      {MakeNode("Attention", {"q", "k", "v"}, {"o", "lse"},
                {{"scale", Attribute::Float(0.25f)},
                 {"causal", Attribute::Int(1)},
                 {"k_transposed", Attribute::Int(0)}},
                "foundry"),
       {{"q", bf, {1, 2, 9, 16}}, {"k", bf, {1, 2, 9, 16}}, {"v", bf, {1, 2, 9, 16}}}},
      {MakeNode("AttentionGrad", {"dout", "q", "k", "v", "o", "lse"}, {"dq", "dk", "dv"},
                {{"scale", Attribute::Float(0.25f)},
                 {"causal", Attribute::Int(1)},
                 {"k_transposed", Attribute::Int(0)}},
                "foundry"),
       {{"dout", bf, {1, 2, 9, 16}},
        {"q", bf, {1, 2, 9, 16}},
        {"k", bf, {1, 2, 9, 16}},
        {"v", bf, {1, 2, 9, 16}},
        {"o", bf, {1, 2, 9, 16}},
        {"lse", f32, {1, 2, 9}}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node.op_type);
    Graph g = GraphOf(c.node, c.in, c.constants);
    const Node& n = g.nodes[0];
    const Graph w = Widened(g);
    const int64_t staging = StagingBytes(g, n);
    ASSERT_GT(staging, 0);
    EXPECT_FALSE(
        CudaTakesBf16Directly(n, OperandTypesOf(g, n.inputs), OperandTypesOf(g, n.outputs)));
    EXPECT_EQ(CpuWorkspaceBytes(g, n), staging + CpuWorkspaceBytes(w, n));
    EXPECT_EQ(CudaWorkspaceBytes(g, n), staging + CudaWorkspaceBytes(w, n));
    std::cout << n.op_type << ": staging " << staging << " bytes; kernel cpu "
              << CpuWorkspaceBytes(w, n) << ", cuda " << CudaWorkspaceBytes(w, n) << "\n";
  }
}

TEST(CudaBf16HostTest, Bf16ProductsPlanOnlyCublasWorkspace) {
  const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
  struct Case {
    Node node;
    std::vector<Operand> in;
    DType y;
    // The CPU's figure: one product's f32 tiles of A [m, k], B [k, n] and C [m, n]
    // (kernels/cpu/math.cc), 8 x 40 x 24 = 1280 + 3840 + 768 bytes unless noted.
    int64_t cpu_tiles = 1280 + 3840 + 768;
  };
  std::vector<Case> cases = {
      // The batch folds into the rows: 48 x 24 over 40.
      {MakeNode("MatMul", {"a", "b"}, {"y"}),
       {{"a", bf, {2, 3, 8, 40}}, {"b", bf, {40, 24}}},
       bf,
       7680 + 3840 + 4608},
      {MakeNode("MatMul", {"a", "b"}, {"y"}), {{"a", bf, {8, 40}}, {"b", bf, {40, 24}}}, f32},
      {MakeNode("FusedMatMul", {"a", "b"}, {"y"},
                {{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(1)}}, "com.microsoft"),
       {{"a", bf, {4, 40, 8}}, {"b", bf, {4, 24, 40}}},
       bf},
      {MakeNode("Gemm", {"a", "b", "c"}, {"y"}, {{"transB", Attribute::Int(1)}}),
       {{"a", bf, {8, 40}}, {"b", bf, {24, 40}}, {"c", bf, {24}}},
       bf},
      {MakeNode("Gemm", {"a", "b", "c"}, {"y"}),
       {{"a", bf, {8, 40}}, {"b", bf, {40, 24}}, {"c", bf, {8, 24}}},
       f32},
      {MakeNode("Gemm", {"a", "b"}, {"y"}), {{"a", bf, {8, 40}}, {"b", bf, {40, 24}}}, bf},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node.op_type + " -> " + std::string(DTypeName(c.y)));
    Graph g = GraphOf(c.node, c.in);
    g.FindValue("y")->dtype = c.y;
    const Node& n = g.nodes[0];
    EXPECT_TRUE(
        CudaTakesBf16Directly(n, OperandTypesOf(g, n.inputs), OperandTypesOf(g, n.outputs)));
    EXPECT_EQ(CudaWorkspaceBytes(g, n), kCublasWorkspaceBytes);
    // The CPU widens them by tiles in its product kernel, not by staging whole operands.
    EXPECT_EQ(CpuWorkspaceBytes(g, n), c.cpu_tiles);
  }
}

// One list: every op the CPU moves bfloat16 through as it is, CUDA does too, without workspace;
// an op not on it (Where, Pad, GatherElements: they move elements too, but are not on the list)
// is staged on both.
TEST(CudaBf16HostTest, ElementMovesShareTheCpusList) {
  const DType bf = DType::kBFloat16;
  int as_is = 0;
  for (const auto& row : CpuKernels().rows()) {
    Node n = MakeNode(row.op_type, {"x"}, {"y"}, {}, row.domain);
    std::vector<OperandType> in(1), out(1);
    const Shape s = {4, 6};
    in[0] = {bf, &s};
    out[0] = {bf, &s};
    const bool cpu_as_is = TakesBf16AsIs(n);
    if (cpu_as_is) ++as_is;
    ASSERT_NE(CudaKernels().Find(row.domain, row.op_type), nullptr) << row.op_type;
    if (IsCollectiveOp(n)) {
      // Neither moved as is nor staged: the collectives take bfloat16 themselves on both
      // backends (kernels/cpu/collective.cc), so CUDA runs them directly.
      EXPECT_TRUE(CudaTakesBf16Directly(n, in, out)) << row.op_type;
    } else if (!IsProduct(n)) {
      EXPECT_EQ(CudaTakesBf16Directly(n, in, out), cpu_as_is) << row.domain << "::" << row.op_type;
    }
  }
  EXPECT_EQ(as_is, 17);  // Cast ... Identity (kernels/cpu/kernel.cc)
  Graph g = GraphOf(MakeNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints({1, 0})}}),
                    {{"x", bf, {4, 6}}});
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes[0]), 0);
  EXPECT_EQ(CpuWorkspaceBytes(g, g.nodes[0]), 0);
}

// Every op autocast can put in bf16 (passes/autocast.h's lower-precision list) that the CPU runs,
// CUDA runs; and every fixture's amp_bf16 plan: each node with a bfloat16 operand has a CUDA
// kernel, runs direct or staged, and the plan's cuda layout gives it exactly the workspace
// RunCudaKernel demands (the planner and the run take the same figure).
TEST(CudaBf16HostTest, EveryAmpBf16FixtureNodeHasACudaPathAndItsPlannedWorkspace) {
  for (const char* op : {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "PRelu"})
    EXPECT_TRUE(!CpuKernels().Find("", op) || CudaKernels().Find("", op)) << op;
  EXPECT_NE(CudaKernels().Find("com.microsoft", "FusedMatMul"), nullptr);
  EXPECT_NE(CudaKernels().Find("foundry", "Attention"), nullptr);

  std::map<std::string, std::string> path;  // "domain::op" -> direct / as is / staged
  int fixtures = 0;
  for (const TrainingFixture& f : TrainingFixtures(SourceDir() / "models/fixtures")) {
    SCOPED_TRACE(f.dir.filename().string());
    auto plan = CompileFixture(f.dir / "model.onnx", f.feeds, std::vector<std::string>{},
                               Precision::kAmpBf16);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    ++fixtures;
    const Graph& g = plan->graph;
    const BackendLayout* layout = plan->plan.memory.Layout("cuda");
    ASSERT_NE(layout, nullptr);
    ASSERT_EQ(layout->workspace_bytes.size(), g.nodes.size());
    int bf16_nodes = 0;
    const Graph w = Widened(g);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      const std::vector<OperandType> in = OperandTypesOf(g, n.inputs),
                                     out = OperandTypesOf(g, n.outputs);
      bool bf16 = false;
      for (const auto* side : {&in, &out})
        for (const OperandType& t : *side) bf16 |= t.dtype == DType::kBFloat16;
      EXPECT_EQ(layout->workspace_bytes[i], CudaWorkspaceBytes(g, n)) << n.name;
      if (!bf16) continue;
      ++bf16_nodes;
      const std::string key = (n.domain.empty() ? "" : n.domain + "::") + n.op_type;
      ASSERT_NE(CudaKernels().Find(n.domain, n.op_type), nullptr) << key;
      const bool direct = CudaTakesBf16Directly(n, in, out);
      EXPECT_TRUE(direct || !IsProduct(n)) << n.name << ": a product with bf16 A and B is direct";
      const std::string how = TakesBf16AsIs(n) ? "as is"
                              : direct         ? "direct (cuBLAS bf16)"
                                               : "staged";
      path[key] = path.count(key) && path[key] != how ? path[key] + ", " + how : how;
      const int64_t want = direct ? (IsProduct(n) ? kCublasWorkspaceBytes : 0)
                                  : StagingBytes(g, n) + CudaWorkspaceBytes(w, n);
      EXPECT_EQ(CudaWorkspaceBytes(g, n), want) << n.name << " (" << how << ")";
      if (!direct) {
        EXPECT_EQ(CpuWorkspaceBytes(g, n), StagingBytes(g, n) + CpuWorkspaceBytes(w, n));
      }
    }
    EXPECT_GT(bf16_nodes, 0);
  }
  EXPECT_GE(fixtures, 5);
  // The products autocast makes (canonicalized to FusedMatMul and Gemm) are direct; the fused
  // attention is staged.
  EXPECT_EQ(path["com.microsoft::FusedMatMul"], "direct (cuBLAS bf16)");
  EXPECT_EQ(path["Gemm"], "direct (cuBLAS bf16)");
  EXPECT_EQ(path["foundry::Attention"], "staged");
  EXPECT_EQ(path["foundry::AttentionGrad"], "staged");
  for (const auto& [op, how] : path) std::cout << op << ": " << how << "\n";
}

#else

TEST(CudaBf16HostTest, StagedOpsPlanTheCpusStagingBytes) {
  GTEST_SKIP() << "built without CUDA (-DFOUNDRY_CUDA=OFF or no nvcc)";
}

#endif

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
