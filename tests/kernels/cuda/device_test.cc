// The CUDA backend's device query: compiled whenever nvcc is found; skips without a GPU.
#include <gtest/gtest.h>

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif

namespace foundry {
namespace {

TEST(CudaDeviceTest, DescribesEveryDevice) {
#ifndef FOUNDRY_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA (-DFOUNDRY_CUDA=OFF or no nvcc)";
#else
  int count = CudaDeviceCount();
  if (count == 0) GTEST_SKIP() << CudaDeviceDescription(0);
  for (int i = 0; i < count; ++i)
    EXPECT_NE(CudaDeviceDescription(i).find(" (sm_"), std::string::npos)
        << CudaDeviceDescription(i);
#endif
}

}  // namespace
}  // namespace foundry
