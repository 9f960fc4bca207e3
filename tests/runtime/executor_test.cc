// The planned executor (runtime/executor.h) under the trainer, on every committed fixture x export
// kind (compiled as foundry-compile does, in memory; inputs fed from the fixture), plain and with
// every checkpointing target form (tests/support/fixture_plans.h, CheckpointCases), one AdamW step:
//  - arena: the bytes the accounting allocator counts as arena equal the plan's arena, exactly;
//    every other class (parameters, gradients, outputs, inputs, constants, optimizer state) equals
//    its planned figure too;
//  - the accounting's live bytes equal the bytes of what the trainer holds: its parameters and
//    optimizer slots, the executor's regions, and the graph's constant tensors (nothing held
//    twice, nothing leaked), before and after the step;
//  - during the step nothing is allocated outside the plan (class other does not move), and the
//    high-water mark of the planned classes is at most the planned total;
//  - the loss and every gradient are bitwise equal to Interpret's on the same bindings;
// plain also under --precision amp_bf16.
#include "runtime/executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <set>

#include "base/memory_accounting.h"
#include "compiler/onnx_import.h"
#include "passes/pipeline.h"
#include "runtime/interpreter.h"
#include "runtime/trainer.h"
#include "tests/support/fixture_plans.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

// Bytes of every tensor the graph holds (value data, attribute payloads), each once.
int64_t GraphTensorBytes(const Graph& g) {
  std::set<const Tensor*> seen;
  int64_t n = 0;
  auto add = [&](const std::shared_ptr<const Tensor>& t) {
    if (t && seen.insert(t.get()).second) n += t->owned_bytes();
  };
  for (const auto& [name, v] : g.values()) add(v.data);
  for (const Node& node : g.nodes)
    for (const auto& [key, a] : node.attrs) add(a.t);
  return n;
}

// Bytes of the tensors only node attributes hold (Constant payloads): graph structure, the one
// thing of a trainer's outside the planned classes.
int64_t AttributeOnlyBytes(const Graph& g) {
  std::set<const Tensor*> data;
  for (const auto& [name, v] : g.values())
    if (v.data) data.insert(v.data.get());
  std::set<const Tensor*> seen;
  int64_t n = 0;
  for (const Node& node : g.nodes)
    for (const auto& [key, a] : node.attrs)
      if (a.t && !data.count(a.t.get()) && seen.insert(a.t.get()).second) n += a.t->owned_bytes();
  return n;
}

// What the trainer holds: parameters, optimizer slots, the executor's regions, the graph's tensors.
int64_t HeldBytes(const Trainer& t) {
  int64_t n = t.executor().allocated_bytes() + GraphTensorBytes(t.plan().graph);
  for (const auto& name : t.plan().plan.parameters) n += t.parameter(name).owned_bytes();
  for (const auto& [name, s] : t.slot_m()) n += s.owned_bytes();
  for (const auto& [name, s] : t.slot_v()) n += s.owned_bytes();
  return n;
}

int64_t Live(const MemorySnapshot& now, const MemorySnapshot& base, MemoryClass c) {
  return now[c].live - base[c].live;
}

// Compiles (inside the measured window: the compile's own tensors must be gone or held by the
// trainer), creates the trainer, runs one step, and checks the accounting and the numbers.
void ExpectPlannedEqualsMeasured(const std::string& label, const std::vector<std::string>& feeds,
                                 const std::function<StatusOr<LoadedPlan>()>& compile) {
  const MemorySnapshot base = MemoryUsage();
  auto plan = compile();
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  TrainerOptions options;  // AdamW: the optimizer the plan's figure assumes
  options.feeds = feeds;
  auto created = Trainer::Create(std::move(plan).value(), options);
  ASSERT_TRUE(created.ok()) << created.status().message();
  Trainer& t = **created;
  const MemoryPlan& mp = t.memory_plan();
  const BackendLayout& layout = t.executor().layout();
  ASSERT_EQ(layout.backend, "cpu");

  MemorySnapshot now = MemoryUsage();
  EXPECT_EQ(Live(now, base, MemoryClass::kArena), layout.arena_bytes);
  EXPECT_EQ(Live(now, base, MemoryClass::kParameter), mp.outside[MemoryClass::kParameter]);
  EXPECT_EQ(Live(now, base, MemoryClass::kGradient), mp.outside[MemoryClass::kGradient]);
  EXPECT_EQ(Live(now, base, MemoryClass::kOutput), mp.outside[MemoryClass::kOutput]);
  EXPECT_EQ(Live(now, base, MemoryClass::kInput), mp.outside[MemoryClass::kInput]);
  EXPECT_EQ(Live(now, base, MemoryClass::kConstant), mp.outside[MemoryClass::kConstant]);
  EXPECT_EQ(Live(now, base, MemoryClass::kOptimizerState),
            mp.outside[MemoryClass::kOptimizerState]);
  EXPECT_EQ(now.total.live - base.total.live, HeldBytes(t));
  // Nothing else: an initializer the graph still held besides the trainer's parameter, or a
  // gradient kept twice, would show up here as class other.
  EXPECT_EQ(Live(now, base, MemoryClass::kOther), AttributeOnlyBytes(t.plan().graph));

  // Interpret on the same bindings (copies, made before the step is measured).
  std::map<std::string, Tensor> bindings = t.parameters();
  for (const auto& in : t.plan().graph.inputs) bindings[in] = *t.executor().value(in);
  InterpretOptions io;
  io.ctx.seed = StepSeed(options.seed, 1);
  auto reference = Interpret(t.plan().graph, bindings, io);
  ASSERT_TRUE(reference.ok()) << reference.status().message();

  const MemorySnapshot before_step = MemoryUsage();
  ResetMemoryPeaks();
  auto r = t.Step();
  ASSERT_TRUE(r.ok()) << r.status().message();
  now = MemoryUsage();
  EXPECT_EQ(now[MemoryClass::kOther].peak, before_step[MemoryClass::kOther].live)
      << "the step allocated outside the plan";
  EXPECT_EQ(now.total.live, before_step.total.live) << "the step leaked";
  // The planned classes' high-water mark: the total's, less what was outside them already.
  const int64_t measured = now.total.peak - before_step[MemoryClass::kOther].live -
                           (base.total.live - base[MemoryClass::kOther].live);
  const int64_t planned = mp.TotalBytes(layout);
  EXPECT_LE(measured, planned);
  int64_t copies = 0;  // the test's own: the bindings and Interpret's outputs
  for (const auto& [name, c] : bindings) copies += c.owned_bytes();
  for (const auto& [name, c] : *reference) copies += c.owned_bytes();
  EXPECT_EQ(now.total.live - base.total.live, HeldBytes(t) + copies);

  const std::string& loss = t.plan().plan.loss;
  EXPECT_TRUE(t.output(loss).BitwiseEqual(reference->at(loss)))
      << "loss " << t.output(loss).GetAsDouble(0) << " vs " << reference->at(loss).GetAsDouble(0);
  for (const auto& [param, gname] : t.plan().plan.gradients)
    EXPECT_TRUE(t.output(gname).BitwiseEqual(reference->at(gname))) << gname;
  std::cout << label << ": arena " << layout.arena_bytes << " (bound " << layout.lower_bound_bytes
            << "), total planned " << planned << ", measured " << measured << "\n";
}

TEST(ExecutorTest, EveryFixturePlannedEqualsMeasuredAndMatchesInterpretBitwise) {
  const std::vector<TrainingFixture> fixtures =
      TrainingFixtures(fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures");
  ASSERT_GE(fixtures.size(), 7u);
  for (const TrainingFixture& f : fixtures) {
    for (const char* file : {"model.onnx", "model.stock.onnx"}) {
      const std::string label = f.dir.filename().string() + "/" + file;
      SCOPED_TRACE(label);
      ExpectPlannedEqualsMeasured(label, f.feeds,
                                  [&] { return CompileFixture(f.dir / file, f.feeds); });
    }
  }
}

// The same under --precision amp_bf16: bf16 activations, casts, and the bf16 kernels'
// staging workspace are all planned bytes.
TEST(ExecutorTest, EveryFixtureUnderAmpBf16PlannedEqualsMeasuredAndMatchesInterpretBitwise) {
  const std::vector<TrainingFixture> fixtures =
      TrainingFixtures(fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures");
  ASSERT_GE(fixtures.size(), 7u);
  for (const TrainingFixture& f : fixtures) {
    for (const char* file : {"model.onnx", "model.stock.onnx"}) {
      const std::string label = f.dir.filename().string() + "/" + file + " amp_bf16";
      SCOPED_TRACE(label);
      ExpectPlannedEqualsMeasured(label, f.feeds, [&] {
        return CompileFixture(f.dir / file, f.feeds, std::vector<std::string>{},
                              Precision::kAmpBf16);
      });
    }
  }
}

// The same with every target form checkpointed (CheckpointCases): the plan of the rewritten
// graph, recompute clones included, is what runs.
TEST(ExecutorTest, EveryCheckpointedPlanPlannedEqualsMeasuredAndMatchesInterpretBitwise) {
  const fs::path fixtures = fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures";
  for (const CkptCase& c : CheckpointCases()) {
    SCOPED_TRACE(c.Name());
    auto f = FixtureOf(fixtures, c);
    ASSERT_TRUE(f.ok()) << f.status().message();
    ExpectPlannedEqualsMeasured(c.Name(), f->feeds, [&] { return CompileCkptCase(fixtures, c); });
  }
}

}  // namespace
}  // namespace foundry
