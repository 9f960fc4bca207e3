#include "passes/parameters.h"

#include <gtest/gtest.h>

#include "compiler/text.h"
#include "passes/pipeline.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr const char* kModel = R"(graph g {
  input x : f32[3,4]
  param w : f32[4,4]
  param b : f32[4]
  const buf : f32[4] = [0.5, -1.0, 2.0, 1.5]
  const two : f32[] = [2.0]
  h = MatMul(x, w)
  h2 = Add(h, b)
  s = Mul(buf, two)
  v = Mul(h2, s)
  loss = ReduceSum(v) {keepdims=0}
  output loss
})";

Graph Parsed() {
  auto g = ParseGraph(kModel);
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

TEST(ParametersTest, FreezeAndTrainableGlobs) {
  Graph g = Parsed();
  ParametersPass frozen({.freeze = {"b"}, .trainable = {}});
  auto changed = frozen.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(g.parameters, (std::vector<std::string>{"w"}));
  EXPECT_EQ(frozen.Stats(), "1 trainable (1 frozen by --freeze, 0 added by --trainable)");
  EXPECT_EQ(frozen.stats().trainable, 1);
  EXPECT_EQ(frozen.stats().frozen, 1);
  EXPECT_EQ(frozen.stats().added, 0);

  Graph with_buffer = Parsed();
  ASSERT_TRUE(ParametersPass({.freeze = {}, .trainable = {"bu?"}}).Run(with_buffer).ok());
  EXPECT_EQ(with_buffer.parameters, (std::vector<std::string>{"w", "b", "buf"}));

  Graph same = Parsed();
  auto unchanged = ParametersPass({}).Run(same);
  ASSERT_TRUE(unchanged.ok());
  EXPECT_FALSE(*unchanged);
}

TEST(ParametersTest, GlobsThatMatchNothingAreErrors) {
  Graph g = Parsed();
  auto st = ParametersPass({.freeze = {"nope*"}, .trainable = {}}).Run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), "parameters: --freeze nope* matches no parameter");
  // A buffer is not a parameter, so --freeze cannot name it; an integer is never trainable.
  st = ParametersPass({.freeze = {"buf"}, .trainable = {}}).Run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(), "parameters: --freeze buf matches no parameter");
}

// The trainable set is decided before folding: `s = Mul(buf, two)` is constant arithmetic that
// fold would evaluate (and buf would vanish with it) unless buf is already trainable.
TEST(ParametersTest, TrainableBufferIsNeverFoldedAway) {
  Graph g = Parsed();
  CompileOptions options;
  options.parameters.trainable = {"buf"};
  Status st = RunPasses(g, BuildPipeline(options), {});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(g.outputs, (std::vector<std::string>{"loss", "w_grad", "b_grad", "buf_grad"}));

  Graph plain = Parsed();
  st = RunPasses(plain, BuildPipeline(CompileOptions{}), {});
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(plain.outputs, (std::vector<std::string>{"loss", "w_grad", "b_grad"}));
  EXPECT_EQ(plain.FindValue("buf"), nullptr);  // folded into s, as expected for a buffer
}

// A buffer holding -inf (a causal mask) can never train: --trainable naming it is an error that
// says why, not a step that fails later with learning-rate advice.
TEST(ParametersTest, TrainableNonFiniteBufferIsAnError) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[4]
  param w : f32[4]
  const mask : f32[4] = [0.0, -inf, 0.0, -inf]
  h = Mul(x, w)
  m = Add(h, mask)
  loss = ReduceSum(m) {keepdims=0}
  output loss
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto st = ParametersPass({.freeze = {}, .trainable = {"ma*"}}).Run(*g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(),
            "parameters: --trainable selects 'mask', which holds non-finite values (a -inf "
            "mask?): a buffer that cannot be trained; narrow the glob");
  EXPECT_EQ(g->parameters, (std::vector<std::string>{"w"}));  // untouched
}

TEST(GlobTest, Matches) {
  EXPECT_TRUE(GlobMatch("transformer.blocks.*.attn.*", "transformer.blocks.3.attn.Wqkv.weight"));
  EXPECT_FALSE(GlobMatch("transformer.blocks.*.attn", "transformer.blocks.3.attn.Wqkv"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("a?c", "abc"));
}

}  // namespace
}  // namespace foundry
