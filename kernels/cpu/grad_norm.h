// The global gradient norm and torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=2) on
// fp32 gradients, in the float types PyTorch (1.13 and 2.6) computes in:
//   norm_i     = ||g_i||_2                         f32, one per tensor (torch.linalg.vector_norm)
//   total      = ||[norm_0, norm_1, ...]||_2       f32 (vector_norm of the stacked norms)
//   clip_coef  = max_norm / (total + 1e-6)         Tensor.__rtruediv__: reciprocal(total +
//                                                  f32(1e-6)) * f32(max_norm), each rounded to f32
//   g_i       *= min(clip_coef, 1)                 f32 products (clamp(max=1.0) then mul_)
// The returned norm is `total`, before clipping, as clip_grad_norm_ returns it.
//
// PyTorch sums each norm in f32 in an order of its own (vectorised, threaded); here each sum of
// squares is exact-product double arithmetic in one fixed order, so a norm is the f32 rounding of
// a sum far more accurate than torch's: they differ by a few f32 ulps (the clipped gradients by as
// much, relative). The order, shared with the CUDA kernel (kernels/cuda/grad_norm.h) so the two
// give the same bits:
//   a tensor of n elements is cut into blocks of kNormBlock elements; in block b, lane l
//   (0 <= l < kNormLanes) adds x[i]^2 for i = b*kNormBlock + l + kNormLanes*j, j = 0, 1, ...
//   (in double: the square of an f32 is exact, so an fma changes nothing), then the lanes are
//   added as a tree (lane[l] += lane[l + s] for s = 128, 64, ..., 1) into the block's partial;
//   the partials are added the same way (lane l takes partials l, l + 256, ...; then the tree);
//   norm_i = f32(sqrt(sum_i)); the norms' squares, exact in double, are added in tensor order and
//   total = f32(sqrt(that)).
// Blocks are independent: the CPU runs them on any number of threads with the same bits.
#pragma once

#include <cstdint>
#include <span>

namespace foundry {

inline constexpr int64_t kNormLanes = 256;
inline constexpr int64_t kNormBlock = 32 * kNormLanes;

// Blocks of a tensor of n elements: ceil(n / kNormBlock).
inline int64_t NormBlocks(int64_t n) { return n <= 0 ? 0 : (n + kNormBlock - 1) / kNormBlock; }

// The sum of squares of x[0, n) in the order above (threads: kernels/cpu/parallel.h).
double SumOfSquares(const float* x, int64_t n);

// The f32 norms from each tensor's sum of squares, and the clip coefficient for `max_norm`
// (> 0; 0 = no clipping: clip_coef is 1).
struct ClipScalars {
  float total_norm = 0;
  float clip_coef = 1;  // min(max_norm / (total + 1e-6), 1) as torch rounds it
};
ClipScalars ClipScalarsFromSums(std::span<const double> sums_of_squares, double max_norm);

// clip_coef(total, max_norm) alone, in f32 as clip_grad_norm_ computes it (NaN stays NaN).
float ClipCoefficient(float total_norm, double max_norm);

// g[0, n) *= coef, f32 (threads: elementwise chunks).
void ScaleInPlace(float* g, int64_t n, float coef);

}  // namespace foundry
