// The CUDA op table against the CPU one (no GPU needed: the tables are host data): every op the
// CPU backend runs has a CUDA kernel, no op is registered twice, and the matrix products plan
// cuBLAS's workspace.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "tests/support/test_util.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace {

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

#else

TEST(CudaKernelTableTest, EveryCpuOpHasACudaKernel) {
  GTEST_SKIP() << "built without CUDA (-DFOUNDRY_CUDA=OFF or no nvcc)";
}

#endif

}  // namespace
}  // namespace foundry
