// runtime/nccl_communicator on a GPU with NCCL (the GPU check's machine: scripts/gpu-check.sh
// points FOUNDRY_NCCL_LIBRARY at the libnccl.so.2 of PyTorch's nvidia wheels). One GPU means one
// rank: NCCL (2.5 and newer) refuses two ranks of one communicator on one GPU. So: a world of
// one, made both ways without MPI (no variables; the id file), every collective on device buffers
// of the backend, checked byte for byte against what the interface promises for one rank; the id
// file gone once the rank joined; the argument errors. (The variables' errors: JoinNcclWorld's,
// tests/runtime/nccl_communicator_test.cc.) Skips without a GPU or NCCL (fails under
// FOUNDRY_REQUIRE_GPU=1, where NCCL is expected too).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "runtime/cuda_backend.h"
#include "runtime/nccl_communicator.h"
#include "tests/support/cuda_check.h"
#include "tests/support/scoped_env.h"
#include "tests/support/test_util.h"

namespace foundry {
namespace FOUNDRY_TEST_NS {

// The backend, or skips (fails under FOUNDRY_REQUIRE_GPU=1) when NCCL does not load.
#define REQUIRE_GPU_AND_NCCL(backend)                              \
  FOUNDRY_REQUIRE_GPU();                                           \
  {                                                                \
    auto lib_ = LoadNcclLibrary();                                 \
    if (!lib_.ok()) {                                              \
      if (GpuRequired()) FAIL() << lib_.status().message();        \
      GTEST_SKIP() << lib_.status().message();                     \
    }                                                              \
  }                                                                \
  auto backend_or_ = GetCudaBackend();                             \
  ASSERT_TRUE(backend_or_.ok()) << backend_or_.status().message(); \
  CudaBackend& backend = **backend_or_

// The world-of-one variables unset for the scope.
struct NoRendezvous {
  ScopedEnv a{"FOUNDRY_NCCL_ID_FILE", nullptr};
  ScopedEnv b{"FOUNDRY_RANK", nullptr};
  ScopedEnv c{"FOUNDRY_WORLD_SIZE", nullptr};
};

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng() & 0xff);
  return v;
}

// Host bytes to a new device region, and back.
Region ToDevice(CudaBackend& backend, const std::vector<std::byte>& host) {
  auto r = backend.Allocate(static_cast<int64_t>(host.size()), MemoryClass::kOther, "test");
  EXPECT_TRUE(r.ok()) << r.status().message();
  Tensor d = Tensor::View(DType::kUint8, {static_cast<int64_t>(host.size())}, r->data());
  Tensor h = Tensor::View(DType::kUint8, {static_cast<int64_t>(host.size())},
                          const_cast<std::byte*>(host.data()));
  EXPECT_TRUE(backend.CopyIn(h, d).ok());
  return std::move(*r);
}
std::vector<std::byte> ToHost(CudaBackend& backend, Region& region, size_t n) {
  std::vector<std::byte> host(n);
  Tensor d = Tensor::View(DType::kUint8, {static_cast<int64_t>(n)}, region.data());
  Tensor h = Tensor::View(DType::kUint8, {static_cast<int64_t>(n)}, host.data());
  EXPECT_TRUE(backend.CopyOut(d, h).ok());
  return host;
}

TEST(CudaNcclCommunicatorTest, AWorldOfOneMovesDeviceBytes) {
  REQUIRE_GPU_AND_NCCL(backend);
  NoRendezvous none;
  auto comm = CreateNcclCommunicator(backend, nullptr);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  Communicator& c = **comm;
  EXPECT_EQ(c.name(), "nccl");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  // Odd sizes (no multiple of 4 or 16), and a large one (many NCCL chunks).
  for (size_t n : {size_t{1}, size_t{1001}, size_t{3} << 20}) {
    const std::vector<std::byte> src = RandomBytes(n, n);
    Region send = ToDevice(backend, src);
    Region recv = ToDevice(backend, RandomBytes(n, n + 1));
    // recv[0, n) = rank 0's send[0, n)
    ASSERT_TRUE(c.AllGather(send.data(), recv.data(), static_cast<int64_t>(n)).ok());
    EXPECT_EQ(ToHost(backend, recv, n), src) << "AllGather, " << n << " bytes";
    recv = ToDevice(backend, RandomBytes(n, n + 2));
    ASSERT_TRUE(c.AllToAll(send.data(), recv.data(), static_cast<int64_t>(n)).ok());
    EXPECT_EQ(ToHost(backend, recv, n), src) << "AllToAll, " << n << " bytes";
    ASSERT_TRUE(c.Broadcast(send.data(), static_cast<int64_t>(n), 0).ok());
    EXPECT_EQ(ToHost(backend, send, n), src) << "Broadcast, " << n << " bytes";
  }
  EXPECT_TRUE(c.Barrier().ok());
  EXPECT_TRUE(c.AllGather(nullptr, nullptr, 0).ok());
  EXPECT_EQ(c.Broadcast(nullptr, 4, 1).message(),
            "nccl: Broadcast from rank 1 in a world of 1 ranks");
  EXPECT_EQ(c.AllToAll(nullptr, nullptr, -4).message(), "nccl: AllToAll of -4 bytes");
  // Still usable after refused arguments (nothing reached NCCL).
  EXPECT_TRUE(c.Barrier().ok());
}

TEST(CudaNcclCommunicatorTest, TheIdFileIsGoneOnceTheRanksJoined) {
  REQUIRE_GPU_AND_NCCL(backend);
  TempDir dir;
  const std::string file = dir / "nccl.id";
  ScopedEnv a("FOUNDRY_NCCL_ID_FILE", file.c_str());
  ScopedEnv b("FOUNDRY_RANK", "0");
  ScopedEnv c("FOUNDRY_WORLD_SIZE", "1");
  auto comm = CreateNcclCommunicator(backend, nullptr);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  EXPECT_EQ((*comm)->size(), 1);
  EXPECT_FALSE(std::filesystem::exists(file));
  EXPECT_TRUE((*comm)->Barrier().ok());
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef REQUIRE_GPU_AND_NCCL
