// The CPU collective kernels (kernels/cpu/collective.cc) and the MPI communicator under them
// (runtime/mpi_communicator.h), run on every rank of an mpirun world (ctest
// runtime_collective_kernels_test_np2 starts 2; the plain entry, one process without mpirun,
// runs the checks that need no world), and on worlds of 1, 2 and 3 ranks in this process (one
// thread per rank, ThreadWorld below). Every rank draws every rank's data from the same seeds, so
// each checks its own result against the arithmetic of docs/design.md §10 written out here:
//  - the communicator's byte moves, split into many MPI calls (SetMpiChunkBytes(7)) and whole;
//  - AllGather: rank r's shard is flat(P)[r*c, (r+1)*c), zero-padded; the output is P, bitwise,
//    f32 and bf16 shards mixed in one node;
//  - ReduceScatterGradient / AllReduceGradient over K microbatches: rank r's microbatch k is the
//    global microbatch j = k*N + r with scale s_j. f32 partials: the result is, bit for bit, the
//    one-process AccumulateGradient sum (g = s_0 p_0, then g = g + s_j p_j for j = 1..N*K-1,
//    each product and sum rounded to f32), and within 1e-6 of the double sum. bf16 partials: per
//    microbatch t = bf16(s p) summed over the ranks in bf16 (each add in f32, rounded), then
//    g = f32(t) or g + f32(t), bit for bit;
//  - buckets: a tensor whose shards span several exchanges gives those same bits, and the
//    workspace is at most one bucket per region (a 50257 x 4096 embedding) and exact;
//  - the errors: no communicator, a world_size other than the run's, types the ops do not take.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/bfloat16.h"
#include "kernels/cpu/collective.h"
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

// N ranks in this process, one thread each, exchanging through shared memory: the kernels at
// world sizes the mpirun entry does not start (1, 3), and without MPI at all.
class ThreadWorld {
 public:
  explicit ThreadWorld(int n) : size_(n), slots_(static_cast<size_t>(n)), sync_(n) {
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
  }
  // fn(comm) on every rank, each on its own thread; returns when all are done.
  template <class F>
  void Run(F fn) {
    std::vector<std::thread> threads;
    for (auto& r : ranks_)
      threads.emplace_back([this, &fn, &r] {
        fn(static_cast<Communicator*>(r.get()));
        Leave(r->rank());
      });
    for (std::thread& t : threads) t.join();
  }

 private:
  class Rank final : public Communicator {
   public:
    Rank(ThreadWorld* w, int r) : w_(w), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return w_->size_; }
    std::string_view name() const override { return "threads"; }
    Status AllGather(const void* send, void* recv, int64_t bytes) override {
      return w_->Exchange(r_, send, [&](int from, const std::byte* theirs) {
        std::memcpy(static_cast<std::byte*>(recv) + from * bytes, theirs,
                    static_cast<size_t>(bytes));
      });
    }
    Status AllToAll(const void* send, void* recv, int64_t bytes) override {
      return w_->Exchange(r_, send, [&](int from, const std::byte* theirs) {
        std::memcpy(static_cast<std::byte*>(recv) + from * bytes, theirs + r_ * bytes,
                    static_cast<size_t>(bytes));
      });
    }
    Status Broadcast(void* data, int64_t bytes, int root) override {
      return w_->Exchange(r_, data, [&](int from, const std::byte* theirs) {
        if (from == root && r_ != root) std::memcpy(data, theirs, static_cast<size_t>(bytes));
      });
    }
    Status Barrier() override {
      w_->sync_.arrive_and_wait();
      return Status::Ok();
    }

   private:
    ThreadWorld* w_;
    int r_;
  };

  // Every rank publishes `mine`, reads every rank's, then waits until all have read.
  template <class F>
  Status Exchange(int rank, const void* mine, F read) {
    slots_[static_cast<size_t>(rank)] = static_cast<const std::byte*>(mine);
    sync_.arrive_and_wait();
    for (int r = 0; r < size_; ++r)
      if (const std::byte* theirs = slots_[static_cast<size_t>(r)]) read(r, theirs);
    sync_.arrive_and_wait();
    return Status::Ok();
  }
  // A rank whose function returned, done or stopped by a failed ASSERT: the others no longer wait
  // for it (nor read from it), so a failure ends the test instead of hanging it.
  void Leave(int rank) {
    slots_[static_cast<size_t>(rank)] = nullptr;
    sync_.arrive_and_drop();
  }

  int size_;
  std::vector<const std::byte*> slots_;
  std::barrier<> sync_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

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

// The planned workspace's regions (kernels/cpu/collective_workspace.cc): bytes rounded up to 256,
// each one exchange of N*b elements of e bytes, b = min(c, floor(8 MiB / (N*e)))
// (kernels/cpu/collective.h).
int64_t Region(int64_t bytes) { return (bytes + 255) / 256 * 256; }
int64_t ExchangeRegion(int64_t c, int64_t N, int64_t e) {
  const int64_t b = std::min(c, std::max<int64_t>(1, kCollectiveBucketBytes / (N * e)));
  return Region(N * b * e);
}

float F(uint16_t h) { return Bf16ToFloat(h); }
uint16_t Bf(float x) { return FloatToBf16(x); }
std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = Bf(v[i]);
  return h;
}
template <class T>
DType TypeOf() {
  return std::is_same_v<T, float> ? DType::kFloat32 : DType::kBFloat16;
}

// Values in [-1, 1) from a hash of (seed, index): cheaper than a normal draw for the tens of
// millions the bucket test needs.
std::vector<float> Uniform(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v[static_cast<size_t>(i)] = static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }
  return v;
}

// Rank comm->rank()'s shards of tensors of `shapes` and `types` (f32 or bf16) gathered by one
// node: every output is the tensor, bitwise, and the workspace is the largest region among the
// outputs whose numel is not N*c (none when every one divides evenly).
void CheckAllGatherOf(Communicator* comm, const std::vector<Shape>& shapes,
                      const std::vector<DType>& types) {
  const int64_t N = comm->size(), me = comm->rank();
  std::vector<std::vector<std::byte>> full, shard, out_data;
  std::vector<Tensor> ins, outs;
  std::vector<std::string> in_names, out_names;
  int64_t want_ws = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : shapes[i]) numel *= d;
    const int64_t c = Shard(numel, N), e = types[i] == DType::kBFloat16 ? 2 : 4;
    const std::vector<float> values = Random(numel, 100 + i);
    std::vector<std::byte>& f = full.emplace_back(static_cast<size_t>(numel * e));
    if (e == 2)
      std::memcpy(f.data(), ToBf16(values).data(), f.size());
    else
      std::memcpy(f.data(), values.data(), f.size());
    std::vector<std::byte>& s = shard.emplace_back(static_cast<size_t>(c * e), std::byte{0});
    const int64_t mine = std::max<int64_t>(0, std::min(c, numel - me * c));
    std::memcpy(s.data(), f.data() + me * c * e, static_cast<size_t>(mine * e));
    out_data.emplace_back(static_cast<size_t>(numel * e), std::byte{0xEE});
    in_names.push_back("s" + std::to_string(i));
    out_names.push_back("p" + std::to_string(i));
    if (numel != N * c) want_ws = std::max(want_ws, ExchangeRegion(c, N, e));
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t c =
        static_cast<int64_t>(shard[i].size()) / (types[i] == DType::kBFloat16 ? 2 : 4);
    ins.push_back(Tensor::View(types[i], {c}, shard[i].data()));
    outs.push_back(Tensor::View(types[i], shapes[i], out_data[i].data()));
  }
  std::vector<const Tensor*> in_ptrs;
  std::vector<Tensor*> out_ptrs;
  for (auto& t : ins) in_ptrs.push_back(&t);
  for (auto& t : outs) out_ptrs.push_back(&t);
  const Node node =
      MakeNode("AllGather", in_names, out_names, {{"world_size", Attribute::Int(N)}}, "foundry");
  EXPECT_EQ(CpuWorkspaceBytesFor(node, in_ptrs, out_ptrs), want_ws);
  std::vector<std::byte> ws(static_cast<size_t>(want_ws) + 1);
  KernelContext ctx;
  ctx.comm = comm;
  ctx.workspace = std::span<std::byte>(ws.data(), static_cast<size_t>(want_ws));
  Status st = RunCpuKernel(node, in_ptrs, out_ptrs, ctx);
  ASSERT_TRUE(st.ok()) << st.message();
  for (size_t i = 0; i < shapes.size(); ++i)
    EXPECT_TRUE(out_data[i] == full[i]) << "parameter " << i << " (" << DTypeName(types[i]) << ")";
}

TEST(CollectiveKernelsTest, AllGatherReassemblesEveryParameter) {
  NEEDS_WORLD(comm);
  // Shapes whose element count does and does not divide by N (2: 7 and 3x5 pad, 6 does not).
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  CheckAllGatherOf(comm, {{7}, {2, 3}, {3, 5}, {1}}, {f32, f32, f32, f32});
  CheckAllGatherOf(comm, {{7}, {2, 3}, {3, 5}, {1}}, {bf16, f32, bf16, bf16});
}

TEST(CollectiveKernelsTest, AllGatherOfF32AndBf16ShardsInProcess) {
  const DType f32 = DType::kFloat32, bf16 = DType::kBFloat16;
  for (int N : {1, 2, 3}) {
    ThreadWorld world(N);
    world.Run([&](Communicator* comm) {
      SCOPED_TRACE(std::to_string(N) + " ranks, rank " + std::to_string(comm->rank()));
      CheckAllGatherOf(comm, {{7}, {2, 3}, {3, 5}, {1}, {100003}}, {bf16, f32, bf16, bf16, f32});
    });
  }
}

// Rank `me`'s K microbatches through the gradient collective `op` into `grad`, its partials of T
// (float: f32, uint16_t: bf16).
template <class T>
void RunGradient(const std::string& op, Communicator* comm, int64_t numel, int64_t K,
                 const std::vector<std::vector<T>>& partials, const std::vector<float>& scales,
                 std::vector<float>& grad) {
  const int64_t N = comm->size(), me = comm->rank();
  const Node node = MakeNode(op, {"p"}, {"g"}, {{"world_size", Attribute::Int(N)}}, "foundry");
  const int64_t c = Shard(numel, N);
  const int64_t grad_numel = op == "ReduceScatterGradient" ? c : numel;
  const int64_t ws_bytes =
      (op == "ReduceScatterGradient" ? 2 : 3) * ExchangeRegion(c, N, sizeof(T));
  std::vector<std::byte> ws(static_cast<size_t>(ws_bytes));
  grad.assign(static_cast<size_t>(grad_numel), 12345.0f);  // old bits: never read at k = 0
  Tensor out = Tensor::View(DType::kFloat32, {grad_numel}, grad.data());
  for (int64_t k = 0; k < K; ++k) {
    const size_t j = static_cast<size_t>(k * N + me);
    Tensor in = Tensor::View(TypeOf<T>(), {numel}, const_cast<T*>(partials[j].data()));
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

// The step's gradient when the reduction runs in bf16, every element of the full tensor: for
// microbatch k, t = bf16(s_j p_j) for j = k*N, then t = bf16(t + bf16(s_j p_j)) for
// j = k*N + 1 .. k*N + N-1 (each product and add in f32); g = f32(t) for k = 0, then g + f32(t).
std::vector<float> Bf16Reference(const std::vector<std::vector<uint16_t>>& partials,
                                 const std::vector<float>& scales, int64_t N, int64_t numel) {
  const size_t K = partials.size() / static_cast<size_t>(N);
  std::vector<float> g(static_cast<size_t>(numel));
  for (int64_t e = 0; e < numel; ++e) {
    const size_t i = static_cast<size_t>(e);
    for (size_t k = 0; k < K; ++k) {
      uint16_t t = 0;
      for (size_t r = 0; r < static_cast<size_t>(N); ++r) {
        const size_t j = k * static_cast<size_t>(N) + r;
        const uint16_t sent = Bf(scales[j] * F(partials[j][i]));
        t = r == 0 ? sent : Bf(F(t) + F(sent));
      }
      g[i] = k == 0 ? F(t) : g[i] + F(t);
    }
  }
  return g;
}

// Rank `me`'s result of `op` against the full tensor `want`: its shard (zero past numel) or all
// of it, bitwise; the first element that differs is reported.
void ExpectRanksPart(const std::string& op, int64_t N, int64_t me, int64_t numel,
                     const std::vector<float>& grad, const std::vector<float>& want) {
  const int64_t c = Shard(numel, N);
  const bool scatter = op == "ReduceScatterGradient";
  const int64_t begin = scatter ? me * c : 0, n = scatter ? c : numel;
  ASSERT_EQ(static_cast<int64_t>(grad.size()), n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = begin + i;
    const float w = e < numel ? want[static_cast<size_t>(e)] : 0.0f;  // padding: 0
    if (std::memcmp(&grad[static_cast<size_t>(i)], &w, sizeof(float)) != 0) {
      ADD_FAILURE() << op << ", rank " << me << " of " << N << ", numel " << numel << ": element "
                    << e << " is " << grad[static_cast<size_t>(i)] << ", want " << w;
      return;
    }
  }
}

// n_j / N_tot as the trainer forms it: float(double(n_j) / double(total)).
std::vector<float> Scales(int64_t microbatches) {
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int64_t j = 0; j < microbatches; ++j) total += counts.emplace_back(3 + 5 * j);
  std::vector<float> scales;
  for (int64_t n : counts)
    scales.push_back(static_cast<float>(static_cast<double>(n) / static_cast<double>(total)));
  return scales;
}

void CheckGradientCollective(const std::string& op, Communicator* comm) {
  ASSERT_NE(comm, nullptr);
  const int64_t N = comm->size(), me = comm->rank();
  for (int64_t K : {int64_t{1}, int64_t{3}})
    for (int64_t numel : {int64_t{1}, int64_t{7}, (int64_t{1} << 16) + 5, int64_t{100003}}) {
      SCOPED_TRACE(op + ", K " + std::to_string(K) + ", numel " + std::to_string(numel));
      const std::vector<float> scales = Scales(N * K);
      std::vector<std::vector<float>> partials;
      for (int64_t j = 0; j < N * K; ++j) partials.push_back(Random(numel, 1000 * numel + j));
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

// The same with bf16 partials: the reduction in bf16 (Bf16Reference), accumulation off (K = 1)
// and on (K = 3), numel 1, 7 and one that no N here divides.
void CheckBf16GradientCollective(const std::string& op, Communicator* comm) {
  const int64_t N = comm->size(), me = comm->rank();
  for (int64_t K : {int64_t{1}, int64_t{3}})
    for (int64_t numel : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
      SCOPED_TRACE(op + " bf16, K " + std::to_string(K) + ", numel " + std::to_string(numel));
      const std::vector<float> scales = Scales(N * K);
      std::vector<std::vector<uint16_t>> partials;
      for (int64_t j = 0; j < N * K; ++j)
        partials.push_back(ToBf16(Random(numel, 2000 * numel + j)));
      std::vector<float> grad;
      RunGradient(op, comm, numel, K, partials, scales, grad);
      ExpectRanksPart(op, N, me, numel, grad, Bf16Reference(partials, scales, N, numel));
    }
}

TEST(CollectiveKernelsTest, ReduceScatterGradientIsTheOneProcessSumBitwise) {
  NEEDS_WORLD(comm);
  CheckGradientCollective("ReduceScatterGradient", comm);
}

TEST(CollectiveKernelsTest, AllReduceGradientIsTheOneProcessSumBitwise) {
  NEEDS_WORLD(comm);
  CheckGradientCollective("AllReduceGradient", comm);
}

TEST(CollectiveKernelsTest, Bf16GradientCollectivesSumInBf16InRankOrder) {
  NEEDS_WORLD(comm);
  CheckBf16GradientCollective("ReduceScatterGradient", comm);
  CheckBf16GradientCollective("AllReduceGradient", comm);
}

TEST(CollectiveKernelsTest, GradientCollectivesInProcessAtOneTwoAndThreeRanks) {
  for (int N : {1, 2, 3}) {
    ThreadWorld world(N);
    world.Run([&](Communicator* comm) {
      SCOPED_TRACE(std::to_string(N) + " ranks, rank " + std::to_string(comm->rank()));
      for (const char* op : {"ReduceScatterGradient", "AllReduceGradient"}) {
        CheckGradientCollective(op, comm);
        CheckBf16GradientCollective(op, comm);
      }
    });
  }
}

// Shards that take several exchanges give the bits of one exchange (each element's sum runs over
// the ranks in order whatever the chunk). 3 ranks, numel = 3 * 2^21 + 7 = 6291463, c = 2097155:
// f32 chunks of b = floor(8 MiB / (3 * 4)) = 699050 elements, 4 exchanges (the last of 5); bf16
// b = floor(8 MiB / (3 * 2)) = 1398101, 2 exchanges. The references are computed whole.
TEST(CollectiveKernelsTest, ShardsSpanningSeveralBucketsGiveTheUnchunkedBits) {
  const int64_t N = 3, numel = 3 * (int64_t{1} << 21) + 7, K = 2, c = Shard(numel, N);
  ASSERT_EQ(CollectiveChunkElements(c, N, 4), 699050);
  ASSERT_EQ(CollectiveChunkElements(c, N, 2), 1398101);
  const std::vector<float> scales = Scales(N * K);
  std::vector<std::vector<float>> p32;
  std::vector<std::vector<uint16_t>> p16;
  for (int64_t j = 0; j < N * K; ++j) {
    p32.push_back(Uniform(numel, 7 + j));
    p16.push_back(ToBf16(p32.back()));
  }
  const std::vector<float> want32 = OneProcess(p32, scales, numel);
  const std::vector<float> want16 = Bf16Reference(p16, scales, N, numel);
  ThreadWorld world(N);
  world.Run([&](Communicator* comm) {
    for (const char* op : {"ReduceScatterGradient", "AllReduceGradient"}) {
      std::vector<float> grad;
      RunGradient(op, comm, numel, K, p32, scales, grad);
      ExpectRanksPart(op, N, comm->rank(), numel, grad, want32);
      RunGradient(op, comm, numel, K, p16, scales, grad);
      ExpectRanksPart(op, N, comm->rank(), numel, grad, want16);
    }
    CheckAllGatherOf(comm, {{numel}, {numel}}, {DType::kFloat32, DType::kBFloat16});
  });
}

void AddValue(Graph& g, const std::string& name, DType t, Shape shape) {
  Value& v = g.GetOrAddValue(name);
  v.dtype = t;
  v.shape = std::move(shape);
  v.rank_known = true;
}

// What the memory plan holds for the collectives (CpuWorkspaceBytes: bf16 is not staged). A
// 50257 x 4096 embedding (205852672 elements): its shard spans many buckets, so each region is
// b = floor(8 MiB / (N*e)) elements per rank, N*b*e > 8 MiB - 256, rounded up to exactly 8 MiB:
// 16 MiB for a reduce-scatter, 24 MiB for an all-reduce (in f32 over 2 ranks it was two and
// three times the 823 MB gradient), one bucket for an uneven gather (N = 3: 205852672 =
// 3 * 68617557 + 1), none for an even one. A [10, 10] over 3 ranks, c = 34: exactly its regions.
TEST(CollectiveKernelsTest, WorkspaceIsAtMostOneBucketPerRegion) {
  const int64_t B = kCollectiveBucketBytes;
  ASSERT_EQ(B, int64_t{8} << 20);
  for (int64_t N : {2, 3, 8})
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      SCOPED_TRACE(std::to_string(N) + " ranks, " + std::string(DTypeName(t)));
      const Shape shape = {50257, 4096};
      const int64_t numel = 50257 * 4096, c = Shard(numel, N);
      Graph g;
      AddValue(g, "p", t, shape);
      AddValue(g, "s", t, {c});
      const Node rs = MakeNode("ReduceScatterGradient", {"p"}, {"gs"},
                               {{"world_size", Attribute::Int(N)}}, "foundry");
      const Node ar = MakeNode("AllReduceGradient", {"p"}, {"ga"},
                               {{"world_size", Attribute::Int(N)}}, "foundry");
      const Node ag =
          MakeNode("AllGather", {"s"}, {"p"}, {{"world_size", Attribute::Int(N)}}, "foundry");
      AddValue(g, "gs", DType::kFloat32, {c});
      AddValue(g, "ga", DType::kFloat32, shape);
      EXPECT_EQ(CpuWorkspaceBytes(g, rs), 2 * B);
      EXPECT_EQ(CpuWorkspaceBytes(g, ar), 3 * B);
      EXPECT_EQ(CpuWorkspaceBytes(g, ag), numel % N == 0 ? 0 : B);
    }
  Graph g;
  AddValue(g, "p32", DType::kFloat32, {10, 10});
  AddValue(g, "p16", DType::kBFloat16, {10, 10});
  AddValue(g, "g", DType::kFloat32, {34});
  AddValue(g, "s32", DType::kFloat32, {34});
  AddValue(g, "s16", DType::kBFloat16, {2});  // of a [5]: c = 2, N*c = 6 != 5
  AddValue(g, "f16", DType::kBFloat16, {5});
  AddValue(g, "e16", DType::kBFloat16, {2});  // of a [6]: even
  AddValue(g, "full16", DType::kBFloat16, {6});
  const std::map<std::string, Attribute> three = {{"world_size", Attribute::Int(3)}};
  // f32: R(3 * 34 * 4 = 408) = 512; bf16: R(3 * 34 * 2 = 204) = 256.
  EXPECT_EQ(
      CpuWorkspaceBytes(g, MakeNode("ReduceScatterGradient", {"p32"}, {"g"}, three, "foundry")),
      2 * 512);
  EXPECT_EQ(
      CpuWorkspaceBytes(g, MakeNode("ReduceScatterGradient", {"p16"}, {"g"}, three, "foundry")),
      2 * 256);
  EXPECT_EQ(CpuWorkspaceBytes(g, MakeNode("AllReduceGradient", {"p32"}, {"p32"}, three, "foundry")),
            3 * 512);
  EXPECT_EQ(CpuWorkspaceBytes(g, MakeNode("AllReduceGradient", {"p16"}, {"p32"}, three, "foundry")),
            3 * 256);
  // The largest uneven output's region: max(R(3 * 34 * 4) = 512, R(3 * 2 * 2 = 12) = 256).
  EXPECT_EQ(CpuWorkspaceBytes(g, MakeNode("AllGather", {"s32", "s16", "e16"},
                                          {"p32", "f16", "full16"}, three, "foundry")),
            512);
  EXPECT_EQ(CpuWorkspaceBytes(g, MakeNode("AllGather", {"s16"}, {"f16"}, three, "foundry")), 256);
  EXPECT_EQ(CpuWorkspaceBytes(g, MakeNode("AllGather", {"e16"}, {"full16"}, three, "foundry")), 0);
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

// Operands the kernels do not take, refused before anything moves, the message naming the node
// (a world of one rank in this process: the checks come after the world's).
TEST(CollectiveKernelsTest, TypesTheKernelsDoNotTakeAreRefused) {
  ThreadWorld world(1);
  world.Run([](Communicator* comm) {
    std::vector<uint16_t> h(4);
    std::vector<float> f(4);
    std::vector<double> d(4);
    Tensor f32 = Tensor::View(DType::kFloat32, {4}, f.data());
    Tensor bf16 = Tensor::View(DType::kBFloat16, {4}, h.data());
    Tensor f64 = Tensor::View(DType::kFloat64, {4}, d.data());
    std::vector<std::byte> ws(4096);
    KernelContext ctx;
    ctx.comm = comm;
    ctx.workspace = std::span<std::byte>(ws.data(), ws.size());
    const std::map<std::string, Attribute> one = {{"world_size", Attribute::Int(1)}};
    auto run = [&](const char* op, const Tensor& in, Tensor& out) {
      const Node node = MakeNode(op, {"x"}, {"y"}, one, "foundry");
      const Tensor* ins[] = {&in};
      Tensor* outs[] = {&out};
      return RunCpuKernel(node, ins, outs, ctx).message();
    };
    const std::string gather = MakeNode("AllGather", {"x"}, {"y"}, one, "foundry").Describe();
    EXPECT_EQ(run("AllGather", bf16, f32),
              gather +
                  ": input 0 is 4 elements of bf16 for an output of 4 elements of f32; a shard "
                  "is f32 or bf16, of its output's type, with ceil(numel / 1) elements");
    const std::string rs =
        MakeNode("ReduceScatterGradient", {"x"}, {"y"}, one, "foundry").Describe();
    EXPECT_EQ(run("ReduceScatterGradient", f32, bf16),
              rs + ": reduces a partial of 4 elements of f32 into a shard of 4 elements of bf16; "
                   "the partial is f32 or bf16, the shard f32 with ceil(numel / 1) elements");
    const std::string ar = MakeNode("AllReduceGradient", {"x"}, {"y"}, one, "foundry").Describe();
    EXPECT_EQ(run("AllReduceGradient", f64, f32),
              ar + ": reduces a partial of 4 elements of f64 into a gradient of 4 elements of "
                   "f32; the partial is f32 or bf16, the gradient f32 of its size");
  });
}

}  // namespace FOUNDRY_TEST_NS
}  // namespace foundry

// A unity build compiles the next test file in this unit (CMakeLists.txt): its macros end here.
#undef NEEDS_WORLD
