#include "passes/canonicalize.h"

#include <gtest/gtest.h>

#include "compiler/text.h"
#include "compiler/verifier.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::vector<std::string> Ops(const Graph& g) {
  std::vector<std::string> ops;
  for (const Node& n : g.nodes)
    ops.push_back((n.domain.empty() ? "" : n.domain + "::") + n.op_type);
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

// The dynamo exporter's opset-20 Gelu becomes the com.microsoft op whose kernel and gradient
// rule the rest of foundry knows; its attribute picks which one.
TEST(CanonicalizeTest, OnnxGeluBecomesTheComMicrosoftOp) {
  ExpectSameBits(R"(graph g opset=20 {
  input x : f32[3,37]
  y = Gelu(x)
  z = Gelu(x) {approximate="none"}
  t = Gelu(x) {approximate="tanh"}
  output y
  output z
  output t
})",
                 {"com.microsoft::Gelu", "com.microsoft::Gelu", "com.microsoft::FastGelu"});
  auto g = ParseGraph(R"(graph g opset=20 {
  input x : f64[5]
  t = Gelu(x) {approximate="tanh"} #"/act/Gelu"
  output t
})");
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  CanonicalizePass pass;
  ASSERT_TRUE(pass.Run(*g).ok());
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].name, "/act/Gelu");
  EXPECT_EQ(g->nodes[0].attrs.size(), 1u);
  EXPECT_EQ(g->nodes[0].GetString("form", ""), "gelu_new");
  EXPECT_EQ(pass.stats().fast_gelu, 1);
  EXPECT_EQ(g->FindValue("t")->dtype, DType::kFloat64);
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

// torch 2.6's dynamo exporter: an int64 exponent, Reciprocal for 1/sqrt, ReduceMean's axes as an
// input (opset 18).
TEST(CanonicalizeTest, DynamoRmsNormSpellingFusesToo) {
  ExpectSameBits(R"(graph g {
  input x : f32[2,5,24]
  param w : f32[24]
  const two : i64[] = [2]
  const axes : i64[1] = [-1]
  const eps : f32[] = [1e-06]
  p = Pow(x, two)
  m = ReduceMean(p, axes) {keepdims=1}
  a = Add(m, eps)
  s = Sqrt(a)
  r = Reciprocal(s)
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

// torch.onnx.export(training=TRAINING) writes every p = 0 Dropout as Dropout(x, 0.0, true) with
// a mask output that nothing reads; both go.
TEST(CanonicalizeTest, RatioZeroTrainingDropoutGoesWithItsUnreadMask) {
  ExpectSameBits(R"(graph g {
  input x : f32[4,4]
  const ratio : f32[] = [0.0]
  const train : bool[] = [1]
  d, mask = Dropout(x, ratio, train)
  y = Tanh(d)
  output y
})",
                 {"Tanh"});
}

TEST(CanonicalizeTest, DropoutWhoseMaskIsReadStays) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[4]
  const ratio : f32[] = [0.0]
  const train : bool[] = [1]
  d, mask = Dropout(x, ratio, train)
  y = Tanh(d)
  output y
  output mask
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  CanonicalizePass pass;
  ASSERT_TRUE(pass.Run(*g).ok());
  EXPECT_EQ(Ops(*g), (std::vector<std::string>{"Dropout", "Tanh"}));
}

// ONNX: ratio defaults to 0.5. A training-mode Dropout without a ratio input drops half; only
// training_mode false (or absent) makes it the identity.
TEST(CanonicalizeTest, DropoutWithoutRatioInTrainingModeIsActive) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[4]
  const train : bool[] = [1]
  d = Dropout(x, "", train)
  y = Tanh(d)
  output y
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  CanonicalizePass pass;
  ASSERT_TRUE(pass.Run(*g).ok());
  EXPECT_EQ(Ops(*g), (std::vector<std::string>{"Dropout", "Tanh"}));
  EXPECT_EQ(pass.Stats().find("inactive dropout 0") != std::string::npos, true) << pass.Stats();
  EXPECT_EQ(pass.stats().dropout, 0);

  ExpectSameBits(R"(graph g {
  input x : f32[4]
  d = Dropout(x)
  y = Tanh(d)
  output y
})",
                 {"Tanh"});
}

TEST(CanonicalizeTest, CastToTheSameTypeIsRemovedAndARealCastStays) {
  ExpectSameBits(R"(graph g {
  input x : f32[3,5]
  c = Cast(x) {to=1}
  d = Cast(c) {to=11}
  y = Tanh(d)
  output y
})",
                 {"Cast", "Tanh"});
}

// Hugging Face LlamaRMSNorm as torch 1.13 exports it: the body is wrapped in Cast(to=float) and
// cast back to the input dtype, both no-ops in f32.
TEST(CanonicalizeTest, HuggingFaceRmsNormWithCastPairFuses) {
  ExpectSameBits(R"(graph g {
  input x : f32[2,5,24]
  param w : f32[24]
  const two : f32[] = [2.0]
  const eps : f32[] = [1e-06]
  const one : f32[] = [1.0]
  c = Cast(x) {to=1}
  p = Pow(c, two)
  m = ReduceMean(p) {axes=[-1], keepdims=1}
  a = Add(m, eps)
  s = Sqrt(a)
  r = Div(one, s)
  n = Mul(c, r)
  c1 = Cast(n) {to=1}
  y = Mul(w, c1)
  output y
})",
                 {"com.microsoft::SimplifiedLayerNormalization"});
}

// Hugging Face NewGELUActivation (GPT-2's gelu_new), node for node as torch 1.13 exports
// 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))).
constexpr const char* kGeluNew = R"(graph g {
  input x : f32[64,1024]
  const half : f32[] = [0.5]
  const three : f32[] = [3.0]
  const c : f32[] = [0.044715]
  const k : f32[] = [0.797884583]
  const one : f32[] = [1.0]
  h = Mul(x, half)
  p = Pow(x, three)
  u = Mul(p, c)
  v = Add(x, u)
  w = Mul(v, k)
  t = Tanh(w)
  a = Add(t, one)
  y = Mul(h, a)
  output y
})";

// F.gelu(x, approximate='tanh') as torch 1.13's symbolic writes it.
constexpr const char* kTorchTanhGelu = R"(graph g {
  input x : f32[64,1024]
  const half : f32[] = [0.5]
  const c : f32[] = [0.044715]
  const k : f32[] = [0.797884583]
  const one : f32[] = [1.0]
  sq = Mul(x, x)
  cube = Mul(x, sq)
  u = Mul(c, cube)
  v = Add(x, u)
  w = Mul(k, v)
  t = Tanh(w)
  a = Add(one, t)
  p = Mul(x, a)
  y = Mul(half, p)
  output y
})";

TEST(CanonicalizeTest, TanhGeluBothFormsBecomeOneExactOp) {
  ExpectSameBits(kGeluNew, {"com.microsoft::FastGelu"});
  ExpectSameBits(kTorchTanhGelu, {"com.microsoft::FastGelu"});
}

// The two forms round differently (powf vs two products, where the 0.5 goes), so the fused op
// must remember which it replaced: evaluating one with the other's form changes bits.
TEST(CanonicalizeTest, TanhGeluFormsAreNotInterchangeable) {
  for (const char* text : {kGeluNew, kTorchTanhGelu}) {
    auto g = ParseGraph(text);
    ASSERT_TRUE(g.ok());
    ASSERT_TRUE(FoldPass({}).Run(*g).ok());
    Graph fused = *g;
    ASSERT_TRUE(CanonicalizePass().Run(fused).ok());
    ASSERT_EQ(fused.nodes.size(), 1u);
    std::string form = fused.nodes[0].GetString("form", "");
    fused.nodes[0].attrs["form"] =
        Attribute::String(form == "gelu_new" ? "torch_tanh" : "gelu_new");
    std::map<std::string, Tensor> feeds;
    feeds["x"] = RandomTensor({64, 1024}, 42, -4.f, 4.f);
    auto a = Interpret(*g, feeds);
    auto b = Interpret(fused, feeds);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_FALSE(a->at("y").BitwiseEqual(b->at("y"))) << form;
  }
}

TEST(CanonicalizeTest, TanhGeluWithAnotherConstantIsLeftAlone) {
  std::string text = kGeluNew;
  text.replace(text.find("0.044715"), 8, "0.044716");
  auto g = ParseGraph(text);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  ASSERT_TRUE(CanonicalizePass().Run(*g).ok());
  EXPECT_EQ(g->nodes.size(), 8u);
}

// SiLU as torch exports it, Mul(x, Sigmoid(x)), in both operand orders: one QuickGelu {alpha=1}
// with the same bits (ExpectSameBits draws x in [-4, 4]; the kernel test covers f64 and exp's
// overflow and underflow).
TEST(CanonicalizeTest, SiluBecomesOneExactQuickGelu) {
  for (const char* mul : {"Mul(x, s)", "Mul(s, x)"}) {
    SCOPED_TRACE(mul);
    const std::string text = std::string("graph g {\n  input x : f32[3,37]\n  s = Sigmoid(x)\n") +
                             "  y = " + mul + "\n  output y\n}";
    ExpectSameBits(text.c_str(), {"com.microsoft::QuickGelu"});
  }
  auto g = ParseGraph(R"(graph g {
  input x : f32[4]
  s = Sigmoid(x)
  y = Mul(s, x)
  output y
})");
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  CanonicalizePass pass;
  ASSERT_TRUE(pass.Run(*g).ok());
  EXPECT_EQ(pass.stats().silu, 1);
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(g->nodes[0].outputs, (std::vector<std::string>{"y"}));
  EXPECT_EQ(g->nodes[0].GetFloat("alpha", 0.f), 1.f);
}

// Not SiLU: the Sigmoid's output read elsewhere (fused, it would be computed twice), and a
// product with another value than the Sigmoid's input (a gate, as in SwiGLU's up * silu(gate)).
TEST(CanonicalizeTest, SigmoidProductsThatAreNotSiluAreLeftAlone) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[4]
  input z : f32[4]
  s = Sigmoid(x)
  y = Mul(x, s)
  t = Sigmoid(x)
  u = Mul(z, t)
  output y
  output s
  output u
})");
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  CanonicalizePass pass;
  ASSERT_TRUE(pass.Run(*g).ok());
  EXPECT_EQ(pass.stats().silu, 0);
  EXPECT_EQ(Ops(*g), (std::vector<std::string>{"Sigmoid", "Mul", "Sigmoid", "Mul"}));
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
