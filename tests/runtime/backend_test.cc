// The backend interface on the CPU backend (runtime/cpu_backend.h): regions come from the
// accounting allocator, aligned and counted under their class, and go back when dropped; copies
// check types; the planner's spec is the kernels' workspace figure. And the planned executor
// refuses a plan that has no layout for its backend.
#include <gtest/gtest.h>

#include "compiler/text.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "runtime/cpu_backend.h"
#include "runtime/executor.h"

namespace foundry {
namespace {

TEST(CpuBackendTest, RegionsAreAlignedCountedAndFreed) {
  CpuBackend& b = GetCpuBackend();
  EXPECT_EQ(b.name(), "cpu");
  const int64_t before = b.Bytes()[MemoryClass::kArena].live;
  {
    auto r = b.Allocate(1000, MemoryClass::kArena, "the arena");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % kArenaAlignment, 0u);
    EXPECT_EQ(r->bytes(), 1000);
    EXPECT_EQ(r->memory_class(), MemoryClass::kArena);
    EXPECT_EQ(b.Bytes()[MemoryClass::kArena].live - before, 1000);
    Region moved = std::move(r).value();
    EXPECT_EQ(b.Bytes()[MemoryClass::kArena].live - before, 1000);
  }
  EXPECT_EQ(b.Bytes()[MemoryClass::kArena].live, before);
  auto huge = b.Allocate(kMaxTensorBytes + 1, MemoryClass::kArena, "the arena");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(),
            "cannot allocate 1099511627777 bytes for the arena on cpu: one region may hold at most "
            "1099511627776 (1 TiB)");
}

TEST(CpuBackendTest, CopiesCheckTypes) {
  CpuBackend& b = GetCpuBackend();
  Tensor host = Tensor::FromVector<float>(DType::kFloat32, {2}, {1.5f, -2});
  auto r = b.Allocate(8, MemoryClass::kInput, "input 'x'");
  ASSERT_TRUE(r.ok());
  Tensor dev = Tensor::View(DType::kFloat32, {2}, r->data());
  ASSERT_TRUE(b.CopyIn(host, dev).ok());
  Tensor back(DType::kFloat32, {2});
  ASSERT_TRUE(b.CopyOut(dev, back).ok());
  EXPECT_TRUE(back.BitwiseEqual(host));
  Tensor wrong(DType::kInt32, {2});
  EXPECT_EQ(b.CopyIn(wrong, dev).message(), "cpu backend: cannot copy in i32[2] into f32[2]");
  Tensor longer(DType::kFloat32, {3});
  EXPECT_EQ(b.CopyOut(dev, longer).message(), "cpu backend: cannot copy out f32[2] into f32[3]");
}

TEST(CpuBackendTest, SpecIsTheKernelsWorkspace) {
  auto g = ParseGraph(R"(graph sm opset=17 {
  input x : f32[4,8]
  y = Softmax(x) {axis=1}
  output y
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  const BackendSpec spec = GetCpuBackend().Spec();
  EXPECT_EQ(spec.name, "cpu");
  const Node& n = g->nodes.at(0);
  EXPECT_EQ(spec.workspace(*g, n), CpuWorkspaceBytes(*g, n));
}

TEST(ExecutorTest, RefusesAPlanWithoutThisBackend) {
  auto g = ParseGraph(R"(graph wb opset=17 {
  input x : f32[2,4]
  param w : f32[4,2]
  const axes : i64[2] = [0, 1]
  y = MatMul(x, w)
  loss = ReduceSum(y, axes) {keepdims=0}
  output loss
})");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(RunPasses(*g, BuildPipeline(CompileOptions{}), PipelineOptions{}).ok());
  auto plan = PlanMemory(*g, {{"cuda", [](const Graph&, const Node&) { return int64_t{0}; }}});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  Tensor w(DType::kFloat32, {4, 2});
  auto e = Executor::Create(*g, *plan, GetCpuBackend(), {{"w", &w}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(),
            "the memory plan has no layout for the cpu backend (planned for: cuda); recompile it "
            "with foundry-compile for this backend");
  // The same plan for the cpu backend runs.
  plan = PlanMemory(*g, {GetCpuBackend().Spec()});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  e = Executor::Create(*g, *plan, GetCpuBackend(), {{"w", &w}});
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_NE((*e)->input("x"), nullptr);
  EXPECT_EQ((*e)->input("w"), nullptr);  // a parameter, not an input
  EXPECT_TRUE((*e)->Run(KernelContext{}).ok());
}

}  // namespace
}  // namespace foundry
