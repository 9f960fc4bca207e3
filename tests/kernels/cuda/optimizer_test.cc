// The device AdamW / SGD updates against the CPU ones (kernels/cpu/optimizer.h), bitwise, over
// several steps; the non-finite flag. Needs a GPU (skips without one).
#include "kernels/cpu/optimizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tests/support/cuda_check.h"

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/device.h"
#include "kernels/cuda/optimizer.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

#ifdef FOUNDRY_HAVE_CUDA
std::vector<float> Random(int64_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Device copies of host arrays, freed at scope exit.
struct DeviceArrays {
  std::vector<void*> ptrs;
  ~DeviceArrays() {
    for (void* p : ptrs) cuda::DeviceFree(p);
  }
  float* Upload(const std::vector<float>& v, void* stream) {
    void* p = nullptr;
    EXPECT_TRUE(cuda::DeviceAlloc(v.size() * sizeof(float), &p, stream, "array").ok());
    ptrs.push_back(p);
    EXPECT_TRUE(cuda::CopyToDevice(p, v.data(), v.size() * sizeof(float), stream, "array").ok());
    return static_cast<float*>(p);
  }
  int* Flag(void* stream) {
    void* p = nullptr;
    EXPECT_TRUE(cuda::DeviceAlloc(sizeof(int), &p, stream, "flag").ok());
    ptrs.push_back(p);
    return static_cast<int*>(p);
  }
};

std::vector<float> Download(const float* d, int64_t n, void* stream) {
  std::vector<float> v(n);
  EXPECT_TRUE(cuda::CopyToHost(v.data(), d, n * sizeof(float), stream, "array").ok());
  return v;
}

int ReadFlag(int* flag, void* stream) {
  int v = -1;
  EXPECT_TRUE(cuda::CopyToHost(&v, flag, sizeof v, stream, "flag").ok());
  return v;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
#endif

TEST(CudaOptimizerTest, AdamWEqualsCpuBitwise) {
  FOUNDRY_REQUIRE_GPU();
#ifdef FOUNDRY_HAVE_CUDA
  auto sb = cuda::CreateStreamAndBlas();
  ASSERT_TRUE(sb.ok());
  for (int64_t n : {1, 255, 257, 100003}) {
    for (double wd : {0.0, 0.1}) {
      OptimizerOptions o;
      o.kind = n > 256 ? OptimizerKind::kDecoupledAdamW : OptimizerKind::kAdamW;  // both kinds
      o.lr = 2e-3;
      o.initial_lr = 6e-3;  // DecoupledAdamW: decay scaled by lr / initial_lr
      o.weight_decay = wd;
      std::vector<float> p = Random(n, 1, 1.f), m(n, 0.f), v(n, 0.f);
      DeviceArrays d;
      float* dp = d.Upload(p, sb->stream);
      float* dm = d.Upload(m, sb->stream);
      float* dv = d.Upload(v, sb->stream);
      int* flag = d.Flag(sb->stream);
      for (int64_t step = 1; step <= 4; ++step) {
        const std::vector<float> g = Random(n, 10 + step, 0.5f);
        float* dg = d.Upload(g, sb->stream);
        ASSERT_TRUE(CudaAdamWUpdate(o, step, dp, dg, dm, dv, n, flag, sb->stream).ok());
        ASSERT_TRUE(AdamWUpdate(o, step, p.data(), g.data(), m.data(), v.data(), n));
        ASSERT_TRUE(Bitwise(Download(dp, n, sb->stream), p)) << "n " << n << " step " << step;
        ASSERT_TRUE(Bitwise(Download(dm, n, sb->stream), m));
        ASSERT_TRUE(Bitwise(Download(dv, n, sb->stream), v));
        EXPECT_EQ(ReadFlag(flag, sb->stream), 0);
      }
    }
  }
  cuda::DestroyStreamAndBlas(*sb);
#endif
}

TEST(CudaOptimizerTest, SgdEqualsCpuBitwise) {
  FOUNDRY_REQUIRE_GPU();
#ifdef FOUNDRY_HAVE_CUDA
  auto sb = cuda::CreateStreamAndBlas();
  ASSERT_TRUE(sb.ok());
  const int64_t n = 4097;
  for (double wd : {0.0, 0.05}) {
    for (double momentum : {0.0, 0.9}) {
      OptimizerOptions o;
      o.kind = OptimizerKind::kSgd;
      o.lr = 0.05;
      o.weight_decay = wd;
      o.momentum = momentum;
      std::vector<float> p = Random(n, 2, 1.f), buf(n, 0.f);
      DeviceArrays d;
      float* dp = d.Upload(p, sb->stream);
      float* dbuf = d.Upload(buf, sb->stream);
      int* flag = d.Flag(sb->stream);
      for (int step = 1; step <= 4; ++step) {
        const std::vector<float> g = Random(n, 20 + step, 0.3f);
        float* dg = d.Upload(g, sb->stream);
        ASSERT_TRUE(CudaSgdUpdate(o, step == 1, dp, dg, dbuf, n, flag, sb->stream).ok());
        ASSERT_TRUE(SgdUpdate(o, step == 1, p.data(), g.data(), buf.data(), n));
        ASSERT_TRUE(Bitwise(Download(dp, n, sb->stream), p))
            << "wd " << wd << " momentum " << momentum << " step " << step;
        ASSERT_TRUE(Bitwise(Download(dbuf, n, sb->stream), buf));
        EXPECT_EQ(ReadFlag(flag, sb->stream), 0);
      }
    }
  }
  cuda::DestroyStreamAndBlas(*sb);
#endif
}

TEST(CudaOptimizerTest, NonFiniteUpdateSetsTheFlag) {
  FOUNDRY_REQUIRE_GPU();
#ifdef FOUNDRY_HAVE_CUDA
  auto sb = cuda::CreateStreamAndBlas();
  ASSERT_TRUE(sb.ok());
  const int64_t n = 1000;
  std::vector<float> p(n, 1.f), m(n, 0.f), v(n, 0.f), g(n, 0.1f);
  g[777] = std::numeric_limits<float>::quiet_NaN();
  DeviceArrays d;
  float* dp = d.Upload(p, sb->stream);
  float* dm = d.Upload(m, sb->stream);
  float* dv = d.Upload(v, sb->stream);
  float* dg = d.Upload(g, sb->stream);
  int* flag = d.Flag(sb->stream);  // DeviceAlloc zero-fills
  OptimizerOptions o;
  ASSERT_TRUE(CudaAdamWUpdate(o, 1, dp, dg, dm, dv, n, flag, sb->stream).ok());
  EXPECT_EQ(ReadFlag(flag, sb->stream), 1);
  EXPECT_FALSE(AdamWUpdate(o, 1, p.data(), g.data(), m.data(), v.data(), n));
  const std::vector<float> got = Download(dp, n, sb->stream);
  for (int64_t i = 0; i < n; ++i) {
    if (i != 777) {
      ASSERT_EQ(got[i], p[i]) << i;
    }
  }
  cuda::DestroyStreamAndBlas(*sb);
#endif
}

}  // namespace
}  // namespace foundry
