#include "runtime/param_init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/hash.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// ---- initialisation ------------------------------------------------------------------------

TEST(InitTest, RuleByName) {
  Tensor bias = InitParameter("blocks.0.attn.Wqkv.bias", {5}, 3);
  Tensor norm = InitParameter("blocks.0.norm_1.weight", {5}, 3);
  Tensor ln = InitParameter("h.0.ln_1.weight", {5}, 3);
  Tensor layer_norm = InitParameter("encoder.LayerNorm.weight", {5}, 3);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(bias.data<float>()[i], 0.f);
    EXPECT_EQ(norm.data<float>()[i], 1.f);
    EXPECT_EQ(ln.data<float>()[i], 1.f);
    EXPECT_EQ(layer_norm.data<float>()[i], 1.f);
  }
  // Rank 2: a matrix is never a norm scale, whatever its name.
  Tensor matrix = InitParameter("norm_proj.weight", {2, 3}, 3);
  EXPECT_NE(matrix.data<float>()[0], 1.f);
}

TEST(InitTest, SeededNormalIsDeterministic) {
  Tensor a = InitParameter("wte.weight", {100, 7}, 1);
  Tensor b = InitParameter("wte.weight", {100, 7}, 1);
  Tensor c = InitParameter("wte.weight", {100, 7}, 2);
  Tensor d = InitParameter("wpe.weight", {100, 7}, 1);
  EXPECT_TRUE(a.BitwiseEqual(b));
  EXPECT_FALSE(a.BitwiseEqual(c));
  EXPECT_FALSE(a.BitwiseEqual(d));
  // A value depends on (seed, name, index) only: a bigger tensor starts with the same values.
  Tensor longer = InitParameter("wte.weight", {200, 7}, 1);
  EXPECT_TRUE(BitwiseEqual(a.data<float>(), longer.data<float>(), a.numel()));
  // Pinned draws of the generator; a change here changes every --no-weights run.
  const uint64_t key = Fnv1a("w");
  EXPECT_EQ(key, 0xaf63ea4c86020456ull);
  // Cross-checked against a pure-Python Philox4x32-10 + Box-Muller.
  const double want[4] = {-0x1.0c15f6519fb4fp-3, 0x1.f30826f2d1b09p-5, 0x1.5336754067cfbp+0,
                          -0x1.fa3ac3b684d64p-3};
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(NormalSample(0, key, i), want[i]) << i;
}

TEST(InitTest, ThreadedFillGivesTheSameBitsAsOneElementAtATime) {
  // Big enough to be split over threads (runtime/param_init.cc: 1 << 18 elements a thread), odd
  // so that the chunks do not end on pairs of draws.
  const int64_t n = (3 << 18) + 5;
  Tensor t = InitParameter("transformer.wte.weight", {n}, 7);
  const uint64_t key = Fnv1a("transformer.wte.weight");
  for (int64_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(0.02 * NormalSample(7, key, static_cast<uint64_t>(i)));
    ASSERT_EQ(std::memcmp(&want, t.data<float>() + i, sizeof want), 0) << "element " << i;
  }
}

TEST(InitTest, NormalStatistics) {
  // 100000 draws of 0.02 * N(0, 1): the mean's standard error is 6.3e-5, the std's 4.5e-5.
  Tensor t = InitParameter("w", {100000}, 0);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    sum += t.data<float>()[i];
    sq += double(t.data<float>()[i]) * t.data<float>()[i];
  }
  double mean = sum / t.numel(), sd = std::sqrt(sq / t.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 4e-4);
  EXPECT_NEAR(sd, 0.02, 3e-4);
}

}  // namespace
}  // namespace foundry
