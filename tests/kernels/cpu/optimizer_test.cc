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
namespace FOUNDRY_TEST_NS {

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

// Composer's DecoupledAdamW (llm-foundry's decoupled_adamw): the arrays below are what Composer's
// step computes with torch (1.13 here; 2.6 gives the same bits) on 37 elements (torch's vector body
// and its scalar tail), over four steps whose lr follows a warmup (0, 0, 0.005, 0.0075) from
// initial_lr 0.01; py_kernels_cpu_decoupled_adamw_reference_test recomputes them and checks this
// block.
// BEGIN decoupled_adamw reference (tests/kernels/cpu/decoupled_adamw_reference_test.py --print)
const std::vector<float> kDa_init = {
    -0x1.cd6adcp-2f, 0x1.2195a6p-2f,  -0x1.f3f19ep-3f, 0x1.805b32p-2f,  0x1.2db2aep-2f,
    -0x1.d21ee2p-3f, -0x1.a0895cp-2f, 0x1.1172d8p-3f,  -0x1.1b3516p-2f, 0x1.340074p-2f,
    -0x1.daaa0cp-2f, 0x1.218efap-2f,  -0x1.38f9d4p+0f, -0x1.48b32p-4f,  0x1.717244p-4f,
    0x1.1e0a6cp+0f,  -0x1.5ad41ep-2f, 0x1.ca3312p-2f,  0x1.d1b2c2p-2f,  0x1.b4443ap-3f,
    0x1.49e432p-1f,  -0x1.b5fda6p-3f, 0x1.0a1d7ep-1f,  -0x1.844b78p-1f, 0x1.ba96a6p-3f,
    0x1.714708p-3f,  0x1.18d6fp-4f,   -0x1.558826p-2f, 0x1.77e082p-2f,  -0x1.92bc82p-4f,
    0x1.2f49f4p-1f,  0x1.9bc704p-2f,  0x1.30ab12p-1f,  0x1.90cdc4p-4f,  0x1.ad340ap-2f,
    0x1.a56702p-1f,  -0x1.69389p-3f};
const std::vector<float> kDa_grads_0 = {
    -0x1.01edc2p+1f, 0x1.906eb2p-3f,  -0x1.979564p+0f, -0x1.76f9b8p+0f, -0x1.ec0128p-2f,
    -0x1.76f3f8p-1f, 0x1.ac130cp-1f,  0x1.e9774p-4f,   0x1.151fdp+0f,   -0x1.8acd7ep+0f,
    0x1.63930ep-1f,  -0x1.a1f8e4p-3f, -0x1.49d052p-1f, -0x1.6c3e28p+0f, 0x1.8968eap-1f,
    0x1.287ce8p-1f,  0x1.40db96p+0f,  -0x1.89784ap-2f, -0x1.bb48eep-1f, -0x1.03ca0cp+0f,
    0x1.11731ep-2f,  -0x1.4b5a5p-1f,  -0x1.bd8436p-2f, 0x1.dd92cp-2f,   0x1.5e96bp-2f,
    -0x1.46e604p+0f, -0x1.e3ebfap-2f, 0x1.31afe8p+0f,  -0x1.da9148p-2f, -0x1.2ab192p+0f,
    -0x1.7324fep-1f, -0x1.2cabd8p+0f, -0x1.573078p-2f, 0x1.a88bbcp-3f,  0x1.dea15p-1f,
    0x1.b9b908p-1f,  0x1.d63b86p-3f};
const std::vector<float> kDa_grads_1 = {
    0x1.59e0eep-6f,   -0x1.7a87dap-6f,  0x1.491592p-11f, -0x1.49705ap-7f, 0x1.28d9d6p-9f,
    -0x1.7a4a24p-10f, 0x1.dfba66p-8f,   0x1.274446p-7f,  0x1.36e15cp-9f,  -0x1.70a836p-7f,
    -0x1.2f18e4p-7f,  -0x1.1ab30cp-7f,  0x1.cc17p-8f,    -0x1.5753dep-7f, -0x1.1b5cdep-12f,
    -0x1.29712ep-11f, -0x1.26c812p-9f,  0x1.4f5d3ap-8f,  -0x1.58c71cp-8f, -0x1.f9746ap-10f,
    -0x1.e22bap-12f,  0x1.df3c12p-11f,  -0x1.8b596ap-8f, -0x1.3e23fp-7f,  -0x1.0fe502p-9f,
    0x1.eb7546p-12f,  -0x1.780e38p-6f,  0x1.ff1d28p-8f,  0x1.c86bep-9f,   0x1.ca1bf2p-8f,
    0x1.a5da78p-8f,   -0x1.a1c5a8p-10f, -0x1.39d4d2p-9f, -0x1.bc3feap-8f, 0x1.1c40fep-7f,
    0x1.34f264p-7f,   -0x1.531fe6p-7f};
const std::vector<float> kDa_grads_2 = {
    0x1.1dc5d8p-1f,  0x1.d9d57cp+0f,  -0x1.abcce4p+0f, 0x1.9f142cp+1f,  -0x1.12f05ep+3f,
    0x1.b0e9bcp+2f,  0x1.2aa68p-2f,   -0x1.253654p+2f, 0x1.9636d4p+1f,  -0x1.4487d4p+2f,
    -0x1.7355d6p+1f, -0x1.bab746p+1f, 0x1.ec2b04p-2f,  -0x1.26986ap+2f, -0x1.389a8ap+2f,
    0x1.6d4b24p+1f,  0x1.3f1ad8p+1f,  0x1.813e26p+2f,  0x1.b922d8p-1f,  0x1.18f642p-1f,
    -0x1.68aee2p+2f, -0x1.2f30a4p+3f, 0x1.043338p+2f,  -0x1.7be5fp+1f,  -0x1.59f92ep+2f,
    -0x1.d29728p+0f, -0x1.c3be28p+2f, 0x1.775b86p+2f,  -0x1.d664e4p+1f, 0x1.9a600ep-1f,
    -0x1.2cfa42p+2f, -0x1.2a4cd6p+3f, 0x1.c476fcp+2f,  0x1.f56444p+2f,  -0x1.9b18p+0f,
    -0x1.eab758p-4f, 0x1.f441a8p+0f};
const std::vector<float> kDa_grads_3 = {
    0x1.c3bc2ap-4f,  0x1.1881b2p-4f,  -0x1.5659cep-4f, 0x1.4fade2p-5f, 0x1.26cd92p-7f,
    -0x1.044828p-6f, -0x1.fd156p-4f,  -0x1.858e3ap-3f, 0x1.1a93c6p-6f, 0x1.4ffc46p-5f,
    -0x1.2bf1d8p-3f, -0x1.11c79ap-3f, -0x1.18d65p-4f,  0x1.37ef38p-5f, -0x1.38ca76p-2f,
    -0x1.419d7cp-4f, 0x1.b6356p-4f,   0x1.b7c1c6p-4f,  0x1.1ba45cp-4f, -0x1.110e4ep-5f,
    -0x1.3bee7ep-5f, 0x1.6300e4p-5f,  -0x1.7e02b8p-9f, 0x1.973ep-3f,   0x1.6e720cp-4f,
    0x1.c6c656p-6f,  -0x1.264bd8p-3f, -0x1.76864p-3f,  0x1.10abd8p-6f, 0x1.2f9e4cp-5f,
    -0x1.a0ac7ap-3f, 0x1.7ff4dap-5f,  -0x1.68500ap-4f, 0x1.21feb6p-3f, 0x1.15ef2cp-4f,
    0x1.ba1b6ep-5f,  0x1.ecc5ep-6f};
const std::vector<float> kDa_p0 = {
    -0x1.920dfap-2f, 0x1.edd35ep-3f,  -0x1.a4d222p-3f, 0x1.4daf68p-2f,  0x1.10567p-2f,
    -0x1.a6257ep-3f, -0x1.75521ep-2f, 0x1.fc5ae6p-4f,  -0x1.014d38p-2f, 0x1.16ecdep-2f,
    -0x1.9b6fd8p-2f, 0x1.05dff8p-2f,  -0x1.12da7cp+0f, -0x1.ff69d6p-5f, 0x1.5d9d26p-4f,
    0x1.f2d1e2p-1f,  -0x1.39ba96p-2f, 0x1.8c0196p-2f,  0x1.9812aep-2f,  0x1.8310cep-3f,
    0x1.253b9ap-1f,  -0x1.7258p-3f,   0x1.cd6b4p-2f,   -0x1.525daap-1f, 0x1.91e53p-3f,
    0x1.5674a8p-3f,  0x1.145c2ep-4f,  -0x1.33e90ep-2f, 0x1.51da44p-2f,  -0x1.5f9aap-4f,
    0x1.0e74b8p-1f,  0x1.71677ep-2f,  0x1.086e3p-1f,   0x1.43a23p-4f,   0x1.7c2b98p-2f,
    0x1.6fb63ep-1f,  -0x1.4c8fe4p-3f};
const std::vector<float> kDa_m0 = {
    -0x1.57c31cp-4f, 0x1.7c8b6ep-3f,  -0x1.195dcp-2f,  0x1.81c082p-3f,  -0x1.9d4a84p-1f,
    0x1.1b7d74p-1f,  0x1.34aff8p-4f,  -0x1.b00914p-2f, 0x1.773f18p-2f,  -0x1.219746p-1f,
    -0x1.ce90f4p-3f, -0x1.5c6526p-2f, -0x1.475f04p-7f, -0x1.07b34p-1f,  -0x1.a81776p-2f,
    0x1.2a26dep-2f,  0x1.4e1616p-2f,  0x1.0cbdf2p-1f,  0x1.56da28p-6f,  -0x1.cc128p-6f,
    -0x1.f76fcp-2f,  -0x1.ca7e16p-1f, 0x1.556942p-2f,  -0x1.b64f44p-3f, -0x1.cfa798p-2f,
    -0x1.046a38p-2f, -0x1.5f33fcp-1f, 0x1.31c974p-1f,  -0x1.734964p-2f, -0x1.1b6868p-7f,
    -0x1.fbd202p-2f, -0x1.d70e74p-1f, 0x1.34a986p-1f,  0x1.77b546p-1f,  -0x1.1a2a98p-4f,
    0x1.dd5d08p-5f,  0x1.8ee85p-3f};
const std::vector<float> kDa_v0 = {
    0x1.8415bap-3f, 0x1.5127dep-3f, 0x1.eeec7ep-3f, 0x1.2ee138p-1f, 0x1.c21762p+1f, 0x1.1922fcp+1f,
    0x1.1ceee6p-5f, 0x1.ffb56ap-1f, 0x1.0eaa3ap-1f, 0x1.52cb14p+0f, 0x1.afa284p-2f, 0x1.244e9ap-1f,
    0x1.db1dp-6f,   0x1.17e248p+0f, 0x1.29c876p+0f, 0x1.9b2f1cp-2f, 0x1.73d898p-2f, 0x1.ba5dc4p+0f,
    0x1.150a04p-4f, 0x1.df494ep-5f, 0x1.830362p+0f, 0x1.120e16p+2f, 0x1.962612p-1f, 0x1.b808eap-2f,
    0x1.64bdb6p+0f, 0x1.d26542p-3f, 0x1.304788p+1f, 0x1.b25a7ep+0f, 0x1.4d2b8cp-1f, 0x1.6c525cp-4f,
    0x1.133a8ap+0f, 0x1.0bf5bap+2f, 0x1.308dbcp+1f, 0x1.7586dap+1f, 0x1.480f12p-3f, 0x1.0c33a6p-5f,
    0x1.78349cp-3f};
const std::vector<float> kDa_p1 = {
    -0x1.c9f7fp-2f,  0x1.19a1d8p-2f,  -0x1.e0ea28p-3f, 0x1.7c1af8p-2f,  0x1.354bacp-2f,
    -0x1.df5082p-3f, -0x1.a7e772p-2f, 0x1.200c8cp-3f,  -0x1.2409a2p-2f, 0x1.3cab82p-2f,
    -0x1.d4b53cp-2f, 0x1.295d66p-2f,  -0x1.38cc56p+0f, -0x1.25f1f6p-4f, 0x1.8ba6fp-4f,
    0x1.1bfd06p+0f,  -0x1.64273p-2f,  0x1.c335f6p-2f,  0x1.d082f2p-2f,  0x1.b7fefp-3f,
    0x1.4d6756p-1f,  -0x1.a6ad76p-3f, 0x1.06cefp-1f,   -0x1.8149cap-1f, 0x1.c83e2cp-3f,
    0x1.83e14ap-3f,  0x1.37f36ep-4f,  -0x1.5db802p-2f, 0x1.7fd12cp-2f,  -0x1.905ebap-4f,
    0x1.336d1p-1f,   0x1.a3b8b8p-2f,  0x1.2d314cp-1f,  0x1.72baa4p-4f,  0x1.b05544p-2f,
    0x1.a2cd08p-1f,  -0x1.7923e8p-3f};
const std::vector<float> kDa_m1 = {
    -0x1.57c31cp-4f, 0x1.7c8b6ep-3f,  -0x1.195dcp-2f,  0x1.81c082p-3f,  -0x1.9d4a84p-1f,
    0x1.1b7d74p-1f,  0x1.34aff8p-4f,  -0x1.b00914p-2f, 0x1.773f18p-2f,  -0x1.219746p-1f,
    -0x1.ce90f4p-3f, -0x1.5c6526p-2f, -0x1.475f04p-7f, -0x1.07b34p-1f,  -0x1.a81776p-2f,
    0x1.2a26dep-2f,  0x1.4e1616p-2f,  0x1.0cbdf2p-1f,  0x1.56da28p-6f,  -0x1.cc128p-6f,
    -0x1.f76fcp-2f,  -0x1.ca7e16p-1f, 0x1.556942p-2f,  -0x1.b64f44p-3f, -0x1.cfa798p-2f,
    -0x1.046a38p-2f, -0x1.5f33fcp-1f, 0x1.31c974p-1f,  -0x1.734964p-2f, -0x1.1b6868p-7f,
    -0x1.fbd202p-2f, -0x1.d70e74p-1f, 0x1.34a986p-1f,  0x1.77b546p-1f,  -0x1.1a2a98p-4f,
    0x1.dd5d08p-5f,  0x1.8ee85p-3f};
const std::vector<float> kDa_v1 = {
    0x1.1e88a8p-8f,  0x1.c644bcp-9f,  0x1.5cea1cp-8f,  0x1.9e631ep-7f,  0x1.2f01a4p-4f,
    0x1.7ad5bcp-5f,  0x1.a21352p-11f, 0x1.58608ap-6f,  0x1.6ffbdp-7f,   0x1.cbbd42p-6f,
    0x1.23f76cp-7f,  0x1.898d36p-7f,  0x1.5462e2p-11f, 0x1.7be498p-6f,  0x1.91aa92p-6f,
    0x1.15c4e4p-7f,  0x1.fe4bc4p-8f,  0x1.29d3e4p-5f,  0x1.879558p-10f, 0x1.5c4e4p-10f,
    0x1.0484e2p-5f,  0x1.710c1p-4f,   0x1.11a368p-6f,  0x1.28c2eep-7f,  0x1.e05b8p-6f,
    0x1.4414f4p-8f,  0x1.99bb86p-5f,  0x1.256ccp-5f,   0x1.c12002p-7f,  0x1.063508p-9f,
    0x1.734p-6f,     0x1.6937ep-4f,   0x1.9a052ap-5f,  0x1.f6ccdp-5f,   0x1.c478bcp-9f,
    0x1.8e28dcp-11f, 0x1.fb08cep-9f};
// END decoupled_adamw reference

TEST(OptimizerTest, DecoupledAdamWMatchesComposerBitwise) {
  const std::vector<std::vector<float>> grads = {kDa_grads_0, kDa_grads_1, kDa_grads_2,
                                                 kDa_grads_3};
  const double lrs[] = {0.0, 0.0, 0.005, 0.0075};
  struct Config {
    double wd, beta1, beta2, eps;
    const std::vector<float>*p, *m, *v;
  };
  const Config configs[] = {{0.1, 0.9, 0.95, 1e-8, &kDa_p0, &kDa_m0, &kDa_v0},
                            {1e-5, 0.9, 0.999, 1e-6, &kDa_p1, &kDa_m1, &kDa_v1}};
  for (const Config& c : configs) {
    OptimizerOptions o;
    o.kind = OptimizerKind::kDecoupledAdamW;
    o.weight_decay = c.wd;
    o.beta1 = c.beta1;
    o.beta2 = c.beta2;
    o.eps = c.eps;
    o.initial_lr = 0.01;
    const int64_t n = static_cast<int64_t>(kDa_init.size());
    std::vector<float> p = kDa_init, m(n, 0.f), v(n, 0.f);
    for (int s = 0; s < 4; ++s) {
      o.lr = lrs[s];
      EXPECT_TRUE(AdamWUpdate(o, s + 1, p.data(), grads[s].data(), m.data(), v.data(), n));
    }
    EXPECT_TRUE(BitwiseEqual(p.data(), c.p->data(), n)) << "wd " << c.wd;
    EXPECT_TRUE(BitwiseEqual(m.data(), c.m->data(), n)) << "wd " << c.wd;
    EXPECT_TRUE(BitwiseEqual(v.data(), c.v->data(), n)) << "wd " << c.wd;
  }
}

// The decoupled factor: lr / initial_lr scales the decay, not lr itself; without a schedule
// (initial_lr 0 = lr) it is 1 - wd; at lr 0 (a warmup's first steps) nothing decays; wd 0 never
// multiplies (Composer skips the mul_; the factor is exactly 1).
TEST(OptimizerTest, DecoupledDecayFactor) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kDecoupledAdamW;
  o.lr = 3e-4;
  o.weight_decay = 1e-4;
  EXPECT_EQ(AdamWDecay(o), static_cast<float>(1.0 - 1e-4));
  o.initial_lr = 6e-4;
  EXPECT_EQ(AdamWDecay(o), static_cast<float>(1.0 - (3e-4 / 6e-4) * 1e-4));
  o.lr = 0;
  EXPECT_EQ(AdamWDecay(o), 1.0f);
  o.lr = 3e-4;
  o.weight_decay = 0;
  EXPECT_EQ(AdamWDecay(o), 1.0f);
  // torch's AdamW couples it to lr.
  o.kind = OptimizerKind::kAdamW;
  o.weight_decay = 0.1;
  EXPECT_EQ(AdamWDecay(o), static_cast<float>(1.0 - 3e-4 * 0.1));
}

}  // namespace
}  // namespace foundry
