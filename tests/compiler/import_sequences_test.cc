#include "compiler/import_sequences.h"

#include <gtest/gtest.h>

#include "compiler/text.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

Graph Lowered(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  Status st = LowerSplitToSequence(*g);
  EXPECT_TRUE(st.ok()) << st.message();
  return *g;
}

std::string LowerError(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  Status st = LowerSplitToSequence(*g);
  EXPECT_FALSE(st.ok());
  return st.message();
}

std::vector<std::string> Ops(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op_type);
  return ops;
}

// x[:, begin:end] of a row-major [rows, cols] tensor, computed here.
std::vector<float> Columns(const Tensor& x, int64_t begin, int64_t end) {
  std::vector<float> out;
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = begin; c < std::min(end, cols); ++c)
      out.push_back(x.data<float>()[r * cols + c]);
  return out;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::map<std::string, Tensor> FoldAndRun(Graph g, const Tensor& x) {
  EXPECT_TRUE(FoldPass({}).Run(g).ok());
  auto out = Interpret(g, {{"x", x}});
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : std::map<std::string, Tensor>{};
}

// torch's `qkv.split(2, dim=1)` on an axis of known size: one Split with the sizes spelled out,
// each SequenceAt (also one counted from the end) an Identity of its piece.
TEST(ImportSequencesTest, ChunkSizeOnAKnownAxisIsOneSplit) {
  Graph g = Lowered(R"(graph g {
  input x : f32[2,5]
  const two : i64[] = [2]
  const p0 : i64[] = [0]
  const p2 : i64[] = [2]
  const last : i64[] = [-1]
  seq = SplitToSequence(x, two) {axis=1}
  a = SequenceAt(seq, p0)
  b = SequenceAt(seq, p2)
  c = SequenceAt(seq, last)
  output a
  output b
  output c
})");
  EXPECT_EQ(Ops(g),
            (std::vector<std::string>{"Constant", "Split", "Identity", "Identity", "Identity"}));
  EXPECT_EQ(g.nodes[1].outputs.size(), 3u);  // 5 = 2 + 2 + 1
  EXPECT_EQ(g.FindValue("seq"), nullptr);
  Tensor x = RandomTensor({2, 5}, 7);
  auto out = FoldAndRun(g, x);
  EXPECT_EQ(Values(out.at("a")), Columns(x, 0, 2));
  EXPECT_EQ(Values(out.at("b")), Columns(x, 4, 5));
  EXPECT_EQ(Values(out.at("c")), Columns(x, 4, 5));
}

TEST(ImportSequencesTest, ExplicitSizes) {
  Graph g = Lowered(R"(graph g {
  input x : f32[3,6]
  const sizes : i64[2] = [1, 5]
  const p1 : i64[] = [1]
  seq = SplitToSequence(x, sizes) {axis=-1}
  b = SequenceAt(seq, p1)
  output b
})");
  Tensor x = RandomTensor({3, 6}, 8);
  EXPECT_EQ(Values(FoldAndRun(g, x).at("b")), Columns(x, 1, 6));
}

// Without `split`, pieces of size 1; keepdims=0 drops the axis.
TEST(ImportSequencesTest, NoSplitWithoutKeepdimsSqueezes) {
  Graph g = Lowered(R"(graph g {
  input x : f32[2,3]
  const p1 : i64[] = [1]
  seq = SplitToSequence(x) {axis=1, keepdims=0}
  b = SequenceAt(seq, p1)
  output b
})");
  EXPECT_EQ(Ops(g), (std::vector<std::string>{"Constant", "Split", "Constant", "Squeeze"}));
  Tensor x = RandomTensor({2, 3}, 9);
  auto out = FoldAndRun(g, x);
  EXPECT_EQ(out.at("b").shape(), (Shape{2}));
  EXPECT_EQ(Values(out.at("b")), Columns(x, 1, 2));
}

// The axis' size is symbolic: each piece is a Slice, right once the dimension is bound.
TEST(ImportSequencesTest, ChunkSizeOnAnUnknownAxisIsSlices) {
  Graph g = Lowered(R"(graph g {
  input x : f32[2,n]
  const four : i64[] = [4]
  const p1 : i64[] = [1]
  seq = SplitToSequence(x, four) {axis=1}
  b = SequenceAt(seq, p1)
  output b
})");
  EXPECT_EQ(Ops(g), (std::vector<std::string>{"Constant", "Constant", "Constant", "Slice"}));
  FoldPass::Options bind;
  bind.dims = {{"n", 6}};
  ASSERT_TRUE(FoldPass(bind).Run(g).ok());
  Tensor x = RandomTensor({2, 6}, 10);
  auto out = Interpret(g, {{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(Values(out->at("b")), Columns(x, 4, 6));  // the short last piece
}

TEST(ImportSequencesTest, WhatCannotBeLoweredIsAnError) {
  EXPECT_EQ(LowerError(R"(graph g {
  input x : f32[2,4]
  const two : i64[] = [2]
  seq = SplitToSequence(x, two) {axis=1}
  y = ConcatFromSequence(seq) {axis=1}
  output y
})"),
            "SplitToSequence node 'SplitToSequence_0': its sequence 'seq' is read by "
            "ConcatFromSequence node 'ConcatFromSequence_1'; foundry lowers SplitToSequence only "
            "when each use is a SequenceAt at a constant position (torch's Tensor.split / chunk)");
  EXPECT_NE(LowerError(R"(graph g {
  input x : f32[2,4]
  input i : i64[]
  const two : i64[] = [2]
  seq = SplitToSequence(x, two) {axis=1}
  y = SequenceAt(seq, i)
  output y
})")
                .find("the position is not a constant integer"),
            std::string::npos);
  EXPECT_NE(LowerError(R"(graph g {
  input x : f32[2,4]
  const sizes : i64[2] = [1, 2]
  const p0 : i64[] = [0]
  seq = SplitToSequence(x, sizes) {axis=1}
  y = SequenceAt(seq, p0)
  output y
})")
                .find("the split sizes add up to 3 but axis 1 of 'x' has 4"),
            std::string::npos);
  EXPECT_NE(LowerError(R"(graph g {
  input x : f32[2,n]
  const two : i64[] = [2]
  const last : i64[] = [-1]
  seq = SplitToSequence(x, two) {axis=1}
  y = SequenceAt(seq, last)
  output y
})")
                .find("counts from the end of a split whose size the file does not give"),
            std::string::npos);
  EXPECT_NE(LowerError(R"(graph g {
  input x : f32[2,4]
  const two : i64[] = [2]
  const p5 : i64[] = [5]
  seq = SplitToSequence(x, two) {axis=1}
  y = SequenceAt(seq, p5)
  output y
})")
                .find("position 5 is outside the 2 pieces"),
            std::string::npos);
}

}  // namespace
}  // namespace foundry
