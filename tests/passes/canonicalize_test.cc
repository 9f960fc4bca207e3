#include "passes/canonicalize.h"

#include <gtest/gtest.h>

#include "compiler/text.h"
#include "compiler/verifier.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"

namespace foundry {
namespace {

std::vector<std::string> Ops(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back((n.domain.empty() ? "" : n.domain + "::") + n.op_type);
  return ops;
}

// Runs the graph before and after canonicalization on the same random input; the bits must match.
void ExpectSameBits(const char* text, const std::vector<std::string>& expected_ops) {
  auto before = ParseGraph(text);
  ASSERT_TRUE(before.ok()) << before.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*before).ok());
  Graph after = *before;
  CanonicalizePass pass;
  auto changed = pass.Run(after);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(Ops(after), expected_ops) << PrintGraph(after);
  EXPECT_TRUE(VerifyGraph(after).ok()) << VerifyGraph(after).message();
  std::map<std::string, Tensor> feeds;
  feeds["x"] = RandomTensor(before->FindValue("x")->shape, 42, -4.f, 4.f);
  for (const auto& p : before->parameters)
    if (!before->FindValue(p)->data) feeds[p] = RandomTensor(before->FindValue(p)->shape, 7);
  auto a = Interpret(*before, feeds);
  auto b = Interpret(after, feeds);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  for (const auto& out : before->outputs) EXPECT_TRUE(a->at(out).BitwiseEqual(b->at(out))) << out;
}

TEST(CanonicalizeTest, GeluDecompositionBecomesOneExactOp) {
  ExpectSameBits(R"(graph g {
  input x : f32[3,37]
  const sqrt2 : f32[] = [1.41421354]
  const one : f32[] = [1.0]
  const half : f32[] = [0.5]
  d = Div(x, sqrt2)
  e = Erf(d)
  a = Add(e, one)
  m = Mul(x, a)
  y = Mul(m, half)
  output y
})",
                 {"com.microsoft::Gelu"});
}

TEST(CanonicalizeTest, RmsNormDecompositionBecomesOneExactOp) {
  ExpectSameBits(R"(graph g {
  input x : f32[2,5,24]
  param w : f32[24]
  const two : f32[] = [2.0]
  const eps : f32[] = [1e-05]
  const one : f32[] = [1.0]
  p = Pow(x, two)
  m = ReduceMean(p) {axes=[-1], keepdims=1}
  a = Add(m, eps)
  s = Sqrt(a)
  r = Div(one, s)
  n = Mul(x, r)
  y = Mul(w, n)
  output y
})",
                 {"com.microsoft::SimplifiedLayerNormalization"});
}

TEST(CanonicalizeTest, TransposedWeightFeedsMatMulWithoutACopy) {
  ExpectSameBits(R"(graph g {
  input x : f32[2,7,12]
  param w : f32[10,12] = [)"
                 "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "-0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, -0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, 0.2, -0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, 0.2, 0.3, -0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, "
                 "0.1, 0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2"
                 R"(]
  t = Transpose(w) {perm=[1, 0]}
  y = MatMul(x, t)
  output y
})",
                 {"com.microsoft::FusedMatMul"});
}

TEST(CanonicalizeTest, InactiveDropoutAndIdentityDisappear) {
  ExpectSameBits(R"(graph g {
  input x : f32[4,4]
  const ratio : f32[] = [0.0]
  const train : bool[] = [1]
  d = Dropout(x, ratio, train)
  i = Identity(d)
  y = Tanh(i)
  output y
})",
                 {"Tanh"});
}

TEST(CanonicalizeTest, PatternWithSharedIntermediateIsLeftAlone) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[3]
  const sqrt2 : f32[] = [1.41421354]
  const one : f32[] = [1.0]
  const half : f32[] = [0.5]
  d = Div(x, sqrt2)
  e = Erf(d)
  a = Add(e, one)
  m = Mul(x, a)
  y = Mul(m, half)
  output y
  output e
})");
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  CanonicalizePass pass;
  auto changed = pass.Run(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(Ops(*g), (std::vector<std::string>{"Div", "Erf", "Add", "Mul", "Mul"}));
}

}  // namespace
}  // namespace foundry
