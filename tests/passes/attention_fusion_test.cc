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
#include "passes/canonicalize.h"
#include "passes/pipeline.h"
#include "runtime/interpreter.h"
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

}  // namespace
}  // namespace foundry
