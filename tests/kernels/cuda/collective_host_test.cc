// kernels/cuda/collective.cu without a GPU (the tables and the argument checks run on the host):
// the three collective ops have CUDA kernels, their workspace figures are those of
// docs/design.md §10 (the CPU's, f32 and bf16, at most one bucket per region), and a kernel run
// without a communicator says what is missing before it touches any memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <vector>

#include "kernels/cpu/collective.h"
#include "kernels/cpu/kernel.h"
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

// kernels/cpu/collective_workspace.cc, each region one exchange of N*b elements of e bytes
// (b = min(c, floor(8 MiB / (N*e)))) rounded up to 256 bytes (R): AllGather needs the largest
// R(N*c_i*e_i) among the outputs whose numel is not N*c_i (gathered into scratch, then the first
// numel_i copied out), nothing when all divide evenly; ReduceScatterGradient 2*R (send, receive);
// AllReduceGradient 3*R (and the gather); bf16 is not staged (the kernels take it themselves).
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
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), std::max(R(3 * 2 * 4), R(3 * 34 * 4)));
  g.nodes.push_back(
      MakeNode("ReduceScatterGradient", {"f3"}, {"s3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 2 * R(3 * 34 * 4));
  g.nodes.push_back(
      MakeNode("AllReduceGradient", {"f3"}, {"f3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 3 * R(3 * 34 * 4));
  g.nodes.push_back(
      MakeNode("AllReduceGradient", {"f1"}, {"f1"}, {{"world_size", World(1)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 3 * R(5 * 4));
  // bf16 partials and shards: 2-byte elements, no staging copies.
  AddF32(g, "h3", {10, 10});
  g.FindValue("h3")->dtype = DType::kBFloat16;
  AddF32(g, "hs", {34});
  g.FindValue("hs")->dtype = DType::kBFloat16;
  g.nodes.push_back(
      MakeNode("ReduceScatterGradient", {"h3"}, {"s3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 2 * R(3 * 34 * 2));
  g.nodes.push_back(
      MakeNode("AllReduceGradient", {"h3"}, {"f3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), 3 * R(3 * 34 * 2));
  g.nodes.push_back(MakeNode("AllGather", {"hs"}, {"h3"}, {{"world_size", World(3)}}, "foundry"));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes.back()), R(3 * 34 * 2));
  for (const Node& n : g.nodes) EXPECT_EQ(CudaWorkspaceBytes(g, n), CpuWorkspaceBytes(g, n));
}

// A 50257 x 4096 embedding over 3 ranks: each region is one bucket (b = floor(8 MiB / (3*e))
// elements per rank, 3*b*e rounded up to exactly 8 MiB), whatever the element type.
TEST(CudaCollectiveHostTest, WorkspaceOfAHugeTensorIsBoundedByTheBucket) {
  const int64_t B = kCollectiveBucketBytes, numel = int64_t{50257} * 4096;
  const int64_t c = (numel + 2) / 3;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    Graph g;
    AddF32(g, "p", {50257, 4096});
    g.FindValue("p")->dtype = t;
    AddF32(g, "s", {c});
    g.FindValue("s")->dtype = t;
    AddF32(g, "g", {c});
    AddF32(g, "full", {50257, 4096});
    const std::map<std::string, Attribute> three = {{"world_size", World(3)}};
    EXPECT_EQ(
        CudaWorkspaceBytes(g, MakeNode("ReduceScatterGradient", {"p"}, {"g"}, three, "foundry")),
        2 * B);
    EXPECT_EQ(
        CudaWorkspaceBytes(g, MakeNode("AllReduceGradient", {"p"}, {"full"}, three, "foundry")),
        3 * B);
    EXPECT_EQ(CudaWorkspaceBytes(g, MakeNode("AllGather", {"s"}, {"p"}, three, "foundry")), B);
  }
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

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry
