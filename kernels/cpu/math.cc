// CPU reference kernels of the math family: matrix products (OpenBLAS), softmax, reductions,
// CumSum, normalizations and softmax cross-entropy, forward and backward side by side.
//
// Determinism (docs/design.md §5: loss and gradients bitwise identical with and without checkpointing):
// - GEMMs go to OpenBLAS pinned to ONE thread (openblas_set_num_threads(1) when the kernel table
//   is built, before any GEMM runs). A single-threaded OpenBLAS call performs a fixed sequence of
//   operations for given sizes and transposes (operands are packed, so pointer alignment does not
//   matter), so the same product gives the same bits on every run, in the forward and in a
//   recompute clone. Large products are cut into pieces by shape (SplitGemm), one call each, run
//   on the kernels' threads (kernels/cpu/parallel.h): the same bits at any thread count. Products
//   with bfloat16 operands cut the same pieces further into tiles (by shape, "products with
//   bfloat16 operands" below).
// - Every other reduction computes each output element in a fixed order: its reduced elements in
//   row-major order of their indices. Float sums accumulate in double and round once. Threads take
//   whole outputs (rows, lanes, columns; kernels/cpu/parallel.h), never parts of one sum, so the
//   bits do not depend on the thread count.
// - Float exponentials are vmath's (kernels/cpu/vmath.h), the same function in softmax, log-softmax,
//   their gradients and the cross-entropy; double ones libm's.
//
// Statistics conventions (documented because fusions and gradients depend on them):
// - ReduceMean(x) = float(sum_double(x) / count).
// - LayerNormalization: two passes in double (mean, then mean of squared deviations); Y is
//   computed in double from the double statistics and rounded once; Mean and InvStdDev are
//   stored rounded to f32.
// - SimplifiedLayerNormalization reproduces, bit for bit, the decomposition torch exports for
//   `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`:
//   Pow(x,2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(1, .) -> Mul(x, .) -> Mul(., w), each an f32
//   op, with ReduceMean as above. Its inv_std_var output is the Div(1, .) value.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "base/bfloat16.h"
#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vmath.h"

// Also declared by OpenBLAS's cblas.h; repeated so the dependency is explicit.
extern "C" void openblas_set_num_threads(int);

namespace foundry {

namespace {

constexpr char kMs[] = "com.microsoft";

Status MathFail(const Node& n, const std::string& what) { return Error(n.Describe() + ": " + what); }

Status UnsupportedType(const Node& n, DType t) {
  return MathFail(n, "the cpu kernel does not support element type " + std::string(DTypeName(t)));
}

// The executor sizes every buffer from the graph's types, which LoadPlan re-infers from the inputs;
// a kernel that reads or writes by another tensor's size checks that the two agree,
// so a disagreement is an error and never an access past the buffer.
Status RequireLike(const Node& n, const Tensor& t, const char* what, const Tensor& like,
                   const char* like_what) {
  if (t.dtype() == like.dtype() && t.shape() == like.shape()) return Status::Ok();
  return Error(n.Describe() + ": " + what + " is " + std::string(DTypeName(t.dtype())) +
               ShapeToString(t.shape()) + ", not " + like_what + "'s " +
               std::string(DTypeName(like.dtype())) + ShapeToString(like.shape()));
}

// Normalizes `axis` against `rank` with an error naming the node.
StatusOr<int64_t> Axis(const Node& n, int64_t axis, int64_t rank) {
  auto a = NormalizeAxis(axis, rank);
  if (!a.ok()) return MathFail(n, a.status().message());
  return a;
}

// Outer x n x inner view of a shape around one axis.
struct AxisLayout {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisLayout LayoutAround(const Shape& s, int64_t axis) {
  AxisLayout l;
  for (int64_t i = 0; i < axis; ++i) l.outer *= s[i];
  l.n = s[axis];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) l.inner *= s[i];
  return l;
}

// Rows x cols view: rows = prod(s[:axis]), cols = prod(s[axis:]).
std::pair<int64_t, int64_t> SplitAt(const Shape& s, int64_t axis) {
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) (i < axis ? rows : cols) *= s[i];
  return {rows, cols};
}

// ============================== matrix products ==============================

void Blas(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void Blas(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// How GemmOne cuts a product into independent pieces, from the shape alone, so a product gives the
// same bits at any thread count; each piece is one single-threaded BLAS call. OpenBLAS's own
// threads are not used: they cut by thread count and change the bits (measured: 453 of 1200
// random shapes differed between 1 and 2-4 threads with its Haswell kernels).
//  - rows or columns of C, in blocks of `block` (a multiple of 64, every BLAS kernel's unroll);
//    each piece re-packs the operand it does not split, so blocks stay wide when that operand is
//    too big for the cache;
//  - or, for a small C over a long K (a language-model head's input gradient: C [256, 768] over
//    K = 50368), K in `k_pieces` ranges: each range's product is a partial of C (the first in C,
//    the others in the workspace), and the partials are added in range order.
struct GemmSplit {
  bool split_rows = false;
  int64_t block = 0;     // 0: C is not split
  int64_t k_pieces = 1;  // > 1: K is split
};
GemmSplit SplitGemm(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kWorkPerPiece = int64_t{1} << 22;  // multiply-adds
  constexpr int64_t kMaxPieces = 8;
  constexpr int64_t kCachedOperand = int64_t{1} << 18;  // elements (1 MiB of fp32)
  const int64_t work = m * n * k;
  if (work < 2 * kWorkPerPiece) return {};
  const int64_t max_pieces = std::min(kMaxPieces, work / kWorkPerPiece);
  if (k >= 16 * std::max(m, n)) {
    const int64_t pieces = std::min(max_pieces, k / (4 * std::max(m, n)));
    return pieces >= 2 ? GemmSplit{false, 0, pieces} : GemmSplit{};
  }
  const bool rows = m > n;
  const int64_t dim = rows ? m : n;
  const int64_t other = (rows ? n : m) * k;  // the operand every piece packs again
  const int64_t min_block = other <= kCachedOperand ? 64 : 256;
  const int64_t pieces = std::min(max_pieces, dim / min_block);
  if (pieces < 2) return {};
  const int64_t block = ((dim + pieces - 1) / pieces + 63) / 64 * 64;
  if (block >= dim) return {};
  return {rows, block, 1};
}

// Workspace of a product of C [m, n] over k in T: the K-split partials after the first.
int64_t GemmWorkspaceBytes(int64_t m, int64_t n, int64_t k, int64_t elem) {
  const GemmSplit split = SplitGemm(m, n, k);
  return split.k_pieces > 1 ? (split.k_pieces - 1) * m * n * elem : 0;
}

// C[m,n] = alpha * op(A) op(B) + beta * C, row-major; A is stored [m,k] ([k,m] when ta), B is
// stored [k,n] ([n,k] when tb). Handles the empty sizes BLAS rejects. Large products run as
// SplitGemm's pieces on the kernels' threads; `scratch` holds GemmWorkspaceBytes.
template <class T>
Status GemmOne(const Node& node, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
               const T* a, const T* b, T beta, T* c, T* scratch) {
  if (m == 0 || n == 0) return Status::Ok();
  if (k == 0) {
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == T(0) ? T(0) : beta * c[i];
    return Status::Ok();
  }
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return MathFail(node, "matrix dimensions exceed the BLAS int range");
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  const int ldc = static_cast<int>(n);
  const GemmSplit split = SplitGemm(m, n, k);
  if (split.k_pieces > 1) {
    const int64_t len = (k + split.k_pieces - 1) / split.k_pieces, mn = m * n;
    ParallelFor(split.k_pieces, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t k0 = p * len, kl = std::min(k, k0 + len) - k0;
        // K range k0..k0+kl: A's columns (its rows when stored transposed), B's rows (columns).
        const T* ap = ta ? a + k0 * lda : a + k0;
        const T* bp = tb ? b + k0 : b + k0 * ldb;
        Blas(ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(kl), alpha, ap, lda,
             bp, ldb, p == 0 ? beta : T(0), p == 0 ? c : scratch + (p - 1) * mn, ldc);
      }
    });
    ParallelFor(mn, 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t p = 1; p < split.k_pieces; ++p) {
        const T* part = scratch + (p - 1) * mn;
        for (int64_t i = begin; i < end; ++i) c[i] += part[i];
      }
    });
    return Status::Ok();
  }
  if (split.block == 0) {
    Blas(ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, lda, b,
         ldb, beta, c, ldc);
    return Status::Ok();
  }
  const int64_t dim = split.split_rows ? m : n;
  ParallelFor(dim, split.block, [&](int64_t begin, int64_t end) {
    const int len = static_cast<int>(end - begin);
    if (split.split_rows) {
      // Rows begin..end of op(A): A's rows, or A's columns when it is stored transposed.
      const T* ap = ta ? a + begin : a + begin * lda;
      Blas(ta, tb, len, static_cast<int>(n), static_cast<int>(k), alpha, ap, lda, b, ldb, beta,
           c + begin * ldc, ldc);
    } else {
      // Columns begin..end of op(B): B's columns, or B's rows when it is stored transposed.
      const T* bp = tb ? b + begin * ldb : b + begin;
      Blas(ta, tb, static_cast<int>(m), len, static_cast<int>(k), alpha, a, lda, bp, ldb, beta,
           c + begin, ldc);
    }
  });
  return Status::Ok();
}

// The (batches, m, n, k) of a MatMul / FusedMatMul from its operand shapes, and whether the batch
// folds into the rows of one product (B shared and A not transposed); false if they do not make a
// product.
struct MatMulDims {
  int64_t batches = 1, m = 0, n = 0, k = 0;
  bool folded = false;
};
bool MatMulDimsOf(Shape as, Shape bs, bool ta, bool tb, MatMulDims& d) {
  if (as.empty() || bs.empty()) return false;
  if (as.size() == 1) as = {1, as[0]};
  if (bs.size() == 1) bs = {bs[0], 1};
  const size_t ra = as.size(), rb = bs.size();
  d.m = ta ? as[ra - 1] : as[ra - 2];
  d.k = ta ? as[ra - 2] : as[ra - 1];
  d.n = tb ? bs[rb - 2] : bs[rb - 1];
  if ((tb ? bs[rb - 1] : bs[rb - 2]) != d.k) return false;
  const size_t nb = std::max(ra, rb) - 2;
  d.batches = 1;
  bool b_shared = true;
  for (size_t i = 0; i < nb; ++i) {
    const int64_t da = i < nb - (ra - 2) ? 1 : as[i - (nb - (ra - 2))];
    const int64_t db = i < nb - (rb - 2) ? 1 : bs[i - (nb - (rb - 2))];
    d.batches *= std::max(da, db);
    b_shared = b_shared && db == 1;
  }
  d.folded = b_shared && !ta;
  return true;
}

// Numpy matmul with FusedMatMul's transposes of the last two dims: a 1-D A is a [1,K] row, a 1-D B
// a [K,1] column; batch dims broadcast. Calls gemm(ta, m, n, k, a_offset, b_offset, y_offset)
// (offsets in elements) for each product, in batch order: once in all when the batch folds into
// the rows (B shared, A not transposed).
template <class Gemm>
Status ForEachMatMulProduct(const Node& node, const Tensor& A, const Tensor& B, const Tensor& Y,
                            bool ta, bool tb, Gemm gemm) {
  Shape as = A.shape(), bs = B.shape();
  if (as.size() == 1) as = {1, as[0]};
  if (bs.size() == 1) bs = {bs[0], 1};
  size_t ra = as.size(), rb = bs.size();
  int64_t rows_a = as[ra - 2], cols_a = as[ra - 1], rows_b = bs[rb - 2], cols_b = bs[rb - 1];
  int64_t m = ta ? cols_a : rows_a, k = ta ? rows_a : cols_a;
  int64_t kb = tb ? cols_b : rows_b, n = tb ? rows_b : cols_b;
  if (k != kb)
    return MathFail(node, "inner dimensions do not match: " + ShapeToString(A.shape()) + " x " +
                          ShapeToString(B.shape()));
  size_t nb = std::max(ra, rb) - 2;
  Shape ba(nb, 1), bb(nb, 1), by(nb);
  std::copy(as.begin(), as.end() - 2, ba.begin() + (nb - (ra - 2)));
  std::copy(bs.begin(), bs.end() - 2, bb.begin() + (nb - (rb - 2)));
  for (size_t i = 0; i < nb; ++i) {
    if (ba[i] != bb[i] && ba[i] != 1 && bb[i] != 1)
      return MathFail(node, "batch dimensions of " + ShapeToString(A.shape()) + " and " +
                            ShapeToString(B.shape()) + " do not broadcast");
    by[i] = ba[i] == 1 ? bb[i] : ba[i];
  }
  int64_t batches = NumElements(by);
  if (Y.numel() != batches * m * n)
    return MathFail(node, "output has shape " + ShapeToString(Y.shape()) + ", the product needs " +
                          std::to_string(batches * m * n) + " elements");
  bool b_shared = std::all_of(bb.begin(), bb.end(), [](int64_t d) { return d == 1; });
  if (b_shared && !ta) {
    // [batch.., M, K] x [K, N]: the batch folds into the rows of one GEMM.
    return gemm(false, batches * m, n, k, int64_t{0}, int64_t{0}, int64_t{0});
  }
  // Per batch dim, the matrix stride of each operand (0 where it broadcasts).
  std::vector<int64_t> sa(nb), sb(nb);
  for (int64_t i = static_cast<int64_t>(nb) - 1, pa = 1, pb = 1; i >= 0; --i) {
    sa[i] = ba[i] == 1 ? 0 : pa;
    sb[i] = bb[i] == 1 ? 0 : pb;
    pa *= ba[i];
    pb *= bb[i];
  }
  std::vector<int64_t> idx(nb, 0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < nb; ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    RETURN_IF_ERROR(gemm(ta, m, n, k, oa * rows_a * cols_a, ob * rows_b * cols_b, bi * m * n));
    for (int64_t d = static_cast<int64_t>(nb) - 1; d >= 0; --d) {
      if (++idx[d] < by[d]) break;
      idx[d] = 0;
    }
  }
  return Status::Ok();
}

template <class T>
Status MatMulTyped(const Node& node, const Tensor& A, const Tensor& B, Tensor& Y, bool ta, bool tb,
                   T alpha, T* scratch) {
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  T* y = Y.data<T>();
  return ForEachMatMulProduct(
      node, A, B, Y, ta, tb,
      [&](bool t, int64_t m, int64_t n, int64_t k, int64_t oa, int64_t ob, int64_t oy) {
        return GemmOne<T>(node, t, tb, m, n, k, alpha, a + oa, b + ob, T(0), y + oy, scratch);
      });
}

// ---------- products with bfloat16 operands, by tiles ----------
//
// Debian 12's OpenBLAS (0.3.21) has no sbgemm, so a product with a bfloat16 operand or output runs
// cblas_sgemm on f32 copies of bounded tiles of its operands (instead of widening whole operands,
// which at a language-model head costs hundreds of MB of workspace):
//  - C is cut as GemmOne cuts it (SplitGemm's row or column blocks), and each block into tiles of
//    at most kTileRows x kTileCols. One C tile is one unit of work, computed in an f32 tile;
//  - K is cut as GemmOne cuts it (SplitGemm's K pieces; one piece when it does not), and each piece
//    into sub-blocks of at most kTileDepth. Per sub-block, in K order, the A tile [rows, depth] and
//    the B tile [depth, cols] are widened (bfloat16, exact) or copied (f32) and one sgemm adds
//    alpha times their product to the f32 tile (beta = 1 after the piece's first sub-block). Piece
//    p > 0 goes to a second f32 tile, added to the first after the piece, in piece order, as
//    GemmOne adds its K partials;
//  - the f32 tile is written to C once: rounded to nearest even for a bfloat16 C, as it is for f32.
// Every cut is a function of (m, n, k) alone and each unit's arithmetic is fixed by its position,
// so the bits do not depend on the thread count. When every block of C fits one tile and every K
// piece one sub-block, the sgemm calls are GemmOne's on the widened operands: the bits of staging
// whole operands (kernel.h). Otherwise the K sub-blocks change the summation order (the result is
// as accurate: f32 accumulation, one rounding).
// Workspace: one slot per concurrent unit, min(kMaxTileSlots, units) slots, each holding the A, B
// and C tiles (and the second C tile when K is split): at most
// 8 x 4 B x (512 x 1024 + 1024 x 512 + 2 x 512 x 512) = 8 x 6 MiB = 48 MiB for any product.
// Slot s runs units [s * units / slots, (s + 1) * units / slots) in row-major order of the C tiles
// (a cut of the shape, whatever the thread count), so consecutive units share their row tile: when
// K is one sub-block, the A tile is widened once per row tile and slot, not once per unit. The
// widening is the cost of this path over an f32 product: about (1 / 512 + 1 / 512) conversions per
// multiply-add at most, a few percent (512 x 512 tiles measured 0.97-1.10 x the time of staging
// whole operands on MPT-125M's products, noisy shared machine, one thread).
constexpr int64_t kTileRows = 512, kTileCols = 512, kTileDepth = 1024, kMaxTileSlots = 8;

// [0, dim) cut into blocks of `block` and each block into tiles of at most `tile` (> 0).
struct TileCuts {
  int64_t dim = 0, block = 1, tile = 1;
  int64_t PerBlock() const { return (block + tile - 1) / tile; }
  int64_t Count() const { return dim / block * PerBlock() + (dim % block + tile - 1) / tile; }
  // The i-th tile, [first, second).
  std::pair<int64_t, int64_t> operator[](int64_t i) const {
    const int64_t b = i / PerBlock(), begin = b * block + i % PerBlock() * tile;
    return {begin, std::min({begin + tile, (b + 1) * block, dim})};
  }
};

struct TiledGemm {
  GemmSplit split;
  TileCuts rows, cols;
  int64_t k = 0, piece_len = 0, depth = 0;  // K, K per piece, K per sub-block
  int64_t units = 0, slots = 0;
  int64_t a_bytes = 0, b_bytes = 0, c_bytes = 0, slot_bytes = 0;  // 256-aligned
  int64_t Bytes() const { return slots * slot_bytes; }
};

TiledGemm TiledGemmOf(int64_t m, int64_t n, int64_t k) {
  TiledGemm t;
  if (m <= 0 || n <= 0) return t;
  t.split = SplitGemm(m, n, k);
  const int64_t row_block = t.split.block && t.split.split_rows ? t.split.block : m;
  const int64_t col_block = t.split.block && !t.split.split_rows ? t.split.block : n;
  t.rows = {m, row_block, std::min(kTileRows, row_block)};
  t.cols = {n, col_block, std::min(kTileCols, col_block)};
  t.k = k;
  t.piece_len = (k + t.split.k_pieces - 1) / t.split.k_pieces;
  t.depth = std::min(kTileDepth, t.piece_len);
  t.units = t.rows.Count() * t.cols.Count();
  t.slots = std::min(kMaxTileSlots, t.units);
  auto f32_bytes = [](int64_t elems) { return (elems * 4 + 255) / 256 * 256; };
  t.a_bytes = f32_bytes(t.rows.tile * t.depth);
  t.b_bytes = f32_bytes(t.depth * t.cols.tile);
  t.c_bytes = f32_bytes(t.rows.tile * t.cols.tile);
  t.slot_bytes = t.a_bytes + t.b_bytes + t.c_bytes * (t.split.k_pieces > 1 ? 2 : 1);
  return t;
}

// An operand of a tiled product: f32 or bfloat16 elements, row-major, `ld` elements per stored row.
struct MixedMatrix {
  const std::byte* data = nullptr;
  bool bf16 = false;
  int64_t ld = 0;
  // Stored rows [r0, r0 + rows) x columns [c0, c0 + cols) as f32, to dst [rows, cols].
  void Load(int64_t r0, int64_t c0, int64_t rows, int64_t cols, float* dst) const {
    for (int64_t i = 0; i < rows; ++i, dst += cols) {
      const int64_t at = (r0 + i) * ld + c0;
      if (bf16)
        Bf16ToFloat(reinterpret_cast<const uint16_t*>(data) + at, dst, cols);
      else
        std::copy_n(reinterpret_cast<const float*>(data) + at, cols, dst);
    }
  }
};

MixedMatrix MatrixOf(const Tensor& t, int64_t offset, int64_t ld) {
  return {static_cast<const std::byte*>(t.raw()) + offset * DTypeSize(t.dtype()),
          t.dtype() == DType::kBFloat16, ld};
}

// Gemm's C term: beta * C broadcast to [M, N] (strides si, sj; 0 where it broadcasts).
struct GemmBias {
  MixedMatrix c;
  int64_t si = 0, sj = 0;
  float beta = 0;
  void Load(int64_t r0, int64_t c0, int64_t rows, int64_t cols, float* dst) const {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = (r0 + i) * si + (c0 + j) * sj;
        dst[i * cols + j] = c.bf16 ? Bf16ToFloat(reinterpret_cast<const uint16_t*>(c.data)[at])
                                   : reinterpret_cast<const float*>(c.data)[at];
      }
  }
};

// One C tile (`unit`) of the tiled product, in the workspace slot `slot` (file section comment).
// `a_tile` says which A tile the slot holds (rows r0.., depth k0.., kl long), so a unit that needs
// the same one does not widen it again.
struct ATileKey {
  int64_t r0 = -1, k0 = -1, kl = -1;
};
void TiledGemmUnit(const TiledGemm& t, int64_t unit, bool ta, bool tb, float alpha,
                   const MixedMatrix& a, const MixedMatrix& b, const GemmBias* bias, std::byte* y,
                   bool y_bf16, std::byte* slot, ATileKey& a_tile) {
  const auto [r0, r1] = t.rows[unit / t.cols.Count()];
  const auto [c0, c1] = t.cols[unit % t.cols.Count()];
  const int64_t rows = r1 - r0, cols = c1 - c0, n = t.cols.dim;
  float* at = reinterpret_cast<float*>(slot);
  float* bt = reinterpret_cast<float*>(slot + t.a_bytes);
  float* ct = reinterpret_cast<float*>(slot + t.a_bytes + t.b_bytes);
  float* part = reinterpret_cast<float*>(slot + t.a_bytes + t.b_bytes + t.c_bytes);
  float beta = 0;
  if (bias) {
    bias->Load(r0, c0, rows, cols, ct);
    beta = bias->beta;
  }
  for (int64_t p = 0; p < t.split.k_pieces; ++p) {
    const int64_t kb = p * t.piece_len, ke = std::min(t.k, kb + t.piece_len);
    if (ke <= kb) {  // K = 0: GemmOne's C = beta C
      if (p == 0)
        for (int64_t i = 0; i < rows * cols; ++i) ct[i] = beta == 0 ? 0.0f : beta * ct[i];
      continue;
    }
    float* acc = p == 0 ? ct : part;
    for (int64_t k0 = kb; k0 < ke; k0 += t.depth) {
      const int64_t kl = std::min(t.depth, ke - k0);
      // op(A)'s rows r0..r1 over k0..k0+kl: A's stored rows, or its columns when transposed;
      // op(B)'s columns c0..c1: B's stored columns, or its rows when transposed.
      if (a_tile.r0 != r0 || a_tile.k0 != k0 || a_tile.kl != kl) {
        if (ta)
          a.Load(k0, r0, kl, rows, at);
        else
          a.Load(r0, k0, rows, kl, at);
        a_tile = {r0, k0, kl};
      }
      if (tb)
        b.Load(c0, k0, cols, kl, bt);
      else
        b.Load(k0, c0, kl, cols, bt);
      Blas(ta, tb, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(kl), alpha, at,
           static_cast<int>(ta ? rows : kl), bt, static_cast<int>(tb ? kl : cols),
           k0 > kb  ? 1.0f
           : p == 0 ? beta
                    : 0.0f,
           acc, static_cast<int>(cols));
    }
    if (p > 0)
      for (int64_t i = 0; i < rows * cols; ++i) ct[i] += part[i];
  }
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t at_y = (r0 + i) * n + c0;
    if (y_bf16)
      FloatToBf16(ct + i * cols, reinterpret_cast<uint16_t*>(y) + at_y, cols);
    else
      std::copy_n(ct + i * cols, cols, reinterpret_cast<float*>(y) + at_y);
  }
}

// Y [m, n] = alpha op(A) op(B) (+ bias) by tiles; `workspace` holds TiledGemmOf(m, n, k).Bytes().
void TiledGemmRun(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const MixedMatrix& a, const MixedMatrix& b, const GemmBias* bias, std::byte* y,
                  bool y_bf16, std::byte* workspace) {
  const TiledGemm t = TiledGemmOf(m, n, k);
  ParallelFor(t.slots, 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      ATileKey a_tile;
      for (int64_t u = s * t.units / t.slots; u < (s + 1) * t.units / t.slots; ++u)
        TiledGemmUnit(t, u, ta, tb, alpha, a, b, bias, y, y_bf16, workspace + s * t.slot_bytes,
                      a_tile);
    }
  });
}

// Whether a product runs by tiles: a bfloat16 operand or output.
bool IsTiledProduct(std::span<const Tensor* const> in, std::span<Tensor* const> out) {
  auto bf16 = [](const Tensor* t) { return t && t->dtype() == DType::kBFloat16; };
  return std::any_of(in.begin(), in.end(), bf16) || std::any_of(out.begin(), out.end(), bf16);
}

// A tiled product takes f32 and bfloat16 operands, in any mix, and nothing else.
Status CheckTiledTypes(const Node& node, std::span<const Tensor* const> in, Tensor& y) {
  const char* const kNames[] = {"A", "B", "C"};
  for (size_t i = 0; i < in.size() && i < 3; ++i) {
    if (!in[i] || in[i]->dtype() == DType::kFloat32 || in[i]->dtype() == DType::kBFloat16) continue;
    return MathFail(node, std::string("a product with bfloat16 operands takes f32 and bfloat16 only, "
                                  "but ") +
                          kNames[i] + " is " + std::string(DTypeName(in[i]->dtype())));
  }
  if (y.dtype() != DType::kFloat32 && y.dtype() != DType::kBFloat16)
    return MathFail(node, "a product with bfloat16 operands takes f32 and bfloat16 only, but Y is " +
                          std::string(DTypeName(y.dtype())));
  return Status::Ok();
}

Status MatMulTiled(const Node& node, std::span<const Tensor* const> in, Tensor& Y, bool ta, bool tb,
                   float alpha, const KernelContext& ctx) {
  RETURN_IF_ERROR(CheckTiledTypes(node, in, Y));
  const Tensor &A = *in[0], &B = *in[1];
  return ForEachMatMulProduct(
      node, A, B, Y, ta, tb,
      [&](bool t, int64_t m, int64_t n, int64_t k, int64_t oa, int64_t ob, int64_t oy) {
        std::byte* y = static_cast<std::byte*>(Y.raw()) + oy * DTypeSize(Y.dtype());
        TiledGemmRun(t, tb, m, n, k, alpha, MatrixOf(A, oa, t ? m : k), MatrixOf(B, ob, tb ? k : n),
                     nullptr, y, Y.dtype() == DType::kBFloat16, ctx.workspace.data());
        return Status::Ok();
      });
}

// MatMul (A, B) -> Y and com.microsoft FusedMatMul (A, B) -> Y {transA, transB, alpha}.
Status MatMulKernel(const Node& node, std::span<const Tensor* const> in,
                    std::span<Tensor* const> out, const KernelContext& ctx) {
  bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  float alpha = node.GetFloat("alpha", 1.0f);
  if (IsTiledProduct(in, out)) return MatMulTiled(node, in, *out[0], ta, tb, alpha, ctx);
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return MatMulTyped<float>(node, *in[0], *in[1], *out[0], ta, tb, alpha,
                                WorkspaceArray<float>(ctx));
    case DType::kFloat64:
      return MatMulTyped<double>(node, *in[0], *in[1], *out[0], ta, tb, alpha,
                                 WorkspaceArray<double>(ctx));
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

// Gemm's sizes, and C's strides over [M, N] (0 where it broadcasts).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0, si = 0, sj = 0;
};

// Checks Gemm's operands: A and B matrices making a product, Y [M, N], C broadcasting to [M, N];
// with `one_type`, all of A's element type (a tiled product mixes f32 and bfloat16).
StatusOr<GemmShape> GemmShapeOf(const Node& node, const Tensor& A, const Tensor& B, const Tensor* C,
                                const Tensor& Y, bool ta, bool tb, bool one_type) {
  if (A.rank() != 2 || B.rank() != 2)
    return MathFail(node, "A " + ShapeToString(A.shape()) + " and B " + ShapeToString(B.shape()) +
                          " are not matrices");
  GemmShape g;
  g.m = ta ? A.shape()[1] : A.shape()[0];
  g.k = ta ? A.shape()[0] : A.shape()[1];
  g.n = tb ? B.shape()[0] : B.shape()[1];
  if ((tb ? B.shape()[1] : B.shape()[0]) != g.k ||
      (one_type && (Y.dtype() != A.dtype() || B.dtype() != A.dtype())) ||
      Y.shape() != Shape{g.m, g.n})
    return MathFail(node, "A " + ShapeToString(A.shape()) + ", B " + ShapeToString(B.shape()) +
                          " and Y " + ShapeToString(Y.shape()) + " do not make a product");
  if (C) {
    Shape cs = C->shape();
    while (cs.size() < 2) cs.insert(cs.begin(), 1);
    if ((one_type && C->dtype() != A.dtype()) || cs.size() != 2 || (cs[0] != 1 && cs[0] != g.m) ||
        (cs[1] != 1 && cs[1] != g.n))
      return MathFail(node, "C " + ShapeToString(C->shape()) + " does not broadcast to [" +
                            std::to_string(g.m) + "," + std::to_string(g.n) + "]");
    g.si = cs[0] == 1 ? 0 : cs[1];
    g.sj = cs[1] == 1 ? 0 : 1;
  }
  return g;
}

// Gemm (A, B[, C]) -> Y = alpha * op(A) op(B) + beta * C, C broadcast to [M, N].
template <class T>
Status GemmTyped(const Node& node, const Tensor& A, const Tensor& B, const Tensor* C, Tensor& Y,
                 T* scratch) {
  bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  T alpha = node.GetFloat("alpha", 1.0f), beta = node.GetFloat("beta", 1.0f);
  ASSIGN_OR_RETURN(GemmShape g, GemmShapeOf(node, A, B, C, Y, ta, tb, true));
  T* y = Y.data<T>();
  bool use_c = C != nullptr && beta != T(0);
  if (use_c) {
    const T* c = C->data<T>();
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) y[i * g.n + j] = c[i * g.si + j * g.sj];
  }
  return GemmOne<T>(node, ta, tb, g.m, g.n, g.k, alpha, A.data<T>(), B.data<T>(),
                    use_c ? beta : T(0), y, scratch);
}

Status GemmTiled(const Node& node, std::span<const Tensor* const> in, Tensor& Y,
                 const KernelContext& ctx) {
  RETURN_IF_ERROR(CheckTiledTypes(node, in, Y));
  const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  const float alpha = node.GetFloat("alpha", 1.0f), beta = node.GetFloat("beta", 1.0f);
  const Tensor &A = *in[0], &B = *in[1];
  const Tensor* C = in.size() > 2 ? in[2] : nullptr;
  ASSIGN_OR_RETURN(GemmShape g, GemmShapeOf(node, A, B, C, Y, ta, tb, false));
  GemmBias bias;
  if (C) bias = {MatrixOf(*C, 0, 0), g.si, g.sj, beta};
  TiledGemmRun(ta, tb, g.m, g.n, g.k, alpha, MatrixOf(A, 0, ta ? g.m : g.k),
               MatrixOf(B, 0, tb ? g.k : g.n), C && beta != 0 ? &bias : nullptr,
               static_cast<std::byte*>(Y.raw()), Y.dtype() == DType::kBFloat16,
               ctx.workspace.data());
  return Status::Ok();
}

Status GemmKernel(const Node& node, std::span<const Tensor* const> in, std::span<Tensor* const> out,
                  const KernelContext& ctx) {
  if (IsTiledProduct(in, out)) return GemmTiled(node, in, *out[0], ctx);
  const Tensor* c = in.size() > 2 ? in[2] : nullptr;
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return GemmTyped<float>(node, *in[0], *in[1], c, *out[0], WorkspaceArray<float>(ctx));
    case DType::kFloat64:
      return GemmTyped<double>(node, *in[0], *in[1], c, *out[0], WorkspaceArray<double>(ctx));
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

// ============================== softmax ==============================

// Elements per block of a stack buffer (the exponentials of a stretch of one lane).
constexpr int64_t kExpBlock = 256;

// Calls f(base, stride, n) for every 1-D lane along `axis`, lanes cut into chunks of whole lanes
// on the kernels' threads.
template <class F>
void ForEachLane(const AxisLayout& l, F f) {
  ParallelFor(l.outer * l.inner, RowGrain(l.n), [&](int64_t begin, int64_t end) {
    for (int64_t lane = begin; lane < end; ++lane)
      f((lane / l.inner) * l.n * l.inner + lane % l.inner, l.inner, l.n);
  });
}

// The max of a lane; NaN is skipped, as std::max skips it (a NaN lane still gives NaN outputs
// through its exponential).
template <class T>
T LaneMax(const T* x, int64_t stride, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j * stride]);
  return m;
}

// sum_j exp(x_j - m) in double, j ascending, with vmath's exp of the rounded difference (libm's in
// double for double); e_j also stored to e[j * stride] when e is not null (e may be x). Softmax
// and the cross-entropy share it, so their exponentials agree bit for bit.
template <class T>
double ExpShiftedSum(const T* x, int64_t stride, int64_t n, T m, T* e) {
  T t[kExpBlock] = {};
  double sum = 0;
  for (int64_t j0 = 0; j0 < n; j0 += kExpBlock) {
    const int64_t len = std::min(kExpBlock, n - j0);
    for (int64_t k = 0; k < len; ++k) t[k] = x[(j0 + k) * stride] - m;
    vmath::Exp(t, t, len);
    for (int64_t k = 0; k < len; ++k) sum += static_cast<double>(t[k]);
    if (e)
      for (int64_t k = 0; k < len; ++k) e[(j0 + k) * stride] = t[k];
  }
  return sum;
}

// Softmax / LogSoftmax (opset 13): max-shifted, exponentials as ExpShiftedSum, their sum in
// double, one rounding per output. Softmax keeps the exponentials in Y between its two passes.
template <class T, bool kLog>
Status SoftmaxTyped(const Node& node, const Tensor& X, Tensor& Y) {
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), X.rank()));
  RETURN_IF_ERROR(RequireLike(node, Y, "Y", X, "X"));
  const T* x = X.data<T>();
  T* y = Y.data<T>();
  ForEachLane(LayoutAround(X.shape(), axis), [&](int64_t base, int64_t stride, int64_t n) {
    const T m = LaneMax(x + base, stride, n);
    const double sum = ExpShiftedSum(x + base, stride, n, m, kLog ? nullptr : y + base);
    const double log_sum = std::log(sum);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = base + j * stride;
      const double v = kLog ? (static_cast<double>(x[p]) - m) - log_sum : y[p] / sum;
      y[p] = static_cast<T>(v);
    }
  });
  return Status::Ok();
}

template <bool kLog>
Status SoftmaxKernel(const Node& node, std::span<const Tensor* const> in,
                     std::span<Tensor* const> out, const KernelContext&) {
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return SoftmaxTyped<float, kLog>(node, *in[0], *out[0]);
    case DType::kFloat64:
      return SoftmaxTyped<double, kLog>(node, *in[0], *out[0]);
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

// MatMul / FusedMatMul / Gemm: GemmOne's K-split partials (most products need none), or, with a
// bfloat16 operand or output, the tiles of TiledGemmOf.
int64_t MatMulWorkspace(const Node& node, std::span<const OperandType> in,
                        std::span<const OperandType> out) {
  if (in.size() < 2 || !in[0].shape || !in[1].shape) return 0;
  auto bf16 = [](const OperandType& t) { return t.dtype == DType::kBFloat16; };
  const bool tiled =
      std::any_of(in.begin(), in.end(), bf16) || std::any_of(out.begin(), out.end(), bf16);
  const int64_t elem = in[0].dtype == DType::kFloat64 ? 8 : in[0].dtype == DType::kFloat32 ? 4 : 0;
  if (!tiled && elem == 0) return 0;
  auto bytes = [&](int64_t m, int64_t n, int64_t k) {
    return tiled ? TiledGemmOf(m, n, k).Bytes() : GemmWorkspaceBytes(m, n, k, elem);
  };
  const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  if (node.op_type == "Gemm") {
    if (in[0].shape->size() != 2 || in[1].shape->size() != 2) return 0;
    const Shape &a = *in[0].shape, &b = *in[1].shape;
    return bytes(ta ? a[1] : a[0], tb ? b[0] : b[1], ta ? a[0] : a[1]);
  }
  MatMulDims d;
  if (!MatMulDimsOf(*in[0].shape, *in[1].shape, ta, tb, d)) return 0;
  return bytes(d.folded ? d.batches * d.m : d.m, d.n, d.k);
}

// SoftmaxGrad_13 (dY, Y): dX = Y * (dY - sum(dY * Y)).
// LogSoftmaxGrad_13 (dY, Y) with Y = log_softmax: dX = dY - exp(Y) * sum(dY).
template <class T, bool kLog>
Status SoftmaxGradTyped(const Node& node, const Tensor& DY, const Tensor& Y, Tensor& DX) {
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), Y.rank()));
  RETURN_IF_ERROR(RequireLike(node, DY, "dY", Y, "Y"));
  RETURN_IF_ERROR(RequireLike(node, DX, "dX", Y, "Y"));
  const T* dy = DY.data<T>();
  const T* y = Y.data<T>();
  T* dx = DX.data<T>();
  ForEachLane(LayoutAround(Y.shape(), axis), [&](int64_t base, int64_t stride, int64_t n) {
    double s = 0;
    for (int64_t j = 0; j < n; ++j) {
      int64_t p = base + j * stride;
      s += kLog ? static_cast<double>(dy[p]) : static_cast<double>(dy[p]) * y[p];
    }
    if (!kLog) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t p = base + j * stride;
        dx[p] = static_cast<T>(static_cast<double>(y[p]) * (dy[p] - s));
      }
      return;
    }
    T e[kExpBlock] = {};
    for (int64_t j0 = 0; j0 < n; j0 += kExpBlock) {
      const int64_t len = std::min(kExpBlock, n - j0);
      for (int64_t k = 0; k < len; ++k) e[k] = y[base + (j0 + k) * stride];
      vmath::Exp(e, e, len);
      for (int64_t k = 0; k < len; ++k) {
        const int64_t p = base + (j0 + k) * stride;
        dx[p] = static_cast<T>(dy[p] - static_cast<double>(e[k]) * s);
      }
    }
  });
  return Status::Ok();
}

template <bool kLog>
Status SoftmaxGradKernel(const Node& node, std::span<const Tensor* const> in,
                         std::span<Tensor* const> out, const KernelContext&) {
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return SoftmaxGradTyped<float, kLog>(node, *in[0], *in[1], *out[0]);
    case DType::kFloat64:
      return SoftmaxGradTyped<double, kLog>(node, *in[0], *in[1], *out[0]);
    default:
      return UnsupportedType(node, in[0]->dtype());
  }
}

// ============================== reductions ==============================

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

// Which axes a Reduce* node reduces: the `axes` attribute (opset < 18, ReduceSum < 13), else
// input 1; empty means all axes, or none with noop_with_empty_axes.
StatusOr<std::vector<bool>> ReducedAxes(const Node& node, const Tensor* axes_input, int64_t rank) {
  std::vector<int64_t> axes;
  if (node.HasAttr("axes")) {
    axes = node.GetInts("axes");
  } else if (axes_input != nullptr) {
    axes = axes_input->ToInt64Vector();
  }
  bool noop = node.GetInt("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(rank, axes.empty() && !noop);
  for (int64_t a : axes) {
    ASSIGN_OR_RETURN(int64_t na, Axis(node, a, rank));
    if (reduced[na]) return MathFail(node, "axis " + std::to_string(a) + " appears twice in axes");
    reduced[na] = true;
  }
  return reduced;
}

// Accumulator type: double for floats, int64 for integers.
template <class T>
using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T, ReduceOp kOp>
struct Reducer {
  using Acc = AccOf<T>;
  static Acc Init() {
    if constexpr (kOp == ReduceOp::kProd) return Acc(1);
    if constexpr (kOp == ReduceOp::kMax)
      return std::is_floating_point_v<T> ? -std::numeric_limits<Acc>::infinity()
                                         : std::numeric_limits<Acc>::lowest();
    if constexpr (kOp == ReduceOp::kMin)
      return std::is_floating_point_v<T> ? std::numeric_limits<Acc>::infinity()
                                         : std::numeric_limits<Acc>::max();
    return Acc(0);
  }
  static Acc Step(Acc acc, T x) {
    Acc v = static_cast<Acc>(x);
    switch (kOp) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        return acc + v;
      case ReduceOp::kProd:
        return acc * v;
      // NaN propagates, as numpy and torch.amax do.
      case ReduceOp::kMax:
        return (v > acc || v != v) ? v : acc;
      case ReduceOp::kMin:
        return (v < acc || v != v) ? v : acc;
      case ReduceOp::kL1:
        return acc + (v < 0 ? -v : v);
      case ReduceOp::kL2:
      case ReduceOp::kSumSquare:
        return acc + v * v;
      case ReduceOp::kLogSum:
        return acc + v;
      // In double, exp overflows only for inputs above ~709, far beyond what f32 models produce.
      case ReduceOp::kLogSumExp:
        return acc + std::exp(static_cast<double>(v));
    }
    return acc;
  }
  static T Finish(Acc acc, int64_t count) {
    if constexpr (kOp == ReduceOp::kMean) {
      if constexpr (std::is_floating_point_v<T>) {
        return static_cast<T>(acc / static_cast<double>(count));
      } else {
        return static_cast<T>(count == 0 ? 0 : acc / count);
      }
    }
    if constexpr (kOp == ReduceOp::kL2) return static_cast<T>(std::sqrt(static_cast<double>(acc)));
    if constexpr (kOp == ReduceOp::kLogSum || kOp == ReduceOp::kLogSumExp)
      return static_cast<T>(std::log(static_cast<double>(acc)));
    return static_cast<T>(acc);
  }
};

// Workspace (ReduceWorkspace): out_n + red_n 8-byte slots, the leading-reduced path's accumulators
// or the general path's offset tables.
template <class T, ReduceOp kOp>
Status ReduceTyped(const Node& node, const Tensor& X, const Tensor* axes_input, Tensor& Y,
                   const KernelContext& ctx) {
  using R = Reducer<T, kOp>;
  using Acc = typename R::Acc;
  static_assert(sizeof(Acc) == sizeof(int64_t) && alignof(Acc) == alignof(int64_t));
  const Shape& xs = X.shape();
  int64_t rank = X.rank();
  ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(node, axes_input, rank));
  bool keepdims = node.GetInt("keepdims", 1) != 0;
  Shape expect;
  int64_t out_n = 1, red_n = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i]) {
      expect.push_back(xs[i]);
      out_n *= xs[i];
    } else {
      red_n *= xs[i];
      if (keepdims) expect.push_back(1);
    }
  }
  if (Y.shape() != expect)
    return MathFail(node, "output was allocated as " + ShapeToString(Y.shape()) +
                          ", the reduction gives " + ShapeToString(expect));
  if (out_n == 0) return Status::Ok();
  const T* x = X.data<T>();
  T* y = Y.data<T>();
  // Each output accumulates its reduced elements in row-major order of their indices.
  int64_t first_kept = rank;
  for (int64_t i = 0; i < rank; ++i)
    if (!reduced[i]) {
      first_kept = i;
      break;
    }
  bool leading_reduced =
      std::all_of(reduced.begin() + first_kept, reduced.end(), [](bool r) { return !r; });
  if (leading_reduced) {
    // Reduced dims all before the kept ones ([R, O] view): sweep rows so memory is read in order.
    // Same per-output order (r ascending) as the general path.
    // Threads take ranges of outputs, each swept over every row; at least 1024 outputs per range,
    // so that each row is read in stretches the prefetcher follows.
    Acc* acc = WorkspaceArray<Acc>(ctx);
    ParallelFor(out_n, std::max<int64_t>(RowGrain(red_n), 1024), [&](int64_t begin, int64_t end) {
      std::fill(acc + begin, acc + end, R::Init());
      for (int64_t r = 0; r < red_n; ++r) {
        const T* row = x + r * out_n;
        for (int64_t o = begin; o < end; ++o) acc[o] = R::Step(acc[o], row[o]);
      }
      for (int64_t o = begin; o < end; ++o) y[o] = R::Finish(acc[o], red_n);
    });
    return Status::Ok();
  }
  // General path: offsets of the kept and of the reduced index combinations.
  std::vector<int64_t> stride(rank, 1);
  for (int64_t i = rank - 2; i >= 0; --i) stride[i] = stride[i + 1] * xs[i + 1];
  auto offsets = [&](bool want_reduced, int64_t count, int64_t* offs) {
    std::vector<int64_t> idx(rank, 0);
    for (int64_t c = 0; c < count; ++c) {
      int64_t off = 0;
      for (int64_t d = 0; d < rank; ++d)
        if (reduced[d] == want_reduced) off += idx[d] * stride[d];
      offs[c] = off;
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (reduced[d] != want_reduced) continue;
        if (++idx[d] < xs[d]) break;
        idx[d] = 0;
      }
    }
  };
  int64_t* out_offs = WorkspaceArray<int64_t>(ctx);
  int64_t* red_offs = out_offs + out_n;
  offsets(false, out_n, out_offs);
  offsets(true, red_n, red_offs);
  ParallelFor(out_n, RowGrain(red_n), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      Acc acc = R::Init();
      const T* base = x + out_offs[o];
      for (int64_t r = 0; r < red_n; ++r) acc = R::Step(acc, base[red_offs[r]]);
      y[o] = R::Finish(acc, red_n);
    }
  });
  return Status::Ok();
}

template <ReduceOp kOp>
Status ReduceKernel(const Node& node, std::span<const Tensor* const> in,
                    std::span<Tensor* const> out, const KernelContext& ctx) {
  const Tensor* axes = in.size() > 1 ? in[1] : nullptr;
  constexpr bool kFloatOnly = kOp == ReduceOp::kL1 || kOp == ReduceOp::kL2 ||
                              kOp == ReduceOp::kSumSquare || kOp == ReduceOp::kLogSum ||
                              kOp == ReduceOp::kLogSumExp;
  switch (in[0]->dtype()) {
    case DType::kFloat32:
      return ReduceTyped<float, kOp>(node, *in[0], axes, *out[0], ctx);
    case DType::kFloat64:
      return ReduceTyped<double, kOp>(node, *in[0], axes, *out[0], ctx);
    case DType::kInt64:
      if (kFloatOnly) break;
      return ReduceTyped<int64_t, kOp>(node, *in[0], axes, *out[0], ctx);
    case DType::kInt32:
      if (kFloatOnly) break;
      return ReduceTyped<int32_t, kOp>(node, *in[0], axes, *out[0], ctx);
    default:
      break;
  }
  return UnsupportedType(node, in[0]->dtype());
}

// The output's element count is out_n, and red_n = numel(X) / out_n whichever axes are reduced,
// so the figure needs no axes (which may be a run-time input).
int64_t ReduceWorkspace(const Node&, std::span<const OperandType> in,
                        std::span<const OperandType> out) {
  if (in.empty() || out.empty() || !in[0].shape || !out[0].shape) return 0;
  const int64_t out_n = NumElements(*out[0].shape);
  if (out_n <= 0) return 0;
  return static_cast<int64_t>(sizeof(int64_t)) * (out_n + NumElements(*in[0].shape) / out_n);
}

// ============================== running sums ==============================

// CumSum along one axis, each line [outer, ·, inner] walked in order (from the back with reverse):
// y_j = sum of x_i for i before j (exclusive) or up to j (inclusive). Floats accumulate in double
// and round each output once (as torch's CPU cumsum does); integers wrap (two's complement).
template <class T>
struct CumSumAcc {
  using type = double;
};
template <>
struct CumSumAcc<int32_t> {
  using type = uint32_t;
};
template <>
struct CumSumAcc<int64_t> {
  using type = uint64_t;
};

template <class T>
void CumSumTyped(const T* x, T* y, const AxisLayout& l, bool exclusive, bool reverse) {
  using Acc = typename CumSumAcc<T>::type;
  ForEachLane(l, [&](int64_t base, int64_t, int64_t) {
      Acc acc = 0;
      for (int64_t step = 0; step < l.n; ++step) {
        const int64_t at = base + (reverse ? l.n - 1 - step : step) * l.inner;
        const Acc v = static_cast<Acc>(x[at]);
        if (exclusive) {
          y[at] = static_cast<T>(acc);
          acc += v;
        } else {
          acc += v;
          y[at] = static_cast<T>(acc);
        }
      }
  });
}

Status CumSumKernel(const Node& node, std::span<const Tensor* const> in,
                    std::span<Tensor* const> out, const KernelContext&) {
  const Tensor& x = *in[0];
  const Tensor& axis = *in[1];
  if (axis.dtype() != DType::kInt64 && axis.dtype() != DType::kInt32)
    return MathFail(node, "axis must be i64 or i32, got " + std::string(DTypeName(axis.dtype())));
  if (axis.rank() > 1 || axis.numel() != 1)
    return MathFail(node, "axis must be a 0-D (or one-element) tensor, has shape " +
                          ShapeToString(axis.shape()));
  if (x.rank() == 0) return MathFail(node, "x must have rank >= 1");
  ASSIGN_OR_RETURN(int64_t a, Axis(node, axis.GetAsInt64(0), x.rank()));
  const int64_t exclusive = node.GetInt("exclusive", 0), reverse = node.GetInt("reverse", 0);
  if ((exclusive != 0 && exclusive != 1) || (reverse != 0 && reverse != 1))
    return MathFail(node, "attributes 'exclusive' and 'reverse' must be 0 or 1, got " +
                          std::to_string(exclusive) + " and " + std::to_string(reverse));
  Tensor& y = *out[0];
  if (y.dtype() != x.dtype() || y.shape() != x.shape())
    return MathFail(node, "output was allocated as " + std::string(DTypeName(y.dtype())) +
                          ShapeToString(y.shape()) + ", x is " + std::string(DTypeName(x.dtype())) +
                          ShapeToString(x.shape()));
  const AxisLayout l = LayoutAround(x.shape(), a);
  switch (x.dtype()) {
    case DType::kFloat32:
      CumSumTyped(x.data<float>(), y.data<float>(), l, exclusive, reverse);
      return Status::Ok();
    case DType::kFloat64:
      CumSumTyped(x.data<double>(), y.data<double>(), l, exclusive, reverse);
      return Status::Ok();
    case DType::kInt32:
      CumSumTyped(x.data<int32_t>(), y.data<int32_t>(), l, exclusive, reverse);
      return Status::Ok();
    case DType::kInt64:
      CumSumTyped(x.data<int64_t>(), y.data<int64_t>(), l, exclusive, reverse);
      return Status::Ok();
    default:
      return UnsupportedType(node, x.dtype());
  }
}

// ============================== normalizations ==============================

Status CheckParam(const Node& node, const Tensor* p, const char* what, int64_t cols) {
  if (p && p->numel() != cols)
    return MathFail(node, std::string(what) + " has " + std::to_string(p->numel()) +
                          " elements, the normalized dims have " + std::to_string(cols));
  return Status::Ok();
}

// LayerNormalization (X, Scale[, B]) -> (Y[, Mean, InvStdDev]), over dims [axis, rank).
Status LayerNormKernel(const Node& node, std::span<const Tensor* const> in,
                       std::span<Tensor* const> out, const KernelContext&) {
  const Tensor& X = *in[0];
  if (X.dtype() != DType::kFloat32) return UnsupportedType(node, X.dtype());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), X.rank()));
  // Plain variables, not a structured binding: the kernels' lambdas capture them, which clang
  // 14 (tests/fuzz/build.sh) refuses for a binding.
  const std::pair<int64_t, int64_t> split = SplitAt(X.shape(), axis);
  const int64_t rows = split.first, cols = split.second;
  const Tensor* bias_t = in.size() > 2 ? in[2] : nullptr;
  RETURN_IF_ERROR(CheckParam(node, in[1], "scale", cols));
  RETURN_IF_ERROR(CheckParam(node, bias_t, "bias", cols));
  RETURN_IF_ERROR(RequireLike(node, *out[0], "Y", X, "X"));
  double eps = node.GetFloat("epsilon", 1e-5f);
  const float* x = X.data<float>();
  const float* scale = in[1]->data<float>();
  const float* bias = bias_t ? bias_t->data<float>() : nullptr;
  float* y = out[0]->data<float>();
  float* mean_out = out.size() > 1 && out[1]->numel() == rows ? out[1]->data<float>() : nullptr;
  float* inv_out = out.size() > 2 && out[2]->numel() == rows ? out[2]->data<float>() : nullptr;
  ParallelFor(rows, RowGrain(cols), [&](int64_t row_begin, int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = x + r * cols;
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += xr[j];
    double mean = sum / static_cast<double>(cols);
    double sq = 0;
    for (int64_t j = 0; j < cols; ++j) {
      double d = xr[j] - mean;
      sq += d * d;
    }
    double inv = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
    float* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      double v = (xr[j] - mean) * inv * scale[j];
      if (bias) v += bias[j];
      yr[j] = static_cast<float>(v);
    }
    if (mean_out) mean_out[r] = static_cast<float>(mean);
    if (inv_out) inv_out[r] = static_cast<float>(inv);
  }
  });
  return Status::Ok();
}

// LayerNormalizationGrad (dY, X, scale, mean, inv_std_dev) -> (dX, dscale, dbias). Per row, with
// xhat = (x - mean) * inv and g = dY * scale:
//   dX = inv * (g - mean(g) - xhat * mean(g * xhat));  dscale = sum_rows dY * xhat;
//   dbias = sum_rows dY.
// Row sums accumulate in double. Rows run in chunks of RowGrain(cols) (fixed by the shape); each
// chunk sums its rows' dY * xhat and dY per column in double, in row order, into its own slice of
// the workspace, and the chunks' partial sums are then added per column in chunk order: the same
// bits at any thread count (and the sequential sums when the rows fit one chunk). xhat and g are
// recomputed in the dX loop rather than stored.
// Workspace (LayerNormGradWorkspace): 2 * cols doubles per chunk of rows.
Status LayerNormGradKernel(const Node& node, std::span<const Tensor* const> in,
                           std::span<Tensor* const> out, const KernelContext& ctx) {
  const Tensor& X = *in[1];
  if (X.dtype() != DType::kFloat32) return UnsupportedType(node, X.dtype());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), X.rank()));
  const std::pair<int64_t, int64_t> split = SplitAt(X.shape(), axis);
  const int64_t rows = split.first, cols = split.second;
  RETURN_IF_ERROR(CheckParam(node, in[2], "scale", cols));
  bool simplified = node.op_type == "SimplifiedLayerNormalizationGrad";
  const Tensor* mean_t = simplified ? nullptr : in[3];
  const Tensor* inv_t = simplified ? in[3] : in[4];
  if ((mean_t && mean_t->numel() != rows) || inv_t->numel() != rows)
    return MathFail(node, "the saved statistics need " + std::to_string(rows) + " elements");
  // dY is read and dX written as X's rows x cols: neither may be smaller (a graph that
  // declared dX [2,16,1] had this kernel write 7.9 KB past the arena; LoadPlan now re-infers it).
  for (const Tensor* t : {in[0], static_cast<const Tensor*>(out[0])})
    if (t->dtype() != DType::kFloat32 || t->shape() != X.shape())
      return MathFail(node, std::string(t == in[0] ? "dY is " : "dX was allocated as ") +
                            std::string(DTypeName(t->dtype())) + ShapeToString(t->shape()) +
                            ", not X's f32" + ShapeToString(X.shape()));
  const float* dy = in[0]->data<float>();
  const float* x = X.data<float>();
  const float* scale = in[2]->data<float>();
  const float* mean = mean_t ? mean_t->data<float>() : nullptr;
  const float* inv = inv_t->data<float>();
  float* dx = out[0]->data<float>();
  double* partial = WorkspaceArray<double>(ctx);
  const int64_t grain = RowGrain(cols);
  ParallelChunks(rows, grain, [&](int64_t chunk, int64_t row_begin, int64_t row_end) {
    double* ds = partial + chunk * 2 * cols;
    double* db = ds + cols;
    std::fill_n(ds, 2 * cols, 0.0);
    for (int64_t r = row_begin; r < row_end; ++r) {
      const float* xr = x + r * cols;
      const float* dyr = dy + r * cols;
      const double m = mean ? mean[r] : 0.0, iv = inv[r];
      double s1 = 0, s2 = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double xhat = (xr[j] - m) * iv;
        const double g = static_cast<double>(dyr[j]) * scale[j];
        s1 += g;
        s2 += g * xhat;
        ds[j] += static_cast<double>(dyr[j]) * xhat;
        db[j] += dyr[j];
      }
      // RMSNorm has no mean subtraction, so no mean(g) term.
      const double c1 = simplified ? 0.0 : s1 / static_cast<double>(cols);
      const double c2 = s2 / static_cast<double>(cols);
      float* dxr = dx + r * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const double g = static_cast<double>(dyr[j]) * scale[j];
        dxr[j] = static_cast<float>(iv * (g - c1 - ((xr[j] - m) * iv) * c2));
      }
    }
  });
  float* dscale = out.size() > 1 && out[1]->numel() == cols ? out[1]->data<float>() : nullptr;
  float* dbias = out.size() > 2 && out[2]->numel() == cols ? out[2]->data<float>() : nullptr;
  if (!dscale && !dbias) return Status::Ok();
  const int64_t chunks = NumChunks(rows, grain);
  for (int64_t j = 0; j < cols; ++j) {
    double ds = 0, db = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      ds += partial[k * 2 * cols + j];
      db += partial[k * 2 * cols + cols + j];
    }
    if (dscale) dscale[j] = static_cast<float>(ds);
    if (dbias) dbias[j] = static_cast<float>(db);
  }
  return Status::Ok();
}

int64_t LayerNormGradWorkspace(const Node& node, std::span<const OperandType> in,
                               std::span<const OperandType>) {
  if (in.size() < 2 || !in[1].shape) return 0;
  const Shape& s = *in[1].shape;
  auto axis = NormalizeAxis(node.GetInt("axis", -1), static_cast<int64_t>(s.size()));
  if (!axis.ok()) return 0;
  auto [rows, cols] = SplitAt(s, *axis);
  return 2 * static_cast<int64_t>(sizeof(double)) * cols * NumChunks(rows, RowGrain(cols));
}

// com.microsoft SimplifiedLayerNormalization (X, scale) -> (Y[, inv_std_var]), RMSNorm over dims
// [axis, rank). The arithmetic is exactly the exported decomposition's (file comment), so that
// canonicalization may fuse it without changing a bit: every step below is one f32 op except the
// mean, which is computed as the ReduceMean kernel computes it.
Status SimplifiedLayerNormKernel(const Node& node, std::span<const Tensor* const> in,
                                 std::span<Tensor* const> out, const KernelContext&) {
  const Tensor& X = *in[0];
  if (X.dtype() != DType::kFloat32) return UnsupportedType(node, X.dtype());
  ASSIGN_OR_RETURN(int64_t axis, Axis(node, node.GetInt("axis", -1), X.rank()));
  const std::pair<int64_t, int64_t> split = SplitAt(X.shape(), axis);
  const int64_t rows = split.first, cols = split.second;
  RETURN_IF_ERROR(CheckParam(node, in[1], "scale", cols));
  RETURN_IF_ERROR(RequireLike(node, *out[0], "Y", X, "X"));
  float eps = node.GetFloat("epsilon", 1e-5f);
  const float* x = X.data<float>();
  const float* w = in[1]->data<float>();
  float* y = out[0]->data<float>();
  float* inv_out = out.size() > 1 && out[1]->numel() == rows ? out[1]->data<float>() : nullptr;
  using Mean = Reducer<float, ReduceOp::kMean>;
  ParallelFor(rows, RowGrain(cols), [&](int64_t row_begin, int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* xr = x + r * cols;
    Mean::Acc acc = Mean::Init();
    for (int64_t j = 0; j < cols; ++j) {
      float sq = xr[j] * xr[j];  // Pow(x, 2)
      acc = Mean::Step(acc, sq);
    }
    float ms = Mean::Finish(acc, cols);  // ReduceMean
    float denom = std::sqrt(ms + eps);   // Add, Sqrt
    float inv = 1.0f / denom;            // Div(1, .)
    float* yr = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      float normed = xr[j] * inv;  // Mul(x, .)
      yr[j] = normed * w[j];       // Mul(., weight)
    }
    if (inv_out) inv_out[r] = inv;
  }
  });
  return Status::Ok();
}

// ============================== softmax cross-entropy ==============================

struct CeLayout {
  int64_t n = 0, c = 0, inner = 1;  // scores [N, C, inner]
};

StatusOr<CeLayout> CeLayoutOf(const Node& node, const Tensor& scores, const Tensor& labels) {
  if (scores.rank() < 2) return MathFail(node, "scores must have rank >= 2");
  CeLayout l;
  l.n = scores.shape()[0];
  l.c = scores.shape()[1];
  for (int64_t i = 2; i < scores.rank(); ++i) l.inner *= scores.shape()[i];
  if (labels.numel() != l.n * l.inner)
    return MathFail(node, "labels of shape " + ShapeToString(labels.shape()) + " do not match scores " +
                          ShapeToString(scores.shape()));
  return l;
}

// The labels as targets: the class of target i, or -1 when it is ignored. Read from the labels
// each time (no table: kernels take no scratch they can do without).
struct CeTargets {
  const Tensor* labels = nullptr;
  bool has_ignore = false;
  int64_t ignore = 0;
  int64_t operator[](int64_t i) const {
    int64_t v = labels->GetAsInt64(i);
    return has_ignore && v == ignore ? -1 : v;
  }
};

// Errors on a label outside [0, C) that is not ignore_index, before anything is written.
StatusOr<CeTargets> CheckCeTargets(const Node& node, const Tensor& labels, int64_t classes) {
  CeTargets t{&labels, node.HasAttr("ignore_index"), node.GetInt("ignore_index", 0)};
  for (int64_t i = 0; i < labels.numel(); ++i) {
    int64_t v = labels.GetAsInt64(i);
    if (t.has_ignore && v == t.ignore) continue;
    if (v < 0 || v >= classes)
      return MathFail(node, "label " + std::to_string(v) + " at position " + std::to_string(i) +
                            " is outside [0, " + std::to_string(classes) + ")" +
                            (t.has_ignore ? " and is not ignore_index " + std::to_string(t.ignore)
                                          : std::string(" and there is no ignore_index")));
  }
  return t;
}

// SoftmaxCrossEntropyLoss (scores, labels[, weights]) -> (loss[, log_prob]). loss_i =
// -w[label_i] * log_softmax(scores_i)[label_i], 0 for ignored targets; "mean" divides the sum by
// the sum of the non-ignored targets' weights, and is 0 (not NaN) when every target is ignored.
// log_softmax as LogSoftmax computes it (ExpShiftedSum, one pass for the max, one for the sum,
// one for the outputs). Targets run on the threads; each keeps its loss in the workspace (one
// double per target) and the sum over targets runs afterwards, in target order.
Status SoftmaxCrossEntropyKernel(const Node& node, std::span<const Tensor* const> in,
                                 std::span<Tensor* const> out, const KernelContext& ctx) {
  const Tensor& S = *in[0];
  if (S.dtype() != DType::kFloat32) return UnsupportedType(node, S.dtype());
  ASSIGN_OR_RETURN(CeLayout l, CeLayoutOf(node, S, *in[1]));
  ASSIGN_OR_RETURN(CeTargets target, CheckCeTargets(node, *in[1], l.c));
  const float* w = in.size() > 2 && in[2] ? in[2]->data<float>() : nullptr;
  std::string reduction = node.GetString("reduction", "mean");
  const float* s = S.data<float>();
  float* log_prob =
      out.size() > 1 && out[1]->numel() == S.numel() ? out[1]->data<float>() : nullptr;
  if (out[0]->dtype() != DType::kFloat32 ||
      out[0]->numel() != (reduction == "none" ? l.n * l.inner : 1))
    return MathFail(node, "the loss was allocated as " + std::string(DTypeName(out[0]->dtype())) +
                          ShapeToString(out[0]->shape()) + ", not f32 with " +
                          std::to_string(reduction == "none" ? l.n * l.inner : 1) + " elements");
  float* loss = out[0]->data<float>();
  double* row_loss = WorkspaceArray<double>(ctx);
  const int64_t targets = l.n * l.inner;
  ParallelFor(targets, RowGrain(l.c), [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t base = (k / l.inner) * l.c * l.inner + k % l.inner;
      const float m = LaneMax(s + base, l.inner, l.c);
      const double log_sum = std::log(ExpShiftedSum<float>(s + base, l.inner, l.c, m, nullptr));
      auto lp = [&](int64_t c) { return (static_cast<double>(s[base + c * l.inner]) - m) - log_sum; };
      if (log_prob)
        for (int64_t c = 0; c < l.c; ++c) log_prob[base + c * l.inner] = static_cast<float>(lp(c));
      const int64_t t = target[k];
      row_loss[k] = t >= 0 ? -lp(t) * (w ? w[t] : 1.0) : 0.0;
    }
  });
  double total = 0, weight_sum = 0;
  for (int64_t k = 0; k < targets; ++k) {
    if (const int64_t t = target[k]; t >= 0) weight_sum += w ? w[t] : 1.0;
    total += row_loss[k];
    if (reduction == "none") loss[k] = static_cast<float>(row_loss[k]);
  }
  if (reduction == "sum") loss[0] = static_cast<float>(total);
  if (reduction == "mean")
    loss[0] = weight_sum == 0 ? 0.0f : static_cast<float>(total / weight_sum);
  return Status::Ok();
}

// SoftmaxCrossEntropyLossGrad (dY, log_prob, label[, weight]) -> d_scores:
//   d_scores[n,c,i] = (exp(log_prob[n,c,i]) - [c == label]) * w[label] * g,
// g = dY ("sum"), dY / sum of non-ignored weights ("mean"; 0 when all are ignored), dY[n,i]
// ("none"); 0 for ignored targets. kSoftmax false: foundry::NegativeLogLikelihoodLossGrad, the
// same without the exp(log_prob) term (log_prob's values are not read):
//   d_log_prob[n,c,i] = -[c == label] * w[label] * g.
template <bool kSoftmax>
Status SoftmaxCrossEntropyGradKernel(const Node& node, std::span<const Tensor* const> in,
                                     std::span<Tensor* const> out, const KernelContext&) {
  const Tensor& LP = *in[1];
  if (LP.dtype() != DType::kFloat32) return UnsupportedType(node, LP.dtype());
  ASSIGN_OR_RETURN(CeLayout l, CeLayoutOf(node, LP, *in[2]));
  ASSIGN_OR_RETURN(CeTargets target, CheckCeTargets(node, *in[2], l.c));
  const float* w = in.size() > 3 && in[3] ? in[3]->data<float>() : nullptr;
  std::string reduction = node.GetString("reduction", "mean");
  RETURN_IF_ERROR(RequireLike(node, *out[0], "dScores", LP, "log_prob"));
  if (in[0]->dtype() != DType::kFloat32 ||
      in[0]->numel() != (reduction == "none" ? l.n * l.inner : 1))
    return MathFail(node, "dY is " + std::string(DTypeName(in[0]->dtype())) +
                          ShapeToString(in[0]->shape()) + ", not f32 with " +
                          std::to_string(reduction == "none" ? l.n * l.inner : 1) + " elements");
  const float* dy = in[0]->data<float>();
  const float* lp = LP.data<float>();
  float* ds = out[0]->data<float>();
  double scale = reduction == "none" ? 1.0 : dy[0];
  if (reduction == "mean") {
    double weight_sum = 0;
    for (int64_t k = 0; k < l.n * l.inner; ++k)
      if (const int64_t t = target[k]; t >= 0) weight_sum += w ? w[t] : 1.0;
    scale = weight_sum == 0 ? 0.0 : scale / weight_sum;
  }
  const bool none = reduction == "none";
  ParallelFor(l.n * l.inner, RowGrain(l.c), [&](int64_t begin, int64_t end) {
    float e[kExpBlock] = {};
    for (int64_t k = begin; k < end; ++k) {
      const int64_t base = (k / l.inner) * l.c * l.inner + k % l.inner;
      const int64_t t = target[k];
      double g = 0;
      if (t >= 0) g = (w ? w[t] : 1.0) * (none ? dy[k] : scale);
      for (int64_t c0 = 0; c0 < l.c; c0 += kExpBlock) {
        const int64_t len = std::min(kExpBlock, l.c - c0);
        if constexpr (kSoftmax) {
          for (int64_t j = 0; j < len; ++j) e[j] = lp[base + (c0 + j) * l.inner];
          if (g != 0) vmath::Exp(e, e, len);
        }
        for (int64_t j = 0; j < len; ++j) {
          const int64_t c = c0 + j;
          const double ex = kSoftmax ? static_cast<double>(e[j]) : 0.0;
          const double v = g == 0 ? 0.0 : (ex - (c == t)) * g;
          ds[base + c * l.inner] = static_cast<float>(v);
        }
      }
    }
  });
  return Status::Ok();
}

// One double per target: SoftmaxCrossEntropyKernel's per-target losses.
int64_t SoftmaxCrossEntropyWorkspace(const Node&, std::span<const OperandType> in,
                                     std::span<const OperandType>) {
  if (in.empty() || !in[0].shape || in[0].shape->size() < 2) return 0;
  const Shape& s = *in[0].shape;
  const int64_t c = s[1];
  return c > 0 ? static_cast<int64_t>(sizeof(double)) * (NumElements(s) / c) : 0;
}

}  // namespace

void RegisterMathWorkspaces(CpuWorkspaceTable& table) {
  table.Add("", "MatMul", MatMulWorkspace);
  table.Add(kMs, "FusedMatMul", MatMulWorkspace);
  table.Add("", "Gemm", MatMulWorkspace);
  table.Add("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyWorkspace);
  table.Add(kMs, "LayerNormalizationGrad", LayerNormGradWorkspace);
  table.Add(kMs, "SimplifiedLayerNormalizationGrad", LayerNormGradWorkspace);
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
    table.Add("", op, ReduceWorkspace);
}

void RegisterMathKernels(CpuKernelTable& table) {
  // Runs once, when the kernel table is first built, i.e. before any GEMM (file comment).
  openblas_set_num_threads(1);

  table.Add("", "MatMul", MatMulKernel);
  table.Add(kMs, "FusedMatMul", MatMulKernel);
  table.Add("", "Gemm", GemmKernel);

  table.Add("", "Softmax", SoftmaxKernel<false>);
  table.Add("", "LogSoftmax", SoftmaxKernel<true>);
  table.Add(kMs, "SoftmaxGrad_13", SoftmaxGradKernel<false>);
  table.Add(kMs, "LogSoftmaxGrad_13", SoftmaxGradKernel<true>);

  table.Add("", "ReduceSum", ReduceKernel<ReduceOp::kSum>);
  table.Add("", "ReduceMean", ReduceKernel<ReduceOp::kMean>);
  table.Add("", "ReduceMax", ReduceKernel<ReduceOp::kMax>);
  table.Add("", "ReduceMin", ReduceKernel<ReduceOp::kMin>);
  table.Add("", "ReduceProd", ReduceKernel<ReduceOp::kProd>);
  table.Add("", "ReduceL1", ReduceKernel<ReduceOp::kL1>);
  table.Add("", "ReduceL2", ReduceKernel<ReduceOp::kL2>);
  table.Add("", "ReduceSumSquare", ReduceKernel<ReduceOp::kSumSquare>);
  table.Add("", "ReduceLogSum", ReduceKernel<ReduceOp::kLogSum>);
  table.Add("", "ReduceLogSumExp", ReduceKernel<ReduceOp::kLogSumExp>);

  table.Add("", "CumSum", CumSumKernel);

  table.Add("", "LayerNormalization", LayerNormKernel);
  table.Add(kMs, "LayerNormalizationGrad", LayerNormGradKernel);
  table.Add(kMs, "SimplifiedLayerNormalization", SimplifiedLayerNormKernel);
  table.Add(kMs, "SimplifiedLayerNormalizationGrad", LayerNormGradKernel);

  table.Add("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyKernel);
  table.Add(kMs, "SoftmaxCrossEntropyLossGrad", SoftmaxCrossEntropyGradKernel<true>);
  table.Add("foundry", "NegativeLogLikelihoodLossGrad", SoftmaxCrossEntropyGradKernel<false>);
}

}  // namespace foundry
