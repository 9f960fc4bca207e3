#include "passes/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "compiler/onnx_import.h"
#include "compiler/phase.h"
#include "compiler/tensor_proto.h"
#include "compiler/text.h"
#include "compiler/verifier.h"
#include "passes/fold.h"
#include "passes/pipeline.h"
#include "runtime/interpreter.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::vector<size_t> Identity(size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

// a, b, c: 1 KiB each (256 floats); y, the output, is not counted.
//   step 0  a = Relu(x)    live a                  1024
//   step 1  b = Exp(a)     live a b                2048  (a is still read by c)
//   step 2  c = Add(a, b)  live a b c              3072  -> a, b die
//   step 3  y = Neg(c)     live c (+ y uncounted)  1024
TEST(ScheduleTest, PeakLiveBytesCountsInputsAndOutputsOfAStepTogether) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[256]
  a = Relu(x)
  b = Exp(a)
  c = Add(a, b)
  y = Neg(c)
  output y
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());  // value types
  LiveBytes live = PeakLiveBytes(*g, Identity(g->nodes.size()));
  EXPECT_EQ(live.peak, 3072);
  EXPECT_EQ(live.peak_step, 2);
  EXPECT_EQ(ValueBytes(*g, "a"), 1024);
}

// Two independent branches: the greedy order finishes the one whose result is small before it
// starts the other, instead of holding both big intermediates at once.
TEST(ScheduleTest, ConsumesABigValueBeforeMakingAnother) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[1024]
  big1 = Exp(x)
  big2 = Relu(x)
  s1 = ReduceSum(big1) {keepdims=0}
  s2 = ReduceSum(big2) {keepdims=0}
  y = Add(s1, s2)
  output y
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  const int64_t before = PeakLiveBytes(*g, Identity(g->nodes.size())).peak;
  auto order = ScheduleOrder(*g);
  ASSERT_TRUE(order.ok()) << order.status().message();
  const int64_t after = PeakLiveBytes(*g, *order).peak;
  EXPECT_EQ(before, 2 * 4096 + 4);
  EXPECT_EQ(after, 4096 + 4 + 4);
  std::vector<std::string> names;
  for (size_t i : *order) names.push_back(g->nodes[i].outputs[0]);
  EXPECT_EQ(names, (std::vector<std::string>{"big1", "s1", "big2", "s2", "y"}));
}

// The hook the remat pass relies on: recompute nodes appended at the end land just before their
// first backward reader, in their own order, and never earlier.
TEST(ScheduleTest, RecomputeNodesLandJustBeforeTheirFirstBackwardReader) {
  auto parsed = ParseGraph(R"(graph g {
  input x : f32[64]
  a = Relu(x)
  b = Exp(a)
  loss = ReduceSum(b) {keepdims=0}
  da = Neg(x)
  a2 = Relu(x)
  b2 = Exp(a2)
  db = Mul(b2, da)
  output loss
  output db
})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*parsed).ok());
  Graph g = *parsed;
  // Phases: a, b, loss forward; da, db backward; a2, b2 recompute, moved to the end.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const std::string& out = g.nodes[i].outputs[0];
    SetPhase(g.nodes[i], out == "da" || out == "db"   ? Phase::kBackward
                         : out == "a2" || out == "b2" ? Phase::kRecompute
                                                      : Phase::kForward);
  }
  std::stable_partition(g.nodes.begin(), g.nodes.end(),
                        [](const Node& n) { return PhaseOf(n) != Phase::kRecompute; });
  SchedulePass pass;
  ASSERT_TRUE(pass.Run(g).ok());
  std::vector<std::string> names;
  for (const Node& n : g.nodes) names.push_back(n.outputs[0]);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "loss", "da", "a2", "b2", "db"}));
  // The statistics: never above the incoming order, the peak at a node of the schedule.
  EXPECT_LE(pass.stats().after.peak, pass.stats().before.peak);
  ASSERT_GE(pass.stats().after.peak_step, 0);
  EXPECT_EQ(pass.stats().peak_node, g.nodes[pass.stats().after.peak_step].name);
  Status verified = VerifyGraph(g);
  EXPECT_TRUE(verified.ok()) << verified.message();
}

// Every committed fixture, compiled as foundry-compile does: the schedule is a topological
// permutation of autodiff's nodes, its peak is never above autodiff's order, and the loss and
// every gradient are bitwise the same.
TEST(ScheduleTest, EveryFixtureNeverAboveTheAutodiffOrderAndSameBits) {
  fs::path root = fs::path(FOUNDRY_SOURCE_DIR) / "models" / "fixtures";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    fs::path model = e.path() / "model.onnx";
    if (!fs::exists(e.path() / "reference" / "loss.pb")) continue;
    SCOPED_TRACE(model.string());
    auto g = ImportOnnx(model.string(), {.load_weights = true});
    ASSERT_TRUE(g.ok()) << g.status().message();
    std::map<std::string, Tensor> feeds;
    for (const char* input : {"input_ids", "labels"}) {
      auto t = ReadTensorFile((e.path() / "inputs" / (std::string(input) + ".pb")).string());
      ASSERT_TRUE(t.ok()) << t.status().message();
      feeds[input] = *t;
    }
    CompileOptions options;
    options.fold.dims = {{"batch", feeds["input_ids"].shape()[0]},
                         {"seq", feeds["input_ids"].shape()[1]}};
    auto passes = BuildPipeline(options);
    ASSERT_EQ(passes.back()->name(), "schedule");
    passes.pop_back();
    ASSERT_TRUE(RunPasses(*g, passes, {}).ok());
    Graph scheduled = *g;
    SchedulePass schedule;
    ASSERT_TRUE(schedule.Run(scheduled).ok());
    ASSERT_TRUE(VerifyGraph(scheduled).ok());

    std::vector<std::string> before, after;
    for (const Node& n : g->nodes) before.push_back(n.name);
    for (const Node& n : scheduled.nodes) after.push_back(n.name);
    std::sort(before.begin(), before.end());
    std::sort(after.begin(), after.end());
    EXPECT_EQ(before, after);
    EXPECT_LE(PeakLiveBytes(scheduled, Identity(scheduled.nodes.size())).peak,
              PeakLiveBytes(*g, Identity(g->nodes.size())).peak);

    for (const auto& p : g->parameters) feeds.erase(p);
    auto want = Interpret(*g, feeds);
    auto got = Interpret(scheduled, feeds);
    ASSERT_TRUE(want.ok()) << want.status().message();
    ASSERT_TRUE(got.ok()) << got.status().message();
    for (const auto& out : g->outputs) EXPECT_TRUE(got->at(out).BitwiseEqual(want->at(out))) << out;
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

}  // namespace
}  // namespace foundry
