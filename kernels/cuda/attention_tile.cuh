// The arithmetic of the CUDA attention kernels (kernels/cuda/attention.cu), written once for the
// host and the device: the operands' geometry and index maps (Q, K in either layout, V, O in
// either layout, the broadcast bias and mask), which tiles a causal kernel may skip, the score of
// one (query, key) pair, the online-softmax step, and the backward's per-element terms.
// tests/kernels/cuda/attention_host_test.cc replays the kernels' tiling on the host with these
// functions against a plain double reference of the op (contract: compiler/ops/attention.cc).
//
// Element types: the kernels compute in float and touch memory only through Load / Store below,
// so a bf16 variant adds an overload pair and an instantiation. Plain C++ for g++ (no CUDA
// headers); FOUNDRY_HD marks what the kernels call.
#pragma once

#include <math.h>

#include <cstdint>
#include <string>

#include "base/tensor.h"
#include "kernels/cpu/philox.h"
#include "kernels/cuda/hd.h"

namespace foundry::attention_tile {

// Tiles: kRows queries x kCols keys, a block of kTx x kTy threads; thread (tx, ty) owns query rows
// ty + kTy·i (i < kRowsPerThread) and keys tx + kTx·j (j < kColsPerThread) of a score tile, and
// columns tx + kTx·k of a [rows, head dim] accumulator. Head dims up to kMaxHeadDim.
inline constexpr int kRows = 64;
inline constexpr int kCols = 64;
inline constexpr int kTx = 16;
inline constexpr int kTy = 16;
inline constexpr int kRowsPerThread = kRows / kTy;
inline constexpr int kColsPerThread = kCols / kTx;
inline constexpr int kMaxHeadDim = 128;
static_assert(kRows == kCols, "the kernels load Q, dO, K and V tiles with one loader");

// Everything the kernels know about one node, passed by value.
struct Geometry {
  int64_t b = 0, hq = 0, hkv = 1, sq = 0, sk = 0, d = 0, dv = 0;
  int64_t rep = 1;            // query heads per key/value head (Hq / Hkv)
  bool kt = true;             // K is [B, Hkv, D, Sk] (else [B, Hkv, Sk, D])
  bool o_transposed = false;  // O and dO are [B, Sq, Hq, Dv] (else [B, Hq, Sq, Dv])
  bool causal = false;
  int64_t window = 0;   // > 0 (with causal): key j <= i - window is masked too
  float softcap = 0.f;  // > 0: the scaled product becomes softcap·tanh(product / softcap)
  bool mask_keep = false;
  float scale = 1.f;
  float mask_value = -INFINITY;
  bool has_bias = false, has_mask = false;
  int64_t bias_stride[4] = {0, 0, 0, 0};  // element strides along [B, Hq, Sq, Sk]; 0 = broadcast
  int64_t mask_stride[4] = {0, 0, 0, 0};
  float dropout = 0.f;  // applied ratio (0 outside training)
  uint64_t seed = 0, node_key = 0;
};

// ------------------------------ element access ------------------------------

FOUNDRY_HD inline float Load(const float* p) { return *p; }
FOUNDRY_HD inline void Store(float* p, float v) { *p = v; }

FOUNDRY_HD inline int64_t QOffset(const Geometry& g, int64_t b, int64_t h, int64_t i) {
  return ((b * g.hq + h) * g.sq + i) * g.d;
}
// Element (key j, dim e) of key/value head kvh.
FOUNDRY_HD inline int64_t KOffset(const Geometry& g, int64_t b, int64_t kvh, int64_t j, int64_t e) {
  return g.kt ? ((b * g.hkv + kvh) * g.d + e) * g.sk + j : ((b * g.hkv + kvh) * g.sk + j) * g.d + e;
}
FOUNDRY_HD inline int64_t VOffset(const Geometry& g, int64_t b, int64_t kvh, int64_t j) {
  return ((b * g.hkv + kvh) * g.sk + j) * g.dv;
}
// Row i of head h of O (and dO), and the distance between consecutive rows of one head.
FOUNDRY_HD inline int64_t OOffset(const Geometry& g, int64_t b, int64_t h, int64_t i) {
  return g.o_transposed ? ((b * g.sq + i) * g.hq + h) * g.dv : ((b * g.hq + h) * g.sq + i) * g.dv;
}
FOUNDRY_HD inline int64_t ORowPitch(const Geometry& g) {
  return g.o_transposed ? g.hq * g.dv : g.dv;
}
// LSE and the backward's D_i = dO_i · O_i: [B, Hq, Sq].
FOUNDRY_HD inline int64_t RowIndex(const Geometry& g, int64_t b, int64_t h, int64_t i) {
  return (b * g.hq + h) * g.sq + i;
}
FOUNDRY_HD inline int64_t KvHead(const Geometry& g, int64_t h) { return h / g.rep; }
FOUNDRY_HD inline int64_t BroadcastIndex(const int64_t* stride, int64_t b, int64_t h, int64_t i,
                                         int64_t j) {
  return b * stride[0] + h * stride[1] + i * stride[2] + j * stride[3];
}

// ------------------------------ causal tile skipping ------------------------------

// A causal kernel skips the tiles where every key is after every query only when that is exact:
// a masked score is -inf and adds nothing. With a finite mask_value those scores still count.
FOUNDRY_HD inline bool SkipsCausalTiles(const Geometry& g) {
  return g.causal && g.mask_value == -INFINITY;
}
// Keys [begin, end) that the query tile [i0, i0 + rows) reads: end after its last query, begin
// (a multiple of kCols) at the tile holding key i0 - window + 1, with a window.
FOUNDRY_HD inline int64_t KeyEnd(const Geometry& g, int64_t i0, int64_t rows) {
  if (!SkipsCausalTiles(g)) return g.sk;
  return i0 + rows < g.sk ? i0 + rows : g.sk;
}
FOUNDRY_HD inline int64_t KeyBegin(const Geometry& g, int64_t i0) {
  if (!SkipsCausalTiles(g) || g.window <= 0) return 0;
  const int64_t j = i0 - g.window + 1;
  return j <= 0 ? 0 : (j < g.sk ? j : g.sk) / kCols * kCols;
}
// The first query tile (a multiple of kRows) that the key tile starting at j0 contributes to, and
// the query after the last one (with a window, query j0 + keys - 1 + window - 1 is the last).
FOUNDRY_HD inline int64_t FirstQueryTile(const Geometry& g, int64_t j0) {
  if (!SkipsCausalTiles(g)) return 0;
  const int64_t i = j0 < g.sq ? j0 : g.sq;
  return i / kRows * kRows;
}
FOUNDRY_HD inline int64_t QueryEnd(const Geometry& g, int64_t j0, int64_t keys) {
  if (!SkipsCausalTiles(g) || g.window <= 0) return g.sq;
  const int64_t end = j0 + keys - 1 + g.window;
  return end < g.sq ? end : g.sq;
}

// ------------------------------ scores ------------------------------

// Whether the causal rule, the window or the mask masks (query i, key j).
FOUNDRY_HD inline bool Masked(const Geometry& g, const uint8_t* mask, int64_t b, int64_t h,
                              int64_t i, int64_t j) {
  if (g.causal && j > i) return true;
  if (g.window > 0 && j <= i - g.window) return true;
  return g.has_mask && (mask[BroadcastIndex(g.mask_stride, b, h, i, j)] != 0) != g.mask_keep;
}

// s_ij from dot = Σ_e Q[i,e] K[j,e]: scaled, soft-capped, plus the bias, replaced by mask_value
// when the causal rule, the window or the mask masks it.
template <class T>
FOUNDRY_HD inline float Score(const Geometry& g, float dot, const T* bias, const uint8_t* mask,
                              int64_t b, int64_t h, int64_t i, int64_t j) {
  float s = g.scale * dot;
  if (g.softcap > 0.f) s = g.softcap * tanhf(s / g.softcap);
  if (g.has_bias) s += Load(bias + BroadcastIndex(g.bias_stride, b, h, i, j));
  return Masked(g, mask, b, h, i, j) ? g.mask_value : s;
}

// The dropout's factor z of probability (b, h, i, j): 0 (dropped) or 1 / (1 - ratio), from the
// Philox draw of element ((b·Hq + h)·Sq + i)·Sk + j (the CPU kernel's and Dropout's draw).
FOUNDRY_HD inline float DropoutFactor(const Geometry& g, int64_t b, int64_t h, int64_t i,
                                      int64_t j) {
  if (g.dropout == 0.f) return 1.f;
  const uint64_t e = static_cast<uint64_t>(((b * g.hq + h) * g.sq + i) * g.sk + j);
  const bool keep = PhiloxBitsToUniform(PhiloxRandom(g.seed, g.node_key, e)) >= g.dropout;
  return keep ? 1.f / (1.f - g.dropout) : 0.f;
}

// ------------------------------ online softmax (forward) ------------------------------

// Moves a row's running maximum m to max(m, tile_max); returns the factor that rescales its
// running sum and output accumulator. While every score is -inf, m stays -inf and the factor is 1
// (nothing has been added), so no -inf - -inf NaN appears.
FOUNDRY_HD inline float Rescale(float* m, float tile_max) {
  const float m_new = *m > tile_max ? *m : tile_max;
  const float alpha = m_new == -INFINITY ? 1.f : expf(*m - m_new);
  *m = m_new;
  return alpha;
}
// exp(s - m) of a score against the row's running maximum; 0 while the row has no finite score.
FOUNDRY_HD inline float Prob(float s, float m) { return m == -INFINITY ? 0.f : expf(s - m); }
// A row with no finite score has l = 0: O = 0 / 0 = NaN (as Softmax gives) and LSE = -inf.
FOUNDRY_HD inline float Output(float acc, float l) { return acc / l; }
FOUNDRY_HD inline float Lse(float m, float l) { return m + logf(l); }

// ------------------------------ backward ------------------------------

// d s_ij / d (scale·dot): 1 - tanh²(scale·dot / softcap) with a softcap, else 1.
FOUNDRY_HD inline float SoftcapSlope(const Geometry& g, float dot) {
  if (g.softcap <= 0.f) return 1.f;
  const float t = tanhf(g.scale * dot / g.softcap);
  return 1.f - t * t;
}

// P_ij = exp(s_ij - LSE_i), literally: a row whose LSE is -inf gives NaN, as in the forward.
FOUNDRY_HD inline float GradProb(float s, float lse) { return expf(s - lse); }
// dS_ij = P_ij (dP_ij - D_i), dP_ij = z_ij (dO_i · V_j) with the dropout's factor z.
FOUNDRY_HD inline float GradScore(float p, float dov, float z, float d_row) {
  return p * (dov * z - d_row);
}
// A masked score is the constant mask_value: no gradient flows back through it. With a finite
// mask_value its probability need not be 0 (a row masked everywhere); with -inf it is 0 (or NaN
// in such a row, as Softmax gives), and dS is left as computed.
FOUNDRY_HD inline bool DropsGradient(const Geometry& g, const uint8_t* mask, int64_t b, int64_t h,
                                     int64_t i, int64_t j) {
  return g.mask_value != -INFINITY && Masked(g, mask, b, h, i, j);
}

// ------------------------------ host: geometry from shapes ------------------------------

// Element strides of an operand of shape `s` (rank <= 4) broadcast to `target`; "" or the reason.
inline std::string BroadcastStridesOf(const Shape& s, const int64_t* target, int64_t* stride) {
  if (s.size() > 4) return "has rank " + std::to_string(s.size()) + " > 4";
  const size_t off = 4 - s.size();
  int64_t step = 1;
  for (size_t k = 4; k-- > 0;) {
    stride[k] = 0;
    if (k < off) continue;
    const int64_t dim = s[k - off];
    if (dim != 1 && dim != target[k])
      return ShapeToString(s) + " does not broadcast to the scores " +
             ShapeToString(Shape{target[0], target[1], target[2], target[3]});
    stride[k] = dim == 1 ? 0 : step;
    step *= dim;
  }
  return "";
}

// Fills g's dimensions and broadcast strides from Q, K (in g.kt's layout), V and the optional
// bias and mask shapes; "" or what does not fit.
inline std::string GeometryFromShapes(const Shape& q, const Shape& k, const Shape& v,
                                      const Shape* bias, const Shape* mask, Geometry* g) {
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return "Q, K and V must have rank 4, got " + ShapeToString(q) + ", " + ShapeToString(k) + ", " +
           ShapeToString(v);
  g->b = q[0];
  g->hq = q[1];
  g->sq = q[2];
  g->d = q[3];
  g->hkv = k[1];
  g->sk = g->kt ? k[3] : k[2];
  g->dv = v[3];
  const int64_t kd = g->kt ? k[2] : k[3];
  if (k[0] != g->b || kd != g->d || v[0] != g->b || v[1] != g->hkv || v[2] != g->sk ||
      g->hkv <= 0 || g->hq % g->hkv != 0)
    return "Q " + ShapeToString(q) + ", K " + ShapeToString(k) + " and V " + ShapeToString(v) +
           " do not fit together (K is " +
           (g->kt ? "[batch, kv_heads, head_dim, key]" : "[batch, kv_heads, key, head_dim]") +
           ", V [batch, kv_heads, key, v_dim], query heads a multiple of kv_heads)";
  g->rep = g->hq / g->hkv;
  const int64_t target[4] = {g->b, g->hq, g->sq, g->sk};
  g->has_bias = bias != nullptr;
  if (bias)
    if (std::string e = BroadcastStridesOf(*bias, target, g->bias_stride); !e.empty())
      return "bias " + e;
  g->has_mask = mask != nullptr;
  if (mask)
    if (std::string e = BroadcastStridesOf(*mask, target, g->mask_stride); !e.empty())
      return "mask " + e;
  return "";
}

inline Shape OShape(const Geometry& g) {
  return g.o_transposed ? Shape{g.b, g.sq, g.hq, g.dv} : Shape{g.b, g.hq, g.sq, g.dv};
}

}  // namespace foundry::attention_tile
