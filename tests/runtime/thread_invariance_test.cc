// Threads do not change bits: every committed fixture trained at 1, 2 and 4 CPU
// threads, with gradient clipping, gives the same loss bits at every step, the same (clipped)
// gradient bits after the first step and the same final weights; and checkpointed plans equal the
// plain plan at every thread count.
//
// The fixtures' own batches (2 x 16 tokens, d_model 64) are below every parallel grain, so each
// fixture's inputs are tiled to kBatch rows: products then split into pieces (kernels/cpu/math.cc
// SplitGemm) and elementwise, norm, softmax and loss kernels run several chunks, which is what the
// thread counts must not change.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "compiler/tensor_proto.h"
#include "kernels/cpu/kernel.h"
#include "runtime/trainer.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

constexpr int64_t kBatch = 64;
constexpr int kSteps = 3;
constexpr int kPlanThreads = 4;  // attention scratch planned for this many

fs::path FixturesDir() { return fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures"; }

// The fixture's feeds with their batch dimension (dim 0) tiled to kBatch rows, written to `dir`.
std::vector<std::string> TiledFeeds(const TrainingFixture& f, const TempDir& dir) {
  std::vector<std::string> feeds;
  for (const std::string& spec : f.feeds) {
    const size_t eq = spec.find('=');
    const std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
    StatusOr<Tensor> t = ReadTensorFile(path);
    EXPECT_TRUE(t.ok()) << t.status().message();
    if (!t.ok()) return {};
    Shape shape = t->shape();
    Tensor tiled = *t;
    if (!shape.empty() && shape[0] > 0) {
      const size_t row = t->nbytes() / static_cast<size_t>(shape[0]);
      shape[0] = kBatch;
      tiled = Tensor(t->dtype(), shape);
      for (int64_t r = 0; r < kBatch; ++r)
        std::memcpy(static_cast<char*>(tiled.raw()) + r * row,
                    static_cast<const char*>(t->raw()) + (r % t->shape()[0]) * row, row);
    }
    const std::string out = dir / (name + ".pb");
    EXPECT_TRUE(WriteTensorFile(out, tiled, name).ok());
    feeds.push_back(name + "=" + out);
  }
  return feeds;
}

// The committed fixture of that folder name (an empty dir when there is none).
TrainingFixture NamedFixture(const std::string& name) {
  for (const TrainingFixture& each : TrainingFixtures(FixturesDir()))
    if (each.dir.filename() == name) return each;
  return {};
}

struct TrainRun {
  std::vector<float> losses;
  std::map<std::string, Tensor> first_gradients;
  std::map<std::string, Tensor> weights;
};

StatusOr<TrainRun> Train(LoadedPlan plan, const std::vector<std::string>& feeds, int threads) {
  TrainerOptions options;
  options.optimizer.weight_decay = 0.01;
  options.seed = 5;
  // Clipped: the global norm and the scaling run in every step at every thread count.
  options.clip_norm = 0.05;  // below every fixture's norm (mpt_tiny's is 2.8)
  options.feeds = feeds;
  SetCpuThreads(threads);
  const std::map<std::string, std::string> gradients = plan.plan.gradients;
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(std::move(plan), options));
  TrainRun run;
  for (int i = 0; i < kSteps; ++i) {
    ASSIGN_OR_RETURN(StepReport r, trainer->Step());
    run.losses.push_back(r.loss);
    if (i == 0)
      for (const auto& [param, grad] : gradients) {
        const Tensor& g = trainer->output(grad);
        Tensor copy(g.dtype(), g.shape());
        if (g.nbytes()) std::memcpy(copy.raw(), g.raw(), g.nbytes());
        run.first_gradients.emplace(param, std::move(copy));
      }
  }
  run.weights = trainer->parameters();
  return run;
}

void ExpectSameRun(const TrainRun& want, const TrainRun& got, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&want.losses[i], &got.losses[i], sizeof(float)), 0)
        << "step " << i + 1 << " loss " << want.losses[i] << " vs " << got.losses[i];
  ASSERT_EQ(want.first_gradients.size(), got.first_gradients.size());
  for (const auto& [name, g] : want.first_gradients)
    EXPECT_TRUE(g.BitwiseEqual(got.first_gradients.at(name))) << "gradient of " << name;
  for (const auto& [name, w] : want.weights)
    EXPECT_TRUE(w.BitwiseEqual(got.weights.at(name))) << "weight " << name;
}

class ThreadInvarianceTest : public ::testing::Test {
 protected:
  void TearDown() override { SetCpuThreads(1); }
};

TEST_F(ThreadInvarianceTest, EveryFixtureTrainsToTheSameBitsAtOneTwoAndFourThreads) {
  std::vector<TrainingFixture> fixtures = TrainingFixtures(FixturesDir());
  ASSERT_GE(fixtures.size(), 7u);
#ifdef FOUNDRY_SANITIZE
  // At -O0 under the sanitizers (CI's second pass) three fixtures exercise the same threading
  // code in a fifth of the time; the main suite trains all of them.
  fixtures.resize(3);
#endif
  for (const TrainingFixture& f : fixtures) {
    SCOPED_TRACE(f.dir.filename().string());
    TempDir dir;
    const std::vector<std::string> feeds = TiledFeeds(f, dir);
    ASSERT_FALSE(feeds.empty());
    SetCpuThreads(kPlanThreads);
    StatusOr<LoadedPlan> plan = CompileFixture(f.dir / "model.onnx", feeds);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    StatusOr<TrainRun> one = Train(*plan, feeds, 1);
    ASSERT_TRUE(one.ok()) << one.status().message();
    for (int threads : {2, 4}) {
      StatusOr<TrainRun> run = Train(*plan, feeds, threads);
      ASSERT_TRUE(run.ok()) << run.status().message();
      ExpectSameRun(*one, *run, std::to_string(threads) + " threads vs 1");
    }
  }
}

// One case per kind of recompute (a whole block, the attention, the MLP) on the tiled fixtures:
// the checkpointed plan at 2 and 4 threads equals the plain plan at 1 thread.
TEST_F(ThreadInvarianceTest, CheckpointedPlansEqualThePlainPlanAtEveryThreadCount) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mpt_tiny", "mptblock"},
      {"mpt_tiny_dropout", "grouped_query_attention"},
      {"mpt_tiny_gqa_glu", "mptglu"},
      {"llama_tiny", "block"},
  };
  for (const auto& [fixture, target] : cases) {
    SCOPED_TRACE(fixture + " --ckpt " + target);
    const TrainingFixture f = NamedFixture(fixture);
    ASSERT_FALSE(f.dir.empty()) << "no fixture " << fixture;
    TempDir dir;
    const std::vector<std::string> feeds = TiledFeeds(f, dir);
    SetCpuThreads(kPlanThreads);
    StatusOr<LoadedPlan> plain = CompileFixture(f.dir / "model.onnx", feeds);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    StatusOr<CkptTarget> parsed = ParseCkptArg(target);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    StatusOr<LoadedPlan> ckpt =
        CompileFixture(f.dir / "model.onnx", feeds, std::vector<CkptTarget>{*parsed});
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ASSERT_GT(ckpt->graph.nodes.size(), plain->graph.nodes.size()) << "nothing recomputed";
    StatusOr<TrainRun> want = Train(*plain, feeds, 1);
    ASSERT_TRUE(want.ok()) << want.status().message();
    for (int threads : {1, 2, 4}) {
      StatusOr<TrainRun> got = Train(*ckpt, feeds, threads);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ExpectSameRun(*want, *got, "checkpointed at " + std::to_string(threads) + " threads");
    }
  }
}

// --precision amp_bf16 (bf16 staging, casts, bf16 products) on the tiled fixtures: the plain and
// a checkpointed plan at 1, 2 and 4 threads give the plain plan's bits at 1 thread.
TEST_F(ThreadInvarianceTest, AmpBf16PlansAtEveryThreadCount) {
  for (const auto& [fixture, target] : std::vector<std::pair<std::string, std::string>>{
           {"mpt_tiny", "mptblock"}, {"llama_tiny", "block"}}) {
    SCOPED_TRACE(fixture + " --precision amp_bf16");
    const TrainingFixture f = NamedFixture(fixture);
    ASSERT_FALSE(f.dir.empty()) << "no fixture " << fixture;
    TempDir dir;
    const std::vector<std::string> feeds = TiledFeeds(f, dir);
    SetCpuThreads(kPlanThreads);
    StatusOr<LoadedPlan> plain = CompileFixture(f.dir / "model.onnx", feeds,
                                                std::vector<std::string>{}, Precision::kAmpBf16);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    StatusOr<CkptTarget> parsed = ParseCkptArg(target);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    StatusOr<LoadedPlan> ckpt =
        CompileFixture(f.dir / "model.onnx", feeds, std::vector<CkptTarget>{*parsed}, nullptr,
                       Precision::kAmpBf16);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    StatusOr<TrainRun> want = Train(*plain, feeds, 1);
    ASSERT_TRUE(want.ok()) << want.status().message();
    for (int threads : {2, 4}) {
      StatusOr<TrainRun> got = Train(*plain, feeds, threads);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ExpectSameRun(*want, *got, "plain at " + std::to_string(threads) + " threads");
    }
    for (int threads : {1, 4}) {
      StatusOr<TrainRun> got = Train(*ckpt, feeds, threads);
      ASSERT_TRUE(got.ok()) << got.status().message();
      ExpectSameRun(*want, *got, "checkpointed at " + std::to_string(threads) + " threads");
    }
  }
}

}  // namespace
}  // namespace foundry
