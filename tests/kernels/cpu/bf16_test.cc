// bfloat16 on the CPU kernels (kernels/cpu/kernel.h "bfloat16"): Cast rounds to nearest even (as
// torch's .to(torch.bfloat16)); a node with bfloat16 operands computes what its f32 kernel computes
// on the widened operands, each bfloat16 output rounded once, within the workspace the plan gives
// it (exactly CpuWorkspaceBytes: one byte fewer is refused); ops that only move elements give the
// same bits without staging; products agree with a double reference within bfloat16's rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace {

Tensor ToBf16(const Tensor& f32) {
  Tensor t(DType::kBFloat16, f32.shape());
  FloatToBf16(f32.data<float>(), t.data<uint16_t>(), f32.numel());
  return t;
}
Tensor ToF32(const Tensor& bf16) {
  Tensor t(DType::kFloat32, bf16.shape());
  Bf16ToFloat(bf16.data<uint16_t>(), t.data<float>(), bf16.numel());
  return t;
}

struct Case {
  std::string label;
  Node node;
  std::map<std::string, Tensor> inputs;  // f32 values (rounded to bf16 for the bf16 run)
  std::vector<std::string> bf16;         // the float inputs given as bfloat16
};

Graph GraphOf(const Node& node, const std::map<std::string, Tensor>& inputs) {
  Graph g;
  for (const auto& [name, t] : inputs) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = t.dtype();
    v.shape = t.shape();
    v.rank_known = true;
    if (t.dtype() == DType::kInt64) v.data = std::make_shared<const Tensor>(t);
    g.inputs.push_back(name);
  }
  g.nodes.push_back(node);
  Status st = InferAndSetTypes(g, g.nodes[0]);
  EXPECT_TRUE(st.ok()) << st.message();
  return g;
}

StatusOr<std::vector<Tensor>> RunNode(const Node& node, const std::map<std::string, Tensor>& inputs,
                                      int64_t workspace_delta = 0, int64_t* planned = nullptr) {
  Graph g = GraphOf(node, inputs);
  std::vector<const Tensor*> ins;
  for (const auto& name : node.inputs) ins.push_back(name.empty() ? nullptr : &inputs.at(name));
  std::vector<Tensor> outs;
  for (const auto& name : node.outputs) {
    const Value* v = g.FindValue(name);
    outs.emplace_back(v->dtype, v->shape);
  }
  std::vector<Tensor*> out_ptrs;
  for (Tensor& t : outs) out_ptrs.push_back(&t);
  const int64_t bytes = CpuWorkspaceBytes(g, g.nodes[0]);
  EXPECT_EQ(CpuWorkspaceBytesFor(node, ins, out_ptrs), bytes);
  if (planned) *planned = bytes;
  std::vector<std::byte> ws(static_cast<size_t>(bytes + workspace_delta));
  KernelContext ctx;
  ctx.workspace = ws;
  RETURN_IF_ERROR(RunCpuKernel(node, ins, out_ptrs, ctx));
  return outs;
}

std::vector<Case> Cases() {
  constexpr char kMs[] = "com.microsoft";
  std::vector<Case> c;
  Tensor a = RandomTensor({6, 40}, 1), b = RandomTensor({40, 24}, 2), bias = RandomTensor({24}, 3);
  c.push_back({"matmul", MakeNode("MatMul", {"a", "b"}), {{"a", a}, {"b", b}}, {"a", "b"}});
  c.push_back({"fusedmatmul",
               MakeNode("FusedMatMul", {"a", "bt"}, {"y"}, {{"transB", Attribute::Int(1)}}, kMs),
               {{"a", a}, {"bt", RandomTensor({24, 40}, 4)}},
               {"a", "bt"}});
  c.push_back({"add_bias",
               MakeNode("Add", {"x", "bias"}),
               {{"x", RandomTensor({6, 24}, 5)}, {"bias", bias}},
               {"x", "bias"}});
  c.push_back({"gelu",
               MakeNode("Gelu", {"x"}, {"y"}, {}, kMs),
               {{"x", RandomTensor({7, 33}, 6, -4, 4)}},
               {"x"}});
  c.push_back({"gelugrad",
               MakeNode("GeluGrad", {"dy", "x"}, {"dx"}, {}, kMs),
               {{"dy", RandomTensor({7, 33}, 7)}, {"x", RandomTensor({7, 33}, 8, -4, 4)}},
               {"dy", "x"}});
  c.push_back({"softmax",
               MakeNode("Softmax", {"x"}, {"y"}, {{"axis", Attribute::Int(-1)}}),
               {{"x", RandomTensor({5, 50}, 9, -6, 6)}},
               {"x"}});
  c.push_back({"reducesum",
               MakeNode("ReduceSum", {"x", "axes"}, {"y"}, {{"keepdims", Attribute::Int(0)}}),
               {{"x", RandomTensor({16, 24}, 10)},
                {"axes", Tensor::FromVector<int64_t>(DType::kInt64, {1}, {0})}},
               {"x"}});
  c.push_back({"layernorm",
               MakeNode("LayerNormalization", {"x", "s", "b"}, {"y", "mean", "inv"},
                        {{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(1e-5f)}}),
               {{"x", RandomTensor({6, 32}, 11)},
                {"s", RandomTensor({32}, 12)},
                {"b", RandomTensor({32}, 13)}},
               {"x", "s", "b"}});
  c.push_back({"attention",
               MakeNode("Attention", {"q", "k", "v"}, {"o", "lse"},
                        {{"scale", Attribute::Float(0.25f)},
                         {"causal", Attribute::Int(1)},
                         {"k_transposed", Attribute::Int(0)}},
                        "foundry"),
               {{"q", RandomTensor({1, 2, 9, 16}, 14)},
                {"k", RandomTensor({1, 2, 9, 16}, 15)},
                {"v", RandomTensor({1, 2, 9, 16}, 16)}},
               {"q", "k", "v"}});
  // Mixed: only one operand bf16 is not a valid graph (shape inference refuses it); covered by
  // the autocast pass, which never makes one.
  return c;
}

class Bf16StagingTest : public testing::TestWithParam<Case> {};

// The bf16 run equals: widen the (rounded) inputs, run the f32 kernel, round each bf16 output.
TEST_P(Bf16StagingTest, IsTheF32KernelRoundedOnce) {
  const Case& c = GetParam();
  std::map<std::string, Tensor> bf16_in, widened;
  for (const auto& [name, t] : c.inputs) {
    const bool narrow = std::count(c.bf16.begin(), c.bf16.end(), name) > 0;
    bf16_in[name] = narrow ? ToBf16(t) : t;
    widened[name] = narrow ? ToF32(ToBf16(t)) : t;
  }
  int64_t planned = 0;
  auto got = RunNode(c.node, bf16_in, 0, &planned);
  ASSERT_TRUE(got.ok()) << got.status().message();
  auto want = RunNode(c.node, widened);
  ASSERT_TRUE(want.ok()) << want.status().message();
  ASSERT_EQ(got->size(), want->size());
  for (size_t k = 0; k < got->size(); ++k) {
    const Tensor& g = (*got)[k];
    Tensor w = (*want)[k];
    if (g.dtype() == DType::kBFloat16) w = ToBf16(w);
    EXPECT_TRUE(g.BitwiseEqual(w)) << "output " << k;
  }
  // The staging copies are in the figure: one byte fewer is refused.
  EXPECT_GT(planned, 0);
  auto short_run = RunNode(c.node, bf16_in, -1);
  EXPECT_FALSE(short_run.ok());
}

INSTANTIATE_TEST_SUITE_P(Ops, Bf16StagingTest, testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.label; });

// A bf16 product within bfloat16's rounding of the exact (double) product of its bf16 inputs:
// f32 accumulation, one rounding at the end.
TEST(Bf16Kernels, MatMulAgainstDouble) {
  const Tensor a = ToBf16(RandomTensor({8, 64}, 21)), b = ToBf16(RandomTensor({64, 12}, 22));
  auto y = RunNode(MakeNode("MatMul", {"a", "b"}), {{"a", a}, {"b", b}});
  ASSERT_TRUE(y.ok()) << y.status().message();
  ASSERT_EQ((*y)[0].dtype(), DType::kBFloat16);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 12; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < 64; ++k) {
        const double p = static_cast<double>(Bf16ToFloat(a.data<uint16_t>()[i * 64 + k])) *
                         Bf16ToFloat(b.data<uint16_t>()[k * 12 + j]);
        ref += p;
        mag += std::fabs(p);
      }
      const double got = Bf16ToFloat((*y)[0].data<uint16_t>()[i * 12 + j]);
      // Rounding to bf16 (2^-9 relative) plus f32 accumulation (64 · 2^-24 of the magnitudes).
      EXPECT_LE(std::fabs(got - ref), std::ldexp(std::fabs(ref), -8) + 64 * std::ldexp(mag, -24))
          << i << "," << j;
    }
}

// Moves of whole elements take bfloat16 as it is (no staging, no workspace) and give the bits a
// staged run would.
TEST(Bf16Kernels, ElementMovesAreNative) {
  const Tensor x = ToBf16(RandomTensor({4, 6}, 31));
  struct Move {
    Node node;
    std::map<std::string, Tensor> in;
  };
  std::vector<Move> moves = {
      {MakeNode("Transpose", {"x"}, {"y"}, {{"perm", Attribute::Ints({1, 0})}}), {{"x", x}}},
      {MakeNode("Concat", {"x", "x"}, {"y"}, {{"axis", Attribute::Int(1)}}), {{"x", x}}},
      {MakeNode("Reshape", {"x", "s"}, {"y"}),
       {{"x", x}, {"s", Tensor::FromVector<int64_t>(DType::kInt64, {1}, {24})}}},
      {MakeNode("Slice", {"x", "st", "en"}, {"y"}),
       {{"x", x},
        {"st", Tensor::FromVector<int64_t>(DType::kInt64, {1}, {1})},
        {"en", Tensor::FromVector<int64_t>(DType::kInt64, {1}, {3})}}},
  };
  for (const Move& m : moves) {
    int64_t planned = -1;
    auto y = RunNode(m.node, m.in, 0, &planned);
    ASSERT_TRUE(y.ok()) << m.node.op_type << ": " << y.status().message();
    EXPECT_EQ(planned, 0) << m.node.op_type;
    std::map<std::string, Tensor> widened = m.in;
    widened["x"] = ToF32(x);
    auto w = RunNode(m.node, widened);
    ASSERT_TRUE(w.ok());
    EXPECT_TRUE((*y)[0].BitwiseEqual(ToBf16((*w)[0]))) << m.node.op_type;
  }
}

// Cast: f32 -> bf16 rounds to nearest even; bf16 -> f32/f64 widens exactly; f64 -> bf16 rounds
// once; bf16 -> i64 truncates like f32 -> i64.
TEST(Bf16Kernels, Cast) {
  std::vector<float> v = {1.0f,
                          1.00390625f,
                          1.01171875f,
                          -3.5f,
                          65504.f,
                          1e-30f,
                          std::numeric_limits<float>::infinity()};
  const Tensor f = Tensor::FromVector<float>(DType::kFloat32, {7}, v);
  auto h = RunNode(MakeNode("Cast", {"f"}, {"y"}, {{"to", Attribute::Int(16)}}), {{"f", f}});
  ASSERT_TRUE(h.ok()) << h.status().message();
  ASSERT_EQ((*h)[0].dtype(), DType::kBFloat16);
  for (int i = 0; i < 7; ++i) EXPECT_EQ((*h)[0].data<uint16_t>()[i], FloatToBf16(v[i])) << i;
  EXPECT_EQ((*h)[0].data<uint16_t>()[1], 0x3F80);  // the tie went to even
  auto back =
      RunNode(MakeNode("Cast", {"h"}, {"y"}, {{"to", Attribute::Int(11)}}), {{"h", (*h)[0]}});
  ASSERT_TRUE(back.ok()) << back.status().message();
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ((*back)[0].data<double>()[i], Bf16ToFloat((*h)[0].data<uint16_t>()[i]));
  const double just_above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  const Tensor d = Tensor::FromVector<double>(DType::kFloat64, {1}, {just_above_tie});
  auto dh = RunNode(MakeNode("Cast", {"d"}, {"y"}, {{"to", Attribute::Int(16)}}), {{"d", d}});
  ASSERT_TRUE(dh.ok());
  EXPECT_EQ((*dh)[0].data<uint16_t>()[0], 0x3F81);
  auto hi = RunNode(MakeNode("Cast", {"h"}, {"y"}, {{"to", Attribute::Int(7)}}), {{"h", (*h)[0]}});
  ASSERT_TRUE(hi.ok());
  EXPECT_EQ((*hi)[0].data<int64_t>()[3], -3);
}

}  // namespace
}  // namespace foundry
