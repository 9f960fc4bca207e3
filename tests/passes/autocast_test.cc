// The autocast pass (passes/autocast.h) on the committed fixtures: products and attention in
// bf16, norms, softmax and losses in f32, one Cast per parameter, parameters, gradients and graph
// outputs in f32, --precision fp32 leaving the graph alone; and the precision names.
#include "passes/autocast.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "compiler/op_schema.h"
#include "compiler/phase.h"
#include "tests/support/fixture_plans.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

fs::path FixturesDir() { return fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures"; }

DType TypeOf(const Graph& g, const std::string& v) { return g.FindValue(v)->dtype; }

bool Is(const Node& n, const char* domain, const char* op) {
  return n.domain == domain && n.op_type == op;
}

TEST(Precision, Names) {
  EXPECT_EQ(*ParsePrecision("fp32"), Precision::kFp32);
  EXPECT_EQ(*ParsePrecision("amp_bf16"), Precision::kAmpBf16);
  EXPECT_EQ(PrecisionName(Precision::kAmpBf16), "amp_bf16");
  auto fp16 = ParsePrecision("amp_fp16");
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.status().message().find("loss scaling"), std::string::npos);
  auto other = ParsePrecision("bf16");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().message(), "unknown precision 'bf16'; use amp_bf16 or fp32");
}

class AutocastFixtureTest : public testing::TestWithParam<TrainingFixture> {};

TEST_P(AutocastFixtureTest, FollowsTheListsAndCastsEachParameterOnce) {
  const TrainingFixture& f = GetParam();
  auto amp = CompileFixture(f.dir / "model.onnx", f.feeds, {}, Precision::kAmpBf16);
  ASSERT_TRUE(amp.ok()) << amp.status().message();
  auto fp32 = CompileFixture(f.dir / "model.onnx", f.feeds);
  ASSERT_TRUE(fp32.ok()) << fp32.status().message();
  const Graph& g = amp->graph;

  for (const auto& [name, v] : fp32->graph.values())
    ASSERT_NE(v.dtype, DType::kBFloat16) << "fp32 plan has bf16 value " << name;

  int products = 0, bf16_values = 0;
  std::map<std::string, int> parameter_casts;
  for (const Node& n : g.nodes) {
    if (PhaseOf(n) != Phase::kForward) continue;
    const bool product = Is(n, "", "MatMul") || Is(n, "", "Gemm") ||
                         Is(n, "com.microsoft", "FusedMatMul") || Is(n, "foundry", "Attention");
    const bool fp32_list = Is(n, "", "LayerNormalization") || Is(n, "", "Softmax") ||
                           Is(n, "", "LogSoftmax") || Is(n, "", "SoftmaxCrossEntropyLoss") ||
                           Is(n, "com.microsoft", "SimplifiedLayerNormalization");
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) continue;
      const DType t = TypeOf(g, n.inputs[i]);
      if (product && (t == DType::kFloat32 || t == DType::kFloat64))
        ADD_FAILURE() << n.Describe() << " input " << i << " is " << DTypeName(t);
      if (fp32_list && t == DType::kBFloat16)
        ADD_FAILURE() << n.Describe() << " input " << i << " is bf16";
    }
    products += product;
    if (n.op_type == "Cast" && g.IsParameter(n.inputs[0])) ++parameter_casts[n.inputs[0]];
  }
  EXPECT_GT(products, 0);
  for (const auto& [p, count] : parameter_casts) EXPECT_EQ(count, 1) << p << " cast " << count;
  EXPECT_FALSE(parameter_casts.empty());
  for (const auto& [name, v] : g.values()) bf16_values += v.dtype == DType::kBFloat16;
  EXPECT_GT(bf16_values, 0);

  // Parameters and their gradients stay f32; the graph's outputs keep their types.
  for (const std::string& p : g.parameters) EXPECT_EQ(TypeOf(g, p), DType::kFloat32) << p;
  ASSERT_EQ(g.outputs.size(), fp32->graph.outputs.size());
  for (size_t i = 0; i < g.outputs.size(); ++i)
    EXPECT_EQ(TypeOf(g, g.outputs[i]), TypeOf(fp32->graph, fp32->graph.outputs[i])) << g.outputs[i];
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AutocastFixtureTest,
                         testing::ValuesIn(TrainingFixtures(FixturesDir())),
                         [](const auto& info) { return info.param.dir.filename().string(); });

// The pass alone on a small graph: a linear layer's bias joins the product in bf16, a scalar
// constant does not widen a bf16 tensor, a rank-1 f32 activation does.
TEST(Autocast, LinearBiasScalarsAndPromotion) {
  Graph g;
  auto add_value = [&](const std::string& name, Shape s, bool param = false) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = DType::kFloat32;
    v.shape = s;
    v.rank_known = true;
    if (param) {
      Tensor t(DType::kFloat32, s);
      v.data = std::make_shared<const Tensor>(t);
      g.initializers.push_back(name);
      g.parameters.push_back(name);
    }
  };
  add_value("x", {2, 4});
  g.inputs.push_back("x");
  add_value("w", {4, 3}, true);
  add_value("b", {3}, true);
  add_value("r", {2, 3});
  g.inputs.push_back("r");
  {
    Value& half = g.GetOrAddValue("half");
    half.dtype = DType::kFloat32;
    half.rank_known = true;
    half.data = std::make_shared<const Tensor>(Tensor::Scalar(0.5f));
    g.initializers.push_back("half");
  }
  auto node = [&](const std::string& op, std::vector<std::string> in, std::string out) {
    Node n;
    n.name = out;
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    g.GetOrAddValue(out);
    ASSERT_TRUE(InferAndSetTypes(g, n).ok());
    g.nodes.push_back(std::move(n));
  };
  node("MatMul", {"x", "w"}, "p");
  node("Add", {"p", "b"}, "pb");
  node("Mul", {"pb", "half"}, "h");
  node("Add", {"h", "r"}, "y");
  g.outputs = {"y", "h"};
  AutocastPass pass({.precision = Precision::kAmpBf16});
  auto changed = pass.Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  std::map<std::string, const Node*> by_name;
  for (const Node& n : g.nodes) by_name[n.name] = &n;
  EXPECT_EQ(TypeOf(g, by_name["p"]->inputs[0]), DType::kBFloat16);
  EXPECT_EQ(TypeOf(g, by_name["p"]->inputs[1]), DType::kBFloat16);
  EXPECT_EQ(TypeOf(g, by_name["pb"]->inputs[1]), DType::kBFloat16);  // the bias joined
  EXPECT_EQ(TypeOf(g, by_name["h"]->inputs[1]), DType::kBFloat16);   // 0.5 converted, no widening
  EXPECT_EQ(TypeOf(g, by_name["y"]->inputs[0]), DType::kFloat32);    // widened by r
  // Outputs keep f32: "h" became bf16 inside and is cast back under its own name.
  EXPECT_EQ(TypeOf(g, "h"), DType::kFloat32);
  EXPECT_EQ(TypeOf(g, "y"), DType::kFloat32);
  EXPECT_EQ(pass.stats().parameter_casts, 2);
  EXPECT_EQ(pass.stats().constants, 1);
  // The replaced constant is gone.
  EXPECT_EQ(g.FindValue("half"), nullptr);
}

TEST(Autocast, Fp32IsANoOp) {
  Graph g;
  AutocastPass pass;
  auto changed = pass.Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

}  // namespace
}  // namespace foundry
