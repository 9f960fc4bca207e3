// bfloat16 on the CPU kernels (kernels/cpu/kernel.h "bfloat16"): Cast rounds to nearest even (as
// torch's .to(torch.bfloat16)); a node with bfloat16 operands computes what its f32 kernel computes
// on the widened operands, each bfloat16 output rounded once, within the workspace the plan gives
// it (exactly CpuWorkspaceBytes: one byte fewer is refused); ops that only move elements give the
// same bits without staging; products agree with a double reference within bfloat16's rounding.
// Matrix products (MatMul, FusedMatMul, Gemm) take bfloat16 themselves, by bounded tiles widened
// in their workspace: within bfloat16's rounding and f32 accumulation of a double reference, on
// shapes tiled in every direction; the staged bits where one tile holds the product; the same bits
// at every thread count; a workspace of tiles, whatever the product's size. Pointwise ops on
// operands of one element count stage in chunks (kBf16StagingChunk): the bits of whole staging
// (spelled out here: widen, the table's f32 kernel, round) at every thread count, in place too, in
// a workspace of one chunk's copies; broadcasting nodes and Dropout keep whole staging.
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
namespace FOUNDRY_TEST_NS {

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
  // The embedding gradient sums its rows in f32 itself (no f32 copy of dX): repeated and unused
  // rows, on axis 0 (an embedding table) and axis 1.
  c.push_back({"gather_grad_rows",
               MakeNode("GatherGrad", {"shape", "idx", "dy"}, {"dx"}, {{"axis", Attribute::Int(0)}},
                        "com.microsoft"),
               {{"shape", Tensor::FromVector(DType::kInt64, {2}, std::vector<int64_t>{11, 300})},
                {"idx", Tensor::FromVector(DType::kInt64, {2, 5},
                                           std::vector<int64_t>{3, 0, 3, 7, 3, 10, 0, -1, 3, 2})},
                {"dy", RandomTensor({2, 5, 300}, 17)}},
               {"dy"}});
  c.push_back({"gather_grad_axis1",
               MakeNode("GatherGrad", {"shape", "idx", "dy"}, {"dx"}, {{"axis", Attribute::Int(1)}},
                        "com.microsoft"),
               {{"shape", Tensor::FromVector(DType::kInt64, {3}, std::vector<int64_t>{2, 6, 5})},
                {"idx", Tensor::FromVector(DType::kInt64, {4}, std::vector<int64_t>{5, 1, 5, 5})},
                {"dy", RandomTensor({2, 4, 5}, 18)}},
               {"dy"}});
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

// ---------- products by tiles (kernels/cpu/math.cc) ----------

// Runs `node` on the given tensors (any dtypes, including mixes a graph would not make) with an
// output of `y_dtype` and `y_shape`, in exactly CpuWorkspaceBytesFor's bytes plus `delta`.
StatusOr<Tensor> RunProduct(const Node& node, const std::vector<const Tensor*>& ins, DType y_dtype,
                            const Shape& y_shape, int64_t delta = 0, int64_t* planned = nullptr) {
  Tensor y(y_dtype, y_shape);
  std::vector<Tensor*> outs = {&y};
  const int64_t bytes = CpuWorkspaceBytesFor(node, ins, outs);
  if (planned) *planned = bytes;
  std::vector<std::byte> ws(static_cast<size_t>(bytes + delta));
  KernelContext ctx;
  ctx.workspace = ws;
  RETURN_IF_ERROR(RunCpuKernel(node, ins, outs, ctx));
  return y;
}

// The exact product in double of MatMul / FusedMatMul / Gemm on operands of rank 2 or 3 (a rank-2
// operand is shared by every batch, a batch of 1 broadcasts), from the operands' f32 values, and
// per element the sum of the magnitudes of its terms (for the accumulation error bound).
struct Reference {
  std::vector<double> value, magnitude;
};
Reference ReferenceProduct(const Node& node, const Tensor& A, const Tensor& B, const Tensor* C) {
  const bool gemm = node.op_type == "Gemm";
  const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  const double alpha = node.GetFloat("alpha", 1.0f), beta = gemm ? node.GetFloat("beta", 1.0f) : 0;
  const Shape &as = A.shape(), &bs = B.shape();
  const int64_t ar = as[as.size() - 2], ac = as.back(), br = bs[bs.size() - 2], bc = bs.back();
  const int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  const int64_t batch_a = as.size() == 3 ? as[0] : 1, batch_b = bs.size() == 3 ? bs[0] : 1;
  const int64_t batches = std::max(batch_a, batch_b);
  Shape cs = C ? C->shape() : Shape{};
  while (C && cs.size() < 2) cs.insert(cs.begin(), 1);
  Reference r{std::vector<double>(batches * m * n), std::vector<double>(batches * m * n)};
  for (int64_t bi = 0; bi < batches; ++bi) {
    const float* a = A.data<float>() + (batch_a == 1 ? 0 : bi) * ar * ac;
    const float* b = B.data<float>() + (batch_b == 1 ? 0 : bi) * br * bc;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double t = static_cast<double>(ta ? a[p * ac + i] : a[i * ac + p]) *
                           (tb ? b[j * bc + p] : b[p * bc + j]);
          sum += t;
          mag += std::fabs(t);
        }
        sum *= alpha;
        mag *= std::fabs(alpha);
        if (C && beta != 0) {
          const double c =
              beta * C->data<float>()[(cs[0] == 1 ? 0 : i) * cs[1] + (cs[1] == 1 ? 0 : j)];
          sum += c;
          mag += std::fabs(c);
        }
        r.value[(bi * m + i) * n + j] = sum;
        r.magnitude[(bi * m + i) * n + j] = mag;
      }
  }
  return r;
}

// got (bf16 or f32) against the reference: f32 accumulation over k terms (a few k·2^-24 of the
// magnitudes: per sub-block sgemm, the sub-block sums, alpha, beta C), and for a bf16 result its
// one rounding to nearest (2^-8 relative).
void ExpectNearReference(const Tensor& got, const Reference& ref, int64_t k,
                         const std::string& label) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(ref.value.size())) << label;
  const bool bf16 = got.dtype() == DType::kBFloat16;
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = bf16 ? Bf16ToFloat(got.data<uint16_t>()[i]) : got.data<float>()[i];
    const double accumulation = (k + 4) * std::ldexp(ref.magnitude[i], -24);
    const double bound =
        accumulation + (bf16 ? std::ldexp(std::fabs(ref.value[i]) + accumulation, -8) : 0.0);
    if (!(std::fabs(g - ref.value[i]) <= bound) && ++bad <= 5)
      ADD_FAILURE() << label << " element " << i << ": " << g << " vs " << ref.value[i]
                    << " (bound " << bound << ")";
  }
}

struct Product {
  std::string label;
  Node node;
  Shape a, b, c;  // c empty: no C
  // Every block of C fits one tile and every K piece one sub-block: the bits of staging.
  bool one_tile;
  int64_t workspace;  // CpuWorkspaceBytes, worked out in Products()
};

void PrintTo(const Product& p, std::ostream* os) { *os << p.label; }

int64_t Tile(int64_t floats) { return (floats * 4 + 255) / 256 * 256; }

std::vector<Product> Products() {
  constexpr char kMs[] = "com.microsoft";
  auto fused = [&](int ta, int tb, float alpha) {
    return MakeNode("FusedMatMul", {"a", "b"}, {"y"},
                    {{"transA", Attribute::Int(ta)},
                     {"transB", Attribute::Int(tb)},
                     {"alpha", Attribute::Float(alpha)}},
                    kMs);
  };
  auto gemm = [](int ta, int tb, float alpha, float beta) {
    return MakeNode("Gemm", {"a", "b", "c"}, {"y"},
                    {{"transA", Attribute::Int(ta)},
                     {"transB", Attribute::Int(tb)},
                     {"alpha", Attribute::Float(alpha)},
                     {"beta", Attribute::Float(beta)}});
  };
  const Node matmul = MakeNode("MatMul", {"a", "b"});
  // Workspace: slots x (A tile + B tile + C tile [+ a second C tile when K is split]), each tile
  // [rows <= 512, depth <= 1024] / [depth, cols <= 512] / [rows, cols] f32, 256-byte aligned;
  // slots = min(8, C tiles). A product below 2^23 multiply-adds is one GemmOne piece.
  return {
      // One tile: 6 x 24 over 40.
      {"matmul_small",
       matmul,
       {6, 40},
       {40, 24},
       {},
       true,
       Tile(6 * 40) + Tile(40 * 24) + Tile(6 * 24)},
      {"fused_tt_small",
       fused(1, 1, 0.5f),
       {40, 6},
       {24, 40},
       {},
       true,
       Tile(6 * 40) + Tile(40 * 24) + Tile(6 * 24)},
      // The batch folds into the rows: one 15 x 7 product over 16.
      {"matmul_folded_batch",
       matmul,
       {3, 5, 16},
       {16, 7},
       {},
       true,
       Tile(15 * 16) + Tile(16 * 7) + Tile(15 * 7)},
      // Three 5 x 7 products over 16 (A broadcast; then transposed A, batched B).
      {"matmul_broadcast_a",
       matmul,
       {1, 5, 16},
       {3, 16, 7},
       {},
       true,
       Tile(5 * 16) + Tile(16 * 7) + Tile(5 * 7)},
      {"fused_ta_batched",
       fused(1, 0, 2.0f),
       {3, 16, 5},
       {3, 16, 7},
       {},
       true,
       Tile(5 * 16) + Tile(16 * 7) + Tile(5 * 7)},
      {"gemm_bias_row",
       gemm(0, 1, 0.5f, 2.0f),
       {6, 40},
       {24, 40},
       {24},
       true,
       Tile(6 * 40) + Tile(40 * 24) + Tile(6 * 24)},
      {"gemm_bias_col_ta",
       gemm(1, 0, 1.0f, -1.0f),
       {40, 6},
       {40, 24},
       {6, 1},
       true,
       Tile(6 * 40) + Tile(40 * 24) + Tile(6 * 24)},
      // 512 x 128 x 128 = 2^23: GemmOne's two row blocks of 256, one tile each.
      {"rows_split_one_tile_each",
       matmul,
       {512, 128},
       {128, 128},
       {},
       true,
       2 * (Tile(256 * 128) + Tile(128 * 128) + Tile(256 * 128))},
      // 64 x 64 over 2048 = 2^23, K >= 16 x 64: two K pieces of 1024, one sub-block each; two C
      // tiles in the slot.
      {"k_split_one_subblock_each",
       matmul,
       {64, 2048},
       {2048, 64},
       {},
       true,
       Tile(64 * 1024) + Tile(1024 * 64) + 2 * Tile(64 * 64)},
      // Tiled rows: 600 rows = 512 + 88, K 1100 = 1024 + 76 (5.3M multiply-adds: one piece).
      {"tiled_rows_k",
       matmul,
       {600, 1100},
       {1100, 8},
       {},
       false,
       2 * (Tile(512 * 1024) + Tile(1024 * 8) + Tile(512 * 8))},
      // Tiled columns (B transposed): 600 columns = 512 + 88, K = 1024 + 76.
      {"tiled_cols_k_tb",
       fused(0, 1, 1.0f),
       {8, 1100},
       {600, 1100},
       {},
       false,
       2 * (Tile(8 * 1024) + Tile(1024 * 512) + Tile(8 * 512))},
      // Tiled rows of a transposed A.
      {"tiled_rows_ta",
       fused(1, 0, 0.25f),
       {1100, 600},
       {1100, 8},
       {},
       false,
       2 * (Tile(512 * 1024) + Tile(1024 * 8) + Tile(512 * 8))},
      // GemmOne's row blocks (3000 x 48 over 64 = 9.2M: two blocks of 1536), three tiles each.
      {"rows_split_tiled",
       matmul,
       {3000, 64},
       {64, 48},
       {},
       false,
       6 * (Tile(512 * 64) + Tile(64 * 48) + Tile(512 * 48))},
      // K split (40 x 40 over 8192: 3 pieces of 2731), each piece in 3 sub-blocks.
      {"k_split_tiled",
       matmul,
       {40, 8192},
       {8192, 40},
       {},
       false,
       Tile(40 * 1024) + Tile(1024 * 40) + 2 * Tile(40 * 40)},
      // K split (600 x 8 over 10000: 4 pieces of 2500, three sub-blocks each) and 2 row tiles.
      {"k_split_rows_tiled",
       matmul,
       {600, 10000},
       {10000, 8},
       {},
       false,
       2 * (Tile(512 * 1024) + Tile(1024 * 8) + 2 * Tile(512 * 8))},
      // Rows and columns with the bias: 600 x 600 over 20 (7.2M: one piece), 2 x 2 tiles.
      {"gemm_tiled_bias",
       gemm(0, 1, 0.5f, 0.75f),
       {600, 20},
       {600, 20},
       {600},
       false,
       4 * (Tile(512 * 20) + Tile(20 * 512) + Tile(512 * 512))},
      // Rows (of a transposed A) and K with a column bias: 600 x 8 over 1100.
      {"gemm_tiled_k_bias_col",
       gemm(1, 0, 1.5f, -0.5f),
       {1100, 600},
       {1100, 8},
       {600, 1},
       false,
       2 * (Tile(512 * 1024) + Tile(1024 * 8) + Tile(512 * 8))},
      // Batched (B not shared): two tiled products in one workspace.
      {"batched_tiled",
       matmul,
       {2, 600, 1100},
       {2, 1100, 8},
       {},
       false,
       2 * (Tile(512 * 1024) + Tile(1024 * 8) + Tile(512 * 8))},
  };
}

class Bf16ProductTest : public testing::TestWithParam<Product> {
 protected:
  // f32 inputs with values of bfloat16 (what the bf16 run sees).
  std::map<std::string, Tensor> Inputs() const {
    const Product& p = GetParam();
    std::map<std::string, Tensor> in = {{"a", ToF32(ToBf16(RandomTensor(p.a, 41)))},
                                        {"b", ToF32(ToBf16(RandomTensor(p.b, 42)))}};
    if (!p.c.empty()) in["c"] = ToF32(ToBf16(RandomTensor(p.c, 43)));
    return in;
  }
  static std::map<std::string, Tensor> Narrowed(const std::map<std::string, Tensor>& in) {
    std::map<std::string, Tensor> out;
    for (const auto& [name, t] : in) out[name] = ToBf16(t);
    return out;
  }
};

// Within bfloat16's rounding and f32 accumulation of the exact product, in the workspace worked
// out above (the planned figure; one byte fewer is refused).
TEST_P(Bf16ProductTest, MatchesDoubleWithinBf16Rounding) {
  const Product& p = GetParam();
  const auto in = Inputs();
  int64_t planned = 0;
  auto y = RunNode(p.node, Narrowed(in), 0, &planned);
  ASSERT_TRUE(y.ok()) << y.status().message();
  ASSERT_EQ((*y)[0].dtype(), DType::kBFloat16);
  EXPECT_EQ(planned, p.workspace);
  const Tensor* c = p.c.empty() ? nullptr : &in.at("c");
  const Shape& as = p.a;
  const int64_t k = p.node.GetInt("transA", 0) ? as[as.size() - 2] : as.back();
  ExpectNearReference((*y)[0], ReferenceProduct(p.node, in.at("a"), in.at("b"), c), k, p.label);
  auto short_run = RunNode(p.node, Narrowed(in), -1);
  ASSERT_FALSE(short_run.ok());
  EXPECT_NE(short_run.status().message().find("needs " + std::to_string(p.workspace) +
                                              " bytes of workspace but was given " +
                                              std::to_string(p.workspace - 1)),
            std::string::npos)
      << short_run.status().message();
}

// A product that fits one tile per block and one sub-block per K piece runs GemmOne's sgemm calls
// on the widened operands: the bits of the f32 kernel on them, rounded once (the staged path).
// (Tiled products may differ: K sub-blocks change the summation order.)
class Bf16OneTileTest : public Bf16ProductTest {};
TEST_P(Bf16OneTileTest, IsTheStagedBits) {
  const Product& p = GetParam();
  const auto in = Inputs();
  auto got = RunNode(p.node, Narrowed(in));
  ASSERT_TRUE(got.ok()) << got.status().message();
  auto f32 = RunNode(p.node, in);
  ASSERT_TRUE(f32.ok()) << f32.status().message();
  EXPECT_TRUE((*got)[0].BitwiseEqual(ToBf16((*f32)[0])));
}

// The same bits at 1, 2 and 4 threads: every cut depends on the shape alone.
TEST_P(Bf16ProductTest, SameBitsAtEveryThreadCount) {
  const Product& p = GetParam();
  const auto in = Narrowed(Inputs());
  std::vector<Tensor> runs;
  for (int threads : {1, 2, 4}) {
    SetCpuThreads(threads);
    auto y = RunNode(p.node, in);
    SetCpuThreads(1);
    ASSERT_TRUE(y.ok()) << y.status().message();
    runs.push_back((*y)[0]);
  }
  EXPECT_TRUE(runs[1].BitwiseEqual(runs[0]));
  EXPECT_TRUE(runs[2].BitwiseEqual(runs[0]));
}

// An f32 result of bfloat16 operands: the f32 tile as it is, no rounding.
TEST_P(Bf16ProductTest, F32OutputFromBf16Operands) {
  const Product& p = GetParam();
  const auto in = Inputs();
  const auto narrow = Narrowed(in);
  std::vector<const Tensor*> ins;
  for (const auto& name : p.node.inputs) ins.push_back(&narrow.at(name));
  auto bf16_out = RunNode(p.node, narrow);
  ASSERT_TRUE(bf16_out.ok()) << bf16_out.status().message();
  int64_t planned = 0;
  auto y = RunProduct(p.node, ins, DType::kFloat32, (*bf16_out)[0].shape(), 0, &planned);
  ASSERT_TRUE(y.ok()) << y.status().message();
  EXPECT_EQ(planned, p.workspace);
  const Tensor* c = p.c.empty() ? nullptr : &in.at("c");
  const int64_t k = p.node.GetInt("transA", 0) ? p.a[p.a.size() - 2] : p.a.back();
  ExpectNearReference(*y, ReferenceProduct(p.node, in.at("a"), in.at("b"), c), k, p.label);
  // Rounding it gives the bf16 result: the same f32 tiles, rounded once.
  EXPECT_TRUE((*bf16_out)[0].BitwiseEqual(ToBf16(*y)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Bf16ProductTest, testing::ValuesIn(Products()),
                         [](const auto& info) { return info.param.label; });

std::vector<Product> OneTileProducts() {
  std::vector<Product> one;
  for (const Product& p : Products())
    if (p.one_tile) one.push_back(p);
  return one;
}
INSTANTIATE_TEST_SUITE_P(Shapes, Bf16OneTileTest, testing::ValuesIn(OneTileProducts()),
                         [](const auto& info) { return info.param.label; });

// A mixed product (one operand bf16, one f32: autocast never makes one, and shape inference
// refuses it) computes on the f32 values of each: the bits of the all-f32 product of the widened
// operands (one tile) and within the reference (tiled); an f64 operand is refused.
TEST(Bf16Products, MixedOperandTypes) {
  const Node node = MakeNode("MatMul", {"a", "b"});
  for (const Shape& a_shape : {Shape{6, 40}, Shape{600, 1100}}) {
    const Shape b_shape = {a_shape[1], 20};
    const Tensor a = ToBf16(RandomTensor(a_shape, 51)), b = RandomTensor(b_shape, 52);
    const Tensor a32 = ToF32(a);
    auto f32 = RunProduct(node, {&a32, &b}, DType::kFloat32, {a_shape[0], 20});
    ASSERT_TRUE(f32.ok()) << f32.status().message();
    for (DType y_type : {DType::kFloat32, DType::kBFloat16}) {
      auto ab = RunProduct(node, {&a, &b}, y_type, {a_shape[0], 20});
      ASSERT_TRUE(ab.ok()) << ab.status().message();
      ExpectNearReference(*ab, ReferenceProduct(node, a32, b, nullptr), a_shape[1], "mixed");
      // B bf16, A f32: the same values.
      const Tensor b16 = ToBf16(b), b16_32 = ToF32(b16);
      auto ba = RunProduct(node, {&a32, &b16}, y_type, {a_shape[0], 20});
      ASSERT_TRUE(ba.ok()) << ba.status().message();
      ExpectNearReference(*ba, ReferenceProduct(node, a32, b16_32, nullptr), a_shape[1], "mixed");
      if (a_shape[0] == 6) {
        EXPECT_TRUE(ab->BitwiseEqual(y_type == DType::kFloat32 ? *f32 : ToBf16(*f32)));
      }
    }
  }
  // An f64 operand or result is refused, naming it.
  const Tensor a = ToBf16(RandomTensor({6, 40}, 53)), b16 = ToBf16(RandomTensor({40, 20}, 54));
  const Tensor a64(DType::kFloat64, {6, 40}), b64(DType::kFloat64, {40, 20});
  const std::string refusal =
      "MatMul node 'n': a product with bfloat16 operands takes f32 and bfloat16 only, but ";
  auto refused_b = RunProduct(node, {&a, &b64}, DType::kBFloat16, {6, 20});
  ASSERT_FALSE(refused_b.ok());
  EXPECT_EQ(refused_b.status().message(), refusal + "B is f64");
  auto refused_a = RunProduct(node, {&a64, &b16}, DType::kFloat64, {6, 20});
  ASSERT_FALSE(refused_a.ok());
  EXPECT_EQ(refused_a.status().message(), refusal + "A is f64");
  auto refused_y = RunProduct(node, {&a, &b16}, DType::kFloat64, {6, 20});
  ASSERT_FALSE(refused_y.ok());
  EXPECT_EQ(refused_y.status().message(), refusal + "Y is f64");
}

// The workspace of a bf16 product is bounded by the tiles, not by the operands: MPT-125M's LM head
// at seq 1024 (vocabulary 50368, d 768) in both directions.
TEST(Bf16Products, LmHeadWorkspaceIsTiles) {
  auto bytes = [](const Node& node, Shape a, Shape b) {
    Graph g =
        GraphOf(node, {{"a", Tensor(DType::kBFloat16, a)}, {"b", Tensor(DType::kBFloat16, b)}});
    return CpuWorkspaceBytes(g, g.nodes[0]);
  };
  // Input gradient dX [1024, 768] = dY [1024, 50368] x W [50368, 768]: GemmOne splits K in 8
  // pieces; 2 x 2 C tiles of at most 512 x 512 -> 4 slots of A [512, 1024] + B [1024, 512] +
  // 2 C [512, 512] f32 = 6 MiB: 24 MiB (staging whole operands took 1024 x 50368 x 4 +
  // 50368 x 768 x 4 + 1024 x 768 x 4 + 7 K partials = 383 MB).
  EXPECT_EQ(bytes(MakeNode("MatMul", {"a", "b"}), {1024, 50368}, {50368, 768}), 24 << 20);
  // Logits [1024, 50368] = X [1024, 768] x W^T (W [50368, 768]): 2 x 103 C tiles (GemmOne's
  // column blocks of 6336, 13 tiles each, the last 6016 in 12) -> 8 slots of A [512, 768] +
  // B [768, 512] + C [512, 512] f32 = 4 MiB: 32 MiB.
  EXPECT_EQ(bytes(MakeNode("FusedMatMul", {"a", "b"}, {"y"}, {{"transB", Attribute::Int(1)}},
                           "com.microsoft"),
                  {1024, 768}, {50368, 768}),
            32 << 20);
}

// ---------- pointwise ops staged in chunks (kernel.h, kBf16StagingChunk) ----------

// Two whole chunks and a ragged one, in a 2-D shape (the chunks cut across rows).
const Shape kBig = {35, 60013};
static_assert(35 * 60013 > 2 * kBf16StagingChunk && 35 * 60013 < 3 * kBf16StagingChunk);

// An input of a chunked case, made when the test runs (the cases hold no big tensors):
// uniform in [lo, hi] from `seed`, given as bfloat16 (bf16), f32, or bool (values > 0 of it).
struct Operand {
  std::string name;
  Shape shape;
  uint64_t seed;
  float lo = -1, hi = 1;
  DType dtype = DType::kBFloat16;
  bool specials = false;  // NaN, +inf and -inf sprinkled in (for IsNaN, IsInf)
};

struct Pointwise {
  std::string label;
  Node node;
  std::vector<Operand> inputs;
};

void PrintTo(const Pointwise& p, std::ostream* os) { *os << p.label; }

std::map<std::string, Tensor> Make(const std::vector<Operand>& operands) {
  std::map<std::string, Tensor> in;
  for (const Operand& o : operands) {
    Tensor r = RandomTensor(o.shape, o.seed, o.lo, o.hi);
    for (int64_t i = 0; o.specials && i < r.numel(); i += 97) {
      constexpr float kInf = std::numeric_limits<float>::infinity();
      const float special[] = {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf};
      r.data<float>()[i] = special[(i / 97) % 3];
    }
    if (o.dtype == DType::kBool) {
      Tensor t(DType::kBool, o.shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = r.data<float>()[i] > 0;
      in[o.name] = t;
    } else {
      in[o.name] = o.dtype == DType::kBFloat16 ? ToBf16(r) : r;
    }
  }
  return in;
}

// Whole staging, spelled out: every bfloat16 input widened whole, the f32 kernel (the table's row)
// run once on the node's own shapes, every bfloat16 output rounded once.
std::vector<Tensor> WholeStaging(const Node& node, const std::map<std::string, Tensor>& in) {
  Graph g = GraphOf(node, in);
  std::map<std::string, Tensor> widened;
  for (const auto& [name, t] : in) widened[name] = t.dtype() == DType::kBFloat16 ? ToF32(t) : t;
  std::vector<const Tensor*> ins;
  for (const auto& name : node.inputs) ins.push_back(&widened.at(name));
  std::vector<Tensor> outs;
  std::vector<bool> narrow;
  for (const auto& name : node.outputs) {
    const Value* v = g.FindValue(name);
    narrow.push_back(v->dtype == DType::kBFloat16);
    outs.emplace_back(narrow.back() ? DType::kFloat32 : v->dtype, v->shape);
  }
  std::vector<Tensor*> out_ptrs;
  for (Tensor& t : outs) out_ptrs.push_back(&t);
  const CpuKernelFn* fn = CpuKernels().Find(node.domain, node.op_type);
  EXPECT_NE(fn, nullptr);
  if (!fn) return {};
  KernelContext ctx;
  Status st = (*fn)(node, ins, out_ptrs, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
  for (size_t k = 0; k < outs.size(); ++k)
    if (narrow[k]) outs[k] = ToBf16(outs[k]);
  return outs;
}

// Bytes of one chunk's f32 copies of `operands` bfloat16 operands.
int64_t ChunkCopies(int operands) { return operands * Bf16StagingBytes(kBf16StagingChunk); }

std::vector<Pointwise> PointwiseCases() {
  constexpr char kMs[] = "com.microsoft";
  std::vector<Pointwise> c;
  auto unary = [&](const std::string& label, Node node, float lo, float hi) {
    c.push_back({label, std::move(node), {{"x", kBig, 61, lo, hi}}});
  };
  for (const char* op : {"Neg", "Abs", "Sign", "Relu", "Exp", "Erf", "Tanh", "Sigmoid", "Sin",
                         "Cos", "Floor", "Ceil", "Round", "Softplus"})
    unary(op, MakeNode(op, {"x"}), -6, 6);
  for (const char* op : {"IsNaN", "IsInf"})
    c.push_back({op, MakeNode(op, {"x"}), {{"x", kBig, 61, -6, 6, DType::kBFloat16, true}}});
  c.push_back({"IsInf_positive",
               MakeNode("IsInf", {"x"}, {"y"}, {{"detect_negative", Attribute::Int(0)}}),
               {{"x", kBig, 61, -6, 6, DType::kBFloat16, true}}});
  for (const char* op : {"Sqrt", "Reciprocal", "Log"}) unary(op, MakeNode(op, {"x"}), 0.01f, 8);
  unary("Gelu", MakeNode("Gelu", {"x"}), -6, 6);
  unary("Gelu_tanh", MakeNode("Gelu", {"x"}, {"y"}, {{"approximate", Attribute::String("tanh")}}),
        -6, 6);
  unary("ms_Gelu", MakeNode("Gelu", {"x"}, {"y"}, {}, kMs), -6, 6);
  unary("FastGelu", MakeNode("FastGelu", {"x"}, {"y"}, {}, kMs), -6, 6);
  unary("FastGelu_gelu_new",
        MakeNode("FastGelu", {"x"}, {"y"}, {{"form", Attribute::String("gelu_new")}}, kMs), -6, 6);
  unary("QuickGelu", MakeNode("QuickGelu", {"x"}, {"y"}, {{"alpha", Attribute::Float(1.0f)}}, kMs),
        -6, 6);
  auto binary = [&](const std::string& label, Node node, float lo, float hi) {
    c.push_back({label, std::move(node), {{"a", kBig, 62, -4, 4}, {"b", kBig, 63, lo, hi}}});
  };
  for (const char* op : {"Add", "Sub", "Mul", "Min", "Max", "Equal", "Less", "Greater",
                         "LessOrEqual", "GreaterOrEqual"})
    binary(op, MakeNode(op, {"a", "b"}), -4, 4);
  binary("Div", MakeNode("Div", {"a", "b"}), 0.25f, 4);
  binary("Mod", MakeNode("Mod", {"a", "b"}, {"y"}, {{"fmod", Attribute::Int(1)}}), 0.25f, 4);
  c.push_back(
      {"Pow", MakeNode("Pow", {"a", "b"}), {{"a", kBig, 64, 0.1f, 3}, {"b", kBig, 65, -2, 2}}});
  for (const char* op : {"Sum", "Mean"})
    c.push_back(
        {op, MakeNode(op, {"a", "b", "c"}), {{"a", kBig, 66}, {"b", kBig, 67}, {"c", kBig, 68}}});
  c.push_back({"Where",
               MakeNode("Where", {"c", "a", "b"}),
               {{"c", kBig, 69, -1, 1, DType::kBool}, {"a", kBig, 70}, {"b", kBig, 71}}});
  for (const char* op :
       {"GeluGrad", "FastGeluGrad", "QuickGeluGrad", "ReluGrad", "SigmoidGrad", "TanhGrad"})
    c.push_back({op,
                 MakeNode(op, {"dy", "x"}, {"dx"}, {}, kMs),
                 {{"dy", kBig, 72, -2, 2}, {"x", kBig, 73, -6, 6}}});
  // [1, n] + [n]: one element count, other ranks (no element broadcast): chunked too.
  const int64_t n = kBig[0] * kBig[1];
  c.push_back({"Add_same_count_other_rank",
               MakeNode("Add", {"a", "b"}),
               {{"a", {1, n}, 74}, {"b", {n}, 75}}});
  return c;
}

int Bf16Operands(const Node& node, const std::map<std::string, Tensor>& in) {
  Graph g = GraphOf(node, in);
  int n = 0;
  for (const auto* side : {&node.inputs, &node.outputs})
    for (const std::string& name : *side) n += g.FindValue(name)->dtype == DType::kBFloat16;
  return n;
}

class Bf16ChunkedTest : public testing::TestWithParam<Pointwise> {};

// A pointwise op on operands larger than several chunks: the bits of whole staging, in a workspace
// of one chunk's copies (exactly; one byte fewer is refused), at 1, 2 and 4 threads.
TEST_P(Bf16ChunkedTest, IsWholeStagingInOneChunksWorkspace) {
  const Pointwise& c = GetParam();
  const auto in = Make(c.inputs);
  const std::vector<Tensor> want = WholeStaging(c.node, in);
  const int64_t bytes = ChunkCopies(Bf16Operands(c.node, in));
  for (int threads : {1, 2, 4}) {
    SetCpuThreads(threads);
    int64_t planned = 0;
    auto got = RunNode(c.node, in, 0, &planned);
    SetCpuThreads(1);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(planned, bytes);
    ASSERT_EQ(got->size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_TRUE((*got)[k].BitwiseEqual(want[k])) << "output " << k << " at " << threads;
  }
  auto short_run = RunNode(c.node, in, -1);
  ASSERT_FALSE(short_run.ok());
  EXPECT_NE(short_run.status().message().find("needs " + std::to_string(bytes) +
                                              " bytes of workspace but was given " +
                                              std::to_string(bytes - 1)),
            std::string::npos)
      << short_run.status().message();
}

INSTANTIATE_TEST_SUITE_P(Ops, Bf16ChunkedTest, testing::ValuesIn(PointwiseCases()),
                         [](const auto& info) { return info.param.label; });

// Broadcasting nodes of listed ops, a one-element operand included, and a random op keep whole
// staging: its workspace (every bfloat16 operand whole) and its bits.
TEST(Bf16Chunked, BroadcastAndRandomNodesStageWhole) {
  const int64_t n = kBig[0] * kBig[1];
  std::vector<Pointwise> cases = {
      {"bias", MakeNode("Add", {"a", "b"}), {{"a", kBig, 81}, {"b", {kBig[1]}, 82}}},
      {"one_element", MakeNode("Mul", {"a", "b"}), {{"a", kBig, 83}, {"b", {1}, 84}}},
      {"sum_broadcast",
       MakeNode("Sum", {"a", "b", "c"}),
       {{"a", kBig, 85}, {"b", {kBig[0], 1}, 86}, {"c", kBig, 87}}},
  };
  const std::vector<int64_t> whole = {
      2 * Bf16StagingBytes(n) + Bf16StagingBytes(kBig[1]),
      2 * Bf16StagingBytes(n) + Bf16StagingBytes(1),
      3 * Bf16StagingBytes(n) + Bf16StagingBytes(kBig[0]),
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto in = Make(cases[i].inputs);
    int64_t planned = 0;
    auto got = RunNode(cases[i].node, in, 0, &planned);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(planned, whole[i]) << cases[i].label;
    EXPECT_TRUE((*got)[0].BitwiseEqual(WholeStaging(cases[i].node, in)[0])) << cases[i].label;
  }
  // Dropout (Philox keyed by the element index) is not on the list, even on one shape.
  const Node dropout = MakeNode("Dropout", {"x"});
  Graph g = GraphOf(dropout, {{"x", Tensor(DType::kBFloat16, kBig)}});
  EXPECT_EQ(CpuWorkspaceBytes(g, g.nodes[0]), 2 * Bf16StagingBytes(n));
}

// In place: an output that shares an input's buffer (the schema's in_place_inputs: Add over
// either input, Sum over any) gets the bits of a run into its own buffer. Each chunk reads its
// inputs before it writes its outputs, and no chunk writes elements a later chunk reads.
TEST(Bf16Chunked, InPlaceOverAnInput) {
  struct InPlace {
    Node node;
    size_t over;  // the input the output writes over
  };
  const std::vector<InPlace> runs = {
      {MakeNode("Add", {"a", "b"}), 0},
      {MakeNode("Add", {"a", "b"}), 1},
      {MakeNode("Sum", {"a", "b", "c"}), 2},
      {MakeNode("GeluGrad", {"a", "b"}, {"y"}, {}, "com.microsoft"), 0}};
  const std::map<std::string, Tensor> in = {{"a", ToBf16(RandomTensor(kBig, 91, -3, 3))},
                                            {"b", ToBf16(RandomTensor(kBig, 92, -3, 3))},
                                            {"c", ToBf16(RandomTensor(kBig, 93, -3, 3))}};
  for (const InPlace& r : runs) {
    auto apart = RunNode(r.node, in);
    ASSERT_TRUE(apart.ok()) << apart.status().message();
    std::map<std::string, Tensor> copies;
    std::vector<const Tensor*> ins;
    for (const auto& name : r.node.inputs) {
      copies[name] = ToBf16(ToF32(in.at(name)));  // owning copies: one is overwritten
      ins.push_back(&copies.at(name));
    }
    Tensor y = Tensor::View(DType::kBFloat16, kBig, const_cast<void*>(ins[r.over]->raw()));
    std::vector<Tensor*> outs = {&y};
    std::vector<std::byte> ws(static_cast<size_t>(CpuWorkspaceBytesFor(r.node, ins, outs)));
    KernelContext ctx;
    ctx.workspace = ws;
    ASSERT_TRUE(RunCpuKernel(r.node, ins, outs, ctx).ok());
    EXPECT_EQ(static_cast<int64_t>(ws.size()), ChunkCopies(static_cast<int>(ins.size()) + 1));
    EXPECT_TRUE(y.BitwiseEqual((*apart)[0])) << r.node.op_type << " over input " << r.over;
  }
}

}  // namespace
}  // namespace foundry
