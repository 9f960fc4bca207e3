// Proofs 3 and 4 of checkpointing, through the trainer (the planned executor, i.e. the memory
// plan of the checkpointed graph):
//  - training: 200 AdamW steps on the fixture's batch give the bitwise-same loss at every step and
//    the same final weights with and without checkpointing (`mptblock`, `grouped_query_attention`;
//    dropout on and off: each step draws new masks, which the recompute must redraw exactly);
//  - resume across plans: a run saved under the plain plan resumes under a checkpointed plan of the
//    same model, and the other way round, bitwise equal to an uninterrupted run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "passes/remat.h"
#include "runtime/trainer.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr int kSteps = 200;

fs::path FixturesDir() { return fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures"; }

struct Run {
  std::vector<float> losses;
  std::map<std::string, Tensor> weights;
};

TrainerOptions Options(const std::vector<std::string>& feeds) {
  TrainerOptions options;  // AdamW, lr 1e-3, betas (0.9, 0.999), eps 1e-8
  options.optimizer.weight_decay = 0.01;
  options.seed = 11;
  options.feeds = feeds;
  return options;
}

// The plain plan (no instances) or the case's checkpointed one (each instance with its clones).
StatusOr<LoadedPlan> Compile(const CkptCase& c, bool checkpointed) {
  if (!checkpointed) {
    ASSIGN_OR_RETURN(TrainingFixture f, FixtureOf(FixturesDir(), c));
    return CompileFixture(f.dir / c.file, f.feeds);
  }
  ASSIGN_OR_RETURN(LoadedPlan plan, CompileCkptCase(FixturesDir(), c));
  for (const auto& inst : c.instances)
    if (RecomputeNodesOf(plan.graph, inst).empty())
      return Error(inst + " is not checkpointed in the plan");
  return plan;
}

StatusOr<Run> Train(const CkptCase& c, bool checkpointed, int steps) {
  ASSIGN_OR_RETURN(TrainingFixture f, FixtureOf(FixturesDir(), c));
  ASSIGN_OR_RETURN(LoadedPlan plan, Compile(c, checkpointed));
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(std::move(plan), Options(f.feeds)));
  Run run;
  for (int i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(StepReport r, trainer->Step());
    run.losses.push_back(r.loss);
  }
  run.weights = trainer->parameters();
  return run;
}

void ExpectSameRun(const Run& a, const Run& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    ASSERT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(float)), 0)
        << "step " << i + 1 << ": " << a.losses[i] << " vs " << b.losses[i];
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [name, w] : a.weights) {
    ASSERT_TRUE(b.weights.count(name)) << name;
    EXPECT_TRUE(w.BitwiseEqual(b.weights.at(name))) << name << " differs";
  }
}

std::vector<std::string> Each(int layers, const std::string& child) {
  std::vector<std::string> out;
  for (int i = 0; i < layers; ++i)
    out.push_back("transformer.blocks." + std::to_string(i) + (child.empty() ? "" : "." + child));
  return out;
}

TEST(CheckpointTrainingTest, TwoHundredAdamWStepsAreBitwiseTheSame) {
  const auto start = std::chrono::steady_clock::now();
  for (const char* fixture : {"mpt_tiny", "mpt_tiny_dropout", "mpt_tiny_gqa_glu"}) {
    const int layers = std::string(fixture) == "mpt_tiny_gqa_glu" ? 3 : 2;
    const CkptCase plain{fixture, "model.onnx", {}, {}};
    auto want = Train(plain, false, kSteps);
    ASSERT_TRUE(want.ok()) << want.status().message();
    // A run that learns: the loss curve is not flat, so equal curves say something.
    EXPECT_LT(want->losses.back(), 0.5f * want->losses.front()) << fixture;
    for (const CkptCase& c :
         {CkptCase{fixture, "model.onnx", {"mptblock"}, Each(layers, "")},
          CkptCase{fixture, "model.onnx", {"grouped_query_attention"}, Each(layers, "attn")}}) {
      SCOPED_TRACE(c.Name());
      auto got = Train(c, true, kSteps);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ExpectSameRun(*want, *got);
      std::cout << c.Name() << ": " << kSteps << " steps, loss " << want->losses.front() << " -> "
                << want->losses.back() << ", bitwise the plain run's\n";
    }
  }
  std::cout << "wall time "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s\n";
}

// N steps under plan A, Save, Resume under plan B, M more steps == N + M steps under plan A.
void ExpectResumesAcross(const CkptCase& c, bool saved_checkpointed) {
  constexpr int kBefore = 3, kAfter = 3;
  auto fixture = FixtureOf(FixturesDir(), c);
  ASSERT_TRUE(fixture.ok()) << fixture.status().message();
  auto straight = Train(c, saved_checkpointed, kBefore + kAfter);
  ASSERT_TRUE(straight.ok()) << straight.status().message();

  TempDir dir;
  auto first_plan = Compile(c, saved_checkpointed);
  ASSERT_TRUE(first_plan.ok()) << first_plan.status().message();
  auto first = Trainer::Create(std::move(first_plan).value(), Options(fixture->feeds));
  ASSERT_TRUE(first.ok()) << first.status().message();
  Run got;
  for (int i = 0; i < kBefore; ++i) {
    auto r = (*first)->Step();
    ASSERT_TRUE(r.ok()) << r.status().message();
    got.losses.push_back(r->loss);
  }
  ASSERT_TRUE((*first)->Save(dir / "run").ok());

  auto second_plan = Compile(c, !saved_checkpointed);
  ASSERT_TRUE(second_plan.ok()) << second_plan.status().message();
  auto second = Trainer::Create(std::move(second_plan).value(), Options(fixture->feeds));
  ASSERT_TRUE(second.ok()) << second.status().message();
  Status st = (*second)->Resume(dir / "run");
  ASSERT_TRUE(st.ok()) << st.message();
  for (int i = 0; i < kAfter; ++i) {
    auto r = (*second)->Step();
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->step, kBefore + 1 + i);
    got.losses.push_back(r->loss);
  }
  got.weights = (*second)->parameters();
  ExpectSameRun(*straight, got);
}

TEST(CheckpointTrainingTest, ResumesAcrossPlainAndCheckpointedPlans) {
  for (const char* fixture : {"mpt_tiny", "mpt_tiny_dropout"}) {
    for (const CkptCase& c : {CkptCase{fixture, "model.onnx", {"mptblock"}, Each(2, "")},
                              CkptCase{fixture, "model.stock.onnx", {"attn"}, Each(2, "attn")}}) {
      SCOPED_TRACE(c.Name());
      {
        SCOPED_TRACE("saved plain, resumed checkpointed");
        ExpectResumesAcross(c, false);
      }
      {
        SCOPED_TRACE("saved checkpointed, resumed plain");
        ExpectResumesAcross(c, true);
      }
    }
  }
}

}  // namespace
}  // namespace foundry
