#include "passes/canonicalize.h"

#include <gtest/gtest.h>

#include "compiler/text.h"
#include "compiler/verifier.h"
#include "passes/autodiff.h"
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

// The exports below are written node for node as torch exports F.gelu, F.gelu(approximate='tanh')
// and litgpt's RMSNorm (x.float(); x * rsqrt(mean(x * x, -1, keepdim) + eps) * w; .to(dtype)):
// torch 1.13 TorchScript at opset 14, torch 2.6 dynamo=True at opset 18 (its Constant nodes as
// consts). torch 1.13's F.gelu is GeluDecompositionBecomesOneExactOp above, its tanh GELU
// kTorchTanhGelu below.

// The graph after folding and canonicalization, and the pass's counts.
Graph Canonicalized(const char* text, CanonicalizeStats* stats = nullptr) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(FoldPass({}).Run(*g).ok());
  CanonicalizePass pass;
  EXPECT_TRUE(pass.Run(*g).ok());
  if (stats) *stats = pass.stats();
  return *g;
}

// torch 2.6 dynamo's F.gelu(x): the 0.5 multiplies 1 + erf before x does.
constexpr const char* kDynamoGelu = R"(graph g {
  input x : f32[3,37]
  const val_0 : f32[] = [1.4142135381698608]
  const val_3 : f32[] = [1.0]
  const val_5 : f32[] = [0.5]
  val_1 = Div(x, val_0)
  val_2 = Erf(val_1)
  val_4 = Add(val_2, val_3)
  val_6 = Mul(val_5, val_4)
  gelu = Mul(x, val_6)
  output gelu
})";

TEST(CanonicalizeTest, DynamoGeluBecomesGeluWithTheHalfFirstForm) {
  ExpectSameBits(kDynamoGelu, {"com.microsoft::Gelu"});
  CanonicalizeStats stats;
  Graph g = Canonicalized(kDynamoGelu, &stats);
  EXPECT_EQ(stats.gelu, 1);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].GetString("form", ""), "half_first");
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x"}));
  // TorchScript's order keeps the default form (no attribute).
  Graph ts = Canonicalized(R"(graph g {
  input x : f32[3,37]
  const sqrt2 : f32[] = [1.41421354]
  const one : f32[] = [1.0]
  const half : f32[] = [0.5]
  d = Div(x, sqrt2)
  e = Erf(d)
  a = Add(one, e)
  m = Mul(a, x)
  y = Mul(half, m)
  output y
})");
  ASSERT_EQ(ts.nodes.size(), 1u);
  EXPECT_EQ(ts.nodes[0].op_type, "Gelu");
  EXPECT_TRUE(ts.nodes[0].attrs.empty());
}

// Hugging Face's Python GELU, x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))): the same bits as
// dynamo's order, so the same form.
TEST(CanonicalizeTest, HalfXTimesOnePlusErfIsTheHalfFirstForm) {
  const char* text = R"(graph g {
  input x : f32[3,37]
  const sqrt2 : f32[] = [1.41421354]
  const one : f32[] = [1.0]
  const half : f32[] = [0.5]
  h = Mul(x, half)
  d = Div(x, sqrt2)
  e = Erf(d)
  a = Add(one, e)
  y = Mul(h, a)
  output y
})";
  ExpectSameBits(text, {"com.microsoft::Gelu"});
  EXPECT_EQ(Canonicalized(text).nodes[0].GetString("form", ""), "half_first");
}

// torch 2.6 dynamo's F.gelu(x, approximate='tanh'): Pow for the cube and the 0.5 first, which is
// FastGelu's gelu_new rounding sequence (kernels/cpu/elementwise.cc).
constexpr const char* kDynamoTanhGelu = R"(graph g {
  input x : f32[64,1024]
  const val_0 : f32[] = [3.0]
  const val_2 : f32[] = [0.044714998453855515]
  const val_5 : f32[] = [0.7978845834732056]
  const val_8 : f32[] = [1.0]
  const val_10 : f32[] = [0.5]
  val_1 = Pow(x, val_0)
  val_3 = Mul(val_2, val_1)
  val_4 = Add(x, val_3)
  val_6 = Mul(val_5, val_4)
  val_7 = Tanh(val_6)
  val_9 = Add(val_7, val_8)
  val_11 = Mul(val_10, val_9)
  gelu = Mul(x, val_11)
  output gelu
})";

TEST(CanonicalizeTest, DynamoTanhGeluBecomesFastGeluGeluNew) {
  ExpectSameBits(kDynamoTanhGelu, {"com.microsoft::FastGelu"});
  CanonicalizeStats stats;
  Graph g = Canonicalized(kDynamoTanhGelu, &stats);
  EXPECT_EQ(stats.fast_gelu, 1);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].GetString("form", ""), "gelu_new");
}

// A mix no kernel form reproduces (two products for the cube, the 0.5 first) is left alone.
TEST(CanonicalizeTest, TanhGeluMixingTheTwoFormsIsLeftAlone) {
  std::string text = kDynamoTanhGelu;
  const std::string pow = "val_1 = Pow(x, val_0)";
  text.replace(text.find(pow), pow.size(), "sq = Mul(x, x)\n  val_1 = Mul(x, sq)");
  CanonicalizeStats stats;
  Graph g = Canonicalized(text.c_str(), &stats);
  EXPECT_EQ(stats.fast_gelu, 0);
  EXPECT_EQ(g.nodes.size(), 9u);
}

// litgpt's RMSNorm as torch 1.13 exports it: the x.float() and .to(dtype) Casts are no-ops in f32,
// the square is Mul(x, x), 1/sqrt is Div(1, .). (With Gemma's unit offset torch 1.13 folds
// weight + 1 into a new initializer: the same graph.)
TEST(CanonicalizeTest, TorchScriptLitgptRmsNormFuses) {
  const char* text = R"(graph g {
  input x : f32[2,5,24]
  param w : f32[24]
  const eps : f32[] = [9.999999747378752e-06]
  const one : f32[] = [1.0]
  c = Cast(x) {to=1}
  sq = Mul(c, c)
  m = ReduceMean(sq) {axes=[-1], keepdims=1}
  a = Add(m, eps)
  s = Sqrt(a)
  r = Div(one, s)
  n = Mul(c, r)
  y = Mul(n, w)
  out = Cast(y) {to=1}
  output out
})";
  ExpectSameBits(text, {"com.microsoft::SimplifiedLayerNormalization", "Identity"});
  CanonicalizeStats stats;
  Graph g = Canonicalized(text, &stats);
  EXPECT_EQ(stats.rmsnorm, 1);
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x", "w"}));
  EXPECT_FLOAT_EQ(g.nodes[0].GetFloat("epsilon", 0.f), 1e-5f);
}

// The same module through torch 2.6 dynamo: ReduceMean's axes a Reshape of constants (folded),
// Reciprocal for 1/sqrt, and a Cast on the weight too; with Gemma's unit offset, Add(weight, 1)
// before that Cast.
constexpr const char* kDynamoLitgptRmsNorm = R"(graph g {
  input x : f32[2,5,24]
  param weight : f32[24]
  const val_0 : i64[1] = [-1]
  const val_1 : i64[1] = [-1]
  const val_3 : f32[] = [9.999999747378752e-06]
  _to_copy = Cast(x) {to=1}
  mul = Mul(_to_copy, _to_copy)
  val_2 = Reshape(val_1, val_0) {allowzero=0}
  mean = ReduceMean(mul, val_2) {keepdims=1, noop_with_empty_axes=0}
  add = Add(mean, val_3)
  val_4 = Sqrt(add)
  rsqrt = Reciprocal(val_4)
  mul_1 = Mul(_to_copy, rsqrt)
  _to_copy_1 = Cast(weight) {to=1}
  mul_2 = Mul(mul_1, _to_copy_1)
  _to_copy_2 = Cast(mul_2) {to=1}
  output _to_copy_2
})";

constexpr const char* kDynamoLitgptRmsNormUnitOffset = R"(graph g {
  input x : f32[2,5,24]
  param weight : f32[24]
  const val_0 : i64[1] = [-1]
  const val_1 : i64[1] = [-1]
  const val_3 : f32[] = [9.999999747378752e-06]
  const val_5 : f32[] = [1.0]
  _to_copy = Cast(x) {to=1}
  mul = Mul(_to_copy, _to_copy)
  val_2 = Reshape(val_1, val_0) {allowzero=0}
  mean = ReduceMean(mul, val_2) {keepdims=1, noop_with_empty_axes=0}
  add = Add(mean, val_3)
  val_4 = Sqrt(add)
  rsqrt = Reciprocal(val_4)
  mul_1 = Mul(_to_copy, rsqrt)
  add_1 = Add(weight, val_5)
  _to_copy_1 = Cast(add_1) {to=1}
  mul_2 = Mul(mul_1, _to_copy_1)
  _to_copy_2 = Cast(mul_2) {to=1}
  output _to_copy_2
})";

TEST(CanonicalizeTest, DynamoLitgptRmsNormFuses) {
  ExpectSameBits(kDynamoLitgptRmsNorm, {"com.microsoft::SimplifiedLayerNormalization", "Identity"});
  CanonicalizeStats stats;
  Graph g = Canonicalized(kDynamoLitgptRmsNorm, &stats);
  EXPECT_EQ(stats.rmsnorm, 1);
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"x", "weight"}));
}

// Gemma's offset: only the normalisation fuses; Add(weight, 1) stays and feeds the scale.
TEST(CanonicalizeTest, DynamoLitgptRmsNormWithUnitOffsetKeepsTheAdd) {
  ExpectSameBits(kDynamoLitgptRmsNormUnitOffset,
                 {"Add", "com.microsoft::SimplifiedLayerNormalization", "Identity"});
  CanonicalizeStats stats;
  Graph g = Canonicalized(kDynamoLitgptRmsNormUnitOffset, &stats);
  EXPECT_EQ(stats.rmsnorm, 1);
  EXPECT_EQ(g.nodes[0].inputs, (std::vector<std::string>{"weight", "val_5"}));
  EXPECT_EQ(g.nodes[1].inputs, (std::vector<std::string>{"x", "add_1"}));
}

// The weight's gradient reaches it through the kept Add: after autodiff, fused and unfused
// graphs give the same d(loss)/d(weight) and d(loss)/d(x) up to the fused gradient's rounding.
TEST(CanonicalizeTest, UnitOffsetRmsNormWeightGradientFlowsThroughTheAdd) {
  std::string text = kDynamoLitgptRmsNormUnitOffset;
  const std::string output = "output _to_copy_2";
  text.replace(text.find(output), output.size(),
               "t = Tanh(_to_copy_2)\n  loss = ReduceSum(t) {keepdims=0}\n  output loss");
  auto fwd = ParseGraph(text);
  ASSERT_TRUE(fwd.ok()) << fwd.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*fwd).ok());
  Graph unfused = *fwd;
  Graph fused = *fwd;
  CanonicalizePass pass;
  ASSERT_TRUE(pass.Run(fused).ok());
  ASSERT_EQ(pass.stats().rmsnorm, 1);
  ASSERT_TRUE(AutodiffPass({}).Run(unfused).ok());
  ASSERT_TRUE(AutodiffPass({}).Run(fused).ok());
  std::map<std::string, Tensor> feeds;
  feeds["x"] = RandomTensor({2, 5, 24}, 42, -4.f, 4.f);
  feeds["weight"] = RandomTensor({24}, 7);
  auto a = Interpret(unfused, feeds);
  auto b = Interpret(fused, feeds);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(unfused.outputs, fused.outputs);
  ASSERT_EQ(unfused.outputs, (std::vector<std::string>{"loss", "weight_grad"}));
  const Tensor& ga = a->at("weight_grad");
  const Tensor& gb = b->at("weight_grad");
  for (int64_t i = 0; i < ga.numel(); ++i) {
    const float want = ga.data<float>()[i];
    EXPECT_NEAR(gb.data<float>()[i], want, 1e-5 + 1e-5 * std::fabs(want)) << i;
  }
}

// Operand orders torch never writes but other code may: eps first in the Add, the weight first
// in the outer Mul, the reciprocal first in the inner one, Pow with an f32 exponent.
TEST(CanonicalizeTest, RmsNormInAnyOperandOrderFuses) {
  ExpectSameBits(R"(graph g {
  input x : f32[2,5,24]
  param w : f32[24]
  const two : f32[] = [2.0]
  const eps : f32[] = [1e-06]
  p = Pow(x, two)
  m = ReduceMean(p) {axes=[2], keepdims=1}
  a = Add(eps, m)
  s = Sqrt(a)
  r = Reciprocal(s)
  n = Mul(r, x)
  y = Mul(w, n)
  output y
})",
                 {"com.microsoft::SimplifiedLayerNormalization"});
}

// Not RMSNorm: the square of another value than the one normalised.
TEST(CanonicalizeTest, RmsNormOfAnotherValuesSquareIsLeftAlone) {
  CanonicalizeStats stats;
  Graph g = Canonicalized(R"(graph g {
  input x : f32[2,5,24]
  input z : f32[2,5,24]
  param w : f32[24]
  const eps : f32[] = [1e-06]
  sq = Mul(z, z)
  m = ReduceMean(sq) {axes=[-1], keepdims=1}
  a = Add(m, eps)
  s = Sqrt(a)
  r = Reciprocal(s)
  n = Mul(x, r)
  y = Mul(n, w)
  output y
})",
                          &stats);
  EXPECT_EQ(stats.rmsnorm, 0);
  EXPECT_EQ(g.nodes.size(), 7u);
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
