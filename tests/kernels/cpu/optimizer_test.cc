// The CPU optimizer updates (kernels/cpu/optimizer.h) against PyTorch's bits, by hand, and
// vectorized against one element at a time.
#include "kernels/cpu/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/support/test_util.h"

namespace foundry {
namespace {

// Reference values from torch 1.13 (torch.optim.AdamW / SGD, foreach=False, CPU, float32):
//   torch.manual_seed(7); p = torch.randn(6) * 0.5; grads = [torch.randn(6) * s for s in (1, .01,
//   5)]
// printed with float.hex().
const std::vector<float> kP0 = {-0x1.2ca2e8p-4f, 0x1.92811cp-2f, 0x1.e4c5cep-2f,
                                -0x1.1d45a6p-1f, 0x1.b0d7a0p-1f, -0x1.ca26e2p-2f};
const std::vector<std::vector<float>> kGrads = {
    {-0x1.6c28f8p-2f, 0x1.3b7da2p+0f, 0x1.1afa44p-3f, -0x1.aea490p+0f, 0x1.454d76p-2f,
     0x1.0ffd1ap-3f},
    {0x1.67fca4p-10f, 0x1.3b49e2p-9f, 0x1.c942e6p-7f, 0x1.b96472p-7f, 0x1.8f79dcp-6f,
     0x1.09c264p-9f},
    {0x1.88162cp+3f, 0x1.4418a8p+3f, 0x1.1caa30p+3f, -0x1.25bce2p+2f, -0x1.25010cp+1f,
     -0x1.cfa9b4p+1f}};

TEST(OptimizerTest, AdamWMatchesTorchBitwise) {
  // AdamW(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
  const std::vector<std::vector<float>> want = {{-0x1.036030p-4f, 0x1.87dca2p-2f, 0x1.da0c44p-2f,
                                                 -0x1.17dde6p-1f, 0x1.ab4a1ap-1f, -0x1.d3ef08p-2f},
                                                {-0x1.cf93d6p-5f, 0x1.809800p-2f, 0x1.d1fb30p-2f,
                                                 -0x1.142fd6p-1f, 0x1.a7265cp-1f, -0x1.da7158p-2f},
                                                {-0x1.01197ap-4f, 0x1.7912f8p-2f, 0x1.cae210p-2f,
                                                 -0x1.0fef88p-1f, 0x1.a9922ep-1f, -0x1.d3a0f2p-2f}};
  const std::vector<float> want_m = {0x1.3253a2p+0f,  0x1.1ce322p+0f,  0x1.cdd646p-1f,
                                     -0x1.30223ap-1f, -0x1.9b9d0ap-3f, -0x1.67ba5ap-2f};
  const std::vector<float> want_v = {0x1.33b8eap-3f, 0x1.aa5cb8p-4f, 0x1.44370cp-4f,
                                     0x1.8766b8p-6f, 0x1.5e0b90p-8f, 0x1.ae8b24p-7f};
  OptimizerOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  std::vector<float> p = kP0, m(6, 0.f), v(6, 0.f);
  for (int s = 0; s < 3; ++s) {
    AdamWUpdate(o, s + 1, p.data(), kGrads[s].data(), m.data(), v.data(), 6);
    EXPECT_TRUE(BitwiseEqual(p.data(), want[s].data(), 6)) << "step " << s + 1;
  }
  EXPECT_TRUE(BitwiseEqual(m.data(), want_m.data(), 6));
  EXPECT_TRUE(BitwiseEqual(v.data(), want_v.data(), 6));
}

TEST(OptimizerTest, SgdMomentumMatchesTorchBitwise) {
  // SGD(lr=0.1, momentum=0.9, weight_decay=0.01)
  const std::vector<std::vector<float>> want = {{-0x1.3557eap-5f, 0x1.13e7d0p-2f, 0x1.d62396p-2f,
                                                 -0x1.8db76ap-2f, 0x1.a024f2p-1f, -0x1.d74b0ep-2f},
                                                {-0x1.7b61a8p-8f, 0x1.42e384p-3f, 0x1.c711d4p-2f,
                                                 -0x1.e64e70p-3f, 0x1.8f739ep-1f, -0x1.e2db4ep-2f},
                                                {-0x1.33c882p+0f, -0x1.e96b90p-1f, -0x1.d5e00cp-2f,
                                                 0x1.6e2d6cp-2f, 0x1.f53afcp-1f, -0x1.e76704p-4f}};
  const std::vector<float> want_buf = {0x1.7ee068p+3f,  0x1.6456c6p+3f,  0x1.210b96p+3f,
                                       -0x1.7cd4e6p+2f, -0x1.fce4d4p+0f, -0x1.c341f0p+1f};
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  std::vector<float> p = kP0, buf(6, 0.f);
  for (int s = 0; s < 3; ++s) {
    SgdUpdate(o, s == 0, p.data(), kGrads[s].data(), buf.data(), 6);
    EXPECT_TRUE(BitwiseEqual(p.data(), want[s].data(), 6)) << "step " << s + 1;
  }
  EXPECT_TRUE(BitwiseEqual(buf.data(), want_buf.data(), 6));
}

// The update loops have a vectorized FMA clone picked at run time by the CPU (optimizer.cc); on
// long arrays (the vector body, not the 6-element tail above) they must give exactly the bits of
// the same arithmetic done one element at a time, here in a file built without the clone.
TEST(OptimizerTest, VectorizedLoopsGiveTheScalarBits) {
  const int64_t n = 1003;
  std::vector<float> p(n), g(n), m(n), v(n), buf(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::sin(0.37f * static_cast<float>(i)) * 0.5f;
    g[i] = std::cos(1.3f * static_cast<float>(i)) * (i % 7 == 0 ? 5.0f : 0.01f);
    m[i] = g[i] * 0.1f;
    v[i] = g[i] * g[i] * 0.001f;
    buf[i] = g[i] * 0.5f;
  }
  OptimizerOptions o;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  std::vector<float> rp = p, rm = m, rv = v;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> one_p = {rp[i]}, one_g = {g[i]}, one_m = {rm[i]}, one_v = {rv[i]};
    AdamWUpdate(o, 3, one_p.data(), one_g.data(), one_m.data(), one_v.data(), 1);
    rp[i] = one_p[0], rm[i] = one_m[0], rv[i] = one_v[0];
  }
  AdamWUpdate(o, 3, p.data(), g.data(), m.data(), v.data(), n);
  EXPECT_TRUE(BitwiseEqual(p.data(), rp.data(), n));
  EXPECT_TRUE(BitwiseEqual(m.data(), rm.data(), n));
  EXPECT_TRUE(BitwiseEqual(v.data(), rv.data(), n));

  o.momentum = 0.9;
  std::vector<float> sp = p, sb = buf;
  for (int64_t i = 0; i < n; ++i) SgdUpdate(o, false, &sp[i], &g[i], &sb[i], 1);
  SgdUpdate(o, false, p.data(), g.data(), buf.data(), n);
  EXPECT_TRUE(BitwiseEqual(p.data(), sp.data(), n));
  EXPECT_TRUE(BitwiseEqual(buf.data(), sb.data(), n));
}

TEST(OptimizerTest, UpdatesSayWhetherTheParametersStayFinite) {
  OptimizerOptions o;
  o.lr = 1e38;
  std::vector<float> p(100, 1.0f), g(100, -1.0f), m(100, 0.0f), v(100, 0.0f);
  EXPECT_TRUE(SgdUpdate(o, true, p.data(), g.data(), nullptr, 100));  // 1 + 1e38
  p[37] = 3.0e38f;                                                    // + 1e38 overflows f32
  EXPECT_FALSE(SgdUpdate(o, true, p.data(), g.data(), nullptr, 100));
  EXPECT_TRUE(std::isinf(p[37]));
  o.lr = 1e-3;
  std::fill(p.begin(), p.end(), 1.0f);
  EXPECT_TRUE(AdamWUpdate(o, 1, p.data(), g.data(), m.data(), v.data(), 100));
  p[99] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(AdamWUpdate(o, 2, p.data(), g.data(), m.data(), v.data(), 100));
}

TEST(OptimizerTest, AdamWByHand) {
  // One element, lr 0.1, wd 0.01, betas (0.9, 0.999), eps 1e-8.
  // Step 1, g = 0.5: p = 1 * (1 - 0.001) = 0.999; m = 0.05, v = 0.00025;
  //   m_hat = 0.05 / 0.1 = 0.5, v_hat = 0.00025 / 0.001 = 0.25; p -= 0.1 * 0.5 / (0.5 + 1e-8)
  //   -> 0.899 (to 2e-8).
  // Step 2, g = -1: p = 0.899 * 0.999 = 0.898101; m = 0.045 - 0.1 = -0.055;
  //   v = 0.00024975 + 0.001 = 0.00124975; m_hat = -0.055 / 0.19 = -0.28947368;
  //   v_hat = 0.00124975 / 0.001999 = 0.62518759, sqrt = 0.79068805;
  //   p += 0.1 * 0.28947368 / 0.79068805 = 0.03661037 -> 0.93471137.
  OptimizerOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.01;
  float p = 1.f, m = 0.f, v = 0.f;
  const float g1 = 0.5f, g2 = -1.f;
  AdamWUpdate(o, 1, &p, &g1, &m, &v, 1);
  EXPECT_NEAR(p, 0.899f, 1e-6);
  EXPECT_NEAR(m, 0.05f, 1e-8);
  EXPECT_NEAR(v, 0.00025f, 1e-10);
  AdamWUpdate(o, 2, &p, &g2, &m, &v, 1);
  EXPECT_NEAR(m, -0.055f, 1e-8);
  EXPECT_NEAR(v, 0.00124975f, 1e-10);
  EXPECT_NEAR(p, 0.93471137f, 1e-6);
}

TEST(OptimizerTest, SgdByHand) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.lr = 0.5;
  // Plain: p = 1 - 0.5 * 0.25 = 0.875, exact in binary.
  float p = 1.f;
  const float g = 0.25f;
  SgdUpdate(o, true, &p, &g, nullptr, 1);
  EXPECT_EQ(p, 0.875f);
  // Momentum 0.5: step 1 buf = g = 0.25, p = 1 - 0.125 = 0.875; step 2 buf = 0.125 + 0.25 =
  // 0.375, p = 0.875 - 0.1875 = 0.6875. All exact.
  o.momentum = 0.5;
  p = 1.f;
  float buf = 0.f;
  SgdUpdate(o, true, &p, &g, &buf, 1);
  EXPECT_EQ(buf, 0.25f);
  EXPECT_EQ(p, 0.875f);
  SgdUpdate(o, false, &p, &g, &buf, 1);
  EXPECT_EQ(buf, 0.375f);
  EXPECT_EQ(p, 0.6875f);
  // Coupled weight decay 0.5, no momentum: d = 0.25 + 0.5 * 1 = 0.75, p = 1 - 0.375 = 0.625.
  o.momentum = 0;
  o.weight_decay = 0.5;
  p = 1.f;
  SgdUpdate(o, true, &p, &g, nullptr, 1);
  EXPECT_EQ(p, 0.625f);
}

}  // namespace
}  // namespace foundry
