// kernels/cuda/collective.cu on a GPU through NCCL (runtime/nccl_communicator.h), in a world of
// one rank (one GPU: NCCL refuses two ranks of one communicator on it). With N = 1 the contract
// (docs/design.md §10) makes ReduceScatterGradient and AllReduceGradient exactly
// foundry::AccumulateGradient (send = s * partial, the exchange a copy, grad = recv or
// grad + recv), so they are checked bitwise against the CPU AccumulateGradient kernel over three
// microbatches with unequal scales (first written, then accumulated), at sizes that are not
// multiples of the 256-thread block; bf16 partials against the bf16 reduction's arithmetic
// written out on the host, and tensors that take several exchanges (buckets); AllGather must
// return the shards unchanged, f32 and bf16. The arithmetic with more ranks (padding, rank order)
// needs a GPU per rank. Skips without a GPU or NCCL (fails
// under FOUNDRY_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "base/bfloat16.h"
#include "kernels/cpu/kernel.h"
#include "runtime/cuda_backend.h"
#include "runtime/nccl_communicator.h"
#include "tests/support/cuda_check.h"
#include "tests/support/scoped_env.h"
#include "tests/support/test_util.h"

#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

#ifdef FOUNDRY_HAVE_CUDA

// The backend and a world-of-one NCCL communicator, or skips (fails under FOUNDRY_REQUIRE_GPU=1)
// when NCCL does not load.
#define REQUIRE_GPU_AND_NCCL(backend, comm)                                               \
  FOUNDRY_REQUIRE_GPU();                                                                  \
  if (auto lib_ = LoadNcclLibrary(); !lib_.ok()) {                                        \
    if (GpuRequired()) FAIL() << lib_.status().message();                                 \
    GTEST_SKIP() << lib_.status().message();                                              \
  }                                                                                       \
  auto backend_or_ = GetCudaBackend();                                                    \
  ASSERT_TRUE(backend_or_.ok()) << backend_or_.status().message();                        \
  CudaBackend& backend = **backend_or_;                                                   \
  ScopedEnv no_file_("FOUNDRY_NCCL_ID_FILE", nullptr), no_rank_("FOUNDRY_RANK", nullptr), \
      no_size_("FOUNDRY_WORLD_SIZE", nullptr);                                            \
  auto comm_or_ = CreateNcclCommunicator(backend, nullptr);                               \
  ASSERT_TRUE(comm_or_.ok()) << comm_or_.status().message();                              \
  Communicator& comm = **comm_or_

std::vector<float> Normal(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// A device tensor of `shape`, filled from `host` (f32).
struct DeviceTensor {
  Region region;
  Tensor t;
};
DeviceTensor ToDevice(CudaBackend& backend, const std::vector<float>& host, const Shape& shape) {
  DeviceTensor d;
  auto r = backend.Allocate(static_cast<int64_t>(host.size() * 4), MemoryClass::kOther, "test");
  EXPECT_TRUE(r.ok()) << r.status().message();
  d.region = std::move(*r);
  d.t = Tensor::View(DType::kFloat32, shape, d.region.data());
  Tensor h = Tensor::View(DType::kFloat32, shape, const_cast<float*>(host.data()));
  EXPECT_TRUE(backend.CopyIn(h, d.t).ok());
  return d;
}
std::vector<float> ToHost(CudaBackend& backend, const Tensor& device) {
  std::vector<float> host(static_cast<size_t>(device.numel()));
  Tensor h = Tensor::View(DType::kFloat32, device.shape(), host.data());
  EXPECT_TRUE(backend.CopyOut(device, h).ok());
  return host;
}

// Runs `node` on the backend as the executor does: its planned workspace, ctx.comm set.
Status RunWithComm(CudaBackend& backend, Communicator& comm, const Node& node,
                   std::vector<const Tensor*> in, std::vector<Tensor*> out, float scale,
                   bool accumulate) {
  const int64_t ws_bytes = CudaWorkspaceBytesFor(node, in, out);
  auto ws = backend.Allocate(ws_bytes, MemoryClass::kOther, "workspace");
  if (!ws.ok()) return ws.status();
  KernelContext ctx;
  ctx.grad_scale = scale;
  ctx.grad_accumulate = accumulate;
  ctx.comm = &comm;
  return backend.Run(node, in, out, std::span<std::byte>(ws->data(), ws_bytes), ctx);
}

TEST(CudaCollectiveTest, GradientCollectivesOfOneRankAreAccumulateGradientBitwise) {
  REQUIRE_GPU_AND_NCCL(backend, comm);
  const std::vector<float> scales = {3.f / 17.f, 5.f / 17.f, 9.f / 17.f};
  const Node accumulate = MakeNode("AccumulateGradient", {"p"}, {"g"}, {}, "foundry");
  for (const char* op : {"ReduceScatterGradient", "AllReduceGradient"}) {
    const Node node = MakeNode(op, {"p"}, {"g"}, {{"world_size", Attribute::Int(1)}}, "foundry");
    for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{100003}}) {
      std::vector<float> cpu(static_cast<size_t>(n));
      Tensor cpu_out = Tensor::View(DType::kFloat32, {n}, cpu.data());
      DeviceTensor grad = ToDevice(backend, std::vector<float>(static_cast<size_t>(n), 7.f), {n});
      for (size_t k = 0; k < scales.size(); ++k) {
        std::vector<float> partial = Normal(n, 100 * n + k);
        Tensor in = Tensor::View(DType::kFloat32, {n}, partial.data());
        KernelContext ctx;
        ctx.grad_scale = scales[k];
        ctx.grad_accumulate = k > 0;
        const Tensor* cins[] = {&in};
        Tensor* couts[] = {&cpu_out};
        ASSERT_TRUE(RunCpuKernel(accumulate, cins, couts, ctx).ok());
        DeviceTensor p = ToDevice(backend, partial, {n});
        Status st = RunWithComm(backend, comm, node, {&p.t}, {&grad.t}, scales[k], k > 0);
        ASSERT_TRUE(st.ok()) << st.message();
      }
      const std::vector<float> gpu = ToHost(backend, grad.t);
      EXPECT_TRUE(BitwiseEqual(cpu.data(), gpu.data(), n)) << op << ", n " << n;
    }
  }
}

TEST(CudaCollectiveTest, AllGatherOfOneRankReturnsTheShards) {
  REQUIRE_GPU_AND_NCCL(backend, comm);
  const Node node = MakeNode("AllGather", {"a", "b"}, {"fa", "fb"},
                             {{"world_size", Attribute::Int(1)}}, "foundry");
  const std::vector<float> a = Normal(7 * 9, 1), b = Normal(100003, 2);
  DeviceTensor da = ToDevice(backend, a, {7 * 9}), db = ToDevice(backend, b, {100003});
  DeviceTensor fa = ToDevice(backend, std::vector<float>(a.size(), -1.f), {7, 9});
  DeviceTensor fb = ToDevice(backend, std::vector<float>(b.size(), -1.f), {100003});
  Status st = RunWithComm(backend, comm, node, {&da.t, &db.t}, {&fa.t, &fb.t}, 1.f, false);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(ToHost(backend, fa.t), a);
  EXPECT_EQ(ToHost(backend, fb.t), b);
}

DeviceTensor ToDeviceBf16(CudaBackend& backend, const std::vector<uint16_t>& host,
                          const Shape& shape) {
  DeviceTensor d;
  auto r = backend.Allocate(static_cast<int64_t>(host.size() * 2), MemoryClass::kOther, "test");
  EXPECT_TRUE(r.ok()) << r.status().message();
  d.region = std::move(*r);
  d.t = Tensor::View(DType::kBFloat16, shape, d.region.data());
  Tensor h = Tensor::View(DType::kBFloat16, shape, const_cast<uint16_t*>(host.data()));
  EXPECT_TRUE(backend.CopyIn(h, d.t).ok());
  return d;
}

// bf16 partials and shards that take several exchanges, one rank: the bf16 reduction of one rank
// is t = bf16(s p) (the product in f32), g = f32(t), then g = g + f32(t); f32 is s p, then
// g + s p. With N = 1 a chunk is b = floor(8 MiB / e) elements: 2^22 + 3 takes 3 exchanges in f32
// (b = 2^21) and 2 in bf16 (b = 2^22). Checked bitwise against that arithmetic on the host.
TEST(CudaCollectiveTest, GradientCollectivesOfOneRankInBf16AndInSeveralBuckets) {
  REQUIRE_GPU_AND_NCCL(backend, comm);
  const std::vector<float> scales = {3.f / 17.f, 5.f / 17.f, 9.f / 17.f};
  for (const char* op : {"ReduceScatterGradient", "AllReduceGradient"}) {
    const Node node = MakeNode(op, {"p"}, {"g"}, {{"world_size", Attribute::Int(1)}}, "foundry");
    for (DType type : {DType::kFloat32, DType::kBFloat16})
      for (int64_t n : {int64_t{257}, (int64_t{1} << 22) + 3}) {
        std::vector<float> want(static_cast<size_t>(n));
        DeviceTensor grad = ToDevice(backend, std::vector<float>(static_cast<size_t>(n), 7.f), {n});
        for (size_t k = 0; k < scales.size(); ++k) {
          const std::vector<float> partial = Normal(n, 100 * n + k);
          std::vector<uint16_t> half(partial.size());
          for (size_t i = 0; i < partial.size(); ++i) {
            half[i] = FloatToBf16(partial[i]);
            const float x = type == DType::kBFloat16
                                ? Bf16ToFloat(FloatToBf16(scales[k] * Bf16ToFloat(half[i])))
                                : scales[k] * partial[i];
            want[i] = k == 0 ? x : want[i] + x;
          }
          DeviceTensor p = type == DType::kBFloat16 ? ToDeviceBf16(backend, half, {n})
                                                    : ToDevice(backend, partial, {n});
          Status st = RunWithComm(backend, comm, node, {&p.t}, {&grad.t}, scales[k], k > 0);
          ASSERT_TRUE(st.ok()) << st.message();
        }
        const std::vector<float> gpu = ToHost(backend, grad.t);
        EXPECT_TRUE(BitwiseEqual(want.data(), gpu.data(), n))
            << op << ", " << DTypeName(type) << ", n " << n;
      }
  }
}

TEST(CudaCollectiveTest, AllGatherOfOneRankReturnsBf16ShardsAsTheyAre) {
  REQUIRE_GPU_AND_NCCL(backend, comm);
  const Node node = MakeNode("AllGather", {"a", "b"}, {"fa", "fb"},
                             {{"world_size", Attribute::Int(1)}}, "foundry");
  std::vector<uint16_t> a(63);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(0x3F80 + 7 * i);
  const std::vector<float> b = Normal(100003, 2);
  DeviceTensor da = ToDeviceBf16(backend, a, {63}), db = ToDevice(backend, b, {100003});
  DeviceTensor fa = ToDeviceBf16(backend, std::vector<uint16_t>(a.size(), 0xFFFF), {7, 9});
  DeviceTensor fb = ToDevice(backend, std::vector<float>(b.size(), -1.f), {100003});
  Status st = RunWithComm(backend, comm, node, {&da.t, &db.t}, {&fa.t, &fb.t}, 1.f, false);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<uint16_t> got(a.size());
  Tensor h = Tensor::View(DType::kBFloat16, {7, 9}, got.data());
  ASSERT_TRUE(backend.CopyOut(fa.t, h).ok());
  EXPECT_EQ(got, a);
  EXPECT_EQ(ToHost(backend, fb.t), b);
}

TEST(CudaCollectiveTest, TheNodesWorldMustBeTheRuns) {
  REQUIRE_GPU_AND_NCCL(backend, comm);
  const Node node = MakeNode("ReduceScatterGradient", {"p"}, {"g"},
                             {{"world_size", Attribute::Int(2)}}, "foundry");
  DeviceTensor p = ToDevice(backend, Normal(10, 3), {10});
  DeviceTensor g = ToDevice(backend, Normal(5, 4), {5});
  Status st = RunWithComm(backend, comm, node, {&p.t}, {&g.t}, 1.f, false);
  EXPECT_EQ(st.message(), node.Describe() + ": compiled for world_size 2 but the run has 1 ranks");
}

#else

TEST(CudaCollectiveTest, GradientCollectivesOfOneRankAreAccumulateGradientBitwise) {
  GTEST_SKIP() << "built without CUDA";
}

#endif

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef REQUIRE_GPU_AND_NCCL
