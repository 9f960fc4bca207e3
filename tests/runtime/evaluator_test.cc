// Eval (runtime/evaluator.h): the forward-only eval plan over the trainer's own parameters, run in
// the training arena. Proven against the training step itself (the eval loss of a batch before
// any update IS the first step's loss, bit for bit), against the interpreter with dropout off,
// and by training runs with and without evals in between being bitwise the same.
#include "runtime/evaluator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "compiler/eval_graph.h"
#include "compiler/phase.h"
#include "passes/memory_plan.h"
#include "runtime/cuda_backend.h"
#include "runtime/interpreter.h"
#include "runtime/trainer.h"
#include "tests/support/fixture_plans.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(FOUNDRY_SOURCE_DIR) / "models" / "fixtures";

// A fixture's training plan with its eval plan, as foundry-compile writes both.
LoadedPlan PlanWithEval(const std::string& fixture, Precision precision = Precision::kFp32) {
  const fs::path dir = kFixtures / fixture;
  std::vector<std::string> feeds;
  for (const TrainingFixture& f : TrainingFixtures(kFixtures))
    if (f.dir == dir) feeds = f.feeds;
  auto lp = CompileFixture(dir / "model.onnx", feeds, std::vector<std::string>{}, precision);
  EXPECT_TRUE(lp.ok()) << lp.status().message();
  if (!lp.ok()) return LoadedPlan();
  auto eval = EvalGraph(lp->graph, lp->plan.loss);
  EXPECT_TRUE(eval.ok()) << eval.status().message();
  auto memory = PlanMemory(*eval, CompiledBackendSpecs());
  EXPECT_TRUE(memory.ok()) << memory.status().message();
  lp->plan.eval_memory = *memory;
  return std::move(lp).value();
}

// `n` pseudo-random token ids in [0, vocab).
std::vector<int64_t> Tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> out(n);
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<int64_t>((seed >> 33) % static_cast<uint64_t>(vocab));
  }
  return out;
}

struct EvalRun {
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<Evaluator> eval;
};

EvalRun Make(LoadedPlan lp, const std::string& data, int64_t max_batches = -1) {
  TrainerOptions o;
  o.data_path = data;
  EvalRun r;
  auto t = Trainer::Create(std::move(lp), o);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return r;
  r.trainer = std::move(t).value();
  EvalOptions e;
  e.data_path = data;
  e.max_batches = max_batches;
  auto ev = Evaluator::Create(*r.trainer, e);
  EXPECT_TRUE(ev.ok()) << ev.status().message();
  if (ev.ok()) r.eval = std::move(ev).value();
  return r;
}

TEST(EvalGraph, KeepsWhatTheLossNeedsAndNothingOfTheBackward) {
  LoadedPlan lp = PlanWithEval("mpt_tiny");
  auto eval = EvalGraph(lp.graph, lp.plan.loss);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->outputs, std::vector<std::string>{lp.plan.loss});
  EXPECT_EQ(eval->parameters, lp.graph.parameters);
  EXPECT_EQ(eval->inputs, lp.graph.inputs);
  int forward = 0;
  for (const Node& n : lp.graph.nodes) forward += PhaseOf(n) != Phase::kBackward;
  EXPECT_EQ(static_cast<int>(eval->nodes.size()), forward);
  for (const Node& n : eval->nodes) EXPECT_NE(PhaseOf(n), Phase::kBackward) << n.Describe();
  EXPECT_EQ(EvalGraph(lp.graph, "nope").status().message(),
            "the loss 'nope' is not computed by a node of the graph");
}

// Before any update, the eval loss of the first batch is the first step's loss: the same nodes
// in the same order on the same bytes (dropout-free fixtures), in both precisions.
TEST(Evaluator, TheFirstBatchsLossIsTheFirstStepsLossBitwise) {
  TempDir dir;
  for (const char* fixture : {"mpt_tiny", "mpt_tiny_gqa_glu", "llama_tiny", "gpt2_tiny"})
    for (Precision precision : {Precision::kFp32, Precision::kAmpBf16}) {
      SCOPED_TRACE(std::string(fixture) + " " + std::string(PrecisionName(precision)));
      LoadedPlan lp = PlanWithEval(fixture, precision);
      const std::string data = dir / (std::string(fixture) + ".bin");
      WriteTokens(data, Tokens(4096, 50, 7), TokenDType::kUint16);
      EvalRun r = Make(std::move(lp), data, /*max_batches=*/1);
      ASSERT_TRUE(r.eval);
      auto e = r.eval->Run();
      ASSERT_TRUE(e.ok()) << e.status().message();
      auto s = r.trainer->Step();
      ASSERT_TRUE(s.ok()) << s.status().message();
      EXPECT_EQ(e->batches, 1);
      EXPECT_EQ(e->step, 0);
      float eval_loss = static_cast<float>(e->loss);
      EXPECT_TRUE(BitwiseEqual(&eval_loss, &s->loss, 1)) << e->loss << " vs " << s->loss;
      EXPECT_DOUBLE_EQ(e->perplexity, std::exp(e->loss));
    }
}

// Evals between steps run in the training arena and input storage: the run is bitwise the run
// without them.
TEST(Evaluator, EvalsBetweenStepsChangeNothingOfTheTraining) {
  TempDir dir;
  const std::string data = dir / "d.bin";
  WriteTokens(data, Tokens(8192, 50, 11), TokenDType::kUint16);
  EvalRun with = Make(PlanWithEval("mpt_tiny_dropout"), data);
  TrainerOptions o;
  o.data_path = data;
  auto without = Trainer::Create(PlanWithEval("mpt_tiny_dropout"), o);
  ASSERT_TRUE(with.eval && without.ok());
  std::vector<double> evals;
  for (int step = 0; step < 4; ++step) {
    auto e = with.eval->Run();
    ASSERT_TRUE(e.ok()) << e.status().message();
    evals.push_back(e->loss);
    auto a = with.trainer->Step();
    auto b = (*without)->Step();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(BitwiseEqual(&a->loss, &b->loss, 1)) << step;
  }
  for (const auto& [name, p] : with.trainer->parameters()) {
    const Tensor& q = (*without)->parameter(name);
    EXPECT_TRUE(BitwiseEqual(p.data<float>(), q.data<float>(), p.numel())) << name;
  }
  // Training lowers the eval loss on this data (the same windows train).
  EXPECT_LT(evals.back(), evals.front());
  // Eval draws no dropout: twice on the same weights, the same bits.
  auto again1 = with.eval->Run();
  auto again2 = with.eval->Run();
  ASSERT_TRUE(again1.ok() && again2.ok());
  EXPECT_EQ(again1->loss, again2->loss);
}

// With dropout in the model, eval is the forward with dropout off: the interpreter's loss of
// the eval graph with training = false, batch by batch, averaged.
TEST(Evaluator, IsTheInterpretersForwardWithDropoutOff) {
  TempDir dir;
  const std::string data = dir / "d.bin";
  WriteTokens(data, Tokens(2000, 50, 3), TokenDType::kUint16);
  LoadedPlan lp = PlanWithEval("mpt_tiny_dropout");
  auto eval_graph = EvalGraph(lp.graph, lp.plan.loss);
  ASSERT_TRUE(eval_graph.ok());
  const bool loss_in_model = lp.plan.loss_in_model;
  EvalRun r = Make(std::move(lp), data, /*max_batches=*/3);
  ASSERT_TRUE(r.eval);
  auto e = r.eval->Run();
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(e->batches, 3);
  const int64_t batch = r.trainer->batch(), seq = r.trainer->seq();
  auto file = TokenFile::Open(data, TokenDType::kUint16);
  ASSERT_TRUE(file.ok());
  double sum = 0;
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<int64_t> windows(batch * (seq + 1));
    for (int64_t row = 0; row < batch; ++row)
      ASSERT_TRUE(file->ReadWindow(b * batch + row, seq + 1, 0, &windows[row * (seq + 1)]).ok());
    TokenBatch tb =
        MakeTokenBatch(windows, batch, seq, /*shift=*/!loss_in_model, DType::kInt64, DType::kInt64);
    std::map<std::string, Tensor> bindings = r.trainer->parameters();
    bindings["input_ids"] = tb.input_ids;
    bindings["labels"] = tb.labels;
    InterpretOptions io;
    io.ctx.training = false;
    auto out = Interpret(*eval_graph, bindings, io);
    ASSERT_TRUE(out.ok()) << out.status().message();
    sum += out->at(eval_graph->outputs[0]).data<float>()[0];
  }
  EXPECT_NEAR(e->loss, sum / 3, 1e-6 * std::abs(sum));
  EXPECT_EQ(e->tokens, 3 * batch * (loss_in_model ? seq - 1 : seq));
}

TEST(Evaluator, Errors) {
  TempDir dir;
  const std::string data = dir / "d.bin";
  WriteTokens(data, Tokens(100, 50, 3), TokenDType::kUint16);
  LoadedPlan lp = PlanWithEval("mpt_tiny");
  lp.plan.eval_memory.reset();
  TrainerOptions o;
  o.data_path = data;
  auto t = Trainer::Create(std::move(lp), o);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EvalOptions e;
  e.data_path = data;
  EXPECT_EQ(Evaluator::Create(**t, e).status().message(),
            "'" + (*t)->plan().plan_path +
                "' has no eval plan (it was compiled before foundry-compile planned one); "
                "recompile it to evaluate");
  auto t2 = Trainer::Create(PlanWithEval("mpt_tiny"), o);
  ASSERT_TRUE(t2.ok());
  const std::string tiny = dir / "tiny.bin";
  WriteTokens(tiny, Tokens(20, 50, 3), TokenDType::kUint16);
  e.data_path = tiny;
  const int64_t batch = (*t2)->batch(), seq = (*t2)->seq();
  EXPECT_EQ(Evaluator::Create(**t2, e).status().message(),
            "--eval-data " + tiny + ": 20 tokens hold no whole batch (" + std::to_string(batch) +
                " windows of " + std::to_string(seq + 1) + " tokens); give a longer file");
}

}  // namespace
}  // namespace foundry
