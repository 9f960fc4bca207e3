#include "runtime/param_init.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>
#include <thread>
#include <vector>

#include "base/hash.h"
#include "kernels/cpu/philox.h"
#include "runtime/messages.h"

namespace foundry {

using namespace runtime_internal;  // NOLINT: the runtime's own message helpers

namespace {

// Fewest elements worth a thread of their own.
constexpr int64_t kInitChunk = 1 << 18;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t StepSeed(uint64_t run_seed, int64_t step) {
  return SplitMix64(run_seed ^ SplitMix64(static_cast<uint64_t>(step)));
}

double NormalSample(uint64_t seed, uint64_t key, uint64_t index) {
  Philox4 r = PhiloxBlock(seed, key, index >> 1);
  // 53-bit uniforms from two 32-bit lanes each; u1 in (0, 1] so the log is finite.
  auto u53 = [](uint32_t hi, uint32_t lo) {
    return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11));
  };
  const double k2m53 = 1.0 / 9007199254740992.0;
  double u1 = (u53(r.v[0], r.v[1]) + 1.0) * k2m53;
  double u2 = u53(r.v[2], r.v[3]) * k2m53;
  double radius = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * std::numbers::pi * u2;
  return (index & 1) ? radius * std::sin(theta) : radius * std::cos(theta);
}

Tensor InitParameter(const std::string& name, const Shape& shape, uint64_t init_seed) {
  Tensor t(DType::kFloat32, shape);
  float* p = t.data<float>();
  std::string lower = Lower(name);
  if (EndsWith(name, ".bias")) return t;  // zero-filled
  if (shape.size() == 1 &&
      (lower.find("norm") != std::string::npos || lower.find("ln") != std::string::npos)) {
    std::fill(p, p + t.numel(), 1.0f);
    return t;
  }
  const uint64_t key = Fnv1a(name);
  auto fill = [p, init_seed, key](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      p[i] = static_cast<float>(0.02 * NormalSample(init_seed, key, static_cast<uint64_t>(i)));
  };
  // Element i depends on (seed, key, i) only, so chunks on threads give the same bits. One
  // element is a Philox block, a log, a sqrt and a cos in double (100-300 ns measured on a loaded
  // 2-core machine): MPT-1B's 1.3e9 elements took minutes on one core, longer than the GPU
  // check's window, so big tensors are split over the cores.
  const int64_t n = t.numel();
  const int64_t threads =
      std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), n / kInitChunk);
  if (threads <= 1) {
    fill(0, n);
    return t;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int64_t k = 0; k < threads; ++k)
    pool.emplace_back(fill, n * k / threads, n * (k + 1) / threads);
  for (auto& th : pool) th.join();
  return t;
}

}  // namespace foundry
