// The attention fusion (passes/attention_fusion.h) on every committed fixture, each export
// format: the fused training graph computes what the unfused one computes (loss and every
// gradient within 1e-5 relative; the fused kernel sums in another order), including dropout on
// the probabilities, whose fused op must draw the very masks the Dropout drew. The counts
// canonicalize records are checked against the graph.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include "compiler/onnx_import.h"
#include "compiler/tensor_proto.h"
#include "compiler/text.h"
#include "passes/canonicalize.h"
#include "passes/fold.h"
#include "passes/pipeline.h"
#include "runtime/interpreter.h"
#include "tests/support/grad_check.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

struct Run {
  Graph graph;
  std::map<std::string, Tensor> outputs;
};

StatusOr<Run> CompileAndRun(const fs::path& model, const std::map<std::string, Tensor>& feeds,
                            bool fuse) {
  ASSIGN_OR_RETURN(Graph g, ImportOnnx(model.string(), {}));
  CompileOptions options;
  for (const auto& in : g.inputs) {
    const Value* v = g.FindValue(in);
    auto it = feeds.find(in);
    if (it == feeds.end()) continue;
    for (size_t d = 0; d < v->dim_params.size(); ++d)
      if (!v->dim_params[d].empty()) options.fold.dims[v->dim_params[d]] = it->second.shape()[d];
  }
  options.canonicalize.fuse_attention = fuse;
  RETURN_IF_ERROR(RunPasses(g, BuildPipeline(options), {}));
  ASSIGN_OR_RETURN(auto out, Interpret(g, feeds));
  return Run{std::move(g), std::move(out)};
}

// max|got - want| / max(max|want|, floor). The floor: a key bias's gradient is mathematically
// zero (it shifts every score of a query equally), rounding noise in both graphs, as in
// pytorch_reference_test.cc; 1e-3 of the fixture's largest gradient element keeps noise over
// noise out of the measure.
double RelativeError(const Tensor& got, const Tensor& want, double floor) {
  double diff = 0, ref = floor;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.GetAsDouble(i), b = want.GetAsDouble(i);
    if (!std::isfinite(a) || !std::isfinite(b)) return INFINITY;
    diff = std::max(diff, std::fabs(a - b));
    ref = std::max(ref, std::fabs(b));
  }
  return ref == 0 ? diff : diff / ref;
}

int Count(const std::string& counts, const std::string& key) {
  const std::string k = key + "=";
  size_t at = counts.find(k);
  return at == std::string::npos ? -1 : std::stoi(counts.substr(at + k.size()));
}

TEST(AttentionFusionTest, FusedGraphComputesWhatTheUnfusedOneComputes) {
  const fs::path root = fs::path(FOUNDRY_SOURCE_DIR) / "models" / "fixtures";
  int fixtures = 0, with_dropout = 0;
  double worst = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    const fs::path dir = e.path();
    if (!fs::exists(dir / "inputs") || !fs::exists(dir / "model.onnx")) continue;
    ++fixtures;
    SCOPED_TRACE(dir.filename().string());
    const auto feeds = ReadFeeds(dir / "inputs");
    auto fused = CompileAndRun(dir / "model.onnx", feeds, true);
    ASSERT_TRUE(fused.ok()) << fused.status().message();
    auto plain = CompileAndRun(dir / "model.onnx", feeds, false);
    ASSERT_TRUE(plain.ok()) << plain.status().message();

    const std::string counts = fused->graph.metadata.at(kAttentionFusionKey);
    int attention = 0, grads = 0, softmax = 0, dropout_nodes = 0;
    for (const Node& n : fused->graph.nodes) {
      attention += n.domain == "foundry" && n.op_type == "Attention";
      grads += n.domain == "foundry" && n.op_type == "AttentionGrad";
      softmax += n.domain.empty() && n.op_type == "Softmax";
      dropout_nodes += n.domain == "foundry" && n.op_type == "Attention" &&
                       n.GetFloat("dropout_ratio", 0.f) > 0;
    }
    EXPECT_GT(attention, 0) << counts;
    EXPECT_EQ(Count(counts, "fused"), attention) << counts;
    EXPECT_EQ(Count(counts, "unfused"), 0) << counts;
    EXPECT_EQ(Count(counts, "dropout"), dropout_nodes) << counts;
    EXPECT_EQ(grads, attention);
    EXPECT_EQ(softmax, 0);
    with_dropout += dropout_nodes > 0;
    // No fusion: the metadata key is absent and every Softmax is still there.
    EXPECT_EQ(plain->graph.metadata.count(kAttentionFusionKey), 0u);

    ASSERT_EQ(fused->outputs.size(), plain->outputs.size());
    double largest = 0;
    for (const auto& [name, want] : plain->outputs)
      for (int64_t i = 0; i < want.numel(); ++i)
        largest = std::max(largest, std::fabs(want.GetAsDouble(i)));
    for (const auto& [name, want] : plain->outputs) {
      auto it = fused->outputs.find(name);
      ASSERT_NE(it, fused->outputs.end()) << name;
      const double err = RelativeError(it->second, want, 1e-3 * largest);
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-5) << name;
    }
  }
  EXPECT_GE(fixtures, 9);
  EXPECT_GE(with_dropout, 1) << "no fixture has attention dropout (mpt_tiny_dropout should)";
  std::cout << fixtures << " fixtures: worst relative difference fused vs unfused " << worst
            << "\n";
}

// ---- sliding windows and soft-capping, in hand-written graphs --------------------------------

// One attention over q, k, v [1, 2, 80, 8] whose scores `s` (scaled) go through `body` (which
// must define `p_in`, the softmax input) with the constants below.
std::string AttentionGraph(const std::string& body) {
  std::string ones;
  for (int i = 0; i < 80 * 80; ++i) ones += i ? ",1" : "1";
  return R"(graph g {
  input q : f32[1,2,80,8]
  input k : f32[1,2,80,8]
  input v : f32[1,2,80,8]
  const zero : i64[] = [0]
  const n : i64[] = [80]
  const one : i64[] = [1]
  const ax0 : i64[1] = [0]
  const ax1 : i64[1] = [1]
  const w : i64[] = [5]
  const fill : f32[] = [-3.40282347e38]
  const scale : f32[] = [0.35]
  const cap : f32[] = [0.9]
  const ones : f32[80,80] = [)" +
         ones + R"(]
  pos = Range(zero, n, one)
  row = Unsqueeze(pos, ax0)
  col = Unsqueeze(pos, ax1)
  kt = Transpose(k) {perm=[0,1,3,2]}
  s0 = MatMul(q, kt)
  s = Mul(s0, scale)
)" + body +
         R"(
  p = Softmax(p_in) {axis=-1}
  o = MatMul(p, v)
  output o
})";
}

struct Fused {
  std::string counts;
  std::vector<Node> attention;  // the foundry::Attention nodes
  double error = INFINITY;      // max relative difference of the output against the unfused graph
};

// Folds (results up to `fold_limit` bytes become constants: a large limit folds the mask, a small
// one leaves its arithmetic), canonicalizes, and runs both graphs.
Fused FuseAndCompare(const std::string& text, int64_t fold_limit) {
  Fused f;
  auto parsed = ParseGraph(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  if (!parsed.ok()) return f;
  Graph before = *parsed;
  FoldPass::Options fo;
  fo.max_folded_bytes = fold_limit;
  EXPECT_TRUE(FoldPass(fo).Run(before).ok());
  Graph after = before;
  CanonicalizePass pass;
  auto changed = pass.Run(after);
  EXPECT_TRUE(changed.ok()) << changed.status().message();
  f.counts = after.metadata[kAttentionFusionKey];
  for (const Node& n : after.nodes)
    if (n.domain == "foundry" && n.op_type == "Attention") f.attention.push_back(n);
  std::map<std::string, Tensor> feeds;
  for (const char* x : {"q", "k", "v"})
    feeds[x] = RandomTensor(before.FindValue(x)->shape, x[0], -2.f, 2.f);
  auto a = Interpret(before, feeds);
  auto b = Interpret(after, feeds);
  EXPECT_TRUE(a.ok() && b.ok());
  if (a.ok() && b.ok()) f.error = RelativeError(b->at("o"), a->at("o"), 0);
  return f;
}

// HF-style sliding window by arithmetic: masked = (j > i) | (i - j >= W), masked_fill'ed.
constexpr const char* kWindowByArithmetic = R"(
  causal = Greater(row, col)
  diff = Sub(col, row)
  far = GreaterOrEqual(diff, w)
  masked = Or(causal, far)
  p_in = Where(masked, fill, s)
)";

TEST(AttentionFusionTest, SlidingWindowMasksFuseWithTheirWindowFoldedOrNot) {
  for (int64_t limit : {int64_t{1} << 20, int64_t{16}}) {
    SCOPED_TRACE(limit);
    const Fused f = FuseAndCompare(AttentionGraph(kWindowByArithmetic), limit);
    ASSERT_EQ(f.attention.size(), 1u) << f.counts;
    const Node& a = f.attention[0];
    EXPECT_EQ(a.GetInt("causal", 0), 1);
    EXPECT_EQ(a.GetInt("window", 0), 5);
    EXPECT_FALSE(a.HasInput(4)) << "the band must not stay a mask input";
    EXPECT_EQ(Count(f.counts, "window"), 1) << f.counts;
    EXPECT_LE(f.error, 1e-5);
  }
}

// The keep form, written another way: keep = (j <= i) & (j > i - W), Where(keep, s, fill); and
// litgpt's, two Trilu of a ones matrix (tril, and triu at -(W - 1)) cast to bool.
TEST(AttentionFusionTest, KeepFormAndTriluBandsFuseToo) {
  const char* keep_form = R"(
  const w1 : i64[] = [5]
  seen = LessOrEqual(row, col)
  start = Sub(col, w1)
  near = Greater(row, start)
  keep = And(seen, near)
  p_in = Where(keep, s, fill)
)";
  const char* trilu = R"(
  const kneg : i64[] = [-4]
  lower = Trilu(ones) {upper=0}
  band = Trilu(lower, kneg) {upper=1}
  keep = Cast(band) {to=9}
  p_in = Where(keep, s, fill)
)";
  for (const char* body : {keep_form, trilu})
    for (int64_t limit : {int64_t{1} << 20, int64_t{16}}) {
      SCOPED_TRACE(std::string(body) + " limit " + std::to_string(limit));
      const Fused f = FuseAndCompare(AttentionGraph(body), limit);
      ASSERT_EQ(f.attention.size(), 1u) << f.counts;
      EXPECT_EQ(f.attention[0].GetInt("window", 0), 5);
      EXPECT_FALSE(f.attention[0].HasInput(4));
      EXPECT_LE(f.error, 1e-5);
    }
}

// An additive float mask, 0 in the band and -inf (or torch.finfo.min) outside, as litgpt builds
// its sliding-window masks: folded to a constant (the default limit) or left as the Where that
// computes it (a small limit), alone or added to another bias, it becomes the window.
TEST(AttentionFusionTest, AdditiveBandMasksBecomeTheWindow) {
  std::string slopes;  // ALiBi-like: -0.05 (h + 1) (79 - j)
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 80; ++j)
      slopes += (slopes.empty() ? "" : ",") + std::to_string(-0.05 * (h + 1) * (79 - j));
  for (const char* fill : {"-inf", "-3.40282347e38"})
    for (int64_t limit : {int64_t{1} << 20, int64_t{16}}) {
      SCOPED_TRACE(std::string(fill) + " limit " + std::to_string(limit));
      const std::string band = std::string(R"(
  const neg : f32[] = [)") + fill +
                               R"(]
  const zf : f32[] = [0.0]
  causal = Greater(row, col)
  diff = Sub(col, row)
  far = GreaterOrEqual(diff, w)
  masked = Or(causal, far)
  bias = Where(masked, neg, zf)
)";
      Fused f = FuseAndCompare(AttentionGraph(band + "  p_in = Add(s, bias)\n"), limit);
      ASSERT_EQ(f.attention.size(), 1u) << f.counts;
      EXPECT_EQ(f.attention[0].GetInt("causal", 0), 1);
      EXPECT_EQ(f.attention[0].GetInt("window", 0), 5);
      EXPECT_FALSE(f.attention[0].HasInput(3)) << "the band must not stay a bias";
      EXPECT_LE(f.error, 1e-5);
      // Beside an ALiBi-like bias of its own, when the sum is computed at run time: that one
      // stays the bias input. (Folded, the sum is one constant that is no band: a plain bias.)
      f = FuseAndCompare(AttentionGraph(band + R"(
  const alibi : f32[1,2,1,80] = [)" + slopes +
                                        R"(]
  both = Add(bias, alibi)
  p_in = Add(s, both)
)"),
                         limit);
      ASSERT_EQ(f.attention.size(), 1u) << f.counts;
      EXPECT_EQ(f.attention[0].GetInt("window", 0), limit == 16 ? 5 : 0);
      EXPECT_TRUE(f.attention[0].HasInput(3));
      EXPECT_LE(f.error, 1e-5);
    }
}

// A window that is not the causal band (it masks only the far past: the future stays visible)
// is no causal window: it stays a mask input, and the result is the same.
TEST(AttentionFusionTest, AMaskThatIsNoCausalBandStaysAMask) {
  const Fused f = FuseAndCompare(AttentionGraph(R"(
  diff = Sub(col, row)
  far = GreaterOrEqual(diff, w)
  p_in = Where(far, fill, s)
)"),
                                 int64_t{1} << 20);
  ASSERT_EQ(f.attention.size(), 1u) << f.counts;
  EXPECT_EQ(f.attention[0].GetInt("causal", 0), 0);
  EXPECT_EQ(f.attention[0].GetInt("window", 0), 0);
  EXPECT_TRUE(f.attention[0].HasInput(4));
  EXPECT_LE(f.error, 1e-5);
}

// Gemma-2's soft-capping, cap·tanh(s / cap), before the mask: one fused op with softcap, with and
// without a window (and 1/cap as a Mul); a scale after the cap cannot be one: left unfused.
TEST(AttentionFusionTest, SoftCappedScoresFuseAndAScaleAfterTheCapDoesNot) {
  const char* capped = R"(
  d = Div(s, cap)
  t = Tanh(d)
  c = Mul(t, cap)
  causal = Greater(row, col)
  p_in = Where(causal, fill, c)
)";
  const char* capped_window = R"(
  const inv : f32[] = [1.11111116]
  d = Mul(inv, s)
  t = Tanh(d)
  c = Mul(cap, t)
  causal = Greater(row, col)
  diff = Sub(col, row)
  far = GreaterOrEqual(diff, w)
  masked = Or(causal, far)
  p_in = Where(masked, fill, c)
)";
  for (const char* body : {capped, capped_window}) {
    SCOPED_TRACE(body);
    const Fused f = FuseAndCompare(AttentionGraph(body), int64_t{16});
    ASSERT_EQ(f.attention.size(), 1u) << f.counts;
    EXPECT_FLOAT_EQ(f.attention[0].GetFloat("softcap", 0.f), 0.9f);
    EXPECT_FLOAT_EQ(f.attention[0].GetFloat("scale", 0.f), 0.35f);
    EXPECT_EQ(f.attention[0].GetInt("window", 0), body == capped ? 0 : 5);
    EXPECT_EQ(Count(f.counts, "softcap"), 1) << f.counts;
    EXPECT_LE(f.error, 1e-5);
  }
  const Fused after = FuseAndCompare(AttentionGraph(R"(
  const half : f32[] = [0.5]
  d = Div(s, cap)
  t = Tanh(d)
  c = Mul(t, cap)
  p_in = Mul(c, half)
)"),
                                     int64_t{16});
  EXPECT_EQ(after.attention.size(), 0u) << after.counts;
  EXPECT_EQ(Count(after.counts, "unfused"), 1) << after.counts;
}

}  // namespace
}  // namespace foundry
