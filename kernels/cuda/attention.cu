// CUDA kernels of foundry::Attention and foundry::AttentionGrad (contract:
// compiler/ops/attention.cc), the GPU twin of kernels/cpu/attention.cc, FlashAttention-2 style in
// exact fp32 (no tensor cores). The per-element arithmetic and the index maps live in
// attention_tile.cuh (replayed on the host by tests/kernels/cuda/attention_host_test.cc).
//
// Forward, one block per (query tile, query head, batch): the Q tile stays in shared memory; each
// key tile's K and V are loaded, its 64 x 64 scores computed (each a fixed-order fmaf chain over
// the head dim), and the online softmax moves the rows' running max m, sum l and the output
// accumulator (registers); O = acc / l and LSE = m + log l are written (`=`) at the end.
//
// Backward, three kernels, outputs written with `=` once each:
//  1. AttentionRowDot: D_i = dO_i · O_i (one warp per row) into the workspace;
//  2. AttentionGradKv, one block per (key tile, kv head, batch): K and V tiles stay in shared
//     memory; for each query head of the group, then each query tile, in that order, it
//     recomputes P and dS and accumulates dV += (P∘z)ᵀ dO and dK += dSᵀ Q in registers;
//  3. AttentionGradQ, one block per (query tile, query head, batch): over the key tiles in order,
//     dQ += dS K in registers.
// Every sum runs in one order fixed by the shapes alone (per-thread fmaf chains, xor-butterfly
// warp reductions, whose lanes all get the same bits), and every output element has one owner: no
// atomics, the same bits on every run.
//
// Causal tiles entirely above the diagonal, and with a window those entirely before it, are
// skipped when mask_value is -inf (exact then; with a finite mask_value the masked scores count
// and every tile runs). Ragged last tiles: loads pad
// with zeros, out-of-range scores are -inf in the forward and 0 in the backward's P and dS.
#include <algorithm>
#include <climits>
#include <string>

#include "kernels/cuda/attention_tile.cuh"
#include "kernels/cuda/common.cuh"

namespace foundry {

namespace {

namespace at = attention_tile;
using at::kCols;
using at::kColsPerThread;
using at::kRows;
using at::kRowsPerThread;
using at::kTx;
using at::kTy;
using cuda::StreamOf;

constexpr char kFoundry[] = "foundry";
constexpr int kBlockThreads = kTx * kTy;
constexpr int kScorePitch = kCols + 1;  // floats per row of a shared score tile

Status Fail(const Node& n, const std::string& what) { return Error(n.Describe() + ": " + what); }

// ------------------------------ shared-memory tiles ------------------------------

// A [64, kHD] operand tile in shared memory: row r at r * kPitch (odd pitch: the column-per-thread
// reads of K and V rows hit distinct banks).
template <int kHD>
struct Tile {
  static constexpr int kPitch = kHD + 1;
  static constexpr int kFloats = kRows * kPitch;
};

// min(limit, n) as an int: the rows or keys of a tile (limit <= 64).
__device__ inline int Clamp(int limit, int64_t n) {
  return n < limit ? static_cast<int>(n) : limit;
}

__device__ inline int ThreadIndex() { return threadIdx.y * kTx + threadIdx.x; }

// s[r][c] = g[r * ld + c] for r < rows, c < cols; 0 elsewhere in the [kRows, kHD] tile.
template <int kHD, class T>
__device__ void LoadRows(float* s, const T* g, int64_t ld, int rows, int cols) {
  for (int idx = ThreadIndex(); idx < kRows * kHD; idx += kBlockThreads) {
    const int r = idx / kHD, c = idx % kHD;
    s[r * Tile<kHD>::kPitch + c] = r < rows && c < cols ? at::Load(g + r * ld + c) : 0.f;
  }
}

// Keys j0.. of a K tile into s[key][e], from either layout (kt: K[e][j] at e * sk + j, read along
// j).
template <int kHD, class T>
__device__ void LoadKeys(float* s, const T* k, const at::Geometry& g, int64_t b, int64_t kvh,
                         int64_t j0, int keys) {
  if (!g.kt) {
    LoadRows<kHD>(s, k + at::KOffset(g, b, kvh, j0, 0), g.d, keys, static_cast<int>(g.d));
    return;
  }
  const T* base = k + at::KOffset(g, b, kvh, j0, 0);
  for (int idx = ThreadIndex(); idx < kRows * kHD; idx += kBlockThreads) {
    const int c = idx % kRows, e = idx / kRows;
    s[c * Tile<kHD>::kPitch + e] = c < keys && e < g.d ? at::Load(base + e * g.sk + c) : 0.f;
  }
}

// acc[i][j] = Σ_{e < n} a[ty + kTy·i][e] · b[tx + kTx·j][e], each a fmaf chain in e order.
template <int kHD>
__device__ void TileDots(float (&acc)[kRowsPerThread][kColsPerThread], const float* a,
                         const float* b, int n) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  constexpr int kP = Tile<kHD>::kPitch;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) acc[i][j] = 0.f;
  for (int e = 0; e < n; ++e) {
    float av[kRowsPerThread], bv[kColsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) av[i] = a[(ty + kTy * i) * kP + e];
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) bv[j] = b[(tx + kTx * j) * kP + e];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
  }
}

// acc[i][k] += Σ_{c < n} w[row_i][c] · m[c][tx + kTx·k] in c order: row_i = ty + kTy·i, w read as
// w[row * wr + c * wc] (a score tile or its transpose), m a [64, kHD] tile.
template <int kHD>
__device__ void AccumulateProducts(float (&acc)[kRowsPerThread][kHD / kTx], const float* w, int wr,
                                   int wc, const float* m, int n) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  constexpr int kP = Tile<kHD>::kPitch;
  for (int c = 0; c < n; ++c) {
    float mv[kHD / kTx];
#pragma unroll
    for (int k = 0; k < kHD / kTx; ++k) mv[k] = m[c * kP + tx + kTx * k];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const float wv = w[(ty + kTy * i) * wr + c * wc];
#pragma unroll
      for (int k = 0; k < kHD / kTx; ++k) acc[i][k] = fmaf(wv, mv[k], acc[i][k]);
    }
  }
}

// Max and sum over the kTx lanes that share a row (one half-warp): xor butterflies, after which
// every lane holds the same bits (each step adds the same two values in either order).
__device__ inline float RowMax(float v) {
#pragma unroll
  for (int o = kTx / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float RowSum(float v) {
#pragma unroll
  for (int o = kTx / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ------------------------------ forward ------------------------------

template <int kHD>
constexpr int ForwardSmemBytes() {
  return (3 * Tile<kHD>::kFloats + kRows * kScorePitch) * static_cast<int>(sizeof(float));
}

template <int kHD, class T>
__global__ void __launch_bounds__(kBlockThreads, 1)
    AttentionForward(T* o, T* lse, const T* q, const T* k, const T* v, const T* bias,
                     const uint8_t* mask, at::Geometry g) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + Tile<kHD>::kFloats;
  float* vs = ks + Tile<kHD>::kFloats;
  float* ps = vs + Tile<kHD>::kFloats;
  constexpr int kE = kHD / kTx;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = at::KvHead(g, h);
  const int rows = Clamp(kRows, g.sq - i0);
  LoadRows<kHD>(qs, q + at::QOffset(g, b, h, i0), g.d, rows, static_cast<int>(g.d));

  float m[kRowsPerThread], l[kRowsPerThread], acc[kRowsPerThread][kE];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[i][e] = 0.f;
  }
  const int64_t key_end = at::KeyEnd(g, i0, rows);
  for (int64_t j0 = at::KeyBegin(g, i0); j0 < key_end; j0 += kCols) {
    const int keys = Clamp(kCols, key_end - j0);
    __syncthreads();  // the previous tile's K, V and P are no longer read
    LoadKeys<kHD>(ks, k, g, b, kvh, j0, keys);
    LoadRows<kHD>(vs, v + at::VOffset(g, b, kvh, j0), g.dv, keys, static_cast<int>(g.dv));
    __syncthreads();
    float s[kRowsPerThread][kColsPerThread];
    TileDots<kHD>(s, qs, ks, static_cast<int>(g.d));
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int r = ty + kTy * i;
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int c = tx + kTx * j;
        s[i][j] = r < rows && c < keys ? at::Score(g, s[i][j], bias, mask, b, h, i0 + r, j0 + c)
                                       : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      const float alpha = at::Rescale(&m[i], RowMax(tile_max));
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int c = tx + kTx * j;
        const float p = at::Prob(s[i][j], m[i]);
        sum += p;
        const float z = r < rows && c < keys ? at::DropoutFactor(g, b, h, i0 + r, j0 + c) : 0.f;
        ps[r * kScorePitch + c] = p * z;
      }
      l[i] = l[i] * alpha + RowSum(sum);
#pragma unroll
      for (int e = 0; e < kE; ++e) acc[i][e] *= alpha;
    }
    __syncthreads();
    AccumulateProducts<kHD>(acc, ps, kScorePitch, 1, vs, keys);
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = ty + kTy * i;
    if (r >= rows) continue;
    T* orow = o + at::OOffset(g, b, h, i0 + r);
#pragma unroll
    for (int e = 0; e < kE; ++e)
      if (tx + kTx * e < g.dv) at::Store(orow + tx + kTx * e, at::Output(acc[i][e], l[i]));
    if (tx == 0) at::Store(lse + at::RowIndex(g, b, h, i0 + r), at::Lse(m[i], l[i]));
  }
}

// ------------------------------ backward ------------------------------

// d_row[(b·Hq + h)·Sq + i] = Σ_e dO[b,h,i,e] O[b,h,i,e]: one warp per row, a butterfly at the end.
template <class T>
__global__ void AttentionRowDot(float* d_row, const T* dout, const T* o, at::Geometry g) {
  const int64_t rows = g.b * g.hq * g.sq;
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; row < rows;
       row += warps) {
    const int64_t i = row % g.sq, bh = row / g.sq;
    const int64_t off = at::OOffset(g, bh / g.hq, bh % g.hq, i);
    float acc = 0.f;
    for (int64_t e = lane; e < g.dv; e += 32)
      acc = fmaf(at::Load(dout + off + e), at::Load(o + off + e), acc);
#pragma unroll
    for (int s = 16; s > 0; s /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, s);
    if (lane == 0) d_row[row] = acc;
  }
}

// P∘z and dS of the query tile [i0, i0 + rows) against the key tile [j0, j0 + keys) into ps / ds
// (ps may be null: dQ needs only dS), from the Q, dO, K, V tiles and the rows' LSE and D.
template <int kHD, class T>
__device__ void GradTile(float* ps, float* ds, const float* qs, const float* dos, const float* ks,
                         const float* vs, const float* lse_s, const float* d_s, const T* bias,
                         const uint8_t* mask, const at::Geometry& g, int64_t b, int64_t h,
                         int64_t i0, int rows, int64_t j0, int keys) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  float s[kRowsPerThread][kColsPerThread], dov[kRowsPerThread][kColsPerThread];
  TileDots<kHD>(s, qs, ks, static_cast<int>(g.d));
  TileDots<kHD>(dov, dos, vs, static_cast<int>(g.dv));
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = ty + kTy * i;
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      const int c = tx + kTx * j;
      float pz = 0.f, dsv = 0.f;
      if (r < rows && c < keys) {
        const float p =
            at::GradProb(at::Score(g, s[i][j], bias, mask, b, h, i0 + r, j0 + c), lse_s[r]);
        const float z = at::DropoutFactor(g, b, h, i0 + r, j0 + c);
        pz = p * z;
        dsv = at::DropsGradient(g, mask, b, h, i0 + r, j0 + c)
                  ? 0.f
                  : at::GradScore(p, dov[i][j], z, d_s[r]) * at::SoftcapSlope(g, s[i][j]);
      }
      if (ps) ps[r * kScorePitch + c] = pz;
      ds[r * kScorePitch + c] = dsv;
    }
  }
}

// LSE and D of query rows i0.. of head h into shared memory (0 past the end).
template <class T>
__device__ void LoadRowStats(float* lse_s, float* d_s, const T* lse, const float* d_row,
                             const at::Geometry& g, int64_t b, int64_t h, int64_t i0, int rows) {
  for (int r = ThreadIndex(); r < kRows; r += kBlockThreads) {
    lse_s[r] = r < rows ? at::Load(lse + at::RowIndex(g, b, h, i0 + r)) : 0.f;
    d_s[r] = r < rows ? d_row[at::RowIndex(g, b, h, i0 + r)] : 0.f;
  }
}

template <int kHD>
constexpr int GradKvSmemBytes() {
  return (4 * Tile<kHD>::kFloats + 2 * kRows * kScorePitch + 2 * kRows) *
         static_cast<int>(sizeof(float));
}

template <int kHD, class T>
__global__ void __launch_bounds__(kBlockThreads, 1)
    AttentionGradKv(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* lse,
                    const float* d_row, const T* bias, const uint8_t* mask, at::Geometry g) {
  extern __shared__ float smem[];
  float* ks = smem;
  float* vs = ks + Tile<kHD>::kFloats;
  float* qs = vs + Tile<kHD>::kFloats;
  float* dos = qs + Tile<kHD>::kFloats;
  float* ps = dos + Tile<kHD>::kFloats;
  float* ds = ps + kRows * kScorePitch;
  float* lse_s = ds + kRows * kScorePitch;
  float* d_s = lse_s + kRows;
  constexpr int kE = kHD / kTx;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kCols, kvh = blockIdx.y, b = blockIdx.z;
  const int keys = Clamp(kCols, g.sk - j0);
  LoadKeys<kHD>(ks, k, g, b, kvh, j0, keys);
  LoadRows<kHD>(vs, v + at::VOffset(g, b, kvh, j0), g.dv, keys, static_cast<int>(g.dv));
  // Thread (tx, ty) owns keys ty + kTy·i and columns tx + kTx·e of dK and dV.
  float dka[kRowsPerThread][kE], dva[kRowsPerThread][kE];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int e = 0; e < kE; ++e) dka[i][e] = dva[i][e] = 0.f;
  for (int64_t hr = 0; hr < g.rep; ++hr) {
    const int64_t h = kvh * g.rep + hr;
    const int64_t query_end = at::QueryEnd(g, j0, keys);
    for (int64_t i0 = at::FirstQueryTile(g, j0); i0 < query_end; i0 += kRows) {
      const int rows = Clamp(kRows, g.sq - i0);
      __syncthreads();  // the previous query tile is no longer read
      LoadRows<kHD>(qs, q + at::QOffset(g, b, h, i0), g.d, rows, static_cast<int>(g.d));
      LoadRows<kHD>(dos, dout + at::OOffset(g, b, h, i0), at::ORowPitch(g), rows,
                    static_cast<int>(g.dv));
      LoadRowStats(lse_s, d_s, lse, d_row, g, b, h, i0, rows);
      __syncthreads();
      GradTile<kHD>(ps, ds, qs, dos, ks, vs, lse_s, d_s, bias, mask, g, b, h, i0, rows, j0, keys);
      __syncthreads();
      // dV[c] += Σ_r (P∘z)[r][c] dO[r];  dK[c] += Σ_r dS[r][c] Q[r]  (tiles read transposed)
      AccumulateProducts<kHD>(dva, ps, 1, kScorePitch, dos, rows);
      AccumulateProducts<kHD>(dka, ds, 1, kScorePitch, qs, rows);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int c = ty + kTy * i;
    if (c >= keys) continue;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int col = tx + kTx * e;
      if (col < g.dv) at::Store(dv + at::VOffset(g, b, kvh, j0 + c) + col, dva[i][e]);
      if (col < g.d) at::Store(dk + at::KOffset(g, b, kvh, j0 + c, col), g.scale * dka[i][e]);
    }
  }
}

template <int kHD>
constexpr int GradQSmemBytes() {
  return (4 * Tile<kHD>::kFloats + kRows * kScorePitch + 2 * kRows) *
         static_cast<int>(sizeof(float));
}

template <int kHD, class T>
__global__ void __launch_bounds__(kBlockThreads, 1)
    AttentionGradQ(T* dq, const T* dout, const T* q, const T* k, const T* v, const T* lse,
                   const float* d_row, const T* bias, const uint8_t* mask, at::Geometry g) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* dos = qs + Tile<kHD>::kFloats;
  float* ks = dos + Tile<kHD>::kFloats;
  float* vs = ks + Tile<kHD>::kFloats;
  float* ds = vs + Tile<kHD>::kFloats;
  float* lse_s = ds + kRows * kScorePitch;
  float* d_s = lse_s + kRows;
  constexpr int kE = kHD / kTx;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kRows, h = blockIdx.y, b = blockIdx.z;
  const int64_t kvh = at::KvHead(g, h);
  const int rows = Clamp(kRows, g.sq - i0);
  LoadRows<kHD>(qs, q + at::QOffset(g, b, h, i0), g.d, rows, static_cast<int>(g.d));
  LoadRows<kHD>(dos, dout + at::OOffset(g, b, h, i0), at::ORowPitch(g), rows,
                static_cast<int>(g.dv));
  LoadRowStats(lse_s, d_s, lse, d_row, g, b, h, i0, rows);
  float dqa[kRowsPerThread][kE];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int e = 0; e < kE; ++e) dqa[i][e] = 0.f;
  const int64_t key_end = at::KeyEnd(g, i0, rows);
  for (int64_t j0 = at::KeyBegin(g, i0); j0 < key_end; j0 += kCols) {
    const int keys = Clamp(kCols, key_end - j0);
    __syncthreads();
    LoadKeys<kHD>(ks, k, g, b, kvh, j0, keys);
    LoadRows<kHD>(vs, v + at::VOffset(g, b, kvh, j0), g.dv, keys, static_cast<int>(g.dv));
    __syncthreads();
    GradTile<kHD>(nullptr, ds, qs, dos, ks, vs, lse_s, d_s, bias, mask, g, b, h, i0, rows, j0,
                  keys);
    __syncthreads();
    AccumulateProducts<kHD>(dqa, ds, kScorePitch, 1, ks, keys);  // dQ[r] += Σ_c dS[r][c] K[c]
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = ty + kTy * i;
    if (r >= rows) continue;
#pragma unroll
    for (int e = 0; e < kE; ++e)
      if (tx + kTx * e < g.d)
        at::Store(dq + at::QOffset(g, b, h, i0 + r) + tx + kTx * e, g.scale * dqa[i][e]);
  }
}

// ------------------------------ host ------------------------------

std::string TypeShape(const Tensor& t) {
  return std::string(DTypeName(t.dtype())) + ShapeToString(t.shape());
}

Status Require(const Node& node, const Tensor* t, const char* what, DType dtype,
               const Shape& shape) {
  if (!t) return Fail(node, std::string(what) + " is missing");
  if (t->dtype() == dtype && t->shape() == shape) return Status::Ok();
  return Fail(node, std::string(what) + " is " + TypeShape(*t) + ", expected " +
                        std::string(DTypeName(dtype)) + ShapeToString(shape));
}

const Tensor* Optional(std::span<const Tensor* const> in, size_t i) {
  return in.size() > i ? in[i] : nullptr;
}

// Checks Q, K, V, the bias and the mask (inputs q.. and extra, extra + 1) against each other,
// the attributes and the kernels' limits; the geometry on success.
StatusOr<at::Geometry> GeometryOf(const Node& node, std::span<const Tensor* const> in, size_t q,
                                  size_t extra, const CudaKernelContext& ctx) {
  at::Geometry g;
  g.kt = node.GetInt("k_transposed", 1) == 1;
  g.o_transposed = node.GetInt("o_transposed", 0) == 1;
  g.causal = node.GetInt("causal", 0) == 1;
  g.mask_keep = node.GetInt("mask_keep", 0) == 1;
  g.window = node.GetInt("window", 0);
  g.softcap = node.GetFloat("softcap", 0.f);
  if (g.window < 0 || (g.window > 0 && !g.causal))
    return Fail(node,
                "window " + std::to_string(g.window) + " must be 0 or positive with causal=1");
  if (!(g.softcap >= 0.f)) return Fail(node, "softcap must be 0 (none) or positive");
  if (!node.attrs.count("scale")) return Fail(node, "the scale attribute is required");
  g.scale = node.GetFloat("scale", 1.f);
  g.mask_value = node.GetFloat("mask_value", -INFINITY);
  const float ratio = node.GetFloat("dropout_ratio", 0.f);
  if (!(ratio >= 0.f && ratio < 1.f))
    return Fail(node, "dropout_ratio " + std::to_string(ratio) + " is outside [0, 1)");
  g.dropout = ctx.base.training ? ratio : 0.f;
  g.seed = ctx.base.seed;
  g.node_key = ctx.base.node_key;
  const Tensor* Q = Optional(in, q);
  const Tensor* K = Optional(in, q + 1);
  const Tensor* V = Optional(in, q + 2);
  if (!Q || !K || !V) return Fail(node, "Q, K and V are required");
  if (Q->dtype() != DType::kFloat32)
    return Fail(node, "the cuda kernel does not support element type " +
                          std::string(DTypeName(Q->dtype())) + " (f32 only)");
  if (K->dtype() != Q->dtype() || V->dtype() != Q->dtype())
    return Fail(node, "Q, K and V must have one element type, got " + TypeShape(*Q) + ", " +
                          TypeShape(*K) + ", " + TypeShape(*V));
  const Tensor* bias = Optional(in, extra);
  const Tensor* mask = Optional(in, extra + 1);
  if (bias && bias->dtype() != Q->dtype())
    return Fail(node, "bias " + TypeShape(*bias) + " must have Q's element type " +
                          std::string(DTypeName(Q->dtype())));
  if (mask && mask->dtype() != DType::kBool)
    return Fail(node, "mask " + TypeShape(*mask) + " must be bool");
  if (std::string e = at::GeometryFromShapes(Q->shape(), K->shape(), V->shape(),
                                             bias ? &bias->shape() : nullptr,
                                             mask ? &mask->shape() : nullptr, &g);
      !e.empty())
    return Fail(node, e);
  if (g.d > at::kMaxHeadDim || g.dv > at::kMaxHeadDim)
    return Fail(node, "head dimensions D=" + std::to_string(g.d) + ", Dv=" + std::to_string(g.dv) +
                          " exceed " + std::to_string(at::kMaxHeadDim) +
                          ", the largest the cuda attention kernels take");
  if (g.hq > 65535 || g.hkv > 65535 || g.b > 65535 || (g.sq + kRows - 1) / kRows > INT_MAX ||
      (g.sk + kCols - 1) / kCols > INT_MAX)
    return Fail(node, "Q " + ShapeToString(Q->shape()) + " / K " + ShapeToString(K->shape()) +
                          " exceed the cuda kernels' grid (batch and heads <= 65535)");
  return g;
}

int HeadDimBucket(const at::Geometry& g) { return std::max(g.d, g.dv) <= 64 ? 64 : 128; }

template <class F>
Status SetSmem(const Node& node, F* kernel, int bytes) {
  FOUNDRY_CUDA_CHECK(
      node, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return Status::Ok();
}

template <int kHD, class T>
Status LaunchForward(const Node& node, const at::Geometry& g, T* o, T* lse, const T* q, const T* k,
                     const T* v, const T* bias, const uint8_t* mask, cudaStream_t stream) {
  constexpr int smem = ForwardSmemBytes<kHD>();
  RETURN_IF_ERROR(SetSmem(node, AttentionForward<kHD, T>, smem));
  const dim3 grid(static_cast<unsigned>((g.sq + kRows - 1) / kRows), static_cast<unsigned>(g.hq),
                  static_cast<unsigned>(g.b));
  AttentionForward<kHD, T><<<grid, dim3(kTx, kTy), smem, stream>>>(o, lse, q, k, v, bias, mask, g);
  FOUNDRY_CUDA_LAUNCHED(node, "AttentionForward");
  return Status::Ok();
}

// Attention (Q, K, V[, bias][, mask]) -> (O, LSE).
Status AttentionKernel(const Node& node, std::span<const Tensor* const> in,
                       std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(at::Geometry g, GeometryOf(node, in, 0, 3, ctx));
  const DType t = in[0]->dtype();
  RETURN_IF_ERROR(Require(node, out.size() > 0 ? out[0] : nullptr, "O", t, at::OShape(g)));
  RETURN_IF_ERROR(
      Require(node, out.size() > 1 ? out[1] : nullptr, "LSE", t, Shape{g.b, g.hq, g.sq}));
  if (g.b * g.hq * g.sq == 0) return Status::Ok();
  const Tensor* bias = Optional(in, 3);
  const Tensor* mask = Optional(in, 4);
  const float* bp = bias ? bias->data<float>() : nullptr;
  const uint8_t* mp = mask ? static_cast<const uint8_t*>(mask->raw()) : nullptr;
  auto launch = HeadDimBucket(g) == 64 ? &LaunchForward<64, float> : &LaunchForward<128, float>;
  return launch(node, g, out[0]->data<float>(), out[1]->data<float>(), in[0]->data<float>(),
                in[1]->data<float>(), in[2]->data<float>(), bp, mp, StreamOf(ctx));
}

// The backward's workspace: D_i, one float per query row.
int64_t RowDotBytes(const at::Geometry& g) {
  return g.b * g.hq * g.sq * static_cast<int64_t>(sizeof(float));
}

template <int kHD, class T>
Status LaunchGrad(const Node& node, const at::Geometry& g, T* dq, T* dk, T* dv, const T* dout,
                  const T* q, const T* k, const T* v, const T* lse, const float* d_row,
                  const T* bias, const uint8_t* mask, cudaStream_t stream) {
  if (g.b * g.hkv * g.sk > 0) {
    constexpr int smem = GradKvSmemBytes<kHD>();
    RETURN_IF_ERROR(SetSmem(node, AttentionGradKv<kHD, T>, smem));
    const dim3 grid(static_cast<unsigned>((g.sk + kCols - 1) / kCols), static_cast<unsigned>(g.hkv),
                    static_cast<unsigned>(g.b));
    AttentionGradKv<kHD, T>
        <<<grid, dim3(kTx, kTy), smem, stream>>>(dk, dv, dout, q, k, v, lse, d_row, bias, mask, g);
    FOUNDRY_CUDA_LAUNCHED(node, "AttentionGradKv");
  }
  if (g.b * g.hq * g.sq > 0) {
    constexpr int smem = GradQSmemBytes<kHD>();
    RETURN_IF_ERROR(SetSmem(node, AttentionGradQ<kHD, T>, smem));
    const dim3 grid(static_cast<unsigned>((g.sq + kRows - 1) / kRows), static_cast<unsigned>(g.hq),
                    static_cast<unsigned>(g.b));
    AttentionGradQ<kHD, T>
        <<<grid, dim3(kTx, kTy), smem, stream>>>(dq, dout, q, k, v, lse, d_row, bias, mask, g);
    FOUNDRY_CUDA_LAUNCHED(node, "AttentionGradQ");
  }
  return Status::Ok();
}

// AttentionGrad (dO, Q, K, V, O, LSE[, bias][, mask]) -> (dQ, dK, dV).
Status AttentionGradKernel(const Node& node, std::span<const Tensor* const> in,
                           std::span<Tensor* const> out, const CudaKernelContext& ctx) {
  ASSIGN_OR_RETURN(at::Geometry g, GeometryOf(node, in, 1, 6, ctx));
  const DType t = in[1]->dtype();
  const Shape o_shape = at::OShape(g);
  RETURN_IF_ERROR(Require(node, Optional(in, 0), "dO", t, o_shape));
  RETURN_IF_ERROR(Require(node, Optional(in, 4), "O", t, o_shape));
  RETURN_IF_ERROR(Require(node, Optional(in, 5), "LSE", t, Shape{g.b, g.hq, g.sq}));
  const char* names[3] = {"dQ", "dK", "dV"};
  for (size_t i = 0; i < 3; ++i)
    RETURN_IF_ERROR(
        Require(node, out.size() > i ? out[i] : nullptr, names[i], t, in[1 + i]->shape()));
  if (static_cast<int64_t>(ctx.base.workspace.size()) < RowDotBytes(g))
    return Fail(node, "the cuda kernel needs " + std::to_string(RowDotBytes(g)) +
                          " bytes of workspace but was given " +
                          std::to_string(ctx.base.workspace.size()));
  float* d_row = reinterpret_cast<float*>(ctx.base.workspace.data());
  const cudaStream_t stream = StreamOf(ctx);
  if (g.b * g.hq * g.sq > 0) {
    constexpr int kRowThreads = 256;  // 8 rows (warps) per block
    AttentionRowDot<float>
        <<<cuda::BlocksFor(g.b * g.hq * g.sq * 32, kRowThreads), kRowThreads, 0, stream>>>(
            d_row, in[0]->data<float>(), in[4]->data<float>(), g);
    FOUNDRY_CUDA_LAUNCHED(node, "AttentionRowDot");
  }
  const Tensor* bias = Optional(in, 6);
  const Tensor* mask = Optional(in, 7);
  const float* bp = bias ? bias->data<float>() : nullptr;
  const uint8_t* mp = mask ? static_cast<const uint8_t*>(mask->raw()) : nullptr;
  auto launch = HeadDimBucket(g) == 64 ? &LaunchGrad<64, float> : &LaunchGrad<128, float>;
  return launch(node, g, out[0]->data<float>(), out[1]->data<float>(), out[2]->data<float>(),
                in[0]->data<float>(), in[1]->data<float>(), in[2]->data<float>(),
                in[3]->data<float>(), in[5]->data<float>(), d_row, bp, mp, stream);
}

// AttentionGrad's D_i: one float per row of Q ([B, Hq, Sq, D], input 1).
int64_t AttentionGradWorkspace(const Node&, std::span<const OperandType> in,
                               std::span<const OperandType>) {
  if (in.size() < 2 || !in[1].shape || in[1].shape->size() != 4) return 0;
  const Shape& q = *in[1].shape;
  return q[0] * q[1] * q[2] * static_cast<int64_t>(sizeof(float));
}

}  // namespace

void RegisterCudaAttentionKernels(CudaKernelTable& table) {
  table.Add(kFoundry, "Attention", AttentionKernel);
  table.Add(kFoundry, "AttentionGrad", AttentionGradKernel);
}

void RegisterCudaAttentionWorkspaces(CudaWorkspaceTable& table) {
  table.Add(kFoundry, "AttentionGrad", AttentionGradWorkspace);
}

}  // namespace foundry
