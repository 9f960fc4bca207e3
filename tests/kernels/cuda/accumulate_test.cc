// foundry::AccumulateGradient on CUDA (kernels/cuda/accumulate.cu) against the CPU kernel, bitwise:
// three microbatches with unequal scales (first `=`, then `+=` into the device gradient), sizes
// that are not multiples of the 256-thread block. Needs a GPU (skips without one).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "tests/support/cuda_check.h"
#include "tests/support/test_util.h"

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

#ifdef FOUNDRY_HAVE_CUDA
TEST(CudaAccumulateGradientTest, BitwiseTheCpuKernel) {
  FOUNDRY_REQUIRE_GPU();
  const Node node = MakeNode("AccumulateGradient", {"p"}, {"g"}, {}, "foundry");
  const std::vector<float> scales = {3.f / 17.f, 5.f / 17.f, 9.f / 17.f};
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{100003}}) {
    std::mt19937_64 rng(static_cast<uint64_t>(n));
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<std::vector<float>> partials(scales.size(), std::vector<float>(n));
    for (auto& p : partials)
      for (float& x : p) x = d(rng);
    // The CPU kernel.
    std::vector<float> cpu(static_cast<size_t>(n));
    Tensor cpu_out = Tensor::View(DType::kFloat32, {n}, cpu.data());
    for (size_t k = 0; k < scales.size(); ++k) {
      Tensor in = Tensor::View(DType::kFloat32, {n}, partials[k].data());
      const Tensor* ins[] = {&in};
      Tensor* outs[] = {&cpu_out};
      KernelContext ctx;
      ctx.grad_scale = scales[k];
      ctx.grad_accumulate = k > 0;
      ASSERT_TRUE(RunCpuKernel(node, ins, outs, ctx).ok());
    }
    // The CUDA kernel on device copies.
    auto stream = cuda::CreateStreamAndBlas();
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    void* dp = nullptr;
    void* dg = nullptr;
    const int64_t bytes = n * static_cast<int64_t>(sizeof(float));
    ASSERT_TRUE(cuda::DeviceAlloc(bytes, &dp, stream->stream, "partial").ok());
    ASSERT_TRUE(cuda::DeviceAlloc(bytes, &dg, stream->stream, "gradient").ok());
    ASSERT_TRUE(cuda::DeviceMemset(dg, 0xff, bytes, stream->stream, "gradient").ok());  // NaN
    Tensor gpu_in = Tensor::View(DType::kFloat32, {n}, dp);
    Tensor gpu_out = Tensor::View(DType::kFloat32, {n}, dg);
    for (size_t k = 0; k < scales.size(); ++k) {
      ASSERT_TRUE(
          cuda::CopyToDevice(dp, partials[k].data(), bytes, stream->stream, "partial").ok());
      const Tensor* ins[] = {&gpu_in};
      Tensor* outs[] = {&gpu_out};
      CudaKernelContext ctx;
      ctx.stream = stream->stream;
      ctx.cublas = stream->cublas;
      ctx.base.grad_scale = scales[k];
      ctx.base.grad_accumulate = k > 0;
      Status st = RunCudaKernel(node, ins, outs, ctx);
      ASSERT_TRUE(st.ok()) << st.message();
    }
    std::vector<float> gpu(static_cast<size_t>(n));
    ASSERT_TRUE(cuda::CopyToHost(gpu.data(), dg, bytes, stream->stream, "gradient").ok());
    cuda::DeviceFree(dp);
    cuda::DeviceFree(dg);
    cuda::DestroyStreamAndBlas(*stream);
    EXPECT_TRUE(BitwiseEqual(cpu.data(), gpu.data(), n)) << "n " << n;
  }
}
#else
TEST(CudaAccumulateGradientTest, BitwiseTheCpuKernel) { GTEST_SKIP() << "built without CUDA"; }
#endif

}  // namespace
}  // namespace foundry
