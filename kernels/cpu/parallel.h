// Parallel loops whose results do not depend on the thread count.
//
// Work over [0, n) is cut into chunks [k * grain, min(n, (k + 1) * grain)): the cut depends on n
// and the grain the kernel chose from the shape, never on how many threads run. Threads take whole
// chunks (any thread, any order); a chunk's body writes only its own outputs, so an elementwise
// kernel gives the same bits at 1 or 16 threads. A reduction writes one partial per chunk and the
// caller combines the partials in chunk order (ParallelChunks' `chunks` tells it how many):
// the same sums in the same order whatever the thread count.
//
// One process-wide pool of CpuThreads() - 1 workers (kernel.h: SetCpuThreads) plus the calling
// thread. A loop of one chunk, or a call with one thread, runs inline on the caller: no wake-up, no
// synchronisation. Loops do not nest: a body that calls ParallelFor runs its inner loop inline.
// Nothing here allocates per call.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace foundry {

namespace parallel_internal {
using ChunkFn = void (*)(void* body, int64_t chunk, int64_t begin, int64_t end);
// Runs fn(body, k, begin_k, end_k) for every chunk k of [0, n) cut by `grain`, on the pool.
void Run(int64_t n, int64_t grain, ChunkFn fn, void* body);
}  // namespace parallel_internal

// Number of chunks ParallelFor cuts [0, n) into with `grain` (>= 1): ceil(n / grain), 0 for n <= 0.
inline int64_t NumChunks(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

// body(begin, end) for each chunk of [0, n); returns when every chunk is done.
template <class F>
void ParallelFor(int64_t n, int64_t grain, F&& body) {
  using Body = std::remove_reference_t<F>;
  parallel_internal::Run(
      n, grain,
      [](void* b, int64_t, int64_t begin, int64_t end) { (*static_cast<Body*>(b))(begin, end); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// body(chunk, begin, end) for each chunk: for reductions that keep one partial per chunk index.
template <class F>
void ParallelChunks(int64_t n, int64_t grain, F&& body) {
  using Body = std::remove_reference_t<F>;
  parallel_internal::Run(
      n, grain,
      [](void* b, int64_t k, int64_t begin, int64_t end) {
        (*static_cast<Body*>(b))(k, begin, end);
      },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// A grain for `rows` independent rows of `row_cost` elements each: about kElementGrain elements
// per chunk, at least one row. Depends only on the shape.
inline constexpr int64_t kElementGrain = 1 << 15;
inline int64_t RowGrain(int64_t row_cost) {
  return row_cost >= kElementGrain ? 1 : kElementGrain / (row_cost < 1 ? 1 : row_cost);
}

// Threads available to this process (its CPU affinity mask), at least 1: the CLIs' default.
int AvailableCpus();

// Sets the threads of foundry's kernels to n (>= 1; SetCpuThreads) and OpenBLAS's to one: products
// run as pieces on foundry's threads (kernels/cpu/math.cc), because OpenBLAS's own threading
// changes bits with the thread count.
void SetAllCpuThreads(int n);

// The name of the OpenBLAS kernels in use ("Haswell", "SkylakeX", ...): OpenBLAS picks them when it
// loads, from the CPU, or from OPENBLAS_CORETYPE when that is set (an AVX2 choice on an AVX-512
// CPU halves the speed of every matrix product).
const char* BlasCoreName();

}  // namespace foundry
