// foundry::AccumulateGradient on the CPU (kernels/cpu/accumulate.cc) over seeded random partials of
// several sizes (1, odd, around and past the parallel chunk of 2^15): K microbatches with unequal
// scales against a double reference sum_k s_k p_k (atol + rtol |ref|), and bitwise against the
// kernel's own two roundings per element done one by one in f32 (product, then sum); the same bits
// at 1 and 4 threads; the first microbatch never reads the storage's old bits (poisoned by every
// test binary), the others add into it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Runs K microbatches of the kernel into `grad` (its old contents whatever they are).
void Accumulate(const std::vector<std::vector<float>>& partials, const std::vector<float>& scales,
                std::vector<float>& grad) {
  const Node node = MakeNode("AccumulateGradient", {"p"}, {"g"}, {}, "foundry");
  const int64_t n = static_cast<int64_t>(grad.size());
  Tensor out = Tensor::View(DType::kFloat32, {n}, grad.data());
  for (size_t k = 0; k < partials.size(); ++k) {
    Tensor in = Tensor::View(DType::kFloat32, {n}, const_cast<float*>(partials[k].data()));
    const Tensor* ins[] = {&in};
    Tensor* outs[] = {&out};
    KernelContext ctx;
    ctx.grad_scale = scales[k];
    ctx.grad_accumulate = k > 0;
    Status st = RunCpuKernel(node, ins, outs, ctx);
    ASSERT_TRUE(st.ok()) << st.message();
  }
}

TEST(AccumulateGradientKernelTest, MatchesTheReferenceOverSizes) {
  const std::vector<float> scales = {3.f / 17.f, 5.f / 17.f, 9.f / 17.f};  // n_k / N
  for (int64_t n :
       {int64_t{1}, int64_t{7}, int64_t{1} << 15, (int64_t{1} << 15) + 5, int64_t{100003}}) {
    std::vector<std::vector<float>> partials;
    for (size_t k = 0; k < scales.size(); ++k) partials.push_back(Random(n, 10 * n + k));
    std::vector<float> grad(static_cast<size_t>(n), 12345.f);  // old bits: never read at k = 0
    Accumulate(partials, scales, grad);
    for (int64_t i = 0; i < n; ++i) {
      double ref = 0;
      float exact = 0;
      for (size_t k = 0; k < scales.size(); ++k) {
        ref += static_cast<double>(scales[k]) * partials[k][static_cast<size_t>(i)];
        const float scaled = scales[k] * partials[k][static_cast<size_t>(i)];
        exact = k == 0 ? scaled : exact + scaled;
      }
      ASSERT_NEAR(grad[static_cast<size_t>(i)], ref, 1e-6 + 1e-6 * std::abs(ref))
          << "n " << n << " i " << i;
      ASSERT_EQ(std::memcmp(&grad[static_cast<size_t>(i)], &exact, sizeof(float)), 0)
          << "n " << n << " i " << i;
    }
  }
}

TEST(AccumulateGradientKernelTest, SameBitsAtAnyThreadCount) {
  const int64_t n = 5 * (int64_t{1} << 15) + 17;
  std::vector<std::vector<float>> partials = {Random(n, 1), Random(n, 2)};
  std::vector<float> one(static_cast<size_t>(n)), four(static_cast<size_t>(n));
  SetCpuThreads(1);
  Accumulate(partials, {0.25f, 0.75f}, one);
  SetCpuThreads(4);
  Accumulate(partials, {0.25f, 0.75f}, four);
  SetCpuThreads(1);
  EXPECT_TRUE(BitwiseEqual(one.data(), four.data(), n));
}

// The first microbatch is `=`: under the tests' output poisoning (NaN) it still gives finite
// values; an accumulating microbatch adds into what is there.
TEST(AccumulateGradientKernelTest, FirstWritesTheOthersAdd) {
  ASSERT_TRUE(PoisonKernelOutputs());
  std::vector<float> grad = {1.f, 2.f};
  Accumulate({{4.f, 8.f}}, {0.5f}, grad);
  EXPECT_EQ(grad, (std::vector<float>{2.f, 4.f}));
  Accumulate({{4.f, 8.f}, {2.f, -2.f}}, {0.5f, 0.5f}, grad);
  EXPECT_EQ(grad, (std::vector<float>{3.f, 3.f}));
}

TEST(AccumulateGradientKernelTest, RefusesOtherTypes) {
  const Node node = MakeNode("AccumulateGradient", {"p"}, {"g"}, {}, "foundry");
  Tensor in(DType::kFloat64, {2}), out(DType::kFloat64, {2});
  const Tensor* ins[] = {&in};
  Tensor* outs[] = {&out};
  EXPECT_EQ(
      RunCpuKernel(node, ins, outs, KernelContext{}).message(),
      "AccumulateGradient node 'n': accumulates an f32 partial into an f32 gradient of its size");
}

}  // namespace
}  // namespace foundry
