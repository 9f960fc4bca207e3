// The device optimizer's per-element updates (kernels/cuda/optimizer.h), run on the host with g++
// (this file is compiled with -ffp-contract=off, as kernels/cpu/optimizer.cc), bitwise against the
// CPU updates AdamWUpdate / SgdUpdate over several steps, with and without weight decay and
// momentum. Needs no GPU: it shows the formula and its roundings are the CPU's; the GPU test shows
// the device computes this formula (__fmul_rn & co. keep nvcc from contracting it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/optimizer.h"
#include "kernels/cuda/optimizer.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

std::vector<float> Random(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaOptimizerMathTest, AdamWElementEqualsAdamWUpdateBitwise) {
  const int64_t n = 1537;
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kDecoupledAdamW})
    for (double wd : {0.0, 0.01, 0.1}) {
      for (double lr : {1e-3, 3e-4}) {
        OptimizerOptions o;
        o.kind = kind;
        o.lr = lr;
        o.initial_lr = 1e-3;  // DecoupledAdamW: the decay scaled by lr / 1e-3
        o.weight_decay = wd;
        std::vector<float> p = Random(n, 1, 1.f), m(n, 0.f), v(n, 0.f);
        std::vector<float> hp = p, hm = m, hv = v;
        for (int64_t step = 1; step <= 6; ++step) {
          const std::vector<float> g = Random(n, 100 + step, step == 3 ? 1e-20f : 0.5f);
          const bool finite = AdamWUpdate(o, step, p.data(), g.data(), m.data(), v.data(), n);
          const opt::AdamWScalars s = opt::AdamWScalarsFor(o, step);
          bool bad = false;
          for (int64_t i = 0; i < n; ++i) bad |= opt::AdamWElement(s, hp[i], g[i], hm[i], hv[i]);
          ASSERT_TRUE(Bitwise(p, hp)) << "param, wd " << wd << " lr " << lr << " step " << step;
          ASSERT_TRUE(Bitwise(m, hm)) << "m, step " << step;
          ASSERT_TRUE(Bitwise(v, hv)) << "v, step " << step;
          EXPECT_EQ(finite, !bad);
          EXPECT_TRUE(finite);
        }
      }
    }
}

TEST(CudaOptimizerMathTest, SgdElementEqualsSgdUpdateBitwise) {
  const int64_t n = 1001;
  for (double wd : {0.0, 0.05}) {
    for (double momentum : {0.0, 0.9}) {
      OptimizerOptions o;
      o.kind = OptimizerKind::kSgd;
      o.lr = 0.05;
      o.weight_decay = wd;
      o.momentum = momentum;
      std::vector<float> p = Random(n, 2, 1.f), buf(n, 0.f);
      std::vector<float> hp = p, hbuf = buf;
      const opt::SgdScalars s = opt::SgdScalarsFor(o);
      for (int step = 1; step <= 5; ++step) {
        const std::vector<float> g = Random(n, 200 + step, 0.3f);
        const bool finite =
            SgdUpdate(o, step == 1, p.data(), g.data(), momentum != 0 ? buf.data() : nullptr, n);
        bool bad = false;
        for (int64_t i = 0; i < n; ++i)
          bad |= opt::SgdElement(s, step == 1, hp[i], g[i], momentum != 0 ? &hbuf[i] : nullptr);
        ASSERT_TRUE(Bitwise(p, hp)) << "wd " << wd << " momentum " << momentum << " step " << step;
        ASSERT_TRUE(Bitwise(buf, hbuf)) << "buffer, step " << step;
        EXPECT_EQ(finite, !bad);
      }
    }
  }
}

TEST(CudaOptimizerMathTest, NonFiniteParametersAreReportedAsOnTheCpu) {
  const int64_t n = 8;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> g = {0.1f, inf, 0.2f, nan, -0.3f, 0.f, 1e30f, -1e-30f};
  OptimizerOptions o;
  std::vector<float> p(n, 1.f), m(n, 0.f), v(n, 0.f), hp = p, hm = m, hv = v;
  const bool finite = AdamWUpdate(o, 1, p.data(), g.data(), m.data(), v.data(), n);
  const opt::AdamWScalars s = opt::AdamWScalarsFor(o, 1);
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) bad |= opt::AdamWElement(s, hp[i], g[i], hm[i], hv[i]);
  EXPECT_FALSE(finite);
  EXPECT_TRUE(bad);
  EXPECT_TRUE(Bitwise(p, hp));  // NaN bits included

  o.kind = OptimizerKind::kSgd;
  o.lr = 0.1;
  std::vector<float> q(n, 1.f), hq = q;
  const bool sgd_finite = SgdUpdate(o, true, q.data(), g.data(), nullptr, n);
  bool sgd_bad = false;
  for (int64_t i = 0; i < n; ++i)
    sgd_bad |= opt::SgdElement(opt::SgdScalarsFor(o), true, hq[i], g[i], nullptr);
  EXPECT_FALSE(sgd_finite);
  EXPECT_TRUE(sgd_bad);
  EXPECT_TRUE(Bitwise(q, hq));
  EXPECT_FALSE(opt::NonFinite(3.f));
  EXPECT_FALSE(opt::NonFinite(std::numeric_limits<float>::max()));
  EXPECT_TRUE(opt::NonFinite(-inf));
  EXPECT_TRUE(opt::NonFinite(nan));
}

}  // namespace
}  // namespace foundry
