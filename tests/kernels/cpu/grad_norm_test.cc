// The gradient norm and clipping on the CPU (kernels/cpu/grad_norm.h): the documented summation
// order (spelled here again, one element at a time), the same bits at 1, 2 and 4 threads, the
// accuracy of the sums, torch's f32 roundings of the clip coefficient, and the backend operation
// (runtime/cpu_backend.h ClipGradNorm) on several tensors. Against torch.nn.utils.clip_grad_norm_
// on real gradients: tests/runtime/clip_grad_norm_reference_test.py.
#include "kernels/cpu/grad_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "runtime/cpu_backend.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::vector<float> Random(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// The order of grad_norm.h, one element at a time: lanes of each block, their tree, then the
// partials in lanes and their tree.
double Tree(std::vector<double> lanes) {
  for (size_t s = lanes.size() / 2; s >= 1; s /= 2)
    for (size_t l = 0; l < s; ++l) lanes[l] += lanes[l + s];
  return lanes[0];
}
double ReferenceSum(const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<double> partials;
  for (int64_t begin = 0; begin < n; begin += kNormBlock) {
    std::vector<double> lanes(kNormLanes, 0.0);
    for (int64_t i = begin; i < std::min(n, begin + kNormBlock); ++i)
      lanes[static_cast<size_t>((i - begin) % kNormLanes)] +=
          static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
    partials.push_back(Tree(lanes));
  }
  if (partials.empty()) return 0.0;
  std::vector<double> lanes(kNormLanes, 0.0);
  for (size_t i = 0; i < partials.size(); ++i) lanes[i % kNormLanes] += partials[i];
  return Tree(lanes);
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class GradNormTest : public ::testing::Test {
 protected:
  void TearDown() override { SetCpuThreads(1); }
};

TEST_F(GradNormTest, SumFollowsTheDocumentedOrder) {
  for (int64_t n : {0, 1, 255, 257, 8191, 8192, 8193, 100003, (1 << 20) + 17}) {
    const std::vector<float> x = Random(n, static_cast<uint64_t>(n) + 1, 0.3f);
    EXPECT_TRUE(SameBits(SumOfSquares(x.data(), n), ReferenceSum(x))) << "n " << n;
  }
}

TEST_F(GradNormTest, SameBitsAtOneTwoAndFourThreads) {
  const int64_t n = 3'000'007;  // 367 blocks, 92 chunks
  const std::vector<float> x = Random(n, 5, 1e-2f);
  SetCpuThreads(1);
  const double one = SumOfSquares(x.data(), n);
  for (int threads : {2, 4}) {
    SetCpuThreads(threads);
    EXPECT_TRUE(SameBits(SumOfSquares(x.data(), n), one)) << threads << " threads";
  }
}

// Squares are exact in double and each add rounds once: the sum is within n * 2^-53 (relative)
// of the exact one (long double's 64-bit mantissa is the reference here).
TEST_F(GradNormTest, SumIsAccurate) {
  const int64_t n = 1'000'003;
  const std::vector<float> x = Random(n, 9, 3.f);
  long double exact = 0;
  for (float v : x) exact += static_cast<long double>(v) * v;
  const double got = SumOfSquares(x.data(), n);
  EXPECT_LE(std::fabs(static_cast<long double>(got) - exact) / exact, 1e-14L);
}

// clip_coef = max_norm / (total + 1e-6) as torch rounds it: f32 add, f32 reciprocal, f32 product;
// clamp at 1.
TEST_F(GradNormTest, ClipCoefficientRoundsAsTorch) {
  const float total = 2.5f;
  const float shifted = total + static_cast<float>(1e-6);
  EXPECT_EQ(ClipCoefficient(total, 1.0), (1.0f / shifted) * 1.0f);
  EXPECT_EQ(ClipCoefficient(total, 0.3), (1.0f / shifted) * static_cast<float>(0.3));
  EXPECT_EQ(ClipCoefficient(total, 10.0), 1.0f);
  EXPECT_EQ(ClipCoefficient(0.0f, 1.0), 1.0f);
  EXPECT_TRUE(std::isnan(ClipCoefficient(NAN, 1.0)));
  EXPECT_EQ(ClipCoefficient(INFINITY, 1.0), 0.0f);
}

// Per-tensor norms are f32 before they are combined (torch stacks f32 norms).
TEST_F(GradNormTest, TotalCombinesF32Norms) {
  const double sums[] = {2.0, 3.0, 0.0};
  const ClipScalars c = ClipScalarsFromSums(sums, 0);
  const double a = static_cast<float>(std::sqrt(2.0)), b = static_cast<float>(std::sqrt(3.0));
  EXPECT_EQ(c.total_norm, static_cast<float>(std::sqrt(a * a + b * b)));
  EXPECT_EQ(c.clip_coef, 1.0f);
  EXPECT_EQ(ClipScalarsFromSums({}, 1.0).total_norm, 0.0f);
}

TEST_F(GradNormTest, CpuBackendClipsInPlace) {
  Tensor a(DType::kFloat32, {3, 4}), b(DType::kFloat32, {5});
  const std::vector<float> av = Random(12, 1, 1.f), bv = Random(5, 2, 2.f);
  std::memcpy(a.raw(), av.data(), 48);
  std::memcpy(b.raw(), bv.data(), 20);
  Tensor* grads[] = {&a, &b};
  Region none;
  // Measuring only (max_norm 0): nothing changes.
  StatusOr<float> norm = GetCpuBackend().ClipGradNorm(grads, 0, none);
  ASSERT_TRUE(norm.ok()) << norm.status().message();
  const double sums[] = {ReferenceSum(av), ReferenceSum(bv)};
  EXPECT_EQ(*norm, ClipScalarsFromSums(sums, 0).total_norm);
  EXPECT_EQ(std::memcmp(a.raw(), av.data(), 48), 0);
  // Above the norm: multiplied by 1, the same bits.
  ASSERT_EQ(*GetCpuBackend().ClipGradNorm(grads, 2.0 * *norm, none), *norm);
  EXPECT_EQ(std::memcmp(b.raw(), bv.data(), 20), 0);
  // Below: every element times the f32 coefficient.
  const float coef = ClipCoefficient(*norm, 0.5);
  ASSERT_EQ(*GetCpuBackend().ClipGradNorm(grads, 0.5, none), *norm);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(a.data<float>()[i], av[static_cast<size_t>(i)] * coef);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.data<float>()[i], bv[static_cast<size_t>(i)] * coef);
  // The clipped norm is max_norm (within the 1e-6 and f32 roundings).
  EXPECT_NEAR(*GetCpuBackend().ClipGradNorm(grads, 0, none), 0.5, 1e-6);
  Tensor h(DType::kFloat16, {2});
  Tensor* bad[] = {&h};
  EXPECT_EQ(GetCpuBackend().ClipGradNorm(bad, 1, none).status().message(),
            "cpu backend: a gradient is f16[2]; the gradient norm reads f32 gradients only");
}

}  // namespace
}  // namespace foundry
