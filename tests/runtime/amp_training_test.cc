// --precision amp_bf16 through the trainer: the planned executor runs the autocast
// graph with the memory plan's exact bytes (bf16 staging included); its loss curve follows fp32
// foundry's; checkpointing stays bitwise under amp_bf16 (threads: thread_invariance_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "runtime/trainer.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/sanitizer.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

fs::path FixturesDir() { return fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures"; }

struct Run {
  std::vector<float> losses;
  std::map<std::string, Tensor> weights;
  int64_t arena = 0;
};

TrainerOptions Options(const std::vector<std::string>& feeds) {
  TrainerOptions options;  // AdamW, lr 1e-3, betas (0.9, 0.999), eps 1e-8
  options.optimizer.weight_decay = 0.01;
  options.seed = 11;
  options.feeds = feeds;
  return options;
}

StatusOr<Run> Train(const std::string& fixture, const std::vector<CkptTarget>& targets,
                    Precision precision, int steps) {
  ASSIGN_OR_RETURN(TrainingFixture f,
                   FixtureOf(FixturesDir(), CkptCase{fixture, "model.onnx", {}, {}}));
  ASSIGN_OR_RETURN(LoadedPlan plan,
                   CompileFixture(f.dir / "model.onnx", f.feeds, targets, nullptr, precision));
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(std::move(plan), Options(f.feeds)));
  Run run;
  for (int i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(StepReport r, trainer->Step());
    run.losses.push_back(r.loss);
  }
  run.weights = trainer->parameters();
  const MemoryPlan& m = trainer->memory_plan();
  run.arena = m.Layout("cpu") ? m.Layout("cpu")->arena_bytes : -1;
  return run;
}

std::vector<CkptTarget> Targets(const std::vector<std::string>& specs) {
  std::vector<CkptTarget> out;
  for (const std::string& s : specs) {
    auto t = ParseCkptArg(s);
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (t.ok()) out.push_back(*t);
  }
  return out;
}

void ExpectSameRun(const Run& a, const Run& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    ASSERT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)), 0)
        << "step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i];
  for (const auto& [name, w] : a.weights)
    EXPECT_TRUE(w.BitwiseEqual(b.weights.at(name))) << name << " differs";
}

// 200 AdamW steps: the amp_bf16 loss within 2 % of fp32 foundry's at every step after 20, and a
// smaller arena (activations saved in bf16).
TEST(AmpTrainingTest, LossCurveFollowsFp32) {
  FOUNDRY_SKIP_UNDER_SANITIZERS();
  constexpr int kSteps = 200;
  for (const char* fixture : {"mpt_tiny", "mpt_tiny_gqa_glu"}) {
    SCOPED_TRACE(fixture);
    auto fp32 = Train(fixture, {}, Precision::kFp32, kSteps);
    ASSERT_TRUE(fp32.ok()) << fp32.status().message();
    auto amp = Train(fixture, {}, Precision::kAmpBf16, kSteps);
    ASSERT_TRUE(amp.ok()) << amp.status().message();
    double worst = 0;
    int worst_step = 0;
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_TRUE(std::isfinite(amp->losses[i])) << "step " << i + 1;
      const double rel = std::fabs(amp->losses[i] - fp32->losses[i]) / fp32->losses[i];
      if (i < 20) continue;
      EXPECT_LE(rel, 0.02) << "step " << i + 1;
      if (rel > worst) worst = rel, worst_step = i + 1;
    }
    EXPECT_LT(amp->losses.back(), 0.5f * amp->losses.front());  // it learns
    EXPECT_LT(amp->arena, fp32->arena);
    std::cout << fixture << ": loss " << fp32->losses.front() << " -> " << fp32->losses.back()
              << " (fp32), " << amp->losses.front() << " -> " << amp->losses.back()
              << " (amp_bf16); largest relative difference after step 20: " << worst << " at step "
              << worst_step << "; arena " << fp32->arena << " -> " << amp->arena << " bytes\n";
  }
}

// Checkpointing under amp_bf16: bitwise the plain amp_bf16 run (the recompute casts what the
// forward cast, in the same kernels).
TEST(AmpTrainingTest, CheckpointingStaysBitwise) {
  const int steps = 12;
  for (const char* fixture : {"mpt_tiny", "mpt_tiny_dropout"}) {
    auto plain = Train(fixture, {}, Precision::kAmpBf16, steps);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    for (const std::vector<std::string>& ckpt :
         {std::vector<std::string>{"mptblock"}, {"grouped_query_attention"}, {"mptmlp"}}) {
      SCOPED_TRACE(std::string(fixture) + " --ckpt " + ckpt[0]);
      auto got = Train(fixture, Targets(ckpt), Precision::kAmpBf16, steps);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ExpectSameRun(*plain, *got);
      EXPECT_LE(got->arena, plain->arena);
    }
  }
}

}  // namespace
}  // namespace foundry
