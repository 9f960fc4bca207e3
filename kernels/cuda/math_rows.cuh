// The arithmetic of the CUDA math kernels (kernels/cuda/math.cu), written once for the host and
// the device: which A and B matrices each output batch of a broadcast matmul reads, how a
// reduction's output and reduced indices map to input offsets, CumSum's lines, and the
// per-element formulas of softmax, the normalizations and cross-entropy. The device code wraps
// these in grid-stride loops and fixed-shape block trees; tests/kernels/cuda/math_host_test.cc runs
// them serially on the host against the CPU kernels (kernels/cpu/math.cc), whose conventions they
// follow:
// - sums accumulate in double and round once (the CPU's order is sequential, the GPU's a fixed
//   tree, so results agree to fp32 rounding, and each is deterministic);
// - RMSNorm is the exported decomposition, one f32 op per step (RmsInv, RmsOut), bit for bit
//   apart from the order of the double sum of squares.
// Plain C++ for g++ (no CUDA headers); FOUNDRY_HD marks what the kernels call.
#pragma once

#include <math.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "kernels/cuda/hd.h"

namespace foundry::math_rows {

inline constexpr int kMaxDims = 8;

// ============================== matmul batch broadcasting ==============================

// numpy.matmul with FusedMatMul's transposes, as the CPU computes it: a 1-D A is a [1,K] row, a 1-D
// B a [K,1] column (the transposes then apply to those), batch dims broadcast. Output batch `bi`
// (row-major over the broadcast batch shape) multiplies A matrix a_index and B matrix b_index.
struct MatMulPlan {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t a_mat = 0, b_mat = 0;  // elements per A / B matrix (rows * cols as stored)
  int64_t batches = 1;
  int nb = 0;  // batch rank
  int64_t batch_dims[kMaxDims] = {};
  int64_t a_strides[kMaxDims] = {};  // in matrices; 0 where A broadcasts
  int64_t b_strides[kMaxDims] = {};
  // The batches fall into batches / group consecutive runs of `group` output batches in which the
  // A and B matrix indices advance by group_a_stride / group_b_stride (0: broadcast): one strided
  // batched GEMM per run.
  int64_t group = 1, group_a_stride = 0, group_b_stride = 0;
  // B is one matrix shared by every batch and A is not transposed: the batch folds into the rows
  // of a single [batches * m, k] x [k, n] product, as the CPU does.
  bool fold_rows = false;
};

FOUNDRY_HD inline void MatMulBatchOperands(const MatMulPlan& p, int64_t bi, int64_t* a_index,
                                           int64_t* b_index) {
  int64_t a = 0, b = 0;
  for (int d = p.nb - 1; d >= 0; --d) {
    int64_t i = bi % p.batch_dims[d];
    bi /= p.batch_dims[d];
    a += i * p.a_strides[d];
    b += i * p.b_strides[d];
  }
  *a_index = a;
  *b_index = b;
}

// An error message (empty when the shapes multiply) and the plan.
inline std::string MakeMatMulPlan(const Shape& a_shape, const Shape& b_shape, bool ta, bool tb,
                                  MatMulPlan* plan) {
  if (a_shape.empty() || b_shape.empty()) return "operands must have rank >= 1";
  Shape as = a_shape, bs = b_shape;
  if (as.size() == 1) as = {1, as[0]};
  if (bs.size() == 1) bs = {bs[0], 1};
  const size_t ra = as.size(), rb = bs.size();
  MatMulPlan p;
  p.ta = ta;
  p.tb = tb;
  const int64_t rows_a = as[ra - 2], cols_a = as[ra - 1], rows_b = bs[rb - 2], cols_b = bs[rb - 1];
  p.m = ta ? cols_a : rows_a;
  p.k = ta ? rows_a : cols_a;
  p.n = tb ? rows_b : cols_b;
  if ((tb ? cols_b : rows_b) != p.k)
    return "inner dimensions do not match: " + ShapeToString(a_shape) + " x " +
           ShapeToString(b_shape);
  p.a_mat = rows_a * cols_a;
  p.b_mat = rows_b * cols_b;
  const size_t nb = std::max(ra, rb) - 2;
  if (nb > static_cast<size_t>(kMaxDims))
    return "the cuda matmul takes at most " + std::to_string(kMaxDims) + " batch dims";
  Shape ba(nb, 1), bb(nb, 1);
  for (size_t i = 0; i + 2 < ra; ++i) ba[nb - (ra - 2) + i] = as[i];
  for (size_t i = 0; i + 2 < rb; ++i) bb[nb - (rb - 2) + i] = bs[i];
  p.nb = static_cast<int>(nb);
  int64_t pa = 1, pb = 1;
  for (int d = p.nb - 1; d >= 0; --d) {
    if (ba[d] != bb[d] && ba[d] != 1 && bb[d] != 1)
      return "batch dimensions of " + ShapeToString(a_shape) + " and " + ShapeToString(b_shape) +
             " do not broadcast";
    p.batch_dims[d] = ba[d] == 1 ? bb[d] : ba[d];
    p.a_strides[d] = ba[d] == 1 ? 0 : pa;
    p.b_strides[d] = bb[d] == 1 ? 0 : pb;
    pa *= ba[d];
    pb *= bb[d];
  }
  for (int d = 0; d < p.nb; ++d) p.batches *= p.batch_dims[d];
  bool b_shared = true;
  for (int d = 0; d < p.nb; ++d) b_shared = b_shared && p.b_strides[d] == 0;
  p.fold_rows = b_shared && !ta;
  // The longest run of trailing batch dims over which both operands' matrix indices are linear in
  // the flattened index: with `span` the product of the run's dims after d, stride[d] ==
  // unit * span, unit being the stride of the run's innermost non-unit dim (0: broadcast).
  int64_t span = 1;
  bool started = false;
  int first = p.nb;
  for (int d = p.nb - 1; d >= 0; --d) {
    const int64_t dim = p.batch_dims[d];
    if (dim != 1) {
      if (!started) {
        p.group_a_stride = p.a_strides[d];
        p.group_b_stride = p.b_strides[d];
        started = true;
      } else if (p.a_strides[d] != p.group_a_stride * span ||
                 p.b_strides[d] != p.group_b_stride * span) {
        break;
      }
    }
    span *= dim;
    first = d;
  }
  p.group = 1;
  for (int d = first; d < p.nb; ++d) p.group *= p.batch_dims[d];
  *plan = p;
  return "";
}

// ============================== reductions ==============================

// A Reduce* over any set of axes as two index spaces: output o (row-major over the kept dims) and
// reduced index r (row-major over the reduced dims, the CPU's accumulation order); the element is
// x[KeptOffset(o) + ReducedOffset(r)]. Adjacent dims of the same kind are merged.
struct ReducePlan {
  int kept_rank = 0, red_rank = 0;
  int64_t kept_dims[kMaxDims] = {}, kept_strides[kMaxDims] = {};
  int64_t red_dims[kMaxDims] = {}, red_strides[kMaxDims] = {};
  int64_t out_n = 1, red_n = 1;
  // The innermost dim is kept: neighbouring outputs are neighbouring in memory (the kernel then
  // gives consecutive threads consecutive outputs, for coalesced reads).
  bool inner_kept = false;
};

FOUNDRY_HD inline int64_t OffsetOf(const int64_t* dims, const int64_t* strides, int rank,
                                   int64_t index) {
  // The outermost dim needs no modulo: index < product of dims (integer division is slow on the
  // device, and most plans have one dim per side).
  int64_t off = 0;
  for (int d = rank - 1; d > 0; --d) {
    off += (index % dims[d]) * strides[d];
    index /= dims[d];
  }
  return rank > 0 ? off + index * strides[0] : 0;
}
FOUNDRY_HD inline int64_t KeptOffset(const ReducePlan& p, int64_t o) {
  return OffsetOf(p.kept_dims, p.kept_strides, p.kept_rank, o);
}
FOUNDRY_HD inline int64_t ReducedOffset(const ReducePlan& p, int64_t r) {
  return OffsetOf(p.red_dims, p.red_strides, p.red_rank, r);
}

// An error message (empty when fine) and the plan of `shape` with `reduced[d]` marking the axes.
inline std::string MakeReducePlan(const Shape& shape, const std::vector<bool>& reduced,
                                  ReducePlan* plan) {
  ReducePlan p;
  const int rank = static_cast<int>(shape.size());
  // From the innermost dim outwards, so a merged group's stride is its innermost dim's. Unit dims
  // move no index and are dropped; an empty dim empties out_n or red_n, and then the offsets of
  // that side are never asked for.
  std::vector<std::pair<int64_t, int64_t>> kept, red;  // (dim, stride), innermost first
  int64_t stride = 1;
  int last_kind = -1;  // 0 kept, 1 reduced: the kind of the group being extended
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t dim = shape[d];
    const int kind = reduced[d] ? 1 : 0;
    (kind ? p.red_n : p.out_n) *= dim;
    if (dim == 1) continue;
    auto& groups = kind ? red : kept;
    if (kind == last_kind) {
      groups.back().first *= dim;
    } else {
      groups.push_back({dim, stride});
      last_kind = kind;
    }
    stride *= dim;
  }
  if (kept.size() > static_cast<size_t>(kMaxDims) || red.size() > static_cast<size_t>(kMaxDims))
    return "the cuda reduction takes at most " + std::to_string(kMaxDims) +
           " alternating groups of kept and reduced dims";
  p.inner_kept = !kept.empty() && kept.front().second == 1;
  p.kept_rank = static_cast<int>(kept.size());
  p.red_rank = static_cast<int>(red.size());
  for (int i = 0; i < p.kept_rank; ++i) {
    p.kept_dims[p.kept_rank - 1 - i] = kept[i].first;
    p.kept_strides[p.kept_rank - 1 - i] = kept[i].second;
  }
  for (int i = 0; i < p.red_rank; ++i) {
    p.red_dims[p.red_rank - 1 - i] = red[i].first;
    p.red_strides[p.red_rank - 1 - i] = red[i].second;
  }
  *plan = p;
  return "";
}

enum ReduceKind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

template <class T>
struct AccFor {
  using type = double;
};
template <>
struct AccFor<int64_t> {
  using type = int64_t;
};
template <>
struct AccFor<int32_t> {
  using type = int64_t;
};

// The CPU's Reducer (kernels/cpu/math.cc) with a Combine for the tree: Combine(a, Step(Init, x))
// == Step(a, x), and every Combine is associative up to rounding, so a tree of partial results
// computes what the sequential loop does.
template <class T, int kOp>
struct Reducer {
  using Acc = typename AccFor<T>::type;
  static constexpr bool kFloat = std::is_floating_point_v<Acc>;
  FOUNDRY_HD static Acc Init() {
    if constexpr (kOp == kProd) return Acc(1);
    if constexpr (kOp == kMax) {
      if constexpr (kFloat)
        return -HUGE_VAL;
      else
        return INT64_MIN;
    }
    if constexpr (kOp == kMin) {
      if constexpr (kFloat)
        return HUGE_VAL;
      else
        return INT64_MAX;
    }
    return Acc(0);
  }
  FOUNDRY_HD static Acc Combine(Acc acc, Acc v) {
    if constexpr (kOp == kProd) return acc * v;
    // NaN propagates, as numpy and torch.amax do.
    if constexpr (kOp == kMax) return (v > acc || v != v) ? v : acc;
    if constexpr (kOp == kMin) return (v < acc || v != v) ? v : acc;
    return acc + v;
  }
  // One element as a partial result.
  FOUNDRY_HD static Acc Lift(T x) {
    Acc v = static_cast<Acc>(x);
    if constexpr (kOp == kL1) return v < 0 ? -v : v;
    if constexpr (kOp == kL2 || kOp == kSumSquare) return v * v;
    if constexpr (kOp == kLogSumExp) return exp(static_cast<double>(v));
    return v;
  }
  FOUNDRY_HD static Acc Step(Acc acc, T x) { return Combine(acc, Lift(x)); }
  FOUNDRY_HD static T Finish(Acc acc, int64_t count) {
    if constexpr (kOp == kMean) {
      if constexpr (kFloat)
        return static_cast<T>(acc / static_cast<double>(count));
      else
        return static_cast<T>(count == 0 ? 0 : acc / count);
    }
    if constexpr (kOp == kL2) return static_cast<T>(sqrt(static_cast<double>(acc)));
    if constexpr (kOp == kLogSum || kOp == kLogSumExp)
      return static_cast<T>(log(static_cast<double>(acc)));
    return static_cast<T>(acc);
  }
};

// ============================== running sums ==============================

// CumSum over x viewed [outer, n, inner]: line l (row-major over [outer, inner]) is walked in
// order (from the back with reverse) by one thread, as the CPU walks it: floats accumulate in
// double and round each output once, integers wrap (unsigned), so the bits are the CPU's.
struct CumSumPlan {
  int64_t lines = 0, n = 0, inner = 1;
  bool exclusive = false, reverse = false;
};

// An error message (empty when fine, worded as the CPU kernel's) and the plan.
inline std::string MakeCumSumPlan(const Shape& x, int64_t axis, int64_t exclusive, int64_t reverse,
                                  CumSumPlan* plan) {
  const int64_t r = static_cast<int64_t>(x.size());
  if (r == 0) return "x must have rank >= 1";
  if (axis < -r || axis >= r)
    return "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r);
  if (axis < 0) axis += r;
  if ((exclusive != 0 && exclusive != 1) || (reverse != 0 && reverse != 1))
    return "attributes 'exclusive' and 'reverse' must be 0 or 1, got " + std::to_string(exclusive) +
           " and " + std::to_string(reverse);
  CumSumPlan p;
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x[i];
  for (int64_t i = axis + 1; i < r; ++i) p.inner *= x[i];
  p.n = x[axis];
  p.lines = outer * p.inner;
  p.exclusive = exclusive != 0;
  p.reverse = reverse != 0;
  *plan = p;
  return "";
}

template <class T>
struct CumAcc {
  using type = double;
};
template <>
struct CumAcc<int64_t> {
  using type = uint64_t;
};
template <>
struct CumAcc<int32_t> {
  using type = uint32_t;
};

template <class T>
FOUNDRY_HD inline void CumSumLine(const CumSumPlan& p, int64_t line, T* y, const T* x) {
  using Acc = typename CumAcc<T>::type;
  const int64_t base = line / p.inner * p.n * p.inner + line % p.inner;
  Acc acc = 0;
  for (int64_t step = 0; step < p.n; ++step) {
    const int64_t at = base + (p.reverse ? p.n - 1 - step : step) * p.inner;
    const Acc v = static_cast<Acc>(x[at]);
    if (p.exclusive) {
      y[at] = static_cast<T>(acc);
      acc += v;
    } else {
      acc += v;
      y[at] = static_cast<T>(acc);
    }
  }
}

// ============================== softmax ==============================

// Along a lane with max m and sum = sum_j exp(x_j - m): softmax or log-softmax of x, in double.
template <bool kLog>
FOUNDRY_HD inline double SoftmaxOut(double x, double m, double sum) {
  if constexpr (kLog)
    return (x - m) - log(sum);
  else
    return exp(x - m) / sum;
}
FOUNDRY_HD inline double MaxIgnoringNaN(double m, double x) { return m < x ? x : m; }

// SoftmaxGrad_13: dX = Y * (dY - s), s = sum(dY * Y). LogSoftmaxGrad_13: dX = dY - exp(Y) * s,
// s = sum(dY).
template <bool kLog>
FOUNDRY_HD inline double SoftmaxGradTerm(double dy, double y) {
  if constexpr (kLog)
    return dy;
  else
    return dy * y;
}
template <bool kLog>
FOUNDRY_HD inline double SoftmaxGradOut(double dy, double y, double s) {
  if constexpr (kLog)
    return dy - exp(y) * s;
  else
    return y * (dy - s);
}

// ============================== normalizations ==============================

// LayerNormalization from the row's double sum and sum of squared deviations.
FOUNDRY_HD inline double LayerNormInv(double sq_sum, int64_t cols, double eps) {
  return 1.0 / sqrt(sq_sum / static_cast<double>(cols) + eps);
}
FOUNDRY_HD inline float LayerNormOut(float x, double mean, double inv, float scale,
                                     const float* bias, int64_t j) {
  double v = (x - mean) * inv * scale;
  if (bias) v += bias[j];
  return static_cast<float>(v);
}

// RMSNorm as torch exports it: Pow -> ReduceMean (double sum, one rounding) -> Add(eps) -> Sqrt
// -> Div(1, .) -> Mul(x, .) -> Mul(., w), each an f32 op.
FOUNDRY_HD inline float RmsSquare(float x) { return x * x; }
FOUNDRY_HD inline float RmsInv(double sq_sum, int64_t cols, float eps) {
  float ms = static_cast<float>(sq_sum / static_cast<double>(cols));
  float denom = sqrtf(ms + eps);
  return 1.0f / denom;
}
FOUNDRY_HD inline float RmsOut(float x, float inv, float w) {
  float normed = x * inv;
  return normed * w;
}

// LayerNormalizationGrad per row, xhat = (x - mean) * inv, g = dY * scale:
// dX = inv * (g - c1 - xhat * c2), c1 = mean(g) (0 for RMSNorm), c2 = mean(g * xhat).
FOUNDRY_HD inline double LnXhat(float x, double mean, double inv) { return (x - mean) * inv; }
FOUNDRY_HD inline double LnDx(double inv, double g, double c1, double xhat, double c2) {
  return inv * (g - c1 - xhat * c2);
}

// ============================== softmax cross-entropy ==============================

// Class of target label `v`: -1 when it is ignored, -2 when it is outside [0, classes) (the CPU
// rejects such a label before writing anything; on the device, where no host check can run inside
// a step, the sample's loss and gradient become NaN instead).
inline constexpr int64_t kIgnored = -1, kBadLabel = -2;
FOUNDRY_HD inline int64_t CeTarget(int64_t v, bool has_ignore, int64_t ignore, int64_t classes) {
  if (has_ignore && v == ignore) return kIgnored;
  return v < 0 || v >= classes ? kBadLabel : v;
}

// d_scores for one element: (exp(log_prob) - [c == target]) * g, 0 when g is 0 (ignored).
FOUNDRY_HD inline float CeGradOut(float log_prob, bool is_target, double g) {
  double v = g == 0 ? 0.0 : (exp(static_cast<double>(log_prob)) - (is_target ? 1.0 : 0.0)) * g;
  return static_cast<float>(v);
}

}  // namespace foundry::math_rows
