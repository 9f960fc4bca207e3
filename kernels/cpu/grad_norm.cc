// The gradient norm and clipping on the CPU (kernels/cpu/grad_norm.h). Built with
// -ffp-contract=off (CMakeLists.txt): the f32 coefficient is rounded where torch rounds it.
#include "kernels/cpu/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace foundry {
namespace {

// Blocks per parallel chunk: kElementGrain elements.
constexpr int64_t kBlocksPerChunk = kElementGrain / kNormBlock;

// The lanes of one block (or of the partials) added as a tree.
double TreeSum(double* lanes) {
  for (int64_t s = kNormLanes / 2; s >= 1; s /= 2)
    for (int64_t l = 0; l < s; ++l) lanes[l] += lanes[l + s];
  return lanes[0];
}

// Lane l adds x[l + kNormLanes * r] for rows r = 0, 1, ... (the last row may be partial). Lanes
// are taken kGroup at a time (the group's loop vectorises over them) instead of one pass over the
// block per row for all 256 lanes.
double BlockSum(const float* x, int64_t n) {
  constexpr int64_t kGroup = 16;
  double lanes[kNormLanes];
  const int64_t rows = n / kNormLanes, rest = n % kNormLanes;
  for (int64_t l0 = 0; l0 < kNormLanes; l0 += kGroup) {
    double acc[kGroup] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < kGroup; ++u) {
        const double v = x[r * kNormLanes + l0 + u];
        acc[u] += v * v;
      }
    for (int64_t u = 0; u < kGroup && l0 + u < rest; ++u) {
      const double v = x[rows * kNormLanes + l0 + u];
      acc[u] += v * v;
    }
    for (int64_t u = 0; u < kGroup; ++u) lanes[l0 + u] = acc[u];
  }
  return TreeSum(lanes);
}

double PartialsSum(const double* partials, int64_t n) {
  double lanes[kNormLanes] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i % kNormLanes] += partials[i];
  return TreeSum(lanes);
}

}  // namespace

double SumOfSquares(const float* x, int64_t n) {
  const int64_t blocks = NormBlocks(n);
  if (blocks == 0) return 0.0;
  // One partial: the lanes' tree over it and zeros gives it back exactly (x + 0 = x), so skip it.
  if (blocks == 1) return BlockSum(x, n);
  // Small and allocated per call: one double per 8192 elements.
  std::vector<double> partials(static_cast<size_t>(blocks));
  ParallelFor(blocks, kBlocksPerChunk, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kNormBlock;
      partials[static_cast<size_t>(b)] = BlockSum(x + begin, std::min(kNormBlock, n - begin));
    }
  });
  return PartialsSum(partials.data(), blocks);
}

float ClipCoefficient(float total_norm, double max_norm) {
  const float shifted = total_norm + static_cast<float>(1e-6);
  const float coef = (1.0f / shifted) * static_cast<float>(max_norm);
  // torch.clamp(coef, max=1.0): NaN stays NaN.
  return coef > 1.0f ? 1.0f : coef;
}

ClipScalars ClipScalarsFromSums(std::span<const double> sums_of_squares, double max_norm) {
  double sum = 0.0;
  for (double s : sums_of_squares) {
    const double norm = static_cast<float>(std::sqrt(s));
    sum += norm * norm;
  }
  ClipScalars c;
  c.total_norm = static_cast<float>(std::sqrt(sum));
  c.clip_coef = max_norm > 0 ? ClipCoefficient(c.total_norm, max_norm) : 1.0f;
  return c;
}

void ScaleInPlace(float* g, int64_t n, float coef) {
  ParallelFor(n, kElementGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) g[i] *= coef;
  });
}

}  // namespace foundry
