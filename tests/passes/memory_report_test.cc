#include "passes/memory_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "compiler/op_schema.h"
#include "compiler/text.h"
#include "passes/fold.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// One tiny training step with every case the report distinguishes. Steps and live rounded bytes:
//   0  a    = Mul(x, w)         fwd  blk       1024  saved (g3 reads it, g1 reads its view s)
//   1  s    = Reshape(a)        fwd  blk.attn  view of a, no bytes: its bytes are blk's
//   2  b    = Concat(a, a)      fwd  blk.attn  2048  saved (g2 reads it)
//   3  h    = Exp(b)            fwd  blk.attn  2048  transient; workspace 300 -> 512
//   4  loss = ReduceSum(h)      fwd            graph output: never saved, though g2l reads it
//   5  g1   = Mul(s, s)         bwd            1024
//   6  g1f  = Reshape(g1)       bwd            view of g1
//   7  g3   = Mul(g1f, x)       bwd            1024  (x is a feed: not saved)
//   8  g4   = Add(g3, a)        bwd            1024
//   9  g2   = ReduceSum(b)      bwd            4 -> 256
//  10  g2l  = Mul(g2, loss)     bwd            4 -> 256
//  11  w_grad = Mul(g4, g2l)    bwd            gradient output
// Live at step 3: a 1024 + b 2048 (saved) + h 2048 (transient) + workspace 512 = 5632, the peak.
// Saved for backward: a 1024 + b 2048 = 3072 (a once, though read directly and through s).
constexpr const char* kStep = R"(graph g {
  module "blk" : pkg.Block
  module "blk.attn" : pkg.Attn, pkg.AttnBase
  input x : f32[256]
  param w : f32[256]
  const shape : i64[2] = [16, 16]
  const flat : i64[1] = [256]
  a = Mul(x, w) @"blk" marks{phase="forward"}
  s = Reshape(a, shape) @"blk.attn" marks{phase="forward"}
  b = Concat(a, a) {axis=0} @"blk.attn" marks{phase="forward"}
  h = Exp(b) @"blk.attn" marks{phase="forward"}
  loss = ReduceSum(h) {keepdims=0} marks{phase="forward"}
  g1 = Mul(s, s) marks{phase="backward"}
  g1f = Reshape(g1, flat) marks{phase="backward"}
  g3 = Mul(g1f, x) marks{phase="backward"}
  g4 = Add(g3, a) marks{phase="backward"}
  g2 = ReduceSum(b) {keepdims=0} marks{phase="backward"}
  g2l = Mul(g2, loss) marks{phase="backward"}
  w_grad = Mul(g4, g2l) marks{phase="backward"}
  output loss
  output w_grad
})";

Graph StepGraph() {
  auto g = ParseGraph(kStep);
  EXPECT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(FoldPass({}).Run(*g).ok());  // value types
  return std::move(g).value();
}

// What the planner would produce for kStep, by hand: views aliased, one workspace.
MemoryPlan StepPlan(const Graph& g) {
  MemoryPlan plan;
  for (const Node& n : g.nodes) plan.schedule.push_back(n.name);
  plan.alias["s"] = {"a", AliasKind::kView};
  plan.alias["g1f"] = {"g1", AliasKind::kView};
  BackendLayout cpu;
  cpu.backend = "cpu";
  cpu.offsets = {{"a", 0},     {"b", 1024},  {"h", 3072}, {"g1", 3072},
                 {"g3", 4096}, {"g4", 3072}, {"g2", 0},   {"g2l", 256}};
  cpu.workspace_bytes.assign(g.nodes.size(), 0);
  cpu.workspace_offsets.assign(g.nodes.size(), -1);
  cpu.workspace_bytes[3] = 300;
  cpu.workspace_offsets[3] = 5120;
  cpu.arena_bytes = 5632;
  cpu.lower_bound_bytes = 5632;
  cpu.peak_step = 3;
  plan.layouts.push_back(cpu);
  plan.outside[MemoryClass::kParameter] = 1024;
  plan.outside[MemoryClass::kGradient] = 1024;
  plan.outside[MemoryClass::kOptimizerState] = 2048;
  plan.outside[MemoryClass::kInput] = 1024;
  plan.outside[MemoryClass::kConstant] = 16 + 8;
  plan.outside[MemoryClass::kOutput] = 4;
  return plan;
}

TEST(MemoryReportTest, SavedBytesCountEachBufferOnceAndSplitByModule) {
  Graph g = StepGraph();
  MemoryPlan plan = StepPlan(g);
  auto r = BuildMemoryReport(g, plan, "cpu", "step.onnx", {{"batch", 1}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->saved_for_backward_bytes, 3072);
  ASSERT_EQ(r->modules.size(), 2u);
  EXPECT_EQ(r->modules[0].module, "blk.attn");
  EXPECT_EQ(r->modules[0].class_name, "pkg.Attn");
  EXPECT_EQ(r->modules[0].saved_for_backward_bytes, 2048);
  EXPECT_EQ(r->modules[1].module, "blk");
  EXPECT_EQ(r->modules[1].class_name, "pkg.Block");
  EXPECT_EQ(r->modules[1].saved_for_backward_bytes, 1024);
  int64_t sum = 0;
  for (const auto& m : r->modules) sum += m.saved_for_backward_bytes;
  EXPECT_EQ(sum, r->saved_for_backward_bytes);
}

// Without the alias, s is a buffer of its own that the backward reads: 1024 more.
TEST(MemoryReportTest, AViewWithoutAnAliasIsABufferOfItsOwn) {
  Graph g = StepGraph();
  MemoryPlan plan = StepPlan(g);
  plan.alias.erase("s");
  auto r = BuildMemoryReport(g, plan, "cpu", "step.onnx", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->saved_for_backward_bytes, 4096);
}

// A value a recompute node reads is saved just as one a backward node reads: mark g2 recompute
// (it reads b) and g1 optimizer (it reads s): b stays saved, a stays saved through g4.
TEST(MemoryReportTest, RecomputeReadersSaveOptimizerReadersDoNot) {
  Graph g = StepGraph();
  for (Node& n : g.nodes) {
    if (n.outputs[0] == "g2") SetPhase(n, Phase::kRecompute);
    if (n.outputs[0] == "g4") SetPhase(n, Phase::kOptimizer);
  }
  auto r = BuildMemoryReport(g, StepPlan(g), "cpu", "step.onnx", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->saved_for_backward_bytes, 3072);
  for (Node& n : g.nodes)
    if (n.outputs[0] == "g1") SetPhase(n, Phase::kOptimizer);
  r = BuildMemoryReport(g, StepPlan(g), "cpu", "step.onnx", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->saved_for_backward_bytes, 2048);
  EXPECT_EQ(r->flops.recompute, 512);  // g2: a ReduceSum, one add per element of b
}

TEST(MemoryReportTest, StepsSplitLiveBytesByKindAndPeakAtTheBound) {
  Graph g = StepGraph();
  auto r = BuildMemoryReport(g, StepPlan(g), "cpu", "step.onnx", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->steps.size(), 12u);
  const std::vector<int64_t> saved = {1024, 1024, 3072, 3072, 3072, 3072,
                                      3072, 3072, 3072, 2048, 0,    0};
  const std::vector<int64_t> transient = {0,    0,    0,    2048, 2048, 1024,
                                          1024, 2048, 2048, 1280, 1536, 1280};
  for (size_t s = 0; s < 12; ++s) {
    EXPECT_EQ(r->steps[s].saved, saved[s]) << "step " << s;
    EXPECT_EQ(r->steps[s].transient, transient[s]) << "step " << s;
    EXPECT_EQ(r->steps[s].workspace, s == 3 ? 512 : 0) << "step " << s;
    EXPECT_EQ(r->steps[s].phase, s < 5 ? Phase::kForward : Phase::kBackward) << "step " << s;
  }
  EXPECT_EQ(r->steps[3].Total(), 5632);
  EXPECT_EQ(r->layout.peak_node, g.nodes[3].name);

  ASSERT_EQ(r->largest_at_peak.size(), 3u);  // a, b, h live at step 3
  EXPECT_EQ(r->largest_at_peak[0].value, "b");
  EXPECT_EQ(r->largest_at_peak[0].bytes, 2048);
  EXPECT_TRUE(r->largest_at_peak[0].saved);
  EXPECT_EQ(r->largest_at_peak[0].module, "blk.attn");
  EXPECT_EQ(r->largest_at_peak[0].phase, "forward");
  EXPECT_EQ(r->largest_at_peak[0].dtype, "f32");
  EXPECT_EQ(r->largest_at_peak[1].value, "h");
  EXPECT_FALSE(r->largest_at_peak[1].saved);
  EXPECT_EQ(r->largest_at_peak[2].value, "a");
  EXPECT_EQ(r->largest_at_peak[2].module, "blk");
}

TEST(MemoryReportTest, FlopsOfMatMulGemmAndFusedMatMulAreExact) {
  auto g = ParseGraph(R"(graph g {
  input a : f32[3,4,5]
  input b : f32[5,6]
  input at : f32[5,4]
  input bt : f32[2,5,4]
  const s : i64[1] = [72]
  y = MatMul(a, b)
  z = Gemm(at, b) {transA=1}
  f = com.microsoft::FusedMatMul(bt, b) {transA=1}
  r = Relu(y) marks{phase="backward"}
  v = Reshape(r, s) marks{phase="backward"}
  o = Relu(z) marks{phase="optimizer"}
  k = Constant() {value=tensor(f32[2] = [1, 2])} marks{phase="backward"}
  output v
  output f
  output o
  output k
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  EXPECT_EQ(NodeFlops(*g, g->nodes[0]), 2 * 3 * 4 * 6 * 5);  // three 4x5 @ 5x6
  EXPECT_EQ(NodeFlops(*g, g->nodes[1]), 2 * 4 * 6 * 5);      // (5x4)^T @ 5x6
  EXPECT_EQ(NodeFlops(*g, g->nodes[2]), 2 * 2 * 4 * 6 * 5);  // two (5x4)^T @ 5x6
  EXPECT_EQ(NodeFlops(*g, g->nodes[3]), 72);                 // one per output element
  EXPECT_EQ(NodeFlops(*g, g->nodes[4]), 0);                  // a view copies nothing
  FlopCounts f = CountFlops(*g);
  EXPECT_EQ(f.forward, 720 + 240 + 480);  // unmarked nodes count as forward
  EXPECT_EQ(f.backward, 72);              // the optimizer's Relu is left out
  EXPECT_EQ(f.recompute, 0);
}

// The ops' formulas: per output element, per input element, variadic ops, Gemm's bias.
TEST(MemoryReportTest, FlopsOfOtherOpsFollowTheTable) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[4,8]
  input y : f32[4,8]
  input z : f32[4,8]
  input s : f32[8]
  input bias : f32[6]
  input w : f32[8,6]
  input labels : i64[4]
  input idx : i64[3]
  input tuples : i64[3,1]
  input dy : f32[3,8]
  const shape : i64[2] = [4, 8]
  sm = Softmax(x) {axis=-1}
  ln = LayerNormalization(x, s, s) {axis=-1}
  gl = com.microsoft::Gelu(x)
  fg = com.microsoft::FastGeluGrad(dy, dy)
  sum3 = Sum(x, y, z)
  mean3 = Mean(x, y, z)
  max1 = Max(x)
  rs = ReduceSum(x) {keepdims=0}
  loss = SoftmaxCrossEntropyLoss(x, labels) {reduction="mean"}
  gg = com.microsoft::GatherGrad(shape, idx, dy)
  gn = com.microsoft::GatherNDGrad(shape, tuples, dy)
  nd = GatherND(x, tuples)
  const axis : i64[] = [1]
  cs = CumSum(x, axis)
  og = Gelu(x)
  ot = Gelu(x) {approximate="tanh"}
  tr = Transpose(x) {perm=[1, 0]}
  gb = Gemm(x, w, bias)
  output sm
  output ln
  output gl
  output fg
  output sum3
  output mean3
  output max1
  output rs
  output loss
  output gg
  output gn
  output nd
  output cs
  output og
  output ot
  output tr
  output gb
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  std::map<std::string, int64_t> flops;
  for (const Node& n : g->nodes) flops[n.outputs[0]] = NodeFlops(*g, n);
  EXPECT_EQ(flops["sm"], 5 * 32);
  EXPECT_EQ(flops["ln"], 7 * 32);
  EXPECT_EQ(flops["gl"], 5 * 32);
  EXPECT_EQ(flops["fg"], 18 * 24);
  EXPECT_EQ(flops["sum3"], 2 * 32);               // two adds per element for three inputs
  EXPECT_EQ(flops["mean3"], 3 * 32);              // and one scale
  EXPECT_EQ(flops["max1"], 0);                    // one input: a copy
  EXPECT_EQ(flops["rs"], 32);                     // per element reduced, not per (scalar) output
  EXPECT_EQ(flops["loss"], 5 * 32);               // the log-softmax over the logits
  EXPECT_EQ(flops["gg"], 24);                     // one add per element of dY (input 2)
  EXPECT_EQ(flops["gn"], 24);                     // the same for GatherNDGrad
  EXPECT_EQ(flops["nd"], 0);                      // data movement
  EXPECT_EQ(flops["cs"], 32);                     // one add per element
  EXPECT_EQ(flops["og"], 5 * 32);                 // ai.onnx Gelu: com.microsoft Gelu's formula
  EXPECT_EQ(flops["ot"], 9 * 32);                 // approximate="tanh": FastGelu's
  EXPECT_EQ(flops["tr"], 0);                      // data movement
  EXPECT_EQ(flops["gb"], 2 * 4 * 6 * 8 + 4 * 6);  // 2·M·N·K and the bias add
}

// Every op foundry knows has a FLOP formula with its schema: no op falls back silently.
TEST(MemoryReportTest, EveryOpHasAFlopFormula) {
  for (const OpSchema* op : OpSchemas().All())
    EXPECT_TRUE(op->flops) << op->domain << "::" << op->op_type << " has no FLOP formula";
}

TEST(MemoryReportTest, JsonHasEverySchemaKey) {
  Graph g = StepGraph();
  MemoryPlan plan = StepPlan(g);
  auto r = BuildMemoryReport(g, plan, "cpu", "step.onnx", {{"batch", 1}, {"seq", 512}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto j = nlohmann::json::parse(MemoryReportJson(*r));
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("model"), "step.onnx");
  EXPECT_EQ(j.at("dims"), (nlohmann::json{{"batch", 1}, {"seq", 512}}));
  const auto& m = j.at("memory");
  EXPECT_EQ(m.at("arena_bytes"), 5632);
  EXPECT_EQ(m.at("lower_bound_bytes"), 5632);
  EXPECT_EQ(m.at("peak_step"), 3);
  EXPECT_EQ(m.at("peak_node"), g.nodes[3].name);
  EXPECT_EQ(m.at("saved_for_backward_bytes"), 3072);
  EXPECT_EQ(m.at("saved_for_backward_by_dtype"), (nlohmann::json{{"f32", 3072}}));
  EXPECT_EQ(m.at("parameter_bytes"), 1024);
  EXPECT_EQ(m.at("gradient_bytes"), 1024);
  EXPECT_EQ(m.at("optimizer_state_bytes"), 2048);
  EXPECT_EQ(m.at("input_bytes"), 1024);
  EXPECT_EQ(m.at("constant_bytes"), 24);
  EXPECT_EQ(m.at("total_bytes"), 5632 + 1024 + 1024 + 2048 + 1024 + 24 + 4);
  const auto& f = j.at("flops");
  // Mul, Reshape (a view: 0), Concat (a copy: 0), Exp, ReduceSum (per element of its input).
  EXPECT_EQ(f.at("forward"), 256 + 0 + 0 + 512 + 512);
  // g1 Mul, g1f view, g3 Mul, g4 Add, g2 ReduceSum over b, g2l scalar Mul, w_grad Mul.
  EXPECT_EQ(f.at("backward"), 256 + 0 + 256 + 256 + 512 + 1 + 256);
  EXPECT_EQ(f.at("recompute"), 0);
  ASSERT_EQ(j.at("modules").size(), 2u);
  EXPECT_EQ(j.at("modules")[0], (nlohmann::json{{"module", "blk.attn"},
                                                {"class", "pkg.Attn"},
                                                {"saved_for_backward_bytes", 2048}}));
}

TEST(MemoryReportTest, TextNamesTheNumbersAndTheValuesAtThePeak) {
  Graph g = StepGraph();
  auto r = BuildMemoryReport(g, StepPlan(g), "cpu", "step.onnx", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::string text = FormatMemoryReport(*r);
  EXPECT_NE(text.find("saved for backward 3.0 KiB (3072 B)"), std::string::npos) << text;
  EXPECT_NE(text.find("   2.0 KiB  saved      forward    f32   blk.attn  b\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("   2.0 KiB  transient  forward    f32   blk.attn  h\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("512 B  workspace of '" + g.nodes[3].name + "'"), std::string::npos) << text;
  EXPECT_NE(text.find("2.0 KiB  blk.attn  Attn\n"), std::string::npos) << text;
}

// Equal bytes list in natural order: blocks.2 before blocks.10, as --list-modules shows them.
TEST(MemoryReportTest, TiesListInNaturalOrder) {
  auto g = ParseGraph(R"(graph g {
  input x : f32[256]
  p = Exp(x) @"blocks.10" marks{phase="forward"}
  q = Exp(x) @"blocks.2" marks{phase="forward"}
  loss = ReduceSum(x) {keepdims=0} marks{phase="forward"}
  y = Add(p, q) marks{phase="backward"}
  output loss
  output y
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(FoldPass({}).Run(*g).ok());
  MemoryPlan plan;
  BackendLayout cpu;
  cpu.backend = "cpu";
  cpu.workspace_bytes.assign(4, 0);
  cpu.workspace_offsets.assign(4, -1);
  cpu.peak_step = 3;
  plan.layouts.push_back(cpu);
  auto r = BuildMemoryReport(*g, plan, "cpu", "m", {});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->modules.size(), 2u);
  EXPECT_EQ(r->modules[0].module, "blocks.2");
  EXPECT_EQ(r->modules[1].module, "blocks.10");
  ASSERT_EQ(r->largest_at_peak.size(), 2u);
  EXPECT_EQ(r->largest_at_peak[0].value, "p");
}

TEST(MemoryReportTest, UnknownBackendIsAnError) {
  Graph g = StepGraph();
  auto r = BuildMemoryReport(g, StepPlan(g), "cuda", "step.onnx", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "memory report: the plan holds no layout for backend 'cuda'; plan for it first");
}

}  // namespace
}  // namespace foundry
