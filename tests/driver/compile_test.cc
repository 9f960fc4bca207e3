// Compile(CompileRequest) as a library call (driver/compile.h): what foundry-compile prints and
// writes is in the result (the plan with a layout per backend, the memory report, the budget
// search's choice), nothing is written, and a request the CLI would refuse is an error here too.
#include "driver/compile.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <sstream>

#include "compiler/phase.h"
#include "compiler/plan.h"
#include "runtime/cuda_backend.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

const std::string kModel =
    std::string(FOUNDRY_SOURCE_DIR) + "/models/fixtures/mpt_tiny_4layer/model.onnx";

CompileRequest Request() {
  CompileRequest r;
  r.model = kModel;
  r.dims = {{"batch", 2}, {"seq", 16}};
  return r;
}

int64_t Total(const CompileResult& r) {
  const MemoryPlan& m = r.plan->memory;
  return m.TotalBytes(*m.Layout("cpu"));
}

TEST(CompileTest, PlainCompileHasAPlanForEveryBackendAndItsReport) {
  std::ostringstream log;
  CompileRequest req = Request();
  req.log = &log;
  req.log_header = "compiling";
  StatusOr<CompileResult> r = Compile(req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->plan && r->report);
  EXPECT_FALSE(r->outputs);  // no -o: nothing will be written
  EXPECT_FALSE(r->budget);
  EXPECT_FALSE(r->selection);
  std::vector<std::string> backends;
  for (const BackendSpec& s : CompiledBackendSpecs()) backends.push_back(s.name);
  ASSERT_EQ(r->plan->memory.layouts.size(), backends.size());
  for (size_t i = 0; i < backends.size(); ++i)
    EXPECT_EQ(r->plan->memory.layouts[i].backend, backends[i]);
  EXPECT_EQ(r->report->backend, "cpu");
  EXPECT_EQ(r->report->layout.total_bytes, Total(*r));
  EXPECT_EQ(r->plan->parameters, r->graph.parameters);
  EXPECT_FALSE(r->plan->parameters.empty());
  EXPECT_EQ(log.str().rfind("compiling\n", 0), 0u) << log.str();
  EXPECT_NE(log.str().find("autodiff"), std::string::npos) << log.str();
}

// --loss-fn torch_crossentropy: the plan holds PyTorch's nn.CrossEntropyLoss backward. On
// MPT-125M at 4 x 1024 (logits 4096 x 50368 f32, 825 MB) the peak moves from the fused loss's
// forward to log_softmax's backward, where log_prob, nll_loss's gradient and log_softmax's
// gradient are live together: one logits-sized f32 buffer more than the fused form holds.
TEST(CompileTest, TorchCrossEntropyHoldsOneMoreLogitsBufferAtItsBackward) {
  auto Plan = [](LossFn loss_fn) {
    CompileRequest r;
    r.model = std::string(FOUNDRY_SOURCE_DIR) + "/models/exports/mpt_125m.onnx";
    r.dims = {{"batch", 4}, {"seq", 1024}};
    r.precision = Precision::kAmpBf16;
    r.loss_fn = loss_fn;
    return Compile(r);
  };
  StatusOr<CompileResult> fused = Plan(LossFn::kFusedCrossEntropy);
  StatusOr<CompileResult> torch = Plan(LossFn::kTorchCrossEntropy);
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  ASSERT_TRUE(torch.ok()) << torch.status().message();
  int nll = 0, fused_grad = 0;
  for (const Node& n : torch->graph.nodes) {
    nll += n.op_type == "NegativeLogLikelihoodLossGrad";
    fused_grad += n.op_type == "SoftmaxCrossEntropyLossGrad";
  }
  EXPECT_EQ(nll, 1);
  EXPECT_EQ(fused_grad, 0);
  EXPECT_EQ(fused->report->layout.peak_node, "/SoftmaxCrossEntropyLoss");
  EXPECT_EQ(torch->graph.nodes[static_cast<size_t>(torch->report->layout.peak_step)].op_type,
            "LogSoftmaxGrad_13");
  const int64_t logits = int64_t{4} * 1024 * 50368 * 4;
  const int64_t more = Total(*torch) - Total(*fused);
  // Within a MiB: the two peaks' other small buffers and workspaces differ.
  EXPECT_NEAR(static_cast<double>(more), static_cast<double>(logits), 1 << 20);
}

// --autocast-weight-copies saved: under amp_bf16 with f32 parameters the backward reads the
// forward's bf16 weight copies (torch.autocast's cache) instead of casting again; a checkpointed
// block still casts again in its recompute. With PyTorch's loss too, the loss's backward still
// runs before any block is recomputed (the schedule counts what a recompute pull allocates).
TEST(CompileTest, SavedAutocastCopiesAndTheTorchLossUnderCheckpointing) {
  auto Plan = [](bool saved, std::vector<CkptTarget> ckpt) {
    CompileRequest r = Request();
    r.precision = Precision::kAmpBf16;
    r.save_autocast_weight_copies = saved;
    r.loss_fn = LossFn::kTorchCrossEntropy;
    r.ckpt_targets = std::move(ckpt);
    StatusOr<CompileResult> c = Compile(r);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? std::move(c).value() : CompileResult{};
  };
  // Recompute-phase Casts of a parameter, and where the loss's backward and the first recompute
  // node run.
  struct Shape {
    int weight_recasts = 0;
    size_t loss_backward = 0, first_recompute = SIZE_MAX;
  };
  auto ShapeOf = [](const Graph& g) {
    Shape s;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const Node& n = g.nodes[k];
      const bool recompute = PhaseOf(n) == Phase::kRecompute;
      if (recompute && n.op_type == "Cast" && g.IsParameter(n.inputs[0])) ++s.weight_recasts;
      if (recompute) s.first_recompute = std::min(s.first_recompute, k);
      if (n.op_type == "LogSoftmaxGrad_13") s.loss_backward = k;
    }
    return s;
  };
  const Shape recast = ShapeOf(Plan(false, {}).graph);
  const Shape saved = ShapeOf(Plan(true, {}).graph);
  EXPECT_GT(recast.weight_recasts, 0);
  EXPECT_EQ(saved.weight_recasts, 0);
  const CompileResult blocks = Plan(true, {{"block", ""}});
  const Shape ckpt = ShapeOf(blocks.graph);
  EXPECT_GT(ckpt.weight_recasts, 0);  // the checkpointed blocks cast their weights again
  EXPECT_LT(ckpt.loss_backward, ckpt.first_recompute);
  // Every backward reader of a block weight's bf16 copy reads a recomputed one.
  const UseDef use = BuildUseDef(blocks.graph);
  for (const Node& n : blocks.graph.nodes) {
    if (n.op_type != "Cast" || !blocks.graph.IsParameter(n.inputs[0]) ||
        PhaseOf(n) != Phase::kForward || n.scope.find("blocks") == std::string::npos)
      continue;
    for (int c : use.Consumers(n.outputs[0]))
      EXPECT_NE(PhaseOf(blocks.graph.nodes[static_cast<size_t>(c)]), Phase::kBackward) << n.name;
  }
}

TEST(CompileTest, MemoryBudgetReturnsTheChoiceAndPlansIt) {
  // A shape where the activations outweigh the gradients (at batch 2 x 16 the peak is at the end
  // of the backward, where every gradient is live, and checkpointing cannot lower it).
  auto Request = [] {
    CompileRequest r = FOUNDRY_TEST_NS::Request();
    r.dims = {{"batch", 4}, {"seq", 32}};
    return r;
  };
  StatusOr<CompileResult> plain = Compile(Request());
  CompileRequest blocks = Request();
  blocks.ckpt_targets = {{"block", ""}};
  StatusOr<CompileResult> all = Compile(blocks);
  ASSERT_TRUE(plain.ok() && all.ok());
  ASSERT_TRUE(all->report->checkpoint);
  const int64_t budget = (Total(*plain) + Total(*all)) / 2;

  CompileRequest req = Request();
  req.memory_budget = budget;
  req.memory_budget_text = std::to_string(budget);
  StatusOr<CompileResult> r = Compile(req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->budget && r->budget_search && r->selection && r->ckpt_config);
  EXPECT_EQ(r->budget->budget_bytes, budget);
  EXPECT_LE(Total(*r), budget);
  EXPECT_EQ(r->budget->chosen.total_bytes, Total(*r));
  std::vector<std::string> planned;
  for (const auto& i : r->selection->instances) planned.push_back(i.module);
  EXPECT_EQ(r->budget->chosen.instances, planned);
  EXPECT_FALSE(r->budget->config.yaml.empty());
  EXPECT_EQ(r->ckpt_config->yaml, r->budget->config.yaml);
  EXPECT_GT(r->budget->plans, 1);
  ASSERT_TRUE(r->budget->uniform);
  EXPECT_LE(r->budget->uniform->total_bytes, budget);
  EXPECT_GE(r->budget->uniform->flops_recomputed, r->budget->chosen.flops_recomputed);
  // The report carries the same choice (its JSON is --report-json's "budget").
  ASSERT_TRUE(r->report->budget && r->report->checkpoint);
  EXPECT_EQ(r->report->budget->chosen.instances, planned);
  EXPECT_EQ(r->report->checkpoint->budget_bytes, budget);
}

TEST(CompileTest, RefusesWhatTheCliRefuses) {
  CompileRequest both = Request();
  both.memory_budget = int64_t{1} << 30;
  both.ckpt_targets = {{"block", ""}};
  StatusOr<CompileResult> r = Compile(both);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--memory-budget chooses the checkpointing itself; drop --ckpt / --ckpt-config");

  CompileRequest forward = Request();
  forward.training = false;
  forward.ckpt_targets = {{"block", ""}};
  EXPECT_FALSE(Compile(forward).ok());

  CompileRequest over_model = Request();
  over_model.outputs = {{kModel, "--report-json FILE"}};
  r = Compile(over_model);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "output '" + kModel + "' is the input model; choose another --report-json FILE");
}

TEST(CompileTest, ForwardOnlyHasNoPlan) {
  CompileRequest req = Request();
  req.training = false;
  StatusOr<CompileResult> r = Compile(req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->plan);
  EXPECT_FALSE(r->report);
  // The forward graph: no gradient outputs (the training graph has one per parameter).
  StatusOr<CompileResult> training = Compile(Request());
  ASSERT_TRUE(training.ok());
  EXPECT_FALSE(r->graph.nodes.empty());
  EXPECT_LT(r->graph.outputs.size() + training->plan->parameters.size(),
            training->graph.outputs.size() + 1);
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
