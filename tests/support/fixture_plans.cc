#include "tests/support/fixture_plans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "compiler/onnx_import.h"
#include "compiler/plan.h"
#include "passes/pipeline.h"
#include "runtime/data.h"

namespace foundry {

namespace fs = std::filesystem;

std::vector<TrainingFixture> TrainingFixtures(const fs::path& fixtures_dir) {
  std::vector<TrainingFixture> out;
  for (const auto& e : fs::directory_iterator(fixtures_dir)) {
    if (!fs::exists(e.path() / "inputs")) continue;
    TrainingFixture f{e.path(), {}};
    for (const auto& in : fs::directory_iterator(e.path() / "inputs"))
      f.feeds.push_back(in.path().stem().string() + "=" + in.path().string());
    std::sort(f.feeds.begin(), f.feeds.end());
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.dir < b.dir; });
  return out;
}

StatusOr<LoadedPlan> CompileFixture(const fs::path& model, const std::vector<std::string>& feeds,
                                    const std::vector<std::string>& checkpoint) {
  ASSIGN_OR_RETURN(Graph g, ImportOnnx(model.string(), {}));
  std::map<std::string, int64_t> dims;
  for (const auto& spec : feeds) {
    ASSIGN_OR_RETURN(Feed f, ReadFeed(spec));
    const Value* v = g.FindValue(f.name);
    if (!v) return Error("no input " + f.name);
    for (size_t d = 0; d < v->dim_params.size() && d < f.tensor.shape().size(); ++d)
      if (!v->dim_params[d].empty()) dims[v->dim_params[d]] = f.tensor.shape()[d];
  }
  CompileOptions options;
  options.fold.dims = dims;
  options.remat.instances = checkpoint;
  RETURN_IF_ERROR(RunPasses(g, BuildPipeline(options), {}));
  LoadedPlan lp;
  lp.plan_path = (fs::path(testing::TempDir()) / "fixture.plan").string();
  lp.plan.graph_file = "fixture.train.onnx";
  lp.plan.source_model = model.string();
  lp.plan.loss = g.metadata["foundry.loss"];
  lp.plan.loss_in_model = g.metadata.count("foundry.loss_appended") == 0;
  lp.plan.inputs = g.inputs;
  lp.plan.parameters = g.parameters;
  for (size_t i = 0; i < g.parameters.size(); ++i)
    lp.plan.gradients[g.parameters[i]] = g.outputs[i + 1];
  lp.plan.dims = dims;
  RETURN_IF_ERROR(CheckPlan(lp.plan, g, lp.plan_path));
  lp.graph = std::move(g);
  return lp;
}

}  // namespace foundry
