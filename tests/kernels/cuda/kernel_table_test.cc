// The CUDA op table against the CPU one (no GPU needed: the tables are host data): every op the
// CPU backend runs has a CUDA kernel, no op is registered twice, and the matrix products plan
// cuBLAS's workspace.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "tests/support/test_util.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

#ifdef FOUNDRY_HAVE_CUDA

TEST(CudaKernelTableTest, EveryCpuOpHasACudaKernel) {
  std::vector<std::string> missing;
  for (const auto& row : CpuKernels().rows())
    if (!CudaKernels().Find(row.domain, row.op_type))
      missing.push_back((row.domain.empty() ? "" : row.domain + "::") + row.op_type);
  EXPECT_TRUE(missing.empty()) << ::testing::PrintToString(missing);
  EXPECT_TRUE(CudaKernels().duplicates().empty())
      << ::testing::PrintToString(CudaKernels().duplicates());
  EXPECT_TRUE(CudaWorkspaces().duplicates().empty());
  EXPECT_GE(CudaKernels().rows().size(), CpuKernels().rows().size());
}

TEST(CudaKernelTableTest, MissingKernelsAreNamedPerGraph) {
  Graph g;
  g.nodes.push_back(MakeNode("MatMul", {"a", "b"}, {"c"}));
  g.nodes.push_back(MakeNode("NoSuchOp", {"c"}, {"d"}, {}, "com.example"));
  g.nodes.push_back(MakeNode("NoSuchOp", {"d"}, {"e"}, {}, "com.example"));
  EXPECT_EQ(MissingCudaKernels(g), std::vector<std::string>{"com.example::NoSuchOp"});
}

TEST(CudaKernelTableTest, MatrixProductsPlanTheCublasWorkspace) {
  Graph g;
  for (const char* name : {"a", "b", "c"}) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = DType::kFloat32;
    v.shape = {4, 4};
    v.rank_known = true;
  }
  g.nodes.push_back(MakeNode("MatMul", {"a", "b"}, {"c"}));
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes[0]), kCublasWorkspaceBytes);
  g.nodes[0] = MakeNode("Add", {"a", "b"}, {"c"});
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes[0]), 0);
}

// GatherNDGrad sorts its index tuples in the workspace (one key per tuple, one slot per dX row);
// an attribute the schema would reject gives no figure rather than an overflow.
TEST(CudaKernelTableTest, GatherNDGradPlansItsSortWorkspace) {
  Graph g;
  for (auto [name, dt, shape] : {std::tuple<const char*, DType, Shape>{"s", DType::kInt64, {3}},
                                 {"i", DType::kInt64, {2, 7, 1}},
                                 {"dy", DType::kFloat32, {2, 7, 4}},
                                 {"dx", DType::kFloat32, {2, 5, 4}}}) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = dt;
    v.shape = shape;
    v.rank_known = true;
  }
  Node n = MakeNode("GatherNDGrad", {"s", "i", "dy"}, {"dx"}, {{"batch_dims", Attribute::Int(1)}},
                    "com.microsoft");
  g.nodes.push_back(n);
  // 14 keys, 10 slots (2 x 5 rows of 4): keys, count, start, unsorted, sorted, 256-byte rounded.
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes[0]), 5 * 256);
  g.nodes[0].attrs["batch_dims"] = Attribute::Int(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes[0]), 0);
}

// ScatterElements sorts its index elements by the data element each one targets: one key per
// index, one slot per data element.
TEST(CudaKernelTableTest, ScatterElementsPlansItsSortWorkspace) {
  Graph g;
  for (auto [name, dt, shape] :
       {std::tuple<const char*, DType, Shape>{"x", DType::kFloat32, {4, 50}},
        {"i", DType::kInt32, {4, 100}},
        {"u", DType::kFloat32, {4, 100}},
        {"y", DType::kFloat32, {4, 50}}}) {
    Value& v = g.GetOrAddValue(name);
    v.dtype = dt;
    v.shape = shape;
    v.rank_known = true;
  }
  g.nodes.push_back(
      MakeNode("ScatterElements", {"x", "i", "u"}, {"y"}, {{"axis", Attribute::Int(1)}}));
  // 400 keys (3200 bytes -> 3328), 200 counts (1600 -> 1792), 201 starts (1608 -> 1792), 400
  // unsorted and 400 sorted (3328 each).
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes[0]), 3 * 3328 + 2 * 1792);
  g.nodes[0].op_type = "Scatter";
  g.nodes[0].attrs.clear();
  EXPECT_EQ(CudaWorkspaceBytes(g, g.nodes[0]), 3 * 3328 + 2 * 1792);
}

#else

TEST(CudaKernelTableTest, EveryCpuOpHasACudaKernel) {
  GTEST_SKIP() << "built without CUDA (-DFOUNDRY_CUDA=OFF or no nvcc)";
}

#endif

}  // namespace
}  // namespace foundry
