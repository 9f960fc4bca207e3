#include "passes/autodiff.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "compiler/onnx_export.h"
#include "compiler/onnx_import.h"
#include "compiler/phase.h"
#include "compiler/text.h"
#include "compiler/verifier.h"
#include "passes/fold.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// w is used twice (two gradient contributions, summed), b is broadcast over rows, buf is a
// buffer (never differentiated), and the loss is the model's own scalar output.
constexpr const char* kModel = R"(graph g {
  input x : f32[3,4]
  param w : f32[4,4]
  param b : f32[4]
  const buf : f32[4] = [0.5, -1.0, 2.0, 1.5]
  h = MatMul(x, w)
  h2 = Add(h, b)
  t = Tanh(h2)
  u = MatMul(t, w)
  v = Mul(u, buf)
  loss = ReduceSum(v) {keepdims=0}
  output loss
})";

Graph Parsed(const char* text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(FoldPass({}).Run(*g).ok());
  return *g;
}

std::map<std::string, Tensor> RandomFeeds(const Graph& g) {
  std::map<std::string, Tensor> feeds;
  uint64_t seed = 100;
  for (const auto& name : g.inputs)
    if (g.FindValue(name)->dtype == DType::kFloat32)
      feeds[name] = RandomTensor(g.FindValue(name)->shape, ++seed);
  for (const auto& p : g.parameters) feeds[p] = RandomTensor(g.FindValue(p)->shape, ++seed);
  return feeds;
}

// Central differences of the forward graph's loss w.r.t. every element of every parameter,
// against the training graph's gradients. Tolerances as in tests/support/grad_check.h.
void ExpectGradientsMatchFiniteDifferences(const Graph& fwd, const Graph& train,
                                           std::map<std::string, Tensor> feeds) {
  auto analytic = Interpret(train, feeds);
  ASSERT_TRUE(analytic.ok()) << analytic.status().message();
  const std::string loss = train.outputs[0];
  for (size_t k = 0; k < train.parameters.size(); ++k) {
    const std::string& p = train.parameters[k];
    const Tensor& grad = analytic->at(train.outputs[k + 1]);
    for (int64_t e = 0; e < feeds[p].numel(); ++e) {
      const float saved = feeds[p].data<float>()[e];
      const float eps = 1e-2f;
      feeds[p].data<float>()[e] = saved + eps;
      double lp = Interpret(fwd, feeds)->at(loss).data<float>()[0];
      feeds[p].data<float>()[e] = saved - eps;
      double lm = Interpret(fwd, feeds)->at(loss).data<float>()[0];
      feeds[p].data<float>()[e] = saved;
      double numeric = (lp - lm) / (2 * eps);
      EXPECT_NEAR(grad.data<float>()[e], numeric, 2e-3 + 1e-2 * std::fabs(numeric))
          << p << "[" << e << "]";
    }
  }
}

TEST(AutodiffTest, GradientsOfEveryParameterMatchFiniteDifferences) {
  Graph fwd = Parsed(kModel);
  Graph train = fwd;
  AutodiffPass pass({});
  auto changed = pass.Run(train);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(VerifyGraph(train).ok()) << VerifyGraph(train).message();
  EXPECT_EQ(train.outputs, (std::vector<std::string>{"loss", "w_grad", "b_grad"}));
  EXPECT_EQ(train.metadata.at("foundry.loss"), "loss");
  // Two contributions to w's gradient, summed explicitly.
  bool found_sum = false;
  for (const Node& n : train.nodes)
    if (n.op_type == "Sum" && n.outputs[0] == "w_grad") {
      found_sum = true;
      EXPECT_EQ(n.inputs, (std::vector<std::string>{"w_grad_0", "w_grad_1"}));
    }
  EXPECT_TRUE(found_sum) << PrintGraph(train);
  EXPECT_EQ(train.FindValue("buf_grad"), nullptr) << "a buffer got a gradient";
  ExpectGradientsMatchFiniteDifferences(fwd, train, RandomFeeds(fwd));
}

TEST(AutodiffTest, BackwardNodesKeepForwardScopeAndNaming) {
  Graph train = Parsed(R"(graph g {
  input x : f32[2,3]
  param w : f32[3,3]
  h = MatMul(x, w) @"transformer.blocks.0.attn" #"/blocks.0/attn/MatMul"
  loss = ReduceSum(h) {keepdims=0} #"/ReduceSum"
  output loss
})");
  ASSERT_TRUE(AutodiffPass({}).Run(train).ok());
  int in_scope = 0;
  for (const Node& n : train.nodes)
    if (n.name.rfind("/blocks.0/attn/MatMul_Grad/", 0) == 0) {
      EXPECT_EQ(n.scope, "transformer.blocks.0.attn");
      ++in_scope;
    }
  EXPECT_GT(in_scope, 0) << PrintGraph(train);
}

TEST(AutodiffTest, AppendsCrossEntropyWhenTheModelHasOnlyLogits) {
  Graph fwd = Parsed(R"(graph g {
  input x : f32[2,3,4]
  param w : f32[4,5]
  logits = MatMul(x, w)
  output logits
})");
  Graph train = fwd;
  auto changed = AutodiffPass({}).Run(train);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_EQ(train.inputs, (std::vector<std::string>{"x", "labels"}));
  EXPECT_EQ(train.FindValue("labels")->shape, (Shape{2, 3}));
  EXPECT_EQ(train.FindValue("labels")->dtype, DType::kInt64);
  EXPECT_EQ(train.metadata.at("foundry.loss_appended"), "1");
  auto feeds = RandomFeeds(fwd);
  feeds["labels"] = Tensor::FromVector<int64_t>(DType::kInt64, {2, 3}, {0, 4, -100, 2, 1, 3});
  auto out = Interpret(train, feeds);
  ASSERT_TRUE(out.ok()) << out.status().message();
  // Reference: mean over the 5 non-ignored rows of -log_softmax(logits)[label], in double.
  auto logits = Interpret(fwd, feeds);
  ASSERT_TRUE(logits.ok());
  const Tensor& l = logits->at("logits");
  const int64_t labels[] = {0, 4, -100, 2, 1, 3};
  double total = 0;
  for (int r = 0; r < 6; ++r) {
    if (labels[r] < 0) continue;
    double mx = -1e30, z = 0;
    for (int c = 0; c < 5; ++c) mx = std::max(mx, double(l.data<float>()[r * 5 + c]));
    for (int c = 0; c < 5; ++c) z += std::exp(l.data<float>()[r * 5 + c] - mx);
    total += -(l.data<float>()[r * 5 + labels[r]] - mx - std::log(z));
  }
  EXPECT_NEAR(out->at(train.outputs[0]).data<float>()[0], total / 5, 1e-5);
}

TEST(AutodiffTest, OpWithoutGradientRuleOnThePathIsAnError) {
  Graph g = Parsed(R"(graph g {
  input x : f32[3]
  param w : f32[3]
  h = Mul(x, w)
  k = com.microsoft::GeluGrad(h, h) @"transformer.blocks.1.ffn" #"odd"
  loss = ReduceSum(k) {keepdims=0}
  output loss
})");
  auto st = AutodiffPass({}).Run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(),
            "autodiff: no gradient rule for GeluGrad node 'odd' (module transformer.blocks.1.ffn), "
            "which lies between a trainable parameter and the loss; freeze the parameters before "
            "it (--freeze GLOB) or file an issue for the op");
}

// A window written into activations by ScatterElements and ScatterND: the data of an overwrite,
// the updates of both, and a parameter that is itself the data of an add (its gradient is dY).
TEST(AutodiffTest, ScatterGradientsMatchFiniteDifferences) {
  Graph fwd = Parsed(R"(graph g {
  input x : f32[3,5]
  param w : f32[3,5]
  param u : f32[3,2]
  param v : f32[2,5]
  param a : f32[3,5]
  const idx : i64[3,2] = [0, 4, -1, 1, 2, 3]
  const rows : i64[2,1] = [2, 0]
  h = Mul(x, w)
  t = Tanh(h)
  s = ScatterElements(t, idx, u) {axis=1}
  n = ScatterND(s, rows, v)
  m = ScatterElements(a, idx, u) {axis=-1, reduction="add"}
  p = Mul(n, m)
  loss = ReduceSum(p) {keepdims=0}
  output loss
})");
  Graph train = fwd;
  auto changed = AutodiffPass({}).Run(train);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(VerifyGraph(train).ok()) << VerifyGraph(train).message();
  EXPECT_EQ(train.outputs,
            (std::vector<std::string>{"loss", "w_grad", "u_grad", "v_grad", "a_grad"}));
  ExpectGradientsMatchFiniteDifferences(fwd, train, RandomFeeds(fwd));
}

TEST(AutodiffTest, ScatterMaxOnThePathIsRefusedByName) {
  Graph g = Parsed(R"(graph g {
  input x : f32[2,3]
  param w : f32[2,3]
  const idx : i64[2,1] = [0, 2]
  const u : f32[2,1] = [0.5, 0.25]
  h = Mul(x, w)
  s = ScatterElements(h, idx, u) {axis=1, reduction="max"} @"transformer.blocks.0.attn" #"window"
  loss = ReduceSum(s) {keepdims=0}
  output loss
})");
  auto st = AutodiffPass({}).Run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().message(),
            "autodiff: gradient rule of ScatterElements node 'window' (module "
            "transformer.blocks.0.attn): reduction 'max' has no gradient in foundry; only 'none' "
            "and 'add' do (keep the node off the path from the trained parameters to the loss, "
            "e.g. --freeze)");
}

// Floor, Ceil, Round, Sign and a comparison cast back to float all read h, but no gradient flows
// through them: d loss / d w is exactly x (the only path is the sum's h term).
TEST(AutodiffTest, NonDifferentiableOpsStopTheGradient) {
  Graph fwd = Parsed(R"(graph g {
  input x : f32[2,3]
  param w : f32[2,3]
  h = Mul(x, w)
  f = Floor(h)
  c = Ceil(h)
  r = Round(h)
  s = Sign(h)
  lt = Less(h, x)
  l = Cast(lt) {to=1}
  t = Sum(h, f, c, r, s, l)
  loss = ReduceSum(t) {keepdims=0}
  output loss
})");
  Graph train = fwd;
  auto changed = AutodiffPass({}).Run(train);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(VerifyGraph(train).ok()) << VerifyGraph(train).message();
  for (const Node& n : train.nodes)
    EXPECT_EQ(n.name.find("_Grad") != std::string::npos &&
                  (n.name.rfind("Floor", 0) == 0 || n.name.rfind("Round", 0) == 0),
              false)
        << n.name;
  auto feeds = RandomFeeds(fwd);
  auto out = Interpret(train, feeds);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_TRUE(out->at("w_grad").BitwiseEqual(feeds.at("x")));
}

// torch 2.6's dynamo export writes CastLike(x, like) with `like` a value that depends on a
// parameter: only x gets a gradient; `like` lends its type (here f64 -> f32 of h's type).
TEST(AutodiffTest, CastLikeTargetTypeGetsNoGradient) {
  Graph fwd = Parsed(R"(graph g {
  input x : f32[2,3]
  param w : f32[2,3]
  const two : f64[] = [2.0]
  h = Mul(x, w)
  c = CastLike(two, h)
  t = Mul(h, c)
  loss = ReduceSum(t) {keepdims=0}
  output loss
})");
  Graph train = fwd;
  auto changed = AutodiffPass({}).Run(train);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(VerifyGraph(train).ok()) << VerifyGraph(train).message();
  ExpectGradientsMatchFiniteDifferences(fwd, train, RandomFeeds(fwd));
}

// The seed of the backward pass is 1 in the loss's own type: an f64 model gets exact f64
// gradients (d/dw sum(x * w * w) = 2 x w).
TEST(AutodiffTest, Float64LossSeedsInFloat64) {
  Graph train = Parsed(R"(graph g {
  input x : f64[5]
  param w : f64[5]
  a = Mul(x, w)
  b = Mul(a, w)
  loss = ReduceSum(b) {keepdims=0}
  output loss
})");
  ASSERT_TRUE(AutodiffPass({}).Run(train).ok());
  std::vector<double> x = {0.5, -1.25, 2.0, 3.5, -0.75}, w = {1.5, 0.25, -2.0, 0.125, 4.0};
  auto out = Interpret(train, {{"x", Tensor::FromVector<double>(DType::kFloat64, {5}, x)},
                               {"w", Tensor::FromVector<double>(DType::kFloat64, {5}, w)}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  const Tensor& g = out->at("w_grad");
  ASSERT_EQ(g.dtype(), DType::kFloat64);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(g.data<double>()[i], 2 * x[i] * w[i]) << i;
}

TEST(AutodiffTest, EveryGradientHasItsParametersShape) {
  Graph g = Parsed(R"(graph g {
  input x : f32[3]
  param w : f32[3]
  h = Mul(x, w)
  loss = ReduceSum(h) {keepdims=0}
  output loss
})");
  ASSERT_TRUE(AutodiffPass({}).Run(g).ok());
  // The check itself, on a graph whose gradient has the wrong shape.
  EXPECT_TRUE(CheckGradientShapes(g).ok());
  g.FindValue("w_grad")->shape = {1, 3};
  Status st = CheckGradientShapes(g);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "autodiff: gradient 'w_grad' is f32[1,3] but parameter 'w' is f32[3]; a gradient rule "
            "produced the wrong shape (please file an issue with the model)");
}

// Every node of the training graph says its phase: the model's nodes (and a loss autodiff appends)
// are forward, everything autodiff emits is backward; the marks survive export and re-import.
TEST(AutodiffTest, EveryNodeCarriesItsPhaseThroughExport) {
  Graph train = Parsed(kModel);
  const size_t model_nodes = train.nodes.size();
  AutodiffPass pass({});
  ASSERT_TRUE(pass.Run(train).ok());
  size_t forward = 0, backward = 0;
  for (const Node& n : train.nodes) {
    auto phase = PhaseOf(n);
    ASSERT_TRUE(phase.has_value()) << n.Describe();
    if (*phase == Phase::kForward) ++forward;
    if (*phase == Phase::kBackward) ++backward;
  }
  EXPECT_EQ(forward, model_nodes);
  EXPECT_EQ(forward + backward, train.nodes.size());
  EXPECT_GT(backward, 0u);
  for (size_t i = 0; i < forward; ++i) EXPECT_EQ(PhaseOf(train.nodes[i]), Phase::kForward) << i;

  auto bytes = ExportOnnxToBytes(train);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto back = ImportOnnxFromBytes(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->nodes.size(), train.nodes.size());
  for (size_t i = 0; i < train.nodes.size(); ++i)
    EXPECT_EQ(PhaseOf(back->nodes[i]), PhaseOf(train.nodes[i])) << train.nodes[i].Describe();
}

// An embedding table `w` with padding row 0, looked up (ids hold 0 twice) and tied as the output
// projection, as BERT's word_embeddings and MLM decoder. `Untied` looks rows up in a second
// table `w2` fed the same values, which splits w's gradient into its two contributions.
constexpr const char* kTiedLookup = R"(graph g {
  param w : f32[4,3]
  const ids : i64[5] = [0, 2, 0, 3, 1]
  h = Gather(w, ids)
  wt = Transpose(w) {perm=[1,0]}
  z = MatMul(h, wt)
  t = Tanh(z)
  loss = ReduceSum(t) {keepdims=0}
  output loss
})";
constexpr const char* kUntiedLookup = R"(graph g {
  param w : f32[4,3]
  param w2 : f32[4,3]
  const ids : i64[5] = [0, 2, 0, 3, 1]
  h = Gather(w2, ids)
  wt = Transpose(w) {perm=[1,0]}
  z = MatMul(h, wt)
  t = Tanh(z)
  loss = ReduceSum(t) {keepdims=0}
  output loss
})";

std::map<std::string, Tensor> RunTraining(Graph g, const std::string& padding,
                                          const std::map<std::string, Tensor>& feeds,
                                          std::string* stats = nullptr,
                                          AutodiffStats* typed = nullptr) {
  if (!padding.empty()) g.metadata["foundry.padding_idx"] = padding;
  AutodiffPass pass({});
  auto changed = pass.Run(g);
  EXPECT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(VerifyGraph(g).ok()) << VerifyGraph(g).message();
  if (stats) *stats = pass.Stats();
  if (typed) *typed = pass.stats();
  auto out = Interpret(g, feeds);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : std::map<std::string, Tensor>{};
}

bool RowBitwiseEqual(const Tensor& a, const Tensor& b, int64_t row) {
  const int64_t cols = a.shape()[1];
  return std::memcmp(a.data<float>() + row * cols, b.data<float>() + row * cols,
                     cols * sizeof(float)) == 0;
}

// torch's embedding backward gives the padding row nothing from the lookup; the tied use still
// contributes. So with foundry.padding_idx, row 0 of w's gradient is exactly the projection's
// contribution and every other row is bit for bit the gradient without the key.
TEST(AutodiffTest, PaddingRowGetsNoGradientFromTheLookup) {
  const Tensor w = RandomTensor({4, 3}, 7);
  const std::string pad = R"({"w": 0})";
  std::string stats;
  AutodiffStats typed;
  auto plain = RunTraining(Parsed(kTiedLookup), "", {{"w", w}});
  auto padded = RunTraining(Parsed(kTiedLookup), pad, {{"w", w}}, &stats, &typed);
  auto split = RunTraining(Parsed(kUntiedLookup), "", {{"w", w}, {"w2", w}});
  auto split_padded = RunTraining(Parsed(kUntiedLookup), R"({"w2": 0})", {{"w", w}, {"w2", w}});
  ASSERT_TRUE(plain.count("w_grad") && padded.count("w_grad") && split.count("w2_grad") &&
              split_padded.count("w2_grad"));
  EXPECT_EQ(stats,
            "1 trainable parameters; 5 forward nodes, 9 backward nodes; padding row zeroed in 1 "
            "lookup gradient");
  EXPECT_EQ(typed.trainable, 1);
  EXPECT_EQ(typed.forward_nodes, 5);
  EXPECT_EQ(typed.backward_nodes, 9);
  EXPECT_EQ(typed.padding_rows_zeroed, 1);
  EXPECT_TRUE(padded.at("loss").BitwiseEqual(plain.at("loss")));
  // The lookup alone: row 0 is exact +0.0 (no -0.0 from a multiply), the rest untouched.
  const Tensor& lookup = split_padded.at("w2_grad");
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(lookup.data<float>()[c], 0.0f);
    EXPECT_FALSE(std::signbit(lookup.data<float>()[c]));
  }
  for (int64_t r = 1; r < 4; ++r) EXPECT_TRUE(RowBitwiseEqual(lookup, split.at("w2_grad"), r)) << r;
  // Without the key the row would have had a gradient (ids hold the padding id twice).
  EXPECT_NE(split.at("w2_grad").data<float>()[0], 0.0f);
  // Tied: row 0 is the projection's contribution alone.
  const Tensor& g = padded.at("w_grad");
  for (int c = 0; c < 3; ++c) EXPECT_EQ(g.data<float>()[c], split.at("w_grad").data<float>()[c]);
  EXPECT_FALSE(RowBitwiseEqual(g, plain.at("w_grad"), 0));
  for (int64_t r = 1; r < 4; ++r) EXPECT_TRUE(RowBitwiseEqual(g, plain.at("w_grad"), r)) << r;
}

TEST(AutodiffTest, PaddingRowIsZeroedByOneScatterNDOnTheLookupsContribution) {
  Graph g = Parsed(kTiedLookup);
  g.metadata["foundry.padding_idx"] = R"({"w": 2})";
  ASSERT_TRUE(AutodiffPass({}).Run(g).ok());
  int scatters = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type != "ScatterND") continue;
    ++scatters;
    const Value* indices = g.FindValue(n.inputs[1]);
    ASSERT_TRUE(indices && indices->data);
    EXPECT_EQ(indices->data->data<int64_t>()[0], 2);
    EXPECT_EQ(g.FindValue(n.inputs[2])->shape, (Shape{1, 3}));
    EXPECT_EQ(n.name.rfind("Gather", 0), 0u) << n.name;  // named and scoped as the lookup's grad
  }
  EXPECT_EQ(scatters, 1) << PrintGraph(g);
}

// Folding took the frozen table (and its Gather) away; the key keeps only tables still there, so
// the training graph's file imports again (import requires every name to be an initializer).
TEST(AutodiffTest, PaddingRowsOfAFoldedTableAreDropped) {
  Graph g = Parsed(R"(graph g {
  const w : f32[2,2] = [1, 2, 3, 4]
  param v : f32[2]
  const ids : i64[2] = [0, 1]
  h = Gather(w, ids)
  m = Mul(h, v)
  loss = ReduceSum(m) {keepdims=0}
  output loss
})");
  g.metadata["foundry.padding_idx"] = R"({"w": 0})";
  AutodiffPass pass({});
  ASSERT_TRUE(pass.Run(g).ok());
  for (const Node& n : g.nodes) EXPECT_NE(n.op_type, "ScatterND");
  EXPECT_EQ(pass.Stats().find("padding"), std::string::npos) << pass.Stats();
  EXPECT_EQ(pass.stats().padding_rows_zeroed, 0);
  EXPECT_EQ(g.FindValue("w"), nullptr);
  EXPECT_EQ(g.metadata.at("foundry.padding_idx"), "{}");
}

TEST(AutodiffTest, BadPaddingIdxMetadataIsAnError) {
  const std::pair<const char*, const char*> cases[] = {
      {"[0]",
       "autodiff: model metadata 'foundry.padding_idx' is not a JSON object of parameter name -> "
       "padding row (e.g. {\"bert.embeddings.word_embeddings.weight\": 0}); fix or remove the "
       "key"},
      {R"({"w": 0.5})",
       "autodiff: model metadata 'foundry.padding_idx': the row of 'w' is not an integer"},
      {R"({"w": 4})",
       "autodiff: model metadata 'foundry.padding_idx': row 4 of 'w' (f32[4,3]) is out of range"},
      {R"({"w": -1})",
       "autodiff: model metadata 'foundry.padding_idx': row -1 of 'w' (f32[4,3]) is out of "
       "range"},
  };
  for (const auto& [value, message] : cases) {
    Graph g = Parsed(kTiedLookup);
    g.metadata["foundry.padding_idx"] = value;
    auto st = AutodiffPass({}).Run(g);
    ASSERT_FALSE(st.ok()) << value;
    EXPECT_EQ(st.status().message(), message);
  }
}

}  // namespace
}  // namespace foundry
