#include "passes/fold.h"

#include <gtest/gtest.h>

#include "compiler/text.h"
#include "compiler/verifier.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Shape arithmetic as exports write it: reshape x [batch, seq, 4] to [batch*seq, 4] through
// Shape/Gather/Mul/Unsqueeze/Concat, and a causal mask over seq x seq built from Range/Less.
constexpr const char* kGraph = R"(graph g opset=17 {
  input x : f32[batch,seq,4]
  param w : f32[4,4]
  const i0 : i64[] = [0]
  const i1 : i64[] = [1]
  const i2 : i64[] = [2]
  const ax : i64[1] = [0]
  const minus_one : i64[1] = [-1]
  const last : i64[1] = [4]
  s = Shape(x)
  b = Gather(s, i0) {axis=0}
  t = Gather(s, i1) {axis=0}
  bt = Mul(b, t)
  bt1 = Unsqueeze(bt, ax)
  new_shape = Concat(bt1, last) {axis=0}
  flat = Reshape(x, new_shape)
  wt = Transpose(w) {perm=[1, 0]}
  y = MatMul(flat, wt)
  zero = Sub(t, t)
  r = Range(zero, t, i1)
  ru = Unsqueeze(r, ax)
  rc = Unsqueeze(r, minus_one)
  mask = Less(ru, rc)
  output y
  output mask
}
)";

TEST(FoldTest, FoldsShapeArithmeticAndKeepsParameterWork) {
  auto g = ParseGraph(kGraph);
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({.dims = {{"batch", 2}, {"seq", 3}}, .max_folded_bytes = 1 << 20});
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  // Left: Reshape of the activation, the weight transpose (w changes every step) and the matmul.
  // The 3x3 mask is small, so it is folded into a constant.
  std::vector<std::string> ops;
  for (const Node& n : g->nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Reshape", "Transpose", "MatMul"}));
  EXPECT_EQ(g->FindValue("y")->shape, (Shape{6, 4}));
  ASSERT_NE(g->FindValue("mask")->data, nullptr);
  EXPECT_EQ(g->FindValue("mask")->data->ToInt64Vector(),
            (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 1, 1, 0}));
  EXPECT_TRUE(VerifyGraph(*g).ok()) << VerifyGraph(*g).message();
}

TEST(FoldTest, LargeGeneratedTensorStaysARunTimeComputation) {
  auto g = ParseGraph(kGraph);
  ASSERT_TRUE(g.ok());
  // seq 2048: the mask is 2048 x 2048 bools = 4 MiB, above a 1 MiB limit. Its inputs (the
  // ranges, 16 KiB each) still fold; only the Less that makes the big tensor remains.
  FoldPass pass({.dims = {{"batch", 1}, {"seq", 2048}}, .max_folded_bytes = 1 << 20});
  ASSERT_TRUE(pass.Run(*g).ok());
  std::vector<std::string> ops;
  for (const Node& n : g->nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Reshape", "Transpose", "MatMul", "Less"}));
  EXPECT_EQ(g->FindValue("mask")->data, nullptr);
  EXPECT_EQ(g->FindValue("mask")->shape, (Shape{2048, 2048}));
  // The statistics say the same: the Less kept, four nodes left, under the limit it was given.
  EXPECT_EQ(pass.stats().kept_large, 1);
  EXPECT_EQ(pass.stats().remaining, 4);
  EXPECT_EQ(pass.stats().max_folded_bytes, 1 << 20);
  EXPECT_GT(pass.stats().folded, 0);
  EXPECT_EQ(pass.Stats(), "folded " + std::to_string(pass.stats().folded) +
                              " nodes, 4 remain (1 kept at run time: result above 1048576 bytes)");
}

// Dropout on a buffer (all inputs constant) has everything folding needs, but its mask must be
// drawn anew at every step: folded, one mask would be frozen into the plan for the whole run.
TEST(FoldTest, NeverFoldsARandomOp) {
  auto g = ParseGraph(R"(graph g opset=17 {
  input x : f32[8]
  const c : f32[8] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
  const ratio : f32[] = [0.5]
  const train : bool[] = [1]
  d, mask = Dropout(c, ratio, train)
  y = Add(x, d)
  output y
  output mask
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({});
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_FALSE(*changed);
  std::vector<std::string> ops;
  for (const Node& n : g->nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Dropout", "Add"}));
  EXPECT_EQ(g->FindValue("d")->data, nullptr);
  EXPECT_EQ(g->FindValue("mask")->data, nullptr);
}

// Hugging Face OPT's positions, cumsum(mask, 1) * mask - 1: with a constant mask the CPU kernel
// evaluates all of it at compile time; a CumSum of a run-time input stays.
TEST(FoldTest, FoldsCumSumOfConstants) {
  auto g = ParseGraph(R"(graph g opset=17 {
  input x : i64[2,4]
  const mask : i64[2,4] = [1, 1, 1, 0, 0, 1, 1, 1]
  const axis : i64[] = [1]
  const one : i64[] = [1]
  c = CumSum(mask, axis)
  m = Mul(c, mask)
  pos = Sub(m, one)
  cx = CumSum(x, axis) {reverse=1}
  output pos
  output cx
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({});
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].outputs[0], "cx");
  ASSERT_NE(g->FindValue("pos")->data, nullptr);
  EXPECT_EQ(g->FindValue("pos")->data->ToInt64Vector(),
            (std::vector<int64_t>{0, 1, 2, -1, -1, 0, 1, 2}));
}

// A sliding-window style mask written into constants with ScatterElements (as torch's dynamo
// export spells `scatter_`): the CPU kernel evaluates the chain at compile time; a scatter into a
// run-time input stays.
TEST(FoldTest, FoldsScatterElementsOfConstants) {
  auto g = ParseGraph(R"(graph g opset=18 {
  input x : f32[2,3]
  const zeros : f32[2,3] = [0, 0, 0, 0, 0, 0]
  const idx : i64[2,2] = [0, -1, 2, 2]
  const ones : f32[2,2] = [1, 1, 1, 1]
  m = ScatterElements(zeros, idx, ones) {axis=1}
  m2 = ScatterElements(m, idx, ones) {axis=1, reduction="add"}
  y = Add(x, m2)
  sx = ScatterElements(x, idx, ones) {axis=1}
  output y
  output sx
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  FoldPass pass({});
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  std::vector<std::string> ops;
  for (const Node& n : g->nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Add", "ScatterElements"}));
  ASSERT_NE(g->FindValue("m2")->data, nullptr);
  const Tensor& m2 = *g->FindValue("m2")->data;
  EXPECT_EQ(std::vector<float>(m2.data<float>(), m2.data<float>() + 6),
            (std::vector<float>{2, 0, 2, 0, 0, 3}));
}

TEST(FoldTest, UnboundDimensionIsAnError) {
  auto g = ParseGraph(kGraph);
  ASSERT_TRUE(g.ok());
  FoldPass pass({.dims = {{"batch", 2}}});
  auto changed = pass.Run(*g);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().message(),
            "symbolic dimension 'seq' of input 'x' is not bound; pass --dim seq=N (the inputs' "
            "dimensions: x f32[batch,seq,4])");
}

TEST(FoldTest, UnsupportedOpNamesOpNodeAndScope) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[2]
  y = FancyOp(x) @"transformer.blocks.0.attn" #"/blocks.0/attn/FancyOp"
  output y
})");
  ASSERT_TRUE(g.ok());
  FoldPass pass({});
  auto changed = pass.Run(*g);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().message(),
            "FancyOp node '/blocks.0/attn/FancyOp' (module transformer.blocks.0.attn): operator "
            "FancyOp is not supported by foundry; supported ops are listed by "
            "`foundry-compile --list-ops`");
}

}  // namespace
}  // namespace foundry
