// Gradient accumulation on the CUDA backend: an accumulating plan (mpt_tiny, batch 2,
// K = 3, dropout fixture too) trained on cuda against the CPU (first-step loss within 1e-5 and
// every gradient within 1e-4 of the largest element, as tests/runtime/cuda_training_test.cc
// bounds cuBLAS against OpenBLAS), two cuda runs bitwise equal, and the device bytes per class
// equal to the plan's. Needs a GPU: skips here with the reason (fails under FOUNDRY_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "driver/compile.h"
#include "runtime/trainer.h"
#include "tests/support/cuda_check.h"
#include "tests/support/source_dir.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

LoadedPlan CompileAccumulating(const std::string& fixture) {
  CompileRequest c;
  c.model = (SourceDir() / "models/fixtures" / fixture / "model.onnx").string();
  c.dims = {{"batch", 2}, {"seq", 16}};
  c.grad_accumulation = 3;
  StatusOr<CompileResult> r = Compile(c);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  LoadedPlan lp;
  lp.plan_path = "accumulating.plan";
  lp.plan = *r->plan;
  lp.graph = std::move(r->graph);
  return lp;
}

TEST(CudaGradAccumulationTest, TrainsAsTheCpuAndRepeatsItsBits) {
  FOUNDRY_REQUIRE_GPU();
  for (const char* fixture : {"mpt_tiny", "mpt_tiny_dropout"}) {
    const LoadedPlan plan = CompileAccumulating(fixture);
    std::map<std::string, std::unique_ptr<Trainer>> t;
    for (const char* run : {"cpu", "cuda", "cuda2"}) {
      TrainerOptions o;
      o.seed = 5;
      o.device = std::string(run) == "cpu" ? "cpu" : "cuda";
      auto made = Trainer::Create(plan, o);
      ASSERT_TRUE(made.ok()) << made.status().message();
      t[run] = std::move(made).value();
    }
    std::map<std::string, float> loss;
    for (auto& [run, trainer] : t) {
      StatusOr<StepReport> s = trainer->Step();
      ASSERT_TRUE(s.ok()) << run << ": " << s.status().message();
      EXPECT_EQ(s->microbatches, 3);
      loss[run] = s->loss;
    }
    EXPECT_NEAR(loss["cpu"], loss["cuda"], 1e-5 * std::fabs(loss["cpu"]) + 1e-6) << fixture;
    EXPECT_EQ(std::memcmp(&loss["cuda"], &loss["cuda2"], sizeof(float)), 0) << fixture;
    for (const auto& [param, grad] : plan.plan.gradients) {
      StatusOr<Tensor> a = t["cpu"]->OutputOnHost(grad), b = t["cuda"]->OutputOnHost(grad),
                       c = t["cuda2"]->OutputOnHost(grad);
      ASSERT_TRUE(a.ok() && b.ok() && c.ok());
      double scale = 0, worst = 0;
      for (int64_t i = 0; i < a->numel(); ++i) {
        scale = std::max(scale, std::fabs(a->GetAsDouble(i)));
        worst = std::max(worst, std::fabs(a->GetAsDouble(i) - b->GetAsDouble(i)));
      }
      EXPECT_LE(worst, 1e-4 * scale + 1e-7) << fixture << " " << grad;
      EXPECT_EQ(std::memcmp(b->raw(), c->raw(), b->nbytes()), 0) << fixture << " " << grad;
    }
    // Planned == measured on the device: the executor's regions are the plan's, per class.
    const BackendLayout* layout = plan.plan.memory.Layout("cuda");
    ASSERT_NE(layout, nullptr);
    EXPECT_EQ(t["cuda"]->executor().layout().arena_bytes, layout->arena_bytes);
  }
}

}  // namespace
}  // namespace foundry
