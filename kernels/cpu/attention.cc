// foundry::Attention and foundry::AttentionGrad on the CPU (the contract: compiler/ops/attention.cc).
//
// Tiled as FlashAttention-2: per batch b and query head h, query rows in tiles of kRows, keys in
// tiles of kCols. The forward keeps a running row maximum m, a running sum l and the unnormalised
// output (in O itself) and rescales them as each key tile arrives (online softmax); only one
// kRows x kCols tile of scores ever exists. The backward recomputes every tile's probabilities
// from Q, K, the bias, the mask and the saved LSE, and accumulates dV, dK (per key tile, over the
// query heads of its group and their query tiles) and dQ (per query tile, over key tiles) with
// GEMMs into the outputs. Causal masking skips the tiles above the diagonal.
//
// Deterministic: the loops and every GEMM run in one fixed order; the work splits into units that
// own disjoint outputs — (b, query head) forward, (b, key/value head) backward (dQ of the group's
// query heads, dK, dV) — spread over up to CpuThreads() threads, each with its own scratch, so
// the bits do not depend on the thread count. The products go to OpenBLAS (one
// thread, kernels/cpu/math.cc), the rest is plain loops the compiler vectorises.
#include <cblas.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <climits>
#include <cstring>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compiler/op_schema.h"
#include "kernels/cpu/kernel.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/philox.h"

namespace foundry {

namespace {

constexpr char kFoundry[] = "foundry";
constexpr int64_t kRows = 64;  // query rows per tile
constexpr int64_t kCols = 64;  // keys per tile

Status Fail(const Node& n, const std::string& what) { return Error(n.Describe() + ": " + what); }

// C = alpha op(A) op(B) + beta C with explicit leading dimensions (row-major).
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
void Gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// Element strides of a bias or mask broadcast to [B, Hq, Sq, Sk] (0 along broadcast dimensions).
struct Broadcast {
  const void* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct Geometry {
  int64_t b = 0, hq = 0, hkv = 0, sq = 0, sk = 0, d = 0, dv = 0;
  bool kt = true;  // K is [B, Hkv, D, Sk]
  bool causal = false;
  int64_t window = 0;  // > 0: key j is also masked when j <= i - window
  double softcap = 0;  // > 0: the scaled product becomes softcap·tanh(product / softcap)
  bool mask_keep = false;
  double scale = 1;
  double mask_value = -std::numeric_limits<double>::infinity();
  Broadcast bias, mask;
  // Dropout on the probabilities (attribute dropout_ratio, applied when training): element
  // (b, h, i, j) is kept when Philox(seed, key, ((b·Hq + h)·Sq + i)·Sk + j) >= ratio, exactly the
  // draw the Dropout the fusion replaced made for that element of its [B, Hq, Sq, Sk] input.
  float dropout = 0;
  uint64_t seed = 0, key = 0;
  bool o_transposed = false;  // O and dO are [B, Sq, Hq, Dv]
  int64_t rep() const { return hq / hkv; }
  // Offset of (b, h)'s first O row, and the distance between its rows.
  int64_t OHead(int64_t b_, int64_t h) const {
    return o_transposed ? (b_ * sq * hq + h) * dv : (b_ * hq + h) * sq * dv;
  }
  int64_t ORow() const { return o_transposed ? hq * dv : dv; }
  Shape OShape() const { return o_transposed ? Shape{b, sq, hq, dv} : Shape{b, hq, sq, dv}; }
};

// Multiplies tile p (rows i0.., keys j0..) by the dropout's keep / (1 - ratio) factor z, written
// to z (may be p itself); no-op when dropout is off.
template <class T>
void DropoutTile(const Geometry& g, int64_t b, int64_t h, int64_t i0, int64_t br, int64_t j0,
                 int64_t bc, const T* p, T* z) {
  const T scale = T(1) / (T(1) - static_cast<T>(g.dropout));
  for (int64_t r = 0; r < br; ++r) {
    const uint64_t base = static_cast<uint64_t>(((b * g.hq + h) * g.sq + i0 + r) * g.sk + j0);
    for (int64_t c = 0; c < bc; ++c) {
      const bool keep =
          PhiloxBitsToUniform(PhiloxRandom(g.seed, g.key, base + static_cast<uint64_t>(c))) >=
          g.dropout;
      z[r * bc + c] = keep ? p[r * bc + c] * scale : T(0);
    }
  }
}

StatusOr<Broadcast> BroadcastOf(const Node& node, const Tensor* t, const char* what,
                                const Geometry& g) {
  Broadcast out;
  if (!t) return out;
  const Shape& s = t->shape();
  if (s.size() > 4) return Fail(node, std::string(what) + " has rank > 4");
  const int64_t target[4] = {g.b, g.hq, g.sq, g.sk};
  const size_t off = 4 - s.size();
  int64_t stride = 1;
  for (size_t k = 4; k-- > 0;) {
    if (k < off) break;
    int64_t dim = s[k - off];
    if (dim != 1 && dim != target[k])
      return Fail(node, std::string(what) + " " + ShapeToString(s) +
                            " does not broadcast to the scores " +
                            ShapeToString(Shape{g.b, g.hq, g.sq, g.sk}));
    out.stride[k] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  out.data = t->raw();
  return out;
}

// Checks Q, K, V and the optional bias and mask of either op against each other and the
// attributes; the outputs are checked by the callers against the geometry.
StatusOr<Geometry> GeometryOf(const Node& node, const Tensor& Q, const Tensor& K, const Tensor& V,
                              const Tensor* bias, const Tensor* mask) {
  Geometry g;
  g.kt = node.GetInt("k_transposed", 1) == 1;
  g.causal = node.GetInt("causal", 0) == 1;
  g.window = node.GetInt("window", 0);
  g.softcap = node.GetFloat("softcap", 0.0f);
  if (g.window < 0 || (g.window > 0 && !g.causal))
    return Fail(node,
                "window " + std::to_string(g.window) + " must be 0 or positive with causal=1");
  if (!(g.softcap >= 0)) return Fail(node, "softcap must be 0 (none) or positive");
  g.mask_keep = node.GetInt("mask_keep", 0) == 1;
  g.scale = node.GetFloat("scale", 1.0f);
  g.mask_value = node.GetFloat("mask_value", -std::numeric_limits<float>::infinity());
  g.dropout = node.GetFloat("dropout_ratio", 0.0f);
  g.o_transposed = node.GetInt("o_transposed", 0) == 1;
  if (!(g.dropout >= 0.f && g.dropout < 1.f))
    return Fail(node, "dropout_ratio " + std::to_string(g.dropout) + " is outside [0, 1)");
  if (Q.rank() != 4 || K.rank() != 4 || V.rank() != 4)
    return Fail(node, "Q, K and V must have rank 4, got " + ShapeToString(Q.shape()) + ", " +
                          ShapeToString(K.shape()) + ", " + ShapeToString(V.shape()));
  if (K.dtype() != Q.dtype() || V.dtype() != Q.dtype())
    return Fail(node, "Q, K and V must have one element type");
  g.b = Q.shape()[0];
  g.hq = Q.shape()[1];
  g.sq = Q.shape()[2];
  g.d = Q.shape()[3];
  g.hkv = K.shape()[1];
  g.sk = g.kt ? K.shape()[3] : K.shape()[2];
  g.dv = V.shape()[3];
  const int64_t kd = g.kt ? K.shape()[2] : K.shape()[3];
  if (K.shape()[0] != g.b || kd != g.d || V.shape()[0] != g.b || V.shape()[1] != g.hkv ||
      V.shape()[2] != g.sk || g.hkv <= 0 || g.hq % g.hkv != 0)
    return Fail(node, "Q " + ShapeToString(Q.shape()) + ", K " + ShapeToString(K.shape()) +
                          " and V " + ShapeToString(V.shape()) + " do not fit together");
  for (int64_t dim : {g.sq, g.sk, g.d, g.dv})
    if (dim > INT_MAX) return Fail(node, "a dimension exceeds the BLAS int range");
  if (bias && bias->dtype() != Q.dtype()) return Fail(node, "the bias must have Q's element type");
  if (mask && mask->dtype() != DType::kBool) return Fail(node, "the mask must be bool");
  ASSIGN_OR_RETURN(g.bias, BroadcastOf(node, bias, "bias", g));
  ASSIGN_OR_RETURN(g.mask, BroadcastOf(node, mask, "mask", g));
  return g;
}

Status RequireShape(const Node& node, const Tensor& t, const char* what, DType dtype,
                    const Shape& shape) {
  if (t.dtype() == dtype && t.shape() == shape) return Status::Ok();
  return Fail(node, std::string(what) + " is " + std::string(DTypeName(t.dtype())) +
                        ShapeToString(t.shape()) + ", expected " +
                        std::string(DTypeName(dtype)) + ShapeToString(shape));
}

// Pointers of one (batch, query head) pair.
template <class T>
struct Head {
  const T* q;  // [Sq, D]
  const T* k;  // [D, Sk] (kt) or [Sk, D]
  const T* v;  // [Sk, Dv]
  int64_t b, h;
};

template <class T>
Head<T> HeadOf(const Geometry& g, const T* q, const T* k, const T* v, int64_t b, int64_t h) {
  const int64_t kv = b * g.hkv + h / g.rep();
  return {q + (b * g.hq + h) * g.sq * g.d, k + kv * g.sk * g.d, v + kv * g.sk * g.dv, b, h};
}

// Sets the elements of tile t (rows i0.., keys j0.., row stride bc) that the mask, the causal rule
// or the window masks to `value`: the scores' mask_value in the forward, 0 for dS in the backward
// (a masked score is a constant; nothing flows back through it).
template <class T>
void MaskTile(const Geometry& g, const Head<T>& hd, int64_t i0, int64_t br, int64_t j0, int64_t bc,
              T* t, T value) {
  if (g.mask.data) {
    const bool* mask = static_cast<const bool*>(g.mask.data);
    const int64_t* st = g.mask.stride;
    for (int64_t r = 0; r < br; ++r) {
      const bool* row = mask + hd.b * st[0] + hd.h * st[1] + (i0 + r) * st[2] + j0 * st[3];
      T* sr = t + r * bc;
      for (int64_t c = 0; c < bc; ++c)
        if (row[c * st[3]] != g.mask_keep) sr[c] = value;
    }
  }
  if (g.causal && j0 + bc - 1 > i0) {
    for (int64_t r = 0; r < br; ++r) {
      T* sr = t + r * bc;
      for (int64_t c = std::max<int64_t>(0, i0 + r + 1 - j0); c < bc; ++c) sr[c] = value;
    }
  }
  // The window: key j <= i - window is masked (query i sees keys i - window + 1 .. i).
  if (g.window > 0 && j0 <= i0 + br - 1 - g.window) {
    for (int64_t r = 0; r < br; ++r) {
      T* sr = t + r * bc;
      const int64_t end = std::min<int64_t>(bc, i0 + r - g.window - j0 + 1);
      for (int64_t c = 0; c < end; ++c) sr[c] = value;
    }
  }
}

// s[r, c] (r < br, c < bc, row stride bc) = the scores of queries i0 + r and keys j0 + c: the
// scaled product (soft-capped: softcap·tanh(product / softcap)), plus the bias, masked scores
// replaced by mask_value. With a softcap and `tanh_out`, tanh_out[r, c] = the tanh (the
// backward's derivative 1 - tanh²).
template <class T>
void ScoreTile(const Geometry& g, const Head<T>& hd, int64_t i0, int64_t br, int64_t j0, int64_t bc,
               T* s, T* tanh_out = nullptr) {
  const T scale = static_cast<T>(g.scale);
  if (g.kt) {
    Gemm(false, false, br, bc, g.d, scale, hd.q + i0 * g.d, g.d, hd.k + j0, g.sk, T(0), s, bc);
  } else {
    Gemm(false, true, br, bc, g.d, scale, hd.q + i0 * g.d, g.d, hd.k + j0 * g.d, g.d, T(0), s, bc);
  }
  if (g.softcap > 0) {
    const T cap = static_cast<T>(g.softcap);
    for (int64_t e = 0; e < br * bc; ++e) {
      const T t = std::tanh(s[e] / cap);
      if (tanh_out) tanh_out[e] = t;
      s[e] = cap * t;
    }
  }
  const T fill = static_cast<T>(g.mask_value);
  if (g.bias.data) {
    const T* bias = static_cast<const T*>(g.bias.data);
    const int64_t* st = g.bias.stride;
    for (int64_t r = 0; r < br; ++r) {
      const T* row = bias + hd.b * st[0] + hd.h * st[1] + (i0 + r) * st[2] + j0 * st[3];
      T* sr = s + r * bc;
      if (st[3] == 1) {
        for (int64_t c = 0; c < bc; ++c) sr[c] += row[c];
      } else {
        for (int64_t c = 0; c < bc; ++c) sr[c] += row[c * st[3]];
      }
    }
  }
  MaskTile(g, hd, i0, br, j0, bc, s, fill);
}

// x[c] = exp(x[c] - shift) for c < n, the kernels' hot loop (one exp per score, forward and
// backward). f32: Cody-Waite reduction x = k·ln2 + r (k rounded to nearest, |r| <= ln2/2),
// Cephes' degree-6 polynomial for e^r (relative error about 1e-7; the kernel tests hold the op to
// a double evaluation), 2^k through the exponent bits; below -87.3 (e^x under FLT_MIN: masked
// scores) exactly 0, NaN stays NaN. Four lanes at a time with SSE2 (x86-64's baseline), the
// tail one at a time by the same operations in the same order, so an element's bits do not
// depend on where it sits in a tile. f64 calls std::exp.
constexpr float kExpHi = 88.3f, kExpLo = -87.3f, kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kRound = 12582912.0f;  // 1.5·2^23: (y + kRound) - kRound rounds y to nearest
constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

float ExpOne(float v) {
  if (v != v) return v;
  if (v < kExpLo) return 0.0f;
  v = std::min(v, kExpHi);
  const float kf = (v * kLog2e + kRound) - kRound;
  float r = v - kf * kLn2Hi;
  r = r - kf * kLn2Lo;
  float p = kP[0];
  for (int i = 1; i < 6; ++i) p = p * r + kP[i];
  p = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(kf) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

void ExpShifted(float* x, int64_t n, float shift) {
  int64_t c = 0;
#if defined(__SSE2__)
  const __m128 vshift = _mm_set1_ps(shift);
  for (; c + 4 <= n; c += 4) {
    const __m128 in = _mm_sub_ps(_mm_loadu_ps(x + c), vshift);
    const __m128 nan = _mm_cmpunord_ps(in, in);
    const __m128 under = _mm_cmplt_ps(in, _mm_set1_ps(kExpLo));
    const __m128 v = _mm_min_ps(in, _mm_set1_ps(kExpHi));  // in < -87.3 is zeroed below
    const __m128 kf = _mm_sub_ps(_mm_add_ps(_mm_mul_ps(v, _mm_set1_ps(kLog2e)), _mm_set1_ps(kRound)),
                                 _mm_set1_ps(kRound));
    __m128 r = _mm_sub_ps(v, _mm_mul_ps(kf, _mm_set1_ps(kLn2Hi)));
    r = _mm_sub_ps(r, _mm_mul_ps(kf, _mm_set1_ps(kLn2Lo)));
    __m128 p = _mm_set1_ps(kP[0]);
    for (int i = 1; i < 6; ++i) p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kP[i]));
    p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), r), _mm_set1_ps(1.0f));
    // Lanes below -87.3 may hold a k under -126 here; they are replaced by 0 before the store.
    const __m128i k = _mm_cvttps_epi32(kf);
    const __m128 scale =
        _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(k, _mm_set1_epi32(127)), 23));
    __m128 e = _mm_andnot_ps(under, _mm_mul_ps(p, scale));
    e = _mm_or_ps(_mm_and_ps(nan, in), _mm_andnot_ps(nan, e));
    _mm_storeu_ps(x + c, e);
  }
#endif
  for (; c < n; ++c) x[c] = ExpOne(x[c] - shift);
}
void ExpShifted(double* x, int64_t n, double shift) {
  for (int64_t c = 0; c < n; ++c) x[c] = std::exp(x[c] - shift);
}

// Runs fn(unit, scratch) for units 0..n-1 on up to CpuThreads() threads (the pool of
// kernels/cpu/parallel.h), as many lanes as the workspace holds `per_thread` bytes for; lane t
// takes units t, t + T, t + 2T, ... with scratch t. Each unit owns its outputs: the bits do not
// depend on T.
template <class F>
void ForEachUnit(const KernelContext& ctx, int64_t n, int64_t per_thread, F fn) {
  int64_t lanes = std::min<int64_t>(CpuThreads(), n);
  if (per_thread > 0)
    lanes = std::min<int64_t>(lanes, static_cast<int64_t>(ctx.workspace.size()) / per_thread);
  lanes = std::max<int64_t>(lanes, 1);
  ParallelFor(lanes, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::byte* scratch = ctx.workspace.data() + t * per_thread;
      for (int64_t u = t; u < n; u += lanes) fn(u, scratch);
    }
  });
}

// Scratch of one thread, rounded up to 256 bytes so each thread's stays aligned: forward one
// score tile and the row statistics; backward three tiles and dO·O per query row of a group.
int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }
int64_t ForwardScratchBytes(int64_t elem) { return Aligned(elem * (kRows * kCols + 2 * kRows)); }
// (A softcap needs a fourth tile: the tanh of each score.)
int64_t BackwardScratchBytes(int64_t elem, int64_t rep, int64_t sq, bool softcap) {
  return Aligned(elem * ((softcap ? 4 : 3) * kRows * kCols + rep * sq));
}

// Causal tiles wholly above the diagonal are skipped only when that is exact: a masked score is
// -inf and adds nothing (with a finite mask_value it still counts, in a row masked everywhere
// else). The fusion writes -inf whenever no row can be masked everywhere (no mask input, a finite
// bias), which is what models export. The CUDA kernels skip by the same rule
// (kernels/cuda/attention_tile.cuh, SkipsCausalTiles).
bool SkipsCausalTiles(const Geometry& g) {
  return g.causal && g.mask_value == -std::numeric_limits<double>::infinity();
}
// Keys the query tile [i0, i0 + br) reads: [0, i0 + br) when causal tiles are skipped, from
// i0 - window + 1 on with a window (the keys before it are masked for every query of the tile).
int64_t KeyEnd(const Geometry& g, int64_t i0, int64_t br) {
  return SkipsCausalTiles(g) ? std::min(g.sk, i0 + br) : g.sk;
}
int64_t KeyBegin(const Geometry& g, int64_t i0) {
  if (!SkipsCausalTiles(g) || g.window <= 0) return 0;
  return std::min(g.sk, std::max<int64_t>(0, i0 - g.window + 1));
}
// Queries the key tile [j0, j0 + bc) contributes to: from j0 (causal; rounded down to a query
// tile) to before j0 + bc - 1 + window with a window.
int64_t QueryBegin(const Geometry& g, int64_t j0) {
  return SkipsCausalTiles(g) ? std::min(g.sq, j0) / kRows * kRows : 0;
}
int64_t QueryEnd(const Geometry& g, int64_t j0, int64_t bc) {
  if (!SkipsCausalTiles(g) || g.window <= 0) return g.sq;
  return std::min(g.sq, j0 + bc - 1 + g.window);
}

template <class T>
void ForwardHead(const Geometry& g, const Head<T>& hd, T* o, T* lse, T* s, T* m, T* l) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t i0 = 0; i0 < g.sq; i0 += kRows) {
    const int64_t br = std::min(kRows, g.sq - i0);
    const int64_t ld = g.ORow();
    T* ot = o + i0 * ld;
    for (int64_t r = 0; r < br; ++r) std::fill(ot + r * ld, ot + r * ld + g.dv, T(0));
    std::fill(m, m + br, neg_inf);
    std::fill(l, l + br, T(0));
    const int64_t jend = KeyEnd(g, i0, br);
    for (int64_t j0 = KeyBegin(g, i0); j0 < jend; j0 += kCols) {
      const int64_t bc = std::min(kCols, jend - j0);
      ScoreTile(g, hd, i0, br, j0, bc, s);
      for (int64_t r = 0; r < br; ++r) {
        T* sr = s + r * bc;
        T mt = neg_inf;
        for (int64_t c = 0; c < bc; ++c) mt = std::max(mt, sr[c]);
        const T m_new = std::max(m[r], mt);
        if (m_new == neg_inf) {  // every score so far is -inf: nothing to add yet
          std::fill(sr, sr + bc, T(0));
          continue;
        }
        ExpShifted(sr, bc, m_new);
        T sum = 0;
        for (int64_t c = 0; c < bc; ++c) sum += sr[c];
        if (m_new != m[r]) {
          const T alpha = std::exp(m[r] - m_new);
          l[r] *= alpha;
          T* orow = ot + r * ld;
          for (int64_t e = 0; e < g.dv; ++e) orow[e] *= alpha;
          m[r] = m_new;
        }
        l[r] += sum;
      }
      if (g.dropout > 0) DropoutTile(g, hd.b, hd.h, i0, br, j0, bc, s, s);
      Gemm(false, false, br, g.dv, bc, T(1), s, bc, hd.v + j0 * g.dv, g.dv, T(1), ot, ld);
    }
    for (int64_t r = 0; r < br; ++r) {
      T* orow = ot + r * ld;
      const T inv = T(1) / l[r];  // l = 0 (every score -inf): 0 * inf = NaN, as Softmax gives
      for (int64_t e = 0; e < g.dv; ++e) orow[e] *= inv;
      lse[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

template <class T>
Status AttentionTyped(const Node& node, std::span<const Tensor* const> in,
                      std::span<Tensor* const> out, const KernelContext& ctx) {
  ASSIGN_OR_RETURN(Geometry g, GeometryOf(node, *in[0], *in[1], *in[2],
                                          in.size() > 3 ? in[3] : nullptr,
                                          in.size() > 4 ? in[4] : nullptr));
  if (!ctx.training) g.dropout = 0;
  g.seed = ctx.seed;
  g.key = ctx.node_key;
  const DType t = in[0]->dtype();
  RETURN_IF_ERROR(RequireShape(node, *out[0], "O", t, g.OShape()));
  RETURN_IF_ERROR(RequireShape(node, *out[1], "LSE", t, {g.b, g.hq, g.sq}));
  const T* q = in[0]->data<T>();
  const T* k = in[1]->data<T>();
  const T* v = in[2]->data<T>();
  T* o = out[0]->data<T>();
  T* lse = out[1]->data<T>();
  ForEachUnit(ctx, g.b * g.hq, ForwardScratchBytes(sizeof(T)), [&](int64_t bh, std::byte* w) {
    T* s = reinterpret_cast<T*>(w);
    T* m = s + kRows * kCols;
    T* l = m + kRows;
    const int64_t b = bh / g.hq, h = bh % g.hq;
    ForwardHead(g, HeadOf(g, q, k, v, b, h), o + g.OHead(b, h), lse + bh * g.sq, s, m, l);
  });
  return Status::Ok();
}

// Inputs: dO, Q, K, V, O, LSE[, bias][, mask]; outputs dQ, dK, dV.
template <class T>
Status AttentionGradTyped(const Node& node, std::span<const Tensor* const> in,
                          std::span<Tensor* const> out, const KernelContext& ctx) {
  ASSIGN_OR_RETURN(Geometry g, GeometryOf(node, *in[1], *in[2], *in[3],
                                          in.size() > 6 ? in[6] : nullptr,
                                          in.size() > 7 ? in[7] : nullptr));
  if (!ctx.training) g.dropout = 0;
  g.seed = ctx.seed;
  g.key = ctx.node_key;
  const DType t = in[1]->dtype();
  const Shape o_shape = g.OShape();
  RETURN_IF_ERROR(RequireShape(node, *in[0], "dO", t, o_shape));
  RETURN_IF_ERROR(RequireShape(node, *in[4], "O", t, o_shape));
  RETURN_IF_ERROR(RequireShape(node, *in[5], "LSE", t, {g.b, g.hq, g.sq}));
  for (int i = 0; i < 3; ++i)
    RETURN_IF_ERROR(RequireShape(node, *out[i], i == 0 ? "dQ" : i == 1 ? "dK" : "dV", t,
                                 in[1 + i]->shape()));
  const T* dout = in[0]->data<T>();
  const T* q = in[1]->data<T>();
  const T* k = in[2]->data<T>();
  const T* v = in[3]->data<T>();
  const T* o = in[4]->data<T>();
  const T* lse = in[5]->data<T>();
  T* dq = out[0]->data<T>();
  T* dk = out[1]->data<T>();
  T* dv = out[2]->data<T>();
  const int64_t rep = g.rep();
  const T scale = static_cast<T>(g.scale);
  std::fill(dq, dq + out[0]->numel(), T(0));
  std::fill(dk, dk + out[1]->numel(), T(0));
  std::fill(dv, dv + out[2]->numel(), T(0));
  const int64_t per_thread = BackwardScratchBytes(sizeof(T), rep, g.sq, g.softcap > 0);
  // One unit, (b, key/value head), owns its dK, dV and its query heads' dQ.
  ForEachUnit(ctx, g.b * g.hkv, per_thread, [&](int64_t unit, std::byte* w) {
      T* s = reinterpret_cast<T*>(w);
      T* dp = s + kRows * kCols;
      T* z = dp + kRows * kCols;    // the dropout's factor per element of the tile
      T* drow = z + kRows * kCols;  // [rep, Sq]: dO_i · O_i per query head of the group
      T* th = drow + rep * g.sq;    // with a softcap: the tanh of each score of the tile
      const int64_t b = unit / g.hkv, kvh = unit % g.hkv;
      T* dk_h = dk + (b * g.hkv + kvh) * g.sk * g.d;
      T* dv_h = dv + (b * g.hkv + kvh) * g.sk * g.dv;
      for (int64_t r = 0; r < rep; ++r) {
        const T* od = o + g.OHead(b, kvh * rep + r);
        const T* dod = dout + g.OHead(b, kvh * rep + r);
        const int64_t ld = g.ORow();
        for (int64_t i = 0; i < g.sq; ++i) {
          T acc = 0;
          for (int64_t e = 0; e < g.dv; ++e) acc += dod[i * ld + e] * od[i * ld + e];
          drow[r * g.sq + i] = acc;
        }
      }
      for (int64_t j0 = 0; j0 < g.sk; j0 += kCols) {
        const int64_t bc = std::min(kCols, g.sk - j0);
        for (int64_t r = 0; r < rep; ++r) {
          const int64_t h = kvh * rep + r;
          const int64_t bh = b * g.hq + h;
          const Head<T> hd = HeadOf(g, q, k, v, b, h);
          const T* do_h = dout + g.OHead(b, h);
          const int64_t ldo = g.ORow();
          const T* lse_h = lse + bh * g.sq;
          const T* d_h = drow + r * g.sq;
          T* dq_h = dq + bh * g.sq * g.d;
          // Skipped causal tiles: query i sees key j only when j <= i, none of these when i < j0
          // (and with a window, only when i < j + window).
          const int64_t iend = QueryEnd(g, j0, bc);
          for (int64_t i0 = QueryBegin(g, j0); i0 < iend; i0 += kRows) {
            const int64_t br = std::min(kRows, g.sq - i0);
            ScoreTile(g, hd, i0, br, j0, bc, s, g.softcap > 0 ? th : nullptr);
            for (int64_t rr = 0; rr < br; ++rr) {
              T* sr = s + rr * bc;
              const T lv = lse_h[i0 + rr];
              ExpShifted(sr, bc, lv);
            }
            // dV_j += (P ∘ z)ᵀ dO_i, z the dropout's keep / (1 - ratio) (1 without dropout)
            const bool drop = g.dropout > 0;
            if (drop) {  // z = the factor tile; dp = P ∘ z for the moment
              std::fill(z, z + br * bc, T(1));
              DropoutTile(g, b, h, i0, br, j0, bc, z, z);
              for (int64_t e = 0; e < br * bc; ++e) dp[e] = s[e] * z[e];
            }
            Gemm(true, false, bc, g.dv, br, T(1), drop ? dp : s, bc, do_h + i0 * ldo, ldo, T(1),
                 dv_h + j0 * g.dv, g.dv);
            // dP = (dO_i V_jᵀ) ∘ z; dS = scale · P ∘ (dP - D), D_i = dO_i · O_i
            Gemm(false, true, br, bc, g.dv, T(1), do_h + i0 * ldo, ldo, hd.v + j0 * g.dv, g.dv,
                 T(0), dp, bc);
            if (drop)
              for (int64_t e = 0; e < br * bc; ++e) dp[e] *= z[e];
            for (int64_t rr = 0; rr < br; ++rr) {
              const T dd = d_h[i0 + rr];
              const T* sr = s + rr * bc;
              T* pr = dp + rr * bc;
              for (int64_t c = 0; c < bc; ++c) pr[c] = scale * (sr[c] * (pr[c] - dd));
            }
            if (g.softcap > 0)  // through softcap·tanh(x / softcap): times 1 - tanh²
              for (int64_t e = 0; e < br * bc; ++e) dp[e] *= T(1) - th[e] * th[e];
            // A finite mask_value gives masked scores a probability (large in a row masked
            // everywhere) but no gradient. (-inf: their P and dS are 0 already, or NaN in a row
            // masked everywhere, as Softmax gives.)
            if (std::isfinite(g.mask_value)) MaskTile(g, hd, i0, br, j0, bc, dp, T(0));
            if (g.kt) {
              // dQ_i += dS K_j with K_j = Kt[:, j0:]ᵀ; dKt[:, j0:] += Q_iᵀ dS
              Gemm(false, true, br, g.d, bc, T(1), dp, bc, hd.k + j0, g.sk, T(1),
                   dq_h + i0 * g.d, g.d);
              Gemm(true, false, g.d, bc, br, T(1), hd.q + i0 * g.d, g.d, dp, bc, T(1), dk_h + j0,
                   g.sk);
            } else {
              Gemm(false, false, br, g.d, bc, T(1), dp, bc, hd.k + j0 * g.d, g.d, T(1),
                   dq_h + i0 * g.d, g.d);
              Gemm(true, false, bc, g.d, br, T(1), dp, bc, hd.q + i0 * g.d, g.d, T(1),
                   dk_h + j0 * g.d, g.d);
            }
          }
        }
      }
  });
  return Status::Ok();
}

template <bool kGrad>
Status AttentionKernel(const Node& node, std::span<const Tensor* const> in,
                       std::span<Tensor* const> out, const KernelContext& ctx) {
  const DType t = in[kGrad ? 1 : 0]->dtype();
  if (t == DType::kFloat32)
    return kGrad ? AttentionGradTyped<float>(node, in, out, ctx)
                 : AttentionTyped<float>(node, in, out, ctx);
  if (t == DType::kFloat64)
    return kGrad ? AttentionGradTyped<double>(node, in, out, ctx)
                 : AttentionTyped<double>(node, in, out, ctx);
  return Fail(node, "the cpu kernel does not support element type " +
                        std::string(DTypeName(t)));
}

// Forward: one score tile and the row statistics; backward: two tiles and dO·O per query row of
// one key/value head's group.
template <bool kGrad>
int64_t AttentionWorkspace(const Node& node, std::span<const OperandType> in,
                           std::span<const OperandType>) {
  const size_t q = kGrad ? 1 : 0;
  if (in.size() < q + 3 || !in[q].shape || !in[q + 1].shape) return 0;
  const Shape& qs = *in[q].shape;
  const Shape& ks = *in[q + 1].shape;
  if (qs.size() != 4 || ks.size() != 4 || ks[1] <= 0) return 0;
  const int64_t elem = in[q].dtype == DType::kFloat64 ? 8 : 4;
  const int64_t per_thread = kGrad ? BackwardScratchBytes(elem, std::max<int64_t>(qs[1] / ks[1], 1),
                                                          qs[2], node.GetFloat("softcap", 0.0f) > 0)
                                   : ForwardScratchBytes(elem);
  return per_thread * CpuThreads();
}

}  // namespace

void RegisterAttentionKernels(CpuKernelTable& table) {
  table.Add(kFoundry, "Attention", AttentionKernel<false>);
  table.Add(kFoundry, "AttentionGrad", AttentionKernel<true>);
}

void RegisterAttentionWorkspaces(CpuWorkspaceTable& table) {
  table.Add(kFoundry, "Attention", AttentionWorkspace<false>);
  table.Add(kFoundry, "AttentionGrad", AttentionWorkspace<true>);
}

}  // namespace foundry
