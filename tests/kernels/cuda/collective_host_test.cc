// kernels/cuda/collective.cu without a GPU (the tables and the argument checks run on the host):
// the three collective ops have CUDA kernels, their workspace figures are those of docs/design.md §10, and a
// kernel run without a communicator says what is missing before it touches any memory.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "tests/support/test_util.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

#ifdef FOUNDRY_HAVE_CUDA

void AddF32(Graph& g, const std::string& name, Shape shape) {
  Value& v = g.GetOrAddValue(name);
  v.dtype = DType::kFloat32;
  v.shape = std::move(shape);
  v.rank_known = true;
}

Attribute World(int64_t n) { return Attribute::Int(n); }

TEST(CudaCollectiveHostTest, EveryCollectiveHasAKernel) {
  for (const char* op : {"AllGather", "ReduceScatterGradient", "AllReduceGradient"})
    EXPECT_NE(CudaKernels().Find("foundry", op), nullptr) << op;
}

// kernels/cpu/collective_workspace.cc, each region rounded up to 256 bytes (R): AllGather needs
// R(N*c_i*4) bytes for each output whose numel is not N*c_i (gathered into scratch, then its first
// numel_i copied out), nothing for one that divides evenly; ReduceScatterGradient 2*R(N*c*4)
// (send, receive); AllReduceGradient 3*R(N*c*4) (and the gather).
int64_t R(int64_t bytes) { return (bytes + 255) / 256 * 256; }

TEST(CudaCollectiveHostTest, WorkspaceIsTheContractsFigure) {
  Graph g;
  AddF32(g, "s1", {3});  // of [5] over 2 ranks: c = 3, N*c = 6 != 5 -> 24 bytes
  AddF32(g, "f1", {5});
  AddF32(g, "s2", {4});  // of [2, 4] over 2 ranks: c = 4, N*c = 8 -> in place
  AddF32(g, "f2", {2, 4});
  AddF32(g, "s3", {34});  // of [10, 10] over 3 ranks: c = 34, N*c = 102 -> 408 bytes
  AddF32(g, "f3", {10, 10});
  AddF32(g, "s4", {2});  // of [5] over 3 ranks: c = 2, N*c = 6 != 5 -> 24 bytes
  g.nodes.push_back(
      MakeNode("AllGather", {"s1", "s2"}, {"f1", "f2"}, {{"world_size", World(2)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), R(2 * 3 * 4));
  g.nodes.push_back(MakeNode("AllGather", {"s2"}, {"f2"}, {{"world_size", World(2)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 0);
  g.nodes.push_back(
      MakeNode("AllGather", {"s4", "s3"}, {"f1", "f3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), R(3 * 2 * 4) + R(3 * 34 * 4));
  g.nodes.push_back(
      MakeNode("ReduceScatterGradient", {"f3"}, {"s3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 2 * R(3 * 34 * 4));
  g.nodes.push_back(
      MakeNode("AllReduceGradient", {"f3"}, {"f3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 3 * R(3 * 34 * 4));
  g.nodes.push_back(
      MakeNode("AllReduceGradient", {"f1"}, {"f1"}, {{"world_size", World(1)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 3 * R(5 * 4));
}

TEST(CudaCollectiveHostTest, WithoutACommunicatorTheKernelSaysSo) {
  // Host memory stands in for the device's: the kernel refuses before it reads any of it.
  std::vector<float> a(10), b(10);
  std::vector<std::byte> ws(3 * R(2 * 5 * 4));
  Tensor partial = Tensor::View(DType::kFloat32, {10}, a.data());
  Tensor grad = Tensor::View(DType::kFloat32, {10}, b.data());
  Tensor shard = Tensor::View(DType::kFloat32, {5}, b.data());
  for (const char* op : {"AllGather", "ReduceScatterGradient", "AllReduceGradient"}) {
    const Node node = MakeNode(op, {"x"}, {"y"}, {{"world_size", World(2)}}, "foundry");
    const std::string o = op;
    const Tensor* in[] = {o == "AllGather" ? &shard : &partial};
    Tensor* out[] = {o == "ReduceScatterGradient" ? &shard : &grad};
    CudaKernelContext ctx;
    ctx.base.workspace = ws;
    Status st = RunCudaKernel(node, in, out, ctx);
    EXPECT_EQ(st.message(), node.Describe() +
                                ": a collective op needs the run's communicator (on --device "
                                "cuda: NCCL, runtime/nccl_communicator.h)");
  }
}

#else

TEST(CudaCollectiveHostTest, EveryCollectiveHasAKernel) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace foundry
