// The CPU collective kernels (kernels/cpu/collective.cc) and the MPI communicator under them
// (runtime/mpi_communicator.h), run on every rank of an mpirun world (ctest
// runtime_collective_kernels_test_np2 starts 2; the plain entry, one process without mpirun,
// runs only the checks that need no world). Every rank draws every rank's data from the same
// seeds, so each checks its own result against the arithmetic of docs/design.md §10 written out here:
//  - the communicator's byte moves, split into many MPI calls (SetMpiChunkBytes(7)) and whole;
//  - AllGather: rank r's shard is flat(P)[r*c, (r+1)*c), zero-padded; the output is P, bitwise;
//  - ReduceScatterGradient / AllReduceGradient over K microbatches: rank r's microbatch k is the
//    global microbatch j = k*N + r with scale s_j; the result is, bit for bit, the one-process
//    AccumulateGradient sum (g = s_0 p_0, then g = g + s_j p_j for j = 1..N*K-1, each product
//    and sum rounded to f32), and within 1e-6 of the double sum;
//  - the errors: no communicator, a world_size other than the run's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kernel.h"
#include "runtime/mpi_communicator.h"
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

// The world, or null (the test then skips): only under mpirun.
Communicator* World() {
  if (LauncherWorldSize() == 0 || !BuiltWithMpi()) return nullptr;
  StatusOr<Communicator*> w = MpiWorld();
  EXPECT_TRUE(w.ok()) << w.status().message();
  return w.ok() ? *w : nullptr;
}

#define NEEDS_WORLD(comm)       \
  Communicator* comm = World(); \
  if (!comm) GTEST_SKIP() << "needs mpirun (ctest runs it as runtime_collective_kernels_test_np2)"

class ChunkBytes {
 public:
  explicit ChunkBytes(int64_t b) : old_(MpiChunkBytes()) { SetMpiChunkBytes(b); }
  ~ChunkBytes() { SetMpiChunkBytes(old_); }

 private:
  int64_t old_;
};

std::vector<unsigned char> Bytes(int64_t n, int rank, int salt) {
  std::vector<unsigned char> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<unsigned char>(i * 7 + rank * 31 + salt);
  return v;
}

TEST(MpiCommunicatorTest, MovesBytesWholeAndInChunks) {
  NEEDS_WORLD(comm);
  const int N = comm->size(), me = comm->rank();
  EXPECT_EQ(comm->name(), "mpi");
  EXPECT_EQ(N, LauncherWorldSize());
  for (int64_t chunk : {int64_t{7}, int64_t{1} << 30}) {
    ChunkBytes scoped(chunk);
    for (int64_t bytes : {int64_t{1}, int64_t{13}, int64_t{1000}}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + ", " + std::to_string(bytes) + " bytes");
      // AllGather: recv[r*bytes, (r+1)*bytes) = rank r's send.
      std::vector<unsigned char> mine = Bytes(bytes, me, 1);
      std::vector<unsigned char> all(static_cast<size_t>(N * bytes), 0xEE);
      ASSERT_TRUE(comm->AllGather(mine.data(), all.data(), bytes).ok());
      for (int r = 0; r < N; ++r) {
        std::vector<unsigned char> want = Bytes(bytes, r, 1);
        ASSERT_EQ(std::memcmp(all.data() + r * bytes, want.data(), static_cast<size_t>(bytes)), 0)
            << "from rank " << r;
      }
      // AllToAll: recv[r*bytes, ...) = rank r's send[me*bytes, (me+1)*bytes).
      std::vector<unsigned char> send = Bytes(N * bytes, me, 2);
      std::vector<unsigned char> recv(static_cast<size_t>(N * bytes), 0xEE);
      ASSERT_TRUE(comm->AllToAll(send.data(), recv.data(), bytes).ok());
      for (int r = 0; r < N; ++r) {
        std::vector<unsigned char> theirs = Bytes(N * bytes, r, 2);
        ASSERT_EQ(std::memcmp(recv.data() + r * bytes, theirs.data() + me * bytes,
                              static_cast<size_t>(bytes)),
                  0)
            << "from rank " << r;
      }
      // Broadcast from the last rank.
      std::vector<unsigned char> b =
          me == N - 1 ? Bytes(bytes, N - 1, 3)
                      : std::vector<unsigned char>(static_cast<size_t>(bytes), 0);
      ASSERT_TRUE(comm->Broadcast(b.data(), bytes, N - 1).ok());
      EXPECT_EQ(b, Bytes(bytes, N - 1, 3));
      ASSERT_TRUE(comm->Barrier().ok());
    }
  }
  Status bad = comm->Broadcast(nullptr, 0, N);
  EXPECT_EQ(bad.message(),
            "Broadcast from rank " + std::to_string(N) + " of a world of " + std::to_string(N));
}

int64_t Shard(int64_t numel, int64_t N) { return (numel + N - 1) / N; }

// The planned workspace's regions (kernels/cpu/collective_workspace.cc): bytes rounded up to 256.
int64_t Region(int64_t bytes) { return (bytes + 255) / 256 * 256; }

TEST(CollectiveKernelsTest, AllGatherReassemblesEveryParameter) {
  NEEDS_WORLD(comm);
  const int64_t N = comm->size(), me = comm->rank();
  // Shapes whose element count does and does not divide by N (2: 7 and 3x5 pad, 6 does not).
  const std::vector<Shape> shapes = {{7}, {2, 3}, {3, 5}, {1}};
  std::vector<std::vector<float>> full, shard;
  std::vector<Tensor> ins, outs;
  std::vector<std::vector<float>> out_data;
  std::vector<std::string> in_names, out_names;
  std::vector<OperandType> in_types, out_types;
  std::vector<Shape> shard_shapes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : shapes[i]) numel *= d;
    const int64_t c = Shard(numel, N);
    full.push_back(Random(numel, 100 + i));
    std::vector<float> s(static_cast<size_t>(c), 0.0f);
    for (int64_t e = 0; e < c; ++e)
      if (me * c + e < numel)
        s[static_cast<size_t>(e)] = full.back()[static_cast<size_t>(me * c + e)];
    shard.push_back(s);
    out_data.emplace_back(static_cast<size_t>(numel), -1.0f);
    shard_shapes.push_back({c});
    in_names.push_back("s" + std::to_string(i));
    out_names.push_back("p" + std::to_string(i));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    ins.push_back(Tensor::View(DType::kFloat32, shard_shapes[i], shard[i].data()));
    outs.push_back(Tensor::View(DType::kFloat32, shapes[i], out_data[i].data()));
  }
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  for (auto& t : ins) in_ptrs.push_back(&t);
  for (auto& t : outs) out_ptrs.push_back(&t);
  const Node node =
      MakeNode("AllGather", in_names, out_names, {{"world_size", Attribute::Int(N)}}, "foundry");
  // The workspace: a region of N*c*4 bytes for every output that does not divide evenly.
  int64_t want_ws = 0;
  for (size_t i = 0; i < shapes.size(); ++i)
    if (static_cast<int64_t>(full[i].size()) != N * shard_shapes[i][0])
      want_ws += Region(N * shard_shapes[i][0] * 4);
  EXPECT_EQ(CpuWorkspaceBytesFor(node, in_ptrs, out_ptrs), want_ws);
  std::vector<std::byte> ws(static_cast<size_t>(want_ws) + 1);
  KernelContext ctx;
  ctx.comm = comm;
  ctx.workspace = std::span<std::byte>(ws.data(), static_cast<size_t>(want_ws));
  Status st = RunCpuKernel(node, in_ptrs, out_ptrs, ctx);
  ASSERT_TRUE(st.ok()) << st.message();
  for (size_t i = 0; i < shapes.size(); ++i)
    EXPECT_TRUE(
        BitwiseEqual(out_data[i].data(), full[i].data(), static_cast<int64_t>(full[i].size())))
        << "parameter " << i;
}

// Rank `me`'s K microbatches through the gradient collective `op` into `grad`.
void RunGradient(const std::string& op, Communicator* comm, int64_t numel, int64_t K,
                 const std::vector<std::vector<float>>& partials, const std::vector<float>& scales,
                 std::vector<float>& grad) {
  const int64_t N = comm->size(), me = comm->rank();
  const Node node = MakeNode(op, {"p"}, {"g"}, {{"world_size", Attribute::Int(N)}}, "foundry");
  const int64_t c = Shard(numel, N);
  const int64_t grad_numel = op == "ReduceScatterGradient" ? c : numel;
  const int64_t ws_bytes = (op == "ReduceScatterGradient" ? 2 : 3) * Region(N * c * 4);
  std::vector<std::byte> ws(static_cast<size_t>(ws_bytes));
  grad.assign(static_cast<size_t>(grad_numel), 12345.0f);  // old bits: never read at k = 0
  Tensor out = Tensor::View(DType::kFloat32, {grad_numel}, grad.data());
  for (int64_t k = 0; k < K; ++k) {
    const size_t j = static_cast<size_t>(k * N + me);
    Tensor in = Tensor::View(DType::kFloat32, {numel}, const_cast<float*>(partials[j].data()));
    const Tensor* ins[] = {&in};
    Tensor* outs[] = {&out};
    ASSERT_EQ(CpuWorkspaceBytesFor(node, ins, outs), ws_bytes);
    KernelContext ctx;
    ctx.comm = comm;
    ctx.grad_scale = scales[j];
    ctx.grad_accumulate = k > 0;
    ctx.workspace = std::span<std::byte>(ws.data(), ws.size());
    Status st = RunCpuKernel(node, ins, outs, ctx);
    ASSERT_TRUE(st.ok()) << st.message();
  }
}

// The one-process gradient over N*K microbatches, as foundry::AccumulateGradient forms it.
std::vector<float> OneProcess(const std::vector<std::vector<float>>& partials,
                              const std::vector<float>& scales, int64_t numel) {
  std::vector<float> g(static_cast<size_t>(numel));
  for (size_t j = 0; j < partials.size(); ++j)
    for (int64_t i = 0; i < numel; ++i) {
      const float scaled = scales[j] * partials[j][static_cast<size_t>(i)];
      g[static_cast<size_t>(i)] = j == 0 ? scaled : g[static_cast<size_t>(i)] + scaled;
    }
  return g;
}

void CheckGradientCollective(const std::string& op) {
  Communicator* comm = World();
  ASSERT_NE(comm, nullptr);
  const int64_t N = comm->size(), me = comm->rank();
  for (int64_t K : {int64_t{1}, int64_t{3}})
    for (int64_t numel : {int64_t{1}, int64_t{7}, (int64_t{1} << 16) + 5, int64_t{100003}}) {
      SCOPED_TRACE(op + ", K " + std::to_string(K) + ", numel " + std::to_string(numel));
      // n_j / N_tot as the trainer forms it: float(double(n_j) / double(total)).
      std::vector<int64_t> counts;
      int64_t total = 0;
      for (int64_t j = 0; j < N * K; ++j) total += counts.emplace_back(3 + 5 * j);
      std::vector<float> scales;
      std::vector<std::vector<float>> partials;
      for (int64_t j = 0; j < N * K; ++j) {
        scales.push_back(static_cast<float>(static_cast<double>(counts[static_cast<size_t>(j)]) /
                                            static_cast<double>(total)));
        partials.push_back(Random(numel, 1000 * numel + j));
      }
      std::vector<float> grad;
      RunGradient(op, comm, numel, K, partials, scales, grad);
      const std::vector<float> one = OneProcess(partials, scales, numel);
      const int64_t c = Shard(numel, N);
      const bool scatter = op == "ReduceScatterGradient";
      const int64_t begin = scatter ? me * c : 0;
      const int64_t n = scatter ? c : numel;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t e = begin + i;  // the element of the full gradient
        const float want = e < numel ? one[static_cast<size_t>(e)] : 0.0f;  // padding: 0
        double ref = 0;
        for (size_t j = 0; j < partials.size() && e < numel; ++j)
          ref += static_cast<double>(scales[j]) * partials[j][static_cast<size_t>(e)];
        ASSERT_NEAR(grad[static_cast<size_t>(i)], ref, 1e-6 + 1e-6 * std::abs(ref)) << "i " << i;
        ASSERT_EQ(std::memcmp(&grad[static_cast<size_t>(i)], &want, sizeof(float)), 0)
            << "i " << i << ": " << grad[static_cast<size_t>(i)] << " vs " << want;
      }
    }
}

TEST(CollectiveKernelsTest, ReduceScatterGradientIsTheOneProcessSumBitwise) {
  NEEDS_WORLD(comm);
  CheckGradientCollective("ReduceScatterGradient");
}

TEST(CollectiveKernelsTest, AllReduceGradientIsTheOneProcessSumBitwise) {
  NEEDS_WORLD(comm);
  CheckGradientCollective("AllReduceGradient");
}

TEST(CollectiveKernelsTest, ErrorsWithoutACommunicatorOrOnAnotherWorldSize) {
  std::vector<float> p(4, 1.0f), g(4, 0.0f);
  Tensor in = Tensor::View(DType::kFloat32, {4}, p.data());
  Tensor out = Tensor::View(DType::kFloat32, {4}, g.data());
  const Tensor* ins[] = {&in};
  Tensor* outs[] = {&out};
  std::vector<std::byte> ws(1024);
  KernelContext ctx;
  ctx.workspace = std::span<std::byte>(ws.data(), ws.size());
  const Node one =
      MakeNode("AllReduceGradient", {"p"}, {"g"}, {{"world_size", Attribute::Int(1)}}, "foundry");
  Status st = RunCpuKernel(one, ins, outs, ctx);
  EXPECT_NE(st.message().find(": a collective op needs the run's communicator (a plan compiled "
                              "with --world-size runs under mpirun with foundry-run)"),
            std::string::npos)
      << st.message();
  Communicator* comm = World();
  if (!comm) GTEST_SKIP() << "the world_size check needs mpirun";
  ctx.comm = comm;
  const int64_t other = comm->size() + 1;
  const Node wrong = MakeNode("AllReduceGradient", {"p"}, {"g"},
                              {{"world_size", Attribute::Int(other)}}, "foundry");
  st = RunCpuKernel(wrong, ins, outs, ctx);
  EXPECT_NE(st.message().find(": compiled for world_size " + std::to_string(other) +
                              " but the run has " + std::to_string(comm->size()) + " ranks"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef NEEDS_WORLD
