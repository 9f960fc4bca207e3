// The device gradient norm and clipping (kernels/cuda/grad_norm.h) against the CPU's
// (kernels/cpu/grad_norm.h), bitwise: the norm and every clipped gradient, over tensors whose sizes
// are and are not multiples of the block. Needs a GPU (skips without one).
#include "kernels/cpu/grad_norm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/support/cuda_check.h"

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/grad_norm.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

TEST(CudaGradNormTest, EqualsCpuBitwise) {
  FOUNDRY_REQUIRE_GPU();
#ifdef FOUNDRY_HAVE_CUDA
  auto sb = cuda::CreateStreamAndBlas();
  ASSERT_TRUE(sb.ok());
  const std::vector<int64_t> sizes = {1, 255, 8192, 8193, 100003, 3'000'007, 0, 64};
  for (double max_norm : {0.0, 0.25, 1e9}) {
    std::vector<std::vector<float>> host;
    std::vector<float*> dev;
    std::mt19937_64 rng(11);
    for (int64_t n : sizes) {
      std::normal_distribution<float> d(0.f, 1e-2f);
      host.emplace_back(static_cast<size_t>(n));
      for (float& x : host.back()) x = d(rng);
      void* p = nullptr;
      ASSERT_TRUE(cuda::DeviceAlloc(n > 0 ? 4 * n : 4, &p, sb->stream, "grad").ok());
      ASSERT_TRUE(cuda::CopyToDevice(p, host.back().data(), 4 * n, sb->stream, "grad").ok());
      dev.push_back(static_cast<float*>(p));
    }
    const int64_t scratch_bytes = CudaGradNormScratchBytes(sizes);
    void* scratch = nullptr;
    ASSERT_TRUE(cuda::DeviceAlloc(scratch_bytes, &scratch, sb->stream, "scratch").ok());
    StatusOr<const float*> norm_dev =
        CudaGradNorm(dev, sizes, max_norm, scratch, scratch_bytes, sb->stream);
    ASSERT_TRUE(norm_dev.ok()) << norm_dev.status().message();
    float norm = 0;
    ASSERT_TRUE(cuda::CopyToHost(&norm, *norm_dev, 4, sb->stream, "norm").ok());
    // The CPU: sums, scalars, scaling.
    std::vector<double> sums;
    for (const auto& h : host)
      sums.push_back(SumOfSquares(h.data(), static_cast<int64_t>(h.size())));
    const ClipScalars c = ClipScalarsFromSums(sums, max_norm);
    EXPECT_EQ(std::memcmp(&norm, &c.total_norm, 4), 0) << norm << " vs " << c.total_norm;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (max_norm > 0 && c.clip_coef != 1.0f) ScaleInPlace(host[i].data(), sizes[i], c.clip_coef);
      std::vector<float> back(static_cast<size_t>(sizes[i]));
      ASSERT_TRUE(cuda::CopyToHost(back.data(), dev[i], 4 * sizes[i], sb->stream, "grad").ok());
      EXPECT_EQ(std::memcmp(back.data(), host[i].data(), 4 * sizes[i]), 0)
          << "tensor " << i << " max_norm " << max_norm;
      cuda::DeviceFree(dev[i]);
    }
    cuda::DeviceFree(scratch);
  }
  cuda::DestroyStreamAndBlas(*sb);
#endif
}

}  // namespace
}  // namespace foundry
