#include "passes/memory_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "compiler/onnx_import.h"
#include "compiler/tensor_proto.h"
#include "compiler/text.h"
#include "kernels/cpu/kernel.h"
#include "passes/fold.h"
#include "passes/pipeline.h"

namespace fs = std::filesystem;

namespace foundry {
namespace FOUNDRY_TEST_NS {

Graph Typed(const std::string& text) {
  auto g = ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().message();
  if (!g.ok()) return Graph();
  Status st = FoldPass({}).Run(*g).status();
  EXPECT_TRUE(st.ok()) << st.message();
  return *g;
}

MemoryPlan Plan(const Graph& g, std::vector<BackendSpec> backends = {{"cpu", nullptr}}) {
  auto plan = PlanMemory(g, backends);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : MemoryPlan();
}

std::string CheckMessage(const Graph& g, const MemoryPlan& plan) {
  Status st = CheckMemoryPlan(g, plan);
  return st.ok() ? "ok" : st.message();
}

// Reshape, then Identity of the reshape: both are views of the Exp output (the chain collapses
// to the owner), which is the one arena buffer, live until the last reader of either view.
TEST(MemoryPlanTest, ViewChainAliasesTheOwner) {
  Graph g = Typed(R"(graph g {
  input x : f32[4,64]
  const shape : i64[1] = [256]
  a = Exp(x)
  v1 = Reshape(a, shape)
  v2 = Identity(v1)
  s = ReduceSum(v2) {keepdims=0}
  output s
})");
  MemoryPlan plan = Plan(g);
  ASSERT_EQ(plan.alias.size(), 2u);
  EXPECT_EQ(plan.alias.at("v1").owner, "a");
  EXPECT_EQ(plan.alias.at("v1").kind, AliasKind::kView);
  EXPECT_EQ(plan.alias.at("v2").owner, "a");
  EXPECT_EQ(plan.alias.at("v2").kind, AliasKind::kView);
  auto buffers = ArenaBuffers(g, plan);
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].owner, "a");
  EXPECT_EQ(buffers[0].bytes, 1024);
  EXPECT_EQ(buffers[0].first, 0);
  EXPECT_EQ(buffers[0].last, 3);
  const BackendLayout* cpu = plan.Layout("cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->arena_bytes, 1024);
  EXPECT_EQ(cpu->lower_bound_bytes, 1024);
  EXPECT_EQ(cpu->offsets, (std::map<std::string, int64_t>{{"a", 0}}));
  EXPECT_EQ(ClassOf(g, plan, "v2"), MemoryClass::kArena);
  EXPECT_EQ(ClassOf(g, plan, "s"), MemoryClass::kOutput);
  EXPECT_EQ(plan.Layout("cuda"), nullptr);
}

// Expand is a view when it keeps the element count (size-1 axes only: the same bytes in the same
// order), and a buffer of its own when it repeats elements. Both then run on the CPU backend.
TEST(MemoryPlanTest, ExpandKeepingTheElementCountIsAView) {
  Graph g = Typed(R"(graph g {
  input x : f32[4,64]
  const lead : i64[3] = [1, 4, 1]
  const rows : i64[2] = [3, 64]
  const rows_axes : i64[1] = [0]
  a = Exp(x)
  v = Expand(a, lead)
  r = ReduceSum(v) {keepdims=0}
  b = ReduceSum(a, rows_axes) {keepdims=1}
  e = Expand(b, rows)
  s = ReduceSum(e) {keepdims=0}
  t = Add(r, s)
  output t
})");
  MemoryPlan plan = Plan(g);
  EXPECT_EQ(g.FindValue("v")->shape, (Shape{1, 4, 64}));
  ASSERT_TRUE(plan.alias.count("v"));
  EXPECT_EQ(plan.alias.at("v").owner, "a");
  EXPECT_EQ(plan.alias.at("v").kind, AliasKind::kView);
  EXPECT_EQ(g.FindValue("e")->shape, (Shape{3, 64}));
  EXPECT_FALSE(plan.alias.count("e")) << "an Expand that repeats rows is not a view";
  EXPECT_EQ(CheckMessage(g, plan), "ok");
}

// A view of a parameter or of an input is an alias of it: no bytes in the arena.
TEST(MemoryPlanTest, ViewOfAParameterOrInputHasNoArenaBytes) {
  Graph g = Typed(R"(graph g {
  input x : f32[2,8]
  param w : f32[16]
  const shape : i64[2] = [8, 2]
  wv = Reshape(w, shape)
  xv = Identity(x)
  y = MatMul(xv, wv)
  s = ReduceSum(y) {keepdims=0}
  gw = Identity(w)
  output s
  output gw
})");
  MemoryPlan plan = Plan(g);
  EXPECT_EQ(plan.alias.at("wv").owner, "w");
  EXPECT_EQ(plan.alias.at("xv").owner, "x");
  EXPECT_EQ(ClassOf(g, plan, "wv"), MemoryClass::kParameter);
  EXPECT_EQ(ClassOf(g, plan, "xv"), MemoryClass::kInput);
  // gw is the gradient output: never an alias even though Identity is a view op.
  EXPECT_EQ(plan.alias.count("gw"), 0u);
  EXPECT_EQ(ClassOf(g, plan, "gw"), MemoryClass::kGradient);
  auto buffers = ArenaBuffers(g, plan);
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].owner, "y");
  EXPECT_EQ(plan.outside[MemoryClass::kParameter], 64);
  EXPECT_EQ(plan.outside[MemoryClass::kGradient], 64);
  EXPECT_EQ(plan.outside[MemoryClass::kOptimizerState], 128);
  EXPECT_EQ(plan.outside[MemoryClass::kInput], 64);
  EXPECT_EQ(plan.outside[MemoryClass::kOutput], 4);
  EXPECT_EQ(plan.outside[MemoryClass::kConstant], 16);
  EXPECT_EQ(plan.TotalBytes(*plan.Layout("cpu")), 256 + 64 + 64 + 128 + 64 + 4 + 16);
}

// In place only where the input's buffer dies at the node: b = Neg(a) cannot take a's buffer
// (c still reads a), c = Add(a, b) can (a and b both die there; input 0 is tried first).
TEST(MemoryPlanTest, InPlaceOnlyWhenTheInputDiesThere) {
  Graph g = Typed(R"(graph g {
  input x : f32[256]
  a = Exp(x)
  b = Neg(a)
  c = Add(a, b)
  d = Sqrt(c)
  s = ReduceSum(d) {keepdims=0}
  output s
})");
  MemoryPlan plan = Plan(g);
  EXPECT_EQ(plan.alias.count("b"), 0u);
  ASSERT_EQ(plan.alias.count("c"), 1u);
  EXPECT_EQ(plan.alias.at("c").owner, "a");
  EXPECT_EQ(plan.alias.at("c").kind, AliasKind::kInPlace);
  ASSERT_EQ(plan.alias.count("d"), 1u);  // c dies at d: d takes the same buffer, owner a
  EXPECT_EQ(plan.alias.at("d").owner, "a");
  auto buffers = ArenaBuffers(g, plan);
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].owner, "a");
  EXPECT_EQ(buffers[0].last, 4);
  EXPECT_EQ(buffers[1].owner, "b");
  EXPECT_EQ(buffers[1].last, 2);
  EXPECT_EQ(plan.Layout("cpu")->arena_bytes, 2048);
  EXPECT_EQ(plan.Layout("cpu")->lower_bound_bytes, 2048);
}

// Mul(a, a) reads one buffer through two inputs, and Add(v, a) through a view and its owner:
// neither may write over it.
TEST(MemoryPlanTest, NoInPlaceWhenAnotherInputSharesTheBuffer) {
  Graph g = Typed(R"(graph g {
  input x : f32[256]
  const shape : i64[2] = [16, 16]
  const back : i64[1] = [256]
  a = Exp(x)
  m = Mul(a, a)
  e = Exp(m)
  v = Reshape(e, shape)
  vb = Reshape(v, back)
  c = Add(vb, e)
  s = ReduceSum(c) {keepdims=0}
  output s
})");
  MemoryPlan plan = Plan(g);
  EXPECT_EQ(plan.alias.count("m"), 0u);
  EXPECT_EQ(plan.alias.count("c"), 0u);
  EXPECT_EQ(plan.alias.at("vb").owner, "m");  // through e, which took m's buffer
  // e = Exp(m) may take m's buffer (m dies there): shows the refusals above are the sharing rule.
  EXPECT_EQ(plan.alias.at("e").owner, "m");
}

// A broadcast input does not have the output's shape: not written over, even when it dies there;
// the other input may be.
TEST(MemoryPlanTest, NoInPlaceOverABroadcastInput) {
  Graph g = Typed(R"(graph g {
  input x : f32[64]
  input big : f32[4,64]
  a = Exp(x)
  c = Add(a, big)
  b = Exp(big)
  a2 = Neg(x)
  d = Mul(a2, b)
  s = ReduceSum(c) {keepdims=0}
  t = ReduceSum(d) {keepdims=0}
  output s
  output t
})");
  MemoryPlan plan = Plan(g);
  EXPECT_EQ(plan.alias.count("c"), 0u);  // a is f32[64], c f32[4,64]; big is an input
  ASSERT_EQ(plan.alias.count("d"), 1u);  // a2 is broadcast, b is not
  EXPECT_EQ(plan.alias.at("d").owner, "b");
}

// A graph output is never an alias: not of a view, not in place.
TEST(MemoryPlanTest, GraphOutputIsNeverAnAlias) {
  Graph g = Typed(R"(graph g {
  input x : f32[256]
  const shape : i64[2] = [16, 16]
  a = Exp(x)
  y = Reshape(a, shape)
  b = Exp(x)
  z = Neg(b)
  output y
  output z
})");
  MemoryPlan plan = Plan(g);
  // b dies where z is made: it is written in z's storage (the other way round, never).
  ASSERT_EQ(plan.alias.size(), 1u);
  EXPECT_EQ(plan.alias.at("b").owner, "z");
  EXPECT_EQ(ClassOf(g, plan, "y"), MemoryClass::kOutput);
  EXPECT_EQ(plan.Layout("cpu")->offsets.count("y"), 0u);
  EXPECT_EQ(plan.Layout("cpu")->offsets.count("z"), 0u);
  EXPECT_EQ(plan.outside[MemoryClass::kOutput], 2048);
}

// A parameter read twice: its first gradient contribution and the partial sum are written in the
// gradient's own storage (memory_plan.h, in place into a graph output), not in the arena.
constexpr const char* kAccumulate = R"(graph g {
  input x : f32[64]
  param w : f32[64]
  a = Mul(x, w)
  s = ReduceSum(a) {keepdims=0}
  c1 = Exp(x)
  u = Sqrt(x)
  g1 = Add(c1, u)
  k = Neg(x)
  gw = Add(g1, k)
  output s
  output gw
})";

TEST(MemoryPlanTest, GradientContributionsAccumulateInTheGradientsStorage) {
  Graph g = Typed(kAccumulate);
  MemoryPlan plan = Plan(g);
  ASSERT_EQ(plan.alias.count("c1"), 1u);
  EXPECT_EQ(plan.alias.at("c1").owner, "gw");
  EXPECT_EQ(plan.alias.at("c1").kind, AliasKind::kInPlace);
  ASSERT_EQ(plan.alias.count("g1"), 1u);
  EXPECT_EQ(plan.alias.at("g1").owner, "gw");
  EXPECT_EQ(plan.alias.at("g1").kind, AliasKind::kInPlace);
  EXPECT_EQ(plan.alias.count("u"), 0u);  // g1's other input: never both in one storage
  EXPECT_EQ(plan.alias.count("k"), 0u);
  EXPECT_EQ(ClassOf(g, plan, "c1"), MemoryClass::kGradient);
  EXPECT_EQ(ClassOf(g, plan, "g1"), MemoryClass::kGradient);
  std::vector<std::string> owners;
  for (const ArenaBuffer& b : ArenaBuffers(g, plan)) owners.push_back(b.owner);
  EXPECT_EQ(owners, (std::vector<std::string>{"a", "u", "k"}));
  EXPECT_EQ(plan.Layout("cpu")->offsets.count("c1"), 0u);
  EXPECT_TRUE(CheckMemoryPlan(g, plan).ok());
}

// The rule holds link by link: a contribution still read after the gradient is made keeps its
// arena buffer.
TEST(MemoryPlanTest, AContributionReadLaterStaysInTheArena) {
  Graph g = Typed(R"(graph g {
  input x : f32[64]
  param w : f32[64]
  a = Mul(x, w)
  s = ReduceSum(a) {keepdims=0}
  c = Exp(x)
  gw = Neg(c)
  t = ReduceSum(c) {keepdims=0}
  output s
  output gw
  output t
})");
  MemoryPlan plan = Plan(g);
  EXPECT_EQ(plan.alias.count("c"), 0u);
  EXPECT_EQ(ClassOf(g, plan, "c"), MemoryClass::kArena);
  // Forged: c in gw's storage would be overwritten at step 3 and read at step 4.
  plan.alias["c"] = {"gw", AliasKind::kInPlace};
  Status st = CheckMemoryPlan(g, plan);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "memory plan: graph output 'gw' is written over 'c' in place at step 3, but 'c' is "
            "read later, at step 4");
}

TEST(MemoryPlanTest, ForgedAliasesIntoAGradientAreRefused) {
  Graph g = Typed(kAccumulate);
  const MemoryPlan good = Plan(g);
  MemoryPlan plan = good;
  // a is read by ReduceSum, which makes the loss: no writer of gw's storage takes it in place.
  plan.alias["a"] = {"gw", AliasKind::kInPlace};
  Status st = CheckMemoryPlan(g, plan);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "memory plan: alias 'a': Mul node 'Mul_0' may not write over the buffer of 'gw'");
  // c1 is made after the loss: in the loss's storage it would overwrite the loss.
  plan = good;
  plan.alias["c1"] = {"s", AliasKind::kInPlace};
  plan.alias["g1"] = {"s", AliasKind::kInPlace};
  st = CheckMemoryPlan(g, plan);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "memory plan: alias 'c1': it is made at step 2, not before graph output 's' (step 1), "
            "whose value it would overwrite");
}

// A backend's workspace is planned at its node's step only, and differs between backends.
TEST(MemoryPlanTest, WorkspaceLivesAtItsStepOnly) {
  Graph g = Typed(R"(graph g {
  input x : f32[256]
  a = Exp(x)
  b = Sqrt(x)
  c = Add(a, b)
  s = ReduceSum(c) {keepdims=0}
  output s
})");
  WorkspaceFn fn = [](const Graph&, const Node& n) -> int64_t {
    return n.op_type == "Sqrt" ? 1000 : 0;
  };
  MemoryPlan plan = Plan(g, {{"plain", nullptr}, {"scratchy", fn}});
  const BackendLayout* plain = plan.Layout("plain");
  const BackendLayout* scratchy = plan.Layout("scratchy");
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(scratchy, nullptr);
  // a and b live together at step 1 (2048); the workspace adds 1024 at step 1 only.
  EXPECT_EQ(plain->lower_bound_bytes, 2048);
  EXPECT_EQ(scratchy->lower_bound_bytes, 3072);
  EXPECT_EQ(scratchy->peak_step, 1);
  EXPECT_EQ(scratchy->arena_bytes, 3072);
  EXPECT_EQ(scratchy->workspace_bytes, (std::vector<int64_t>{0, 1000, 0, 0}));
  EXPECT_EQ(scratchy->workspace_offsets[0], -1);
  EXPECT_EQ(scratchy->workspace_offsets[1] % kArenaAlignment, 0);
  EXPECT_EQ(plain->workspace_bytes, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(CheckMessage(g, plan), "ok");
  EXPECT_TRUE(CheckLayout(g, plan, *scratchy, &fn).ok());
  WorkspaceFn greedy = [](const Graph&, const Node& n) -> int64_t {
    return n.op_type == "Sqrt" ? 2000 : 0;
  };
  EXPECT_EQ(CheckLayout(g, plan, *scratchy, &greedy).message(),
            "memory plan: layout 'scratchy': the workspace of 'Sqrt_1' (step 1) is 1000 bytes; the "
            "backend's kernel needs 2000");
}

TEST(MemoryPlanTest, UnknownShapeIsAnErrorNamingTheValue) {
  auto parsed = ParseGraph(R"(graph g {
  input x : f32[n]
  a = Exp(x)
  s = ReduceSum(a) {keepdims=0}
  output s
})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  auto plan = PlanMemory(*parsed, {{"cpu", nullptr}});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "memory plan: input 'x' has no known shape (f32[n]); bind every symbolic dimension "
            "with --dim NAME=VALUE");
}

// The checker: a valid plan passes; each kind of corruption is refused with its own message.
class MemoryPlanCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ = Typed(R"(graph g {
  input x : f32[256]
  const shape : i64[2] = [16, 16]
  a = Exp(x)
  v = Reshape(a, shape)
  b = Neg(a)
  t = ReduceSum(v) {keepdims=0}
  c = Add(b, t)
  s = ReduceSum(c) {keepdims=0}
  output s
})");
    plan_ = Plan(g_);
    ASSERT_EQ(CheckMessage(g_, plan_), "ok");
  }
  BackendLayout& cpu() { return plan_.layouts.at(0); }

  Graph g_;
  MemoryPlan plan_;
};

TEST_F(MemoryPlanCheckTest, PlannedAsExpected) {
  EXPECT_EQ(plan_.alias.at("v").owner, "a");
  EXPECT_EQ(plan_.alias.count("b"), 0u);  // v is read after b
  EXPECT_EQ(plan_.alias.at("c").owner, "b");
  EXPECT_EQ(cpu().offsets.size(), 3u);  // a, b, t
}

TEST_F(MemoryPlanCheckTest, Overlap) {
  cpu().offsets["b"] = cpu().offsets["a"];
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: layout 'cpu': 'a' at [0, 1024) and 'b' at [0, 1024) overlap at step 2");
}

TEST_F(MemoryPlanCheckTest, Misalignment) {
  cpu().offsets["a"] += 128;
  EXPECT_EQ(CheckMessage(g_, plan_), "memory plan: layout 'cpu': 'a' is at offset " +
                                         std::to_string(cpu().offsets["a"]) +
                                         ", not a non-negative multiple of 256");
}

TEST_F(MemoryPlanCheckTest, OffsetPastTheArena) {
  cpu().offsets["t"] = cpu().arena_bytes;
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: layout 'cpu': 't' at [2304, 2560) ends past the "
            "arena of 2304 bytes");
}

TEST_F(MemoryPlanCheckTest, MissingOffset) {
  cpu().offsets.erase("b");
  EXPECT_EQ(CheckMessage(g_, plan_), "memory plan: layout 'cpu': arena buffer 'b' has no offset");
}

TEST_F(MemoryPlanCheckTest, OffsetOfAnAlias) {
  cpu().offsets["c"] = 0;
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: layout 'cpu': offset given for 'c', which is not an arena buffer");
}

TEST_F(MemoryPlanCheckTest, WrongLowerBound) {
  cpu().lower_bound_bytes -= 256;
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: layout 'cpu': the lower bound is 2048 bytes; its buffers and workspace "
            "need 2304");
}

TEST_F(MemoryPlanCheckTest, ArenaBelowTheBound) {
  cpu().arena_bytes = 1024;
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: layout 'cpu': the arena of 1024 bytes is below the lower bound of 2304");
}

TEST_F(MemoryPlanCheckTest, WrongPeakStep) {
  cpu().peak_step = 5;
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: layout 'cpu': peak step 5 is not a step where the live bytes reach the "
            "lower bound (step 3 is)");
}

// b taking a's buffer in place at step 2 while the view v of a is read at step 3.
TEST_F(MemoryPlanCheckTest, ViewOutlivesItsOwner) {
  plan_.alias["b"] = {"a", AliasKind::kInPlace};
  plan_.alias["c"] = {"a", AliasKind::kInPlace};
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: view 'v' of 'a' is read at step 3, after 'b' took the buffer in place "
            "at step 2");
}

TEST_F(MemoryPlanCheckTest, InPlaceRules) {
  plan_.alias.erase("c");
  plan_.alias["t"] = {"a", AliasKind::kInPlace};  // ReduceSum writes over nothing
  EXPECT_EQ(
      CheckMessage(g_, plan_),
      "memory plan: alias 't': ReduceSum node 'ReduceSum_3' may not write over the buffer of 'a'");
  plan_.alias.erase("t");
  plan_.alias["c"] = {"b", AliasKind::kInPlace};
  plan_.alias["b"] = {"a", AliasKind::kInPlace};
  EXPECT_EQ(CheckMessage(g_, plan_), "memory plan: alias 'c': its owner 'b' is itself an alias");
}

TEST_F(MemoryPlanCheckTest, AliasTheRulesDoNotAllow) {
  plan_.alias["b"] = {"a", AliasKind::kView};
  EXPECT_EQ(CheckMessage(g_, plan_), "memory plan: alias 'b': Neg node 'Neg_2' is not a view op");
  plan_.alias.erase("b");
  plan_.alias["s"] = {"c", AliasKind::kInPlace};
  EXPECT_EQ(CheckMessage(g_, plan_), "memory plan: alias 's': a graph output is never an alias");
  plan_.alias.erase("s");
  plan_.alias["c"] = {"t", AliasKind::kInPlace};  // t is f32[] (broadcast): not in place
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: alias 'c': input 't' is f32[] but the output is f32[256]");
}

TEST_F(MemoryPlanCheckTest, ScheduleIsNotTheGraph) {
  std::swap(plan_.schedule[1], plan_.schedule[2]);
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: step 1 of the schedule is 'Neg_2'; the graph runs 'Reshape_1' there");
  plan_.schedule.pop_back();
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: the schedule has 5 steps; the graph has 6 nodes");
}

// A plan file's workspace figure beyond any machine is refused before any sum could overflow.
TEST_F(MemoryPlanCheckTest, AbsurdWorkspace) {
  cpu().workspace_bytes[0] = INT64_MAX;
  cpu().workspace_offsets[0] = 0;
  EXPECT_EQ(CheckMessage(g_, plan_),
            "memory plan: layout 'cpu': the workspace of 'Exp_0' (step 0) is 9223372036854775807 "
            "bytes");
}

TEST_F(MemoryPlanCheckTest, OutsideFigures) {
  plan_.outside[MemoryClass::kInput] = 4;
  EXPECT_EQ(CheckMessage(g_, plan_), "memory plan: input_bytes is 4; the graph needs 1024");
}

// b = Neg(a) cannot take a's buffer: Add reads a after it.
TEST(MemoryPlanTest, CheckerRefusesInPlaceOverAnInputReadLater) {
  Graph g = Typed(R"(graph g {
  input x : f32[256]
  a = Exp(x)
  b = Neg(a)
  c = Add(a, b)
  s = ReduceSum(c) {keepdims=0}
  output s
})");
  MemoryPlan plan = Plan(g);
  ASSERT_EQ(plan.alias.count("b"), 0u);
  plan.alias.erase("c");
  plan.alias["b"] = {"a", AliasKind::kInPlace};
  EXPECT_EQ(CheckMessage(g, plan),
            "memory plan: alias 'b' (in place) takes the buffer of 'a' at step 1, but 'a' is read "
            "later, at step 2");
  plan.alias["c"] = {"a", AliasKind::kInPlace};
  EXPECT_EQ(
      CheckMessage(g, plan),
      "memory plan: alias 'c': inputs 'a' and 'b' of Add node 'Add_2' share the buffer of 'a'");
}

// ---- every fixture, compiled as foundry-compile does -----------------------------------------

struct Planned {
  int64_t arena = 0, bound = 0;
  double ms = 0;
  size_t aliases = 0;
};

Planned PlanCompiled(Graph& g) {
  auto start = std::chrono::steady_clock::now();
  auto plan = PlanMemory(g, {{"cpu", CpuWorkspaceBytes}});
  Planned p;
  p.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return p;
  Status st = CheckMemoryPlan(g, *plan);
  EXPECT_TRUE(st.ok()) << st.message();
  p.arena = plan->layouts.at(0).arena_bytes;
  p.bound = plan->layouts.at(0).lower_bound_bytes;
  p.aliases = plan->alias.size();
  return p;
}

// Every fixture at its own dims and at the batch 4 x seq 64 users run (bert_tiny and gpt2_tiny
// have learned position tables of 32 rows: seq 32 there).
TEST(MemoryPlanFixturesTest, EveryFixtureWithinFivePercentOfTheBound) {
  fs::path root = fs::path(FOUNDRY_SOURCE_DIR) / "models" / "fixtures";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(root)) {
    fs::path model = e.path() / "model.onnx";
    if (!fs::exists(e.path() / "inputs" / "input_ids.pb")) continue;
    SCOPED_TRACE(model.string());
    auto ids = ReadTensorFile((e.path() / "inputs" / "input_ids.pb").string());
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    const std::string name = e.path().filename().string();
    const int64_t user_seq = name == "bert_tiny" || name == "gpt2_tiny" ? 32 : 64;
    for (const auto& [batch, seq] :
         {std::pair{ids->shape()[0], ids->shape()[1]}, std::pair{int64_t{4}, user_seq}}) {
      std::map<std::string, int64_t> dims = {{"batch", batch}, {"seq", seq}};
      auto g = ImportOnnx(model.string(), {.dims = dims});
      ASSERT_TRUE(g.ok()) << g.status().message();
      CompileOptions options;
      options.fold.dims = dims;
      ASSERT_TRUE(RunPasses(*g, BuildPipeline(options), {}).ok());
      Planned p = PlanCompiled(*g);
      const double ratio = static_cast<double>(p.arena) / static_cast<double>(p.bound);
      std::printf(
          "%-20s %lld x %-3lld arena %9lld  bound %9lld  ratio %.4f  aliases %zu  %.1f ms\n",
          name.c_str(), static_cast<long long>(batch), static_cast<long long>(seq),
          static_cast<long long>(p.arena), static_cast<long long>(p.bound), ratio, p.aliases, p.ms);
      EXPECT_LE(ratio, 1.05) << name << " at batch " << batch << " x seq " << seq;
      EXPECT_GT(p.aliases, 0u);
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

// The MPT structure exports (no weights) at batch 1 and their full sequence length.
// The big no-weights exports at their full sequence length and at the sizes users run.
TEST(MemoryPlanFixturesTest, MptStructureExportsWithinFivePercentOfTheBound) {
  const std::pair<const char*, int64_t> exports[] = {
      {"mpt_125m", 256}, {"mpt_125m", 512}, {"mpt_125m", 1024},  {"mpt_125m", 2048},
      {"mpt_1b", 256},   {"mpt_1b", 512},   {"mpt_1b", 1024},    {"mpt_1b", 2048},
      {"mpt_7b", 256},   {"mpt_7b", 512},   {"mpt_7b", 1024},    {"mpt_7b", 2048},
      {"mpt_30b", 2048}, {"mpt_30b", 8192}, {"gpt2_124m", 1024}, {"pythia_160m", 2048},
      {"bert_base", 512}};
  for (const auto& [name, seq] : exports) {
    fs::path model =
        fs::path(FOUNDRY_SOURCE_DIR) / "models" / "exports" / (std::string(name) + ".onnx");
    SCOPED_TRACE(model.string());
    ASSERT_TRUE(fs::exists(model));
    std::map<std::string, int64_t> dims = {{"batch", 1}, {"seq", seq}};
    auto g = ImportOnnx(model.string(), {.dims = dims});
    ASSERT_TRUE(g.ok()) << g.status().message();
    CompileOptions options;
    options.fold.dims = dims;
    ASSERT_TRUE(RunPasses(*g, BuildPipeline(options), {}).ok());
    Planned p = PlanCompiled(*g);
    const double ratio = static_cast<double>(p.arena) / static_cast<double>(p.bound);
    std::printf(
        "%-10s seq %5lld  arena %12.2f MiB  bound %12.2f MiB  ratio %.4f  nodes %zu  "
        "plan %.1f ms\n",
        name, static_cast<long long>(seq), p.arena / 1048576.0, p.bound / 1048576.0, ratio,
        g->nodes.size(), p.ms);
    EXPECT_LE(ratio, 1.05);
  }
}

}  // namespace
}  // namespace foundry
