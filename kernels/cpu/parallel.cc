// The pool behind ParallelFor (parallel.h): CpuThreads() - 1 workers started on first use and
// resized when the count changes; a job is a chunk counter the caller and the workers draw from.
// Workers sleep on a condition variable between jobs; the caller takes chunks too, and waits for
// the last ones by yielding.
#include "kernels/cpu/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/cpu/kernel.h"

// cblas.h's OpenBLAS extensions, without its macros.
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);

namespace foundry {
namespace parallel_internal {
namespace {

thread_local bool in_parallel_region = false;

class Pool {
 public:
  void Run(int64_t chunks, int64_t n, int64_t grain, ChunkFn fn, void* body, int threads) {
    std::lock_guard<std::mutex> caller(run_mutex_);  // one job at a time
    if (static_cast<int>(workers_.size()) != threads - 1) Resize(threads - 1);
    Job job{fn, body, n, grain, chunks, 0};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job.generation = ++generation_;
      job_ = job;
      done_.store(0, std::memory_order_relaxed);
      next_.store(job.generation << 32, std::memory_order_release);
    }
    wake_.notify_all();
    Work(job);
    // The caller ran out of chunks: wait for the ones still running elsewhere.
    while (done_.load(std::memory_order_acquire) != chunks) std::this_thread::yield();
  }

 private:
  struct Job {
    ChunkFn fn = nullptr;
    void* body = nullptr;
    int64_t n = 0, grain = 1, chunks = 0;
    uint64_t generation = 0;
  };

  // Claims chunks of `job` until none is left. The counter carries the job's generation in its
  // high half, so a worker that wakes late with a finished job's copy claims nothing of the next.
  void Work(const Job& job) {
    in_parallel_region = true;
    uint64_t cur = next_.load(std::memory_order_acquire);
    for (;;) {
      if ((cur >> 32) != (job.generation & 0xFFFFFFFFu)) break;
      const int64_t k = static_cast<int64_t>(cur & 0xFFFFFFFFu);
      if (k >= job.chunks) break;
      if (!next_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) continue;
      const int64_t begin = k * job.grain;
      job.fn(job.body, k, begin, std::min(job.n, begin + job.grain));
      done_.fetch_add(1, std::memory_order_acq_rel);
      cur = next_.load(std::memory_order_acquire);
    }
    in_parallel_region = false;
  }

  void Loop(uint64_t seen) {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      Work(job);
    }
  }

  // Called with run_mutex_ held: no job is running.
  void Resize(int workers) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this, g = generation_] { Loop(g); });
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
  Job job_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::atomic<uint64_t> next_{0};
  std::atomic<int64_t> done_{0};
};

Pool& ThePool() {
  static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
  return *pool;
}

}  // namespace

void Run(int64_t n, int64_t grain, ChunkFn fn, void* body) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t chunks = NumChunks(n, grain);
  const int threads = static_cast<int>(std::min<int64_t>(CpuThreads(), chunks));
  if (threads <= 1 || in_parallel_region) {
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t begin = k * grain;
      fn(body, k, begin, std::min(n, begin + grain));
    }
    return;
  }
  ThePool().Run(chunks, n, grain, fn, body, CpuThreads());
}

}  // namespace parallel_internal

int AvailableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void SetAllCpuThreads(int n) {
  SetCpuThreads(n);
  openblas_set_num_threads(1);
}

const char* BlasCoreName() { return openblas_get_corename(); }

}  // namespace foundry
