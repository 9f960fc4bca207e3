// The CUDA backend's device query: compiled whenever nvcc is found; skips without a GPU (fails
// under FOUNDRY_REQUIRE_GPU=1, as every GPU test).
#include <gtest/gtest.h>

#include "tests/support/cuda_check.h"

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(CudaDeviceTest, DescribesEveryDevice) {
  FOUNDRY_REQUIRE_GPU();
#ifdef FOUNDRY_HAVE_CUDA
  int count = CudaDeviceCount();
  for (int i = 0; i < count; ++i)
    EXPECT_NE(CudaDeviceDescription(i).find(" (sm_"), std::string::npos)
        << CudaDeviceDescription(i);
#endif
}

}  // namespace
}  // namespace foundry
