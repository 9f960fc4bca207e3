// The analyses the planner and the checker share (compiler/memory_liveness.h), on their own.
#include "compiler/memory_liveness.h"

#include <gtest/gtest.h>

#include "compiler/text.h"
#include "passes/fold.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

Graph Typed(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return Graph();
  Status st = FoldPass({}).Run(*g).status();
  EXPECT_TRUE(st.ok()) << st.message();
  return *g;
}

// x (input) and w (parameter) feed a = MatMul (step 0), b = Mul(a, k) with the constant k
// (step 1), s = ReduceSum(b) (step 2, the loss), gw = Identity(w) (step 3, w's gradient).
constexpr char kGraph[] = R"(graph g {
  input x : f32[2,8]
  param w : f32[8,4]
  const k : f32[4] = [1, 2, 3, 4]
  a = MatMul(x, w)
  b = Mul(a, k)
  s = ReduceSum(b) {keepdims=0}
  gw = Identity(w)
  output s
  output gw
})";

TEST(MemoryLivenessTest, IndexKnowsProducersReadersAndClasses) {
  Graph g = Typed(kGraph);
  GraphIndex ix(g);
  EXPECT_EQ(ix.Producer("a"), 0);
  EXPECT_EQ(ix.Producer("x"), -1);
  EXPECT_EQ(ix.LastRead("a"), 1);
  EXPECT_EQ(ix.LastRead("w"), 3);  // the last reader, not the first
  EXPECT_EQ(ix.LastRead("s"), -1);
  EXPECT_EQ(ix.BaseClass(g, "x"), MemoryClass::kInput);
  EXPECT_EQ(ix.BaseClass(g, "w"), MemoryClass::kParameter);
  EXPECT_EQ(ix.BaseClass(g, "k"), MemoryClass::kConstant);
  EXPECT_EQ(ix.BaseClass(g, "a"), MemoryClass::kArena);
  EXPECT_EQ(ix.BaseClass(g, "s"), MemoryClass::kOutput);
  EXPECT_EQ(ix.BaseClass(g, "gw"), MemoryClass::kGradient);
  EXPECT_TRUE(WritableOutput(g, ix, "gw"));
  EXPECT_FALSE(WritableOutput(g, ix, "a"));
}

// Outside the arena: x 64 B, w 128 B and its gradient 128 B, AdamW's two slots 256 B, the loss
// 4 B; the constant k 16 B.
TEST(MemoryLivenessTest, CountsTheBytesOutsideTheArenaPerClass) {
  Graph g = Typed(kGraph);
  const BytesByClass b = CountOutside(g, GraphIndex(g));
  EXPECT_EQ(b[MemoryClass::kInput], 64);
  EXPECT_EQ(b[MemoryClass::kParameter], 128);
  EXPECT_EQ(b[MemoryClass::kGradient], 128);
  EXPECT_EQ(b[MemoryClass::kOptimizerState], 256);
  EXPECT_EQ(b[MemoryClass::kOutput], 4);
  EXPECT_EQ(b[MemoryClass::kConstant], 16);
  EXPECT_EQ(b[MemoryClass::kArena], 0);
  EXPECT_EQ(b[MemoryClass::kOther], 0);
  EXPECT_EQ(TotalOf(b), 64 + 128 + 128 + 256 + 4 + 16);
}

// Without aliases a and b are the arena buffers (32 B each), a live over [0, 1], b over [1, 2].
TEST(MemoryLivenessTest, BuffersAreTheTransientsWithTheirIntervals) {
  Graph g = Typed(kGraph);
  MemoryPlan plan;
  const std::vector<ArenaBuffer> buffers = BuffersOf(g, plan, GraphIndex(g));
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].owner, "a");
  EXPECT_EQ(buffers[0].bytes, 32);
  EXPECT_EQ(buffers[0].first, 0);
  EXPECT_EQ(buffers[0].last, 1);
  EXPECT_EQ(buffers[1].owner, "b");
  EXPECT_EQ(buffers[1].first, 1);
  EXPECT_EQ(buffers[1].last, 2);
  // An alias of a read later stretches a's interval to that read.
  plan.alias["b"] = {"a", AliasKind::kInPlace};
  const std::vector<ArenaBuffer> aliased = BuffersOf(g, plan, GraphIndex(g));
  ASSERT_EQ(aliased.size(), 1u);
  EXPECT_EQ(aliased[0].last, 2);
}

// Items 256 B over [0, 2], 512 B over [1, 1], 256 B over [2, 3]: live 256, 768, 512, 256; the
// bound is 768 at step 1 (the first step that reaches it).
TEST(MemoryLivenessTest, LowerBoundIsTheMostLiveBytesAtAnyStep) {
  const LiveBound b = LowerBound({{256, 0, 2}, {512, 1, 1}, {256, 2, 3}}, 4);
  EXPECT_EQ(b.bytes, 768);
  EXPECT_EQ(b.step, 1);
  EXPECT_EQ(b.live, (std::vector<int64_t>{256, 768, 512, 256}));
  EXPECT_EQ(RoundUpToArenaAlignment(1), kArenaAlignment);
  EXPECT_EQ(RoundUpToArenaAlignment(kArenaAlignment), kArenaAlignment);
  EXPECT_EQ(RoundUpToArenaAlignment(0), 0);
}

}  // namespace
}  // namespace foundry
