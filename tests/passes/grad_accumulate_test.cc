// The grad_accumulate pass (passes/grad_accumulate.h) on the committed fixtures: the changed flag,
// the structure (one foundry::AccumulateGradient per gradient, reading the renamed partial, right
// after its producer), and the numbers: the interpreter runs an accumulator as a step's first
// microbatch at scale 1, so loss and gradients are bitwise those of the graph without it.
#include "passes/grad_accumulate.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "compiler/phase.h"
#include "compiler/verifier.h"
#include "runtime/data.h"
#include "runtime/interpreter.h"
#include "tests/support/fixture_plans.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

fs::path Fixture(const std::string& name) {
  return fs::path(FOUNDRY_SOURCE_DIR) / "models/fixtures" / name;
}

struct Compiled {
  Graph graph;
  std::vector<std::string> feeds;
};

Compiled CompileOne(const std::string& fixture) {
  for (const TrainingFixture& f : TrainingFixtures(Fixture(fixture).parent_path()))
    if (f.dir == Fixture(fixture)) {
      auto lp = CompileFixture(f.dir / "model.onnx", f.feeds);
      EXPECT_TRUE(lp.ok()) << lp.status().message();
      if (lp.ok()) return {std::move(lp->graph), f.feeds};
    }
  ADD_FAILURE() << "no fixture " << fixture;
  return {};
}

std::map<std::string, Tensor> Interpreted(const Graph& g, const std::vector<std::string>& specs) {
  std::map<std::string, Tensor> feeds;
  for (const auto& spec : specs) {
    auto f = ReadFeed(spec);
    EXPECT_TRUE(f.ok()) << f.status().message();
    if (f.ok()) feeds[f->name] = f->tensor;
  }
  InterpretOptions io;
  io.ctx.seed = 5;
  io.ctx.grad_scale = 1.0f;
  io.ctx.grad_accumulate = true;  // the interpreter ignores it: nothing to add to
  auto out = Interpret(g, feeds, io);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? std::move(out).value() : std::map<std::string, Tensor>{};
}

TEST(GradAccumulatePassTest, OneMicrobatchChangesNothing) {
  Compiled c = CompileOne("mpt_tiny");
  const size_t nodes = c.graph.nodes.size();
  GradAccumulatePass pass({1});
  StatusOr<bool> changed = pass.Run(c.graph);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(c.graph.nodes.size(), nodes);
}

TEST(GradAccumulatePassTest, RefusesNoMicrobatches) {
  Graph g;
  GradAccumulatePass pass({0});
  EXPECT_EQ(pass.Run(g).status().message(),
            "grad_accumulate: 0 microbatches per step; give 1 or more");
}

TEST(GradAccumulatePassTest, AccumulatesEveryGradientAndKeepsTheNumbers) {
  for (const char* fixture : {"mpt_tiny", "llama_tiny", "gpt2_tiny", "mpt_tiny_dropout"}) {
    Compiled c = CompileOne(fixture);
    Graph g = c.graph;
    GradAccumulatePass pass({4});
    StatusOr<bool> changed = pass.Run(g);
    ASSERT_TRUE(changed.ok()) << changed.status().message();
    EXPECT_TRUE(*changed);
    EXPECT_EQ(pass.stats().gradients, static_cast<int>(g.parameters.size())) << fixture;
    EXPECT_EQ(g.outputs, c.graph.outputs) << fixture;
    EXPECT_EQ(g.nodes.size(), c.graph.nodes.size() + g.parameters.size()) << fixture;
    Status verified = VerifyGraph(g);
    EXPECT_TRUE(verified.ok()) << verified.message();
    const UseDef use = BuildUseDef(g);
    int64_t partial_bytes = 0;
    for (size_t i = 0; i < g.parameters.size(); ++i) {
      const std::string& grad = g.outputs[i + 1];
      const int acc = use.Producer(grad);
      ASSERT_GE(acc, 0) << grad;
      const Node& n = g.nodes[static_cast<size_t>(acc)];
      EXPECT_EQ(n.domain, "foundry");
      EXPECT_EQ(n.op_type, "AccumulateGradient");
      EXPECT_EQ(PhaseOf(n), Phase::kBackward);
      ASSERT_EQ(n.inputs.size(), 1u);
      EXPECT_EQ(n.inputs[0], MicrobatchPartialName(grad));
      EXPECT_TRUE(use.Consumers(grad).empty()) << grad;  // only the optimizer reads it
      // Right after the partial's producer (a constant partial: at the front).
      const int producer = use.Producer(n.inputs[0]);
      if (producer >= 0) {
        EXPECT_LT(producer, acc);
      }
      const Value* partial = g.FindValue(n.inputs[0]);
      ASSERT_NE(partial, nullptr);
      EXPECT_EQ(partial->dtype, g.FindValue(grad)->dtype);
      EXPECT_EQ(partial->shape, g.FindValue(grad)->shape);
      partial_bytes += partial->NumBytes();
    }
    EXPECT_EQ(pass.stats().partial_bytes, partial_bytes);
    // Bitwise the same loss and gradients (dropout included: no node's key changed).
    std::map<std::string, Tensor> before = Interpreted(c.graph, c.feeds),
                                  after = Interpreted(g, c.feeds);
    for (const auto& out : c.graph.outputs) {
      ASSERT_TRUE(before.count(out) && after.count(out)) << out;
      EXPECT_EQ(std::memcmp(before.at(out).raw(), after.at(out).raw(), before.at(out).nbytes()), 0)
          << fixture << " " << out;
    }
  }
}

}  // namespace
}  // namespace foundry
