// The CUDA attention kernels' arithmetic (kernels/cuda/attention_tile.cuh) run on the host: each
// kernel's tiling (64 x 64 tiles, the grid's units, the loops over key tiles, query heads and
// query tiles in the kernels' order, the causal skips, ragged last tiles) is replayed serially in
// float with the per-element functions the kernels call, and compared with the contract computed
// in double (attention_reference.h). Also: the shape checks and their messages, and the reference
// against the CPU kernel. Runs without a GPU (and the replay without nvcc: the header is plain
// C++ under g++). What this cannot catch (launch geometry, shared-memory races, the warp
// reductions' lanes) is attention_test.cc's job on a GPU.
//
// Tolerances: float sums of at most a few hundred terms of [-1, 1] values against double:
// atol 1e-5 + rtol 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/attention_tile.cuh"
#include "runtime/interpreter.h"
#include "tests/kernels/cuda/attention_reference.h"
#include "tests/support/test_util.h"
#ifdef FOUNDRY_HAVE_CUDA
#include "kernels/cuda/kernel.h"
#endif

namespace foundry {
namespace FOUNDRY_TEST_NS {

namespace at = attention_tile;
using attention_test::Case;
using attention_test::Cases;
using attention_test::Mismatch;
using attention_test::Reference;
using attention_test::Result;

constexpr double kAtol = 1e-5, kRtol = 1e-5;

// The kernels' operands on the host: pointers into the case's tensors and its geometry.
struct Operands {
  at::Geometry g;
  const float *q, *k, *v, *dout, *bias = nullptr;
  const uint8_t* mask = nullptr;
};

Operands OperandsOf(const Case& c, const std::map<std::string, Tensor>& in, uint64_t seed,
                    uint64_t key) {
  Operands op;
  op.g.kt = c.kt;
  op.g.o_transposed = c.o_transposed;
  op.g.causal = c.causal;
  op.g.mask_keep = c.mask_keep;
  op.g.scale = c.Scale();
  op.g.mask_value = c.mask_value;
  op.g.dropout = c.dropout;
  op.g.window = c.window;
  op.g.softcap = c.softcap;
  op.g.seed = seed;
  op.g.node_key = key;
  const std::string err =
      at::GeometryFromShapes(c.QShape(), c.KShape(), c.VShape(), c.bias.empty() ? nullptr : &c.bias,
                             c.mask.empty() ? nullptr : &c.mask, &op.g);
  EXPECT_EQ(err, "");
  op.q = in.at("q").data<float>();
  op.k = in.at("k").data<float>();
  op.v = in.at("v").data<float>();
  op.dout = in.at("dout").data<float>();
  if (in.count("bias")) op.bias = in.at("bias").data<float>();
  if (in.count("mask")) op.mask = static_cast<const uint8_t*>(in.at("mask").raw());
  return op;
}

// TileDots of the kernels: Σ_e a[e]·b[e] as one fmaf chain in e order (a, b at element strides).
float Dot(const float* a, int64_t sa, const float* b, int64_t sb, int64_t n) {
  float acc = 0.f;
  for (int64_t e = 0; e < n; ++e) acc = std::fma(a[e * sa], b[e * sb], acc);
  return acc;
}

// The kernels' row sum over one score-tile row: kTx per-thread partials over columns
// tx + kTx·j in j order, then the xor butterfly (lane 0's bits; every lane has the same).
float RowSum(const float* p) {
  float v[at::kTx];
  for (int tx = 0; tx < at::kTx; ++tx) {
    v[tx] = 0.f;
    for (int j = 0; j < at::kColsPerThread; ++j) v[tx] += p[tx + at::kTx * j];
  }
  for (int o = at::kTx / 2; o > 0; o /= 2) {
    float w[at::kTx];
    for (int t = 0; t < at::kTx; ++t) w[t] = v[t] + v[t ^ o];
    std::copy(w, w + at::kTx, v);
  }
  return v[0];
}

const float* KRow(const Operands& op, int64_t b, int64_t kvh, int64_t j, int64_t* stride) {
  *stride = op.g.kt ? op.g.sk : 1;
  return op.k + at::KOffset(op.g, b, kvh, j, 0);
}

// AttentionForward, block by block: O ([B, Hq, Sq, Dv] or transposed) and LSE.
void ReplayForward(const Operands& op, std::vector<float>* o, std::vector<float>* lse) {
  const at::Geometry& g = op.g;
  o->assign(g.b * g.hq * g.sq * g.dv, NAN);
  lse->assign(g.b * g.hq * g.sq, NAN);
  std::vector<float> s(at::kRows * at::kCols), acc(at::kRows * g.dv);
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t h = 0; h < g.hq; ++h)
      for (int64_t i0 = 0; i0 < g.sq; i0 += at::kRows) {
        const int64_t rows = std::min<int64_t>(at::kRows, g.sq - i0), kvh = at::KvHead(g, h);
        std::vector<float> m(at::kRows, -INFINITY), l(at::kRows, 0.f);
        std::fill(acc.begin(), acc.end(), 0.f);
        const int64_t key_end = at::KeyEnd(g, i0, rows);
        for (int64_t j0 = at::KeyBegin(g, i0); j0 < key_end; j0 += at::kCols) {
          const int64_t keys = std::min<int64_t>(at::kCols, key_end - j0);
          for (int64_t r = 0; r < at::kRows; ++r) {
            float* sr = s.data() + r * at::kCols;
            float tile_max = -INFINITY;
            for (int64_t c = 0; c < at::kCols; ++c) {
              sr[c] = -INFINITY;
              if (r < rows && c < keys) {
                int64_t ks;
                const float* kr = KRow(op, b, kvh, j0 + c, &ks);
                const float dot = Dot(op.q + at::QOffset(g, b, h, i0 + r), 1, kr, ks, g.d);
                sr[c] = at::Score(g, dot, op.bias, op.mask, b, h, i0 + r, j0 + c);
              }
              tile_max = std::max(tile_max, sr[c]);
            }
            const float alpha = at::Rescale(&m[r], tile_max);
            for (int64_t c = 0; c < at::kCols; ++c) sr[c] = at::Prob(sr[c], m[r]);
            l[r] = l[r] * alpha + RowSum(sr);
            for (int64_t e = 0; e < g.dv; ++e) acc[r * g.dv + e] *= alpha;
            for (int64_t c = 0; c < at::kCols; ++c)  // P∘z, as the kernel stores it
              sr[c] *= r < rows && c < keys ? at::DropoutFactor(g, b, h, i0 + r, j0 + c) : 0.f;
          }
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < keys; ++c)
              for (int64_t e = 0; e < g.dv; ++e)
                acc[r * g.dv + e] =
                    std::fma(s[r * at::kCols + c], op.v[at::VOffset(g, b, kvh, j0 + c) + e],
                             acc[r * g.dv + e]);
        }
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t e = 0; e < g.dv; ++e)
            (*o)[at::OOffset(g, b, h, i0 + r) + e] = at::Output(acc[r * g.dv + e], l[r]);
          (*lse)[at::RowIndex(g, b, h, i0 + r)] = at::Lse(m[r], l[r]);
        }
      }
}

// P∘z and dS of one (query row, key) pair, as GradTile computes them.
void GradPair(const Operands& op, const float* o_lse, const float* d_row, int64_t b, int64_t h,
              int64_t i, int64_t j, float* pz, float* ds) {
  const at::Geometry& g = op.g;
  const int64_t kvh = at::KvHead(g, h);
  int64_t ks;
  const float* kr = KRow(op, b, kvh, j, &ks);
  const float dot = Dot(op.q + at::QOffset(g, b, h, i), 1, kr, ks, g.d);
  const float dov =
      Dot(op.dout + at::OOffset(g, b, h, i), 1, op.v + at::VOffset(g, b, kvh, j), 1, g.dv);
  const float p = at::GradProb(at::Score(g, dot, op.bias, op.mask, b, h, i, j),
                               o_lse[at::RowIndex(g, b, h, i)]);
  const float z = at::DropoutFactor(g, b, h, i, j);
  *pz = p * z;
  *ds = at::DropsGradient(g, op.mask, b, h, i, j)
            ? 0.f
            : at::GradScore(p, dov, z, d_row[at::RowIndex(g, b, h, i)]) * at::SoftcapSlope(g, dot);
}

// AttentionRowDot, AttentionGradKv and AttentionGradQ, block by block.
void ReplayBackward(const Operands& op, const std::vector<float>& o, const std::vector<float>& lse,
                    std::vector<float>* dq, std::vector<float>* dk, std::vector<float>* dv) {
  const at::Geometry& g = op.g;
  std::vector<float> d_row(g.b * g.hq * g.sq);
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t h = 0; h < g.hq; ++h)
      for (int64_t i = 0; i < g.sq; ++i) {
        const int64_t off = at::OOffset(g, b, h, i);
        d_row[at::RowIndex(g, b, h, i)] = Dot(op.dout + off, 1, o.data() + off, 1, g.dv);
      }
  dk->assign(g.b * g.hkv * g.sk * g.d, NAN);
  dv->assign(g.b * g.hkv * g.sk * g.dv, NAN);
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t kvh = 0; kvh < g.hkv; ++kvh)
      for (int64_t j0 = 0; j0 < g.sk; j0 += at::kCols) {
        const int64_t keys = std::min<int64_t>(at::kCols, g.sk - j0);
        std::vector<float> dka(keys * g.d, 0.f), dva(keys * g.dv, 0.f);
        for (int64_t hr = 0; hr < g.rep; ++hr) {
          const int64_t h = kvh * g.rep + hr;
          for (int64_t i0 = at::FirstQueryTile(g, j0); i0 < at::QueryEnd(g, j0, keys);
               i0 += at::kRows) {
            const int64_t rows = std::min<int64_t>(at::kRows, g.sq - i0);
            for (int64_t c = 0; c < keys; ++c)
              for (int64_t r = 0; r < rows; ++r) {
                float pz, ds;
                GradPair(op, lse.data(), d_row.data(), b, h, i0 + r, j0 + c, &pz, &ds);
                const float* dor = op.dout + at::OOffset(g, b, h, i0 + r);
                const float* qr = op.q + at::QOffset(g, b, h, i0 + r);
                for (int64_t e = 0; e < g.dv; ++e)
                  dva[c * g.dv + e] = std::fma(pz, dor[e], dva[c * g.dv + e]);
                for (int64_t e = 0; e < g.d; ++e)
                  dka[c * g.d + e] = std::fma(ds, qr[e], dka[c * g.d + e]);
              }
          }
        }
        for (int64_t c = 0; c < keys; ++c) {
          for (int64_t e = 0; e < g.dv; ++e)
            (*dv)[at::VOffset(g, b, kvh, j0 + c) + e] = dva[c * g.dv + e];
          for (int64_t e = 0; e < g.d; ++e)
            (*dk)[at::KOffset(g, b, kvh, j0 + c, e)] = g.scale * dka[c * g.d + e];
        }
      }
  dq->assign(g.b * g.hq * g.sq * g.d, NAN);
  for (int64_t b = 0; b < g.b; ++b)
    for (int64_t h = 0; h < g.hq; ++h)
      for (int64_t i0 = 0; i0 < g.sq; i0 += at::kRows) {
        const int64_t rows = std::min<int64_t>(at::kRows, g.sq - i0), kvh = at::KvHead(g, h);
        std::vector<float> dqa(rows * g.d, 0.f);
        const int64_t key_end = at::KeyEnd(g, i0, rows);
        for (int64_t j0 = at::KeyBegin(g, i0); j0 < key_end; j0 += at::kCols) {
          const int64_t keys = std::min<int64_t>(at::kCols, key_end - j0);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < keys; ++c) {
              float pz, ds;
              GradPair(op, lse.data(), d_row.data(), b, h, i0 + r, j0 + c, &pz, &ds);
              int64_t ks;
              const float* kr = KRow(op, b, kvh, j0 + c, &ks);
              for (int64_t e = 0; e < g.d; ++e)
                dqa[r * g.d + e] = std::fma(ds, kr[e * ks], dqa[r * g.d + e]);
            }
        }
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t e = 0; e < g.d; ++e)
            (*dq)[at::QOffset(g, b, h, i0 + r) + e] = g.scale * dqa[r * g.d + e];
      }
}

// Seed and node key as RunSingleNode / RunSingleNodeOnCuda give them (seed 0, NodeKey).
uint64_t KeyOf(const Case& c) { return NodeKey(attention_test::ForwardNode(c)); }

TEST(AttentionHostTest, ReplayMatchesTheContractOnEveryCase) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const auto in = attention_test::Inputs(c);
    const Operands op = OperandsOf(c, in, 0, KeyOf(c));
    Reference ref(c, in, 0, KeyOf(c));
    Result want;
    ref.Forward(&want);
    std::vector<float> o, lse;
    ReplayForward(op, &o, &lse);
    EXPECT_EQ(Mismatch("O", o.data(), want.o, kAtol, kRtol), "");
    EXPECT_EQ(Mismatch("LSE", lse.data(), want.lse, kAtol, kRtol), "");
    // The backward of both from the same float O and LSE (the replay's forward).
    Tensor o_t = Tensor::FromVector(DType::kFloat32, c.OShape(), o);
    Tensor lse_t = Tensor::FromVector(DType::kFloat32, c.LseShape(), lse);
    ref.Backward(o_t, lse_t, &want);
    std::vector<float> dq, dk, dv;
    ReplayBackward(op, o, lse, &dq, &dk, &dv);
    EXPECT_EQ(Mismatch("dQ", dq.data(), want.dq, kAtol, kRtol), "");
    EXPECT_EQ(Mismatch("dK", dk.data(), want.dk, kAtol, kRtol), "");
    EXPECT_EQ(Mismatch("dV", dv.data(), want.dv, kAtol, kRtol), "");
  }
}

// A row whose every key is masked: O is NaN and LSE -inf (as Softmax gives); its neighbours are
// finite. (The replay test compares the whole case, backward included, with the reference.)
TEST(AttentionHostTest, FullyMaskedRowGivesNanAndMinusInfinity) {
  const Case c = attention_test::MaskedRowCase();
  const auto in = attention_test::Inputs(c);
  std::vector<float> o, lse;
  ReplayForward(OperandsOf(c, in, 0, 0), &o, &lse);
  EXPECT_TRUE(std::isnan(o[3 * c.dv]));
  EXPECT_EQ(lse[3], -INFINITY);
  EXPECT_TRUE(std::isfinite(o[4 * c.dv]));
}

// Which tiles a causal kernel skips: only above the diagonal, and only with a -inf fill.
TEST(AttentionHostTest, CausalTileSkipping) {
  at::Geometry g;
  g.sq = 150;
  g.sk = 200;
  EXPECT_EQ(at::KeyEnd(g, 64, 64), 200);  // not causal: every key
  EXPECT_EQ(at::FirstQueryTile(g, 128), 0);
  g.causal = true;
  EXPECT_EQ(at::KeyEnd(g, 0, 64), 64);     // queries 0..63 see keys 0..63
  EXPECT_EQ(at::KeyEnd(g, 128, 22), 150);  // the ragged last tile: queries 128..149
  EXPECT_EQ(at::FirstQueryTile(g, 64), 64);
  EXPECT_EQ(at::FirstQueryTile(g, 192), 128);  // keys past every query: the last tile, all masked
  EXPECT_EQ(at::KeyBegin(g, 128), 0);          // no window: from the first key
  EXPECT_EQ(at::QueryEnd(g, 64, 64), 150);
  g.window = 40;                           // query i sees keys i - 39 .. i
  EXPECT_EQ(at::KeyBegin(g, 64), 0);       // key 25's tile
  EXPECT_EQ(at::KeyBegin(g, 128), 64);     // key 89's tile
  EXPECT_EQ(at::QueryEnd(g, 0, 64), 103);  // key 63 is seen by queries 63 .. 102
  EXPECT_EQ(at::QueryEnd(g, 128, 64), 150);
  g.mask_value = -1e9f;  // masked scores still count: nothing skipped
  EXPECT_EQ(at::KeyEnd(g, 0, 64), 200);
  EXPECT_EQ(at::FirstQueryTile(g, 192), 0);
  EXPECT_EQ(at::KeyBegin(g, 128), 0);
  EXPECT_EQ(at::QueryEnd(g, 0, 64), 150);
}

TEST(AttentionHostTest, BroadcastStrides) {
  const int64_t target[4] = {2, 4, 5, 7};
  int64_t st[4];
  EXPECT_EQ(at::BroadcastStridesOf({1, 4, 1, 7}, target, st), "");  // ALiBi
  EXPECT_EQ((std::vector<int64_t>(st, st + 4)), (std::vector<int64_t>{0, 7, 0, 1}));
  EXPECT_EQ(at::BroadcastStridesOf({2, 1, 1, 7}, target, st), "");  // padding
  EXPECT_EQ((std::vector<int64_t>(st, st + 4)), (std::vector<int64_t>{7, 0, 0, 1}));
  EXPECT_EQ(at::BroadcastStridesOf({5, 7}, target, st), "");
  EXPECT_EQ((std::vector<int64_t>(st, st + 4)), (std::vector<int64_t>{0, 0, 7, 1}));
  EXPECT_EQ(at::BroadcastIndex(st, 1, 3, 4, 6), 34);
  EXPECT_EQ(at::BroadcastStridesOf({3, 7}, target, st),
            "[3,7] does not broadcast to the scores [2,4,5,7]");
  EXPECT_EQ(at::BroadcastStridesOf({1, 2, 4, 5, 7}, target, st), "has rank 5 > 4");
}

// The reference is the contract the CPU kernel implements too (a check of the reference).
TEST(AttentionHostTest, ReferenceAgreesWithTheCpuKernel) {
  for (const Case& c : Cases()) {
    if (c.causal && c.mask_value != attention_test::kNegInf) continue;  // the CPU skips tiles
    SCOPED_TRACE(c.name);
    const auto in = attention_test::Inputs(c);
    const Node fwd = attention_test::ForwardNode(c);
    auto cpu = RunSingleNode(fwd, in);
    ASSERT_TRUE(cpu.ok()) << cpu.status().message();
    Result want;
    Reference ref(c, in, 0, NodeKey(fwd));
    ref.Forward(&want);
    EXPECT_EQ(Mismatch("O", (*cpu)[0].data<float>(), want.o, 1e-5, 1e-5), "");
    EXPECT_EQ(Mismatch("LSE", (*cpu)[1].data<float>(), want.lse, 1e-5, 1e-5), "");
  }
}

#ifdef FOUNDRY_HAVE_CUDA
// Shape checks run on the host before any launch: a mismatch is an error naming the node (these
// inputs carry no data; a launch would fail differently).
std::string CudaError(const Node& node, const std::vector<Tensor>& in, std::vector<Tensor> out,
                      size_t workspace = 4096) {
  std::vector<const Tensor*> ip;
  for (const Tensor& t : in) ip.push_back(t.dtype() == DType::kUndefined ? nullptr : &t);
  std::vector<Tensor*> op;
  for (Tensor& t : out) op.push_back(&t);
  std::vector<std::byte> scratch(workspace);  // never touched: the checks fail first
  CudaKernelContext ctx;
  ctx.base.workspace = scratch;
  Status st = RunCudaKernel(node, ip, op, ctx);
  return st.ok() ? "ok" : st.message();
}

Tensor Shaped(Shape s, DType t = DType::kFloat32) { return Tensor::View(t, std::move(s), nullptr); }

TEST(AttentionHostTest, CudaKernelsRejectBadOperandsNamingTheNode) {
  Case c{.b = 2, .hq = 4, .hkv = 2, .sq = 10, .sk = 12, .d = 16, .dv = 8};
  const Node fwd = attention_test::ForwardNode(c);
  const std::vector<Tensor> out = {Shaped({2, 4, 10, 8}), Shaped({2, 4, 10})};
  EXPECT_EQ(
      CudaError(fwd, {Shaped({2, 4, 10, 16}), Shaped({2, 3, 16, 12}), Shaped({2, 3, 12, 8})}, out),
      "Attention node 'n': Q [2,4,10,16], K [2,3,16,12] and V [2,3,12,8] do not fit "
      "together (K is [batch, kv_heads, head_dim, key], V [batch, kv_heads, key, v_dim], "
      "query heads a multiple of kv_heads)");
  EXPECT_EQ(CudaError(fwd,
                      {Shaped({2, 4, 10, 16}, DType::kFloat64), Shaped({2, 2, 16, 12}),
                       Shaped({2, 2, 12, 8})},
                      out),
            "Attention node 'n': the cuda kernel does not support element type f64 (f32 only)");
  EXPECT_EQ(CudaError(fwd,
                      {Shaped({2, 4, 10, 16}), Shaped({2, 2, 16, 12}), Shaped({2, 2, 12, 8}),
                       Shaped({1, 4, 2, 12})},
                      out),
            "Attention node 'n': bias [1,4,2,12] does not broadcast to the scores [2,4,10,12]");
  EXPECT_EQ(CudaError(fwd,
                      {Shaped({2, 4, 10, 16}), Shaped({2, 2, 16, 12}), Shaped({2, 2, 12, 8}),
                       Tensor(), Shaped({2, 1, 1, 12})},
                      out),
            "Attention node 'n': mask f32[2,1,1,12] must be bool");
  EXPECT_EQ(CudaError(fwd, {Shaped({2, 4, 10, 16}), Shaped({2, 2, 16, 12}), Shaped({2, 2, 12, 8})},
                      {Shaped({2, 10, 4, 8}), Shaped({2, 4, 10})}),
            "Attention node 'n': O is f32[2,10,4,8], expected f32[2,4,10,8]");
  EXPECT_EQ(CudaError(fwd, {Shaped({1, 1, 3, 160}), Shaped({1, 1, 160, 5}), Shaped({1, 1, 5, 8})},
                      {Shaped({1, 1, 3, 8}), Shaped({1, 1, 3})}),
            "Attention node 'n': head dimensions D=160, Dv=8 exceed 128, the largest the cuda "
            "attention kernels take");
  const Node bwd = attention_test::BackwardNode(c);
  const std::vector<Tensor> good = {Shaped({2, 4, 10, 8}),  Shaped({2, 4, 10, 16}),
                                    Shaped({2, 2, 16, 12}), Shaped({2, 2, 12, 8}),
                                    Shaped({2, 4, 10, 8}),  Shaped({2, 4, 10})};
  std::vector<Tensor> bad_lse = good;
  bad_lse[5] = Shaped({2, 4, 11});
  EXPECT_EQ(CudaError(bwd, bad_lse,
                      {Shaped({2, 4, 10, 16}), Shaped({2, 2, 16, 12}), Shaped({2, 2, 12, 8})}),
            "AttentionGrad node 'n': LSE is f32[2,4,11], expected f32[2,4,10]");
  EXPECT_EQ(
      CudaError(bwd, good, {Shaped({2, 4, 10, 16}), Shaped({2, 2, 12, 16}), Shaped({2, 2, 12, 8})}),
      "AttentionGrad node 'n': dK is f32[2,2,12,16], expected f32[2,2,16,12]");
  // A well-formed backward with no workspace: D_i needs 2·4·10 floats.
  EXPECT_EQ(CudaError(bwd, good,
                      {Shaped({2, 4, 10, 16}), Shaped({2, 2, 16, 12}), Shaped({2, 2, 12, 8})}, 0),
            "AttentionGrad node 'n': the cuda kernel needs 320 bytes of workspace but was given 0 "
            "(plan the node's workspace with CudaWorkspaceBytes)");
}
#endif

}  // namespace
}  // namespace foundry
