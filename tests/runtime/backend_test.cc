// The backend interface on the CPU backend (runtime/cpu_backend.h): regions come from the
// accounting allocator, aligned and counted under their class, and go back when dropped; copies
// check types; the planner's spec is the kernels' workspace figure; the step's end (the finite
// check, the optimizer) is the CPU updates'. A backend's allocation error carries its own reason.
// The CUDA backend's host-side pieces (FOUNDRY_CUDA_SYNC, the node it names). And the planned
// executor refuses a plan that has no layout for its backend.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "compiler/text.h"
#include "kernels/cpu/optimizer.h"
#include "passes/memory_plan.h"
#include "passes/pipeline.h"
#include "runtime/cpu_backend.h"
#include "runtime/cuda_backend.h"
#include "runtime/executor.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

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

TEST(CpuBackendTest, CopiesAndZeroesWithinTheBackend) {
  CpuBackend& b = GetCpuBackend();
  auto r = b.Allocate(16, MemoryClass::kOther, "scratch");
  ASSERT_TRUE(r.ok());
  Tensor x = Tensor::View(DType::kFloat32, {2}, r->data());
  Tensor y = Tensor::View(DType::kFloat32, {2}, r->data() + 8);
  ASSERT_TRUE(b.CopyIn(Tensor::FromVector<float>(DType::kFloat32, {2}, {3, -4}), x).ok());
  ASSERT_TRUE(b.Copy(x, y).ok());
  EXPECT_TRUE(y.BitwiseEqual(x));
  ASSERT_TRUE(b.Zero(x).ok());
  EXPECT_TRUE(x.BitwiseEqual(Tensor(DType::kFloat32, {2})));
  EXPECT_EQ(y.data<float>()[1], -4.f);
  Tensor longer(DType::kFloat32, {3});
  EXPECT_EQ(b.Copy(x, longer).message(), "cpu backend: cannot copy f32[2] into f32[3]");
}

TEST(CpuBackendTest, HostSideOfBackendTensorsIsTheTensorItself) {
  CpuBackend& b = GetCpuBackend();
  EXPECT_TRUE(b.host_memory());
  Tensor t = Tensor::FromVector<float>(DType::kFloat32, {2}, {1, 2});
  auto read = b.ReadableOnHost(t);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->is_view());
  EXPECT_EQ(read->raw(), t.raw());
  Tensor staging = b.HostStaging(t);
  EXPECT_EQ(staging.raw(), t.raw());
  EXPECT_TRUE(b.CopyIn(staging, t).ok());  // the same bytes: nothing to move
  auto status = b.AllocateStepStatus(5);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->bytes(), 0);
}

// The step's end on the CPU: the loss and one finite flag over the loss and the gradients, and the
// optimizer update bitwise AdamWUpdate / SgdUpdate, naming the first parameter it made non-finite.
TEST(CpuBackendTest, CheckStepAndApplyOptimizer) {
  CpuBackend& b = GetCpuBackend();
  Region status;
  Tensor loss = Tensor::Scalar(2.5f);
  Tensor g1 = Tensor::FromVector<float>(DType::kFloat32, {3}, {0.5f, -1, 2});
  Tensor g2 = Tensor::FromVector<float>(DType::kFloat32, {2}, {1, 1});
  std::vector<const Tensor*> grads = {&g1, &g2};
  auto c = b.CheckStep(loss, grads, status);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->loss, 2.5f);
  EXPECT_TRUE(c->finite);
  g2.data<float>()[1] = NAN;
  EXPECT_FALSE(b.CheckStep(loss, grads, status)->finite);
  g2.data<float>()[1] = 1;
  EXPECT_FALSE(b.CheckStep(Tensor::Scalar(INFINITY), grads, status)->finite);

  OptimizerOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  Tensor p1 = Tensor::FromVector<float>(DType::kFloat32, {3}, {1, 2, 3});
  Tensor p2 = Tensor::FromVector<float>(DType::kFloat32, {2}, {-1, 4});
  Tensor m1(DType::kFloat32, {3}), v1(DType::kFloat32, {3}), m2(DType::kFloat32, {2}),
      v2(DType::kFloat32, {2});
  std::vector<float> want1 = {1, 2, 3}, wm1(3), wv1(3);
  ASSERT_TRUE(AdamWUpdate(o, 1, want1.data(), g1.data<float>(), wm1.data(), wv1.data(), 3));
  std::vector<ParameterUpdate> updates = {{&p1, &g1, &m1, &v1}, {&p2, &g2, &m2, &v2}};
  auto bad = b.ApplyOptimizer(o, 1, updates, status);
  ASSERT_TRUE(bad.ok()) << bad.status().message();
  EXPECT_FALSE(bad->has_value());
  EXPECT_TRUE(p1.BitwiseEqual(Tensor::FromVector<float>(DType::kFloat32, {3}, want1)));
  EXPECT_TRUE(m1.BitwiseEqual(Tensor::FromVector<float>(DType::kFloat32, {3}, wm1)));
  EXPECT_TRUE(v1.BitwiseEqual(Tensor::FromVector<float>(DType::kFloat32, {3}, wv1)));

  // SGD without momentum keeps no slot. An lr that overflows fp32 makes both parameters
  // non-finite: the first is named.
  o.kind = OptimizerKind::kSgd;
  o.lr = 1e300;
  updates = {{&p1, &g1, nullptr, nullptr}, {&p2, &g2, nullptr, nullptr}};
  bad = b.ApplyOptimizer(o, 2, updates, status);
  ASSERT_TRUE(bad.ok());
  ASSERT_TRUE(bad->has_value());
  EXPECT_EQ(**bad, 0u);
  // Only the second: the first parameter's gradient is zero, the second is pushed past the f32
  // maximum.
  Tensor zero(DType::kFloat32, {3});
  Tensor fine = Tensor::FromVector<float>(DType::kFloat32, {3}, {1, 2, 3});
  Tensor huge = Tensor::FromVector<float>(DType::kFloat32, {2}, {3.4e38f, 3.4e38f});
  Tensor push = Tensor::FromVector<float>(DType::kFloat32, {2}, {-1e38f, -1e38f});
  updates = {{&fine, &zero, nullptr, nullptr}, {&huge, &push, nullptr, nullptr}};
  o.lr = 10;
  bad = b.ApplyOptimizer(o, 1, updates, status);
  ASSERT_TRUE(bad.ok());
  ASSERT_TRUE(bad->has_value());
  EXPECT_EQ(**bad, 1u);
}

// A backend's reason for having no memory reaches the message, whatever it is (the CUDA backend
// passes the CUDA error through; the CPU says "out of memory").
class RefusingBackend final : public Backend {
 public:
  std::string_view name() const override { return "refusing"; }
  int64_t WorkspaceBytes(const Graph&, const Node&) const override { return 0; }
  Status Run(const Node&, std::span<const Tensor* const>, std::span<Tensor* const>,
             std::span<std::byte>, const KernelContext&) override {
    return Status::Ok();
  }
  Status CopyIn(const Tensor&, Tensor&) override { return Status::Ok(); }
  Status CopyOut(const Tensor&, Tensor&) override { return Status::Ok(); }
  Status Copy(const Tensor&, Tensor&) override { return Status::Ok(); }
  Status Zero(Tensor&) override { return Status::Ok(); }
  StatusOr<StepCheck> CheckStep(const Tensor&, std::span<const Tensor* const>, Region&) override {
    return StepCheck{};
  }
  StatusOr<std::optional<size_t>> ApplyOptimizer(const OptimizerOptions&, int64_t,
                                                 std::span<const ParameterUpdate>,
                                                 Region&) override {
    return std::optional<size_t>();
  }
  MemorySnapshot Bytes() const override { return {}; }
  void ResetPeaks() override {}

 protected:
  StatusOr<std::byte*> AllocateBytes(int64_t, MemoryClass) override {
    return Error("cudaMalloc failed: an illegal memory access was encountered");
  }
  void FreeBytes(std::byte*, int64_t, MemoryClass) override {}
};

TEST(BackendTest, AllocationErrorsCarryTheBackendsReason) {
  RefusingBackend b;
  auto r = b.Allocate(1024, MemoryClass::kArena, "the arena");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "cannot allocate 1024 bytes for the arena on refusing: cudaMalloc failed: an illegal "
            "memory access was encountered");
}

TEST(CudaBackendHostTest, SyncAfterEveryNodeOnlyForOne) {
  EXPECT_FALSE(CudaSyncRequested(nullptr));
  EXPECT_FALSE(CudaSyncRequested(""));
  EXPECT_FALSE(CudaSyncRequested("0"));
  EXPECT_FALSE(CudaSyncRequested("yes"));
  EXPECT_TRUE(CudaSyncRequested("1"));
}

TEST(CudaBackendHostTest, AFaultNamesTheNodeAndItsOp) {
  Node n;
  n.name = "mm";
  n.op_type = "MatMul";
  EXPECT_EQ(CudaNodeFault(n, Error("cudaStreamSynchronize failed: an illegal memory access was "
                                   "encountered"))
                .message(),
            "cuda: node 'mm' (MatMul): cudaStreamSynchronize failed: an illegal memory access was "
            "encountered");
  EXPECT_TRUE(CudaNodeFault(n, Status::Ok()).ok());
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
