// Fused attention (domain "foundry"): the op canonicalize folds every recognised
// softmax(Q·Kᵀ·scale + bias)·V into (passes/attention_fusion.h), and its gradient.
//
// foundry::Attention (Q, K, V[, bias][, mask]) -> (O, LSE)
//   Q     [B, Hq, Sq, D]
//   K     k_transposed=1 (default): [B, Hkv, D, Sk], what MatMul(Q, Kᵀ) reads; 0: [B, Hkv, Sk, D]
//   V     [B, Hkv, Sk, Dv]
//   bias  optional additive scores, Q's dtype, rank <= 4, broadcastable to [B, Hq, Sq, Sk]
//         (ALiBi [1, Hq, 1, Sk], a padding bias [B, 1, 1, Sk]); never differentiated
//   mask  optional bool, rank <= 4, broadcastable to [B, Hq, Sq, Sk]
//   Hq is a multiple of Hkv; query head h reads key/value head h / (Hq / Hkv) (repeat_kv order).
//   Attributes: scale (float, required); causal (0/1: key j > query i is masked); mask_keep (0/1:
//   with a mask, 1 = true keeps the score, 0 = true masks it); mask_value (float, default -inf:
//   what a masked score becomes, replacing it); k_transposed (0/1, default 1); o_transposed
//   (0/1, default 0: 1 = O, and dO in the gradient, are [B, Sq, Hq, Dv], the layout
//   out.transpose(1, 2) has, so the reshape to [B, Sq, Hq·Dv] that follows is a view and the
//   out-projection saves the same buffer the backward reads as O); dropout_ratio
//   (float in [0, 1), default 0) with seed (int); window (int, default 0: none; > 0 needs causal=1:
//   key j is also masked when j <= i - window, so query i sees keys i - window + 1 .. i, as
//   sliding-window attention); softcap (float, default 0: none; > 0: the scaled product becomes
//   softcap · tanh(product / softcap) before the bias and the mask, Gemma-2's logit soft-capping).
//   When training, element (b, h, i, j) of the
//   probabilities is kept, times 1 / (1 - ratio), when the Philox draw (kernels/cpu/philox.h,
//   key = seed) of element ((b·Hq + h)·Sq + i)·Sk + j is >= ratio, as a Dropout of the
//   [B, Hq, Sq, Sk] probabilities keyed by that seed draws it; LSE is taken before the dropout.
//   Per batch b, head h, query i, key j:
//     x_ij = scale · Σ_d Q[i,d] K[j,d];  c_ij = softcap · tanh(x_ij / softcap) (x_ij without one)
//     s_ij = c_ij (+ bias_ij); masked (mask, causal or window) => s_ij = mask_value
//     LSE_i = log Σ_j exp(s_ij);  O_i = Σ_j exp(s_ij - LSE_i) V_j
//   A row whose every score is -inf gives NaN (as Softmax does). O has Q's dtype and [B, Hq, Sq,
//   Dv]; LSE has Q's dtype (f32 when Q is bf16) and [B, Hq, Sq]: the backward's only statistic
//   (O(seq) per head).
//
// foundry::AttentionGrad (dO, Q, K, V, O, LSE[, bias][, mask]) -> (dQ, dK, dV), same attributes:
// recomputes each score from Q, K, the bias and the mask, P = exp(s - LSE), and
//   dV_j = Σ_i P_ij dO_i;  dS_ij = P_ij (dO_i·V_j - dO_i·O_i);  dQ_i = scale Σ_j dS_ij K_j;
//   dK_j = scale Σ_i dS_ij Q_i   (dK, dV summed over the query heads sharing a key/value head);
// with a softcap, dS_ij is multiplied by 1 - tanh²(x_ij / softcap) first; a masked score is the
// constant mask_value, so its dS_ij is 0 (with a finite mask_value its P_ij need not be: a row
// masked everywhere);
// with dropout, dV_j reads P ∘ z and dO_i·V_j is multiplied by z (z redrawn from the same key).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compiler/op_schema.h"

namespace foundry {

namespace {

constexpr char kFoundry[] = "foundry";

bool IsFloatType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16;
}

bool Differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

std::string Dims(const Value& v) { return v.TypeString(); }

Status CheckFlag(const InferContext& ctx, const char* name, int64_t fallback) {
  int64_t v = ctx.node.GetInt(name, fallback);
  if (v != 0 && v != 1)
    return ctx.Fail(std::string("attribute ") + name + " must be 0 or 1, got " + std::to_string(v));
  return Status::Ok();
}

// The four dimensions every operand is checked against.
struct AttentionDims {
  int64_t b = -1, hq = -1, hkv = -1, sq = -1, sk = -1, d = -1, dv = -1;
};

// An optional bias or mask: rank <= 4 and each trailing-aligned dimension 1 or the scores'.
Status CheckBroadcast(const InferContext& ctx, size_t i, const char* what, const AttentionDims& a) {
  const Value& v = ctx.input(i);
  if (!v.rank_known) return Status::Ok();
  if (v.shape.size() > 4)
    return ctx.Fail(std::string(what) + " has rank " + std::to_string(v.shape.size()) +
                    "; it must broadcast to [batch, heads, query, key] (rank <= 4)");
  const int64_t target[4] = {a.b, a.hq, a.sq, a.sk};
  const size_t off = 4 - v.shape.size();
  for (size_t k = 0; k < v.shape.size(); ++k) {
    int64_t dim = v.shape[k];
    if (dim != 1 && Differ(dim, target[off + k]))
      return ctx.Fail(std::string(what) + " " + Dims(v) +
                      " does not broadcast to the scores [batch, heads, query, key] = [" +
                      std::to_string(a.b) + "," + std::to_string(a.hq) + "," +
                      std::to_string(a.sq) + "," + std::to_string(a.sk) + "]");
  }
  return Status::Ok();
}

// Checks Q, K, V (inputs q, q+1, q+2) and the optional bias and mask (inputs extra, extra+1);
// returns the dimensions.
StatusOr<AttentionDims> CheckOperands(const InferContext& ctx, size_t q, size_t extra) {
  RETURN_IF_ERROR(CheckFlag(ctx, "causal", 0));
  RETURN_IF_ERROR(CheckFlag(ctx, "mask_keep", 0));
  RETURN_IF_ERROR(CheckFlag(ctx, "k_transposed", 1));
  RETURN_IF_ERROR(CheckFlag(ctx, "o_transposed", 0));
  if (!ctx.node.attrs.count("scale")) return ctx.Fail("the scale attribute is required");
  const int64_t window = ctx.node.GetInt("window", 0);
  if (window < 0 || (window > 0 && ctx.node.GetInt("causal", 0) != 1))
    return ctx.Fail("window " + std::to_string(window) +
                    " must be 0 (none) or positive with causal=1");
  const float softcap = ctx.node.GetFloat("softcap", 0.0f);
  if (!(softcap >= 0.f)) return ctx.Fail("softcap must be 0 (none) or positive");
  const float ratio = ctx.node.GetFloat("dropout_ratio", 0.0f);
  if (!(ratio >= 0.f && ratio < 1.f))
    return ctx.Fail("dropout_ratio " + std::to_string(ratio) + " is outside [0, 1)");
  const Value& Q = ctx.input(q);
  const Value& K = ctx.input(q + 1);
  const Value& V = ctx.input(q + 2);
  if (!IsFloatType(Q.dtype)) return ctx.Fail("Q must be f32, f64 or bf16, got " + Dims(Q));
  if (K.dtype != Q.dtype || V.dtype != Q.dtype)
    return ctx.Fail("Q, K and V must have one element type, got " + Dims(Q) + ", " + Dims(K) +
                    ", " + Dims(V));
  AttentionDims a;
  for (const Value* v : {&Q, &K, &V})
    if (v->rank_known && v->shape.size() != 4)
      return ctx.Fail("Q, K and V must have rank 4 ([batch, heads, seq, head_dim]), got " +
                      Dims(Q) + ", " + Dims(K) + ", " + Dims(V));
  const bool kt = ctx.node.GetInt("k_transposed", 1) == 1;
  if (Q.rank_known) a = {Q.shape[0], Q.shape[1], -1, Q.shape[2], -1, Q.shape[3], -1};
  if (K.rank_known) {
    if (Differ(K.shape[0], a.b))
      return ctx.Fail("K's batch differs from Q's: " + Dims(K) + " vs " + Dims(Q));
    a.hkv = K.shape[1];
    int64_t kd = kt ? K.shape[2] : K.shape[3];
    if (Differ(kd, a.d))
      return ctx.Fail("K's head dimension differs from Q's: " + Dims(K) + " vs " + Dims(Q) +
                      (kt ? " (K is [batch, heads, head_dim, key])" : ""));
    a.sk = kt ? K.shape[3] : K.shape[2];
  }
  if (V.rank_known) {
    if (Differ(V.shape[0], a.b) || Differ(V.shape[1], a.hkv) || Differ(V.shape[2], a.sk))
      return ctx.Fail("V " + Dims(V) + " does not match K " + Dims(K) +
                      " in batch, heads or key length");
    a.dv = V.shape[3];
    if (a.hkv < 0) a.hkv = V.shape[1];
    if (a.sk < 0) a.sk = V.shape[2];
  }
  if (a.hq >= 0 && a.hkv > 0 && a.hq % a.hkv != 0)
    return ctx.Fail("Q's " + std::to_string(a.hq) + " heads are not a multiple of K's " +
                    std::to_string(a.hkv));
  if (a.hkv == 0) return ctx.Fail("K has no heads");
  if (ctx.has_input(extra)) {
    if (ctx.input(extra).dtype != Q.dtype)
      return ctx.Fail("bias " + Dims(ctx.input(extra)) + " must have Q's element type " + Dims(Q));
    RETURN_IF_ERROR(CheckBroadcast(ctx, extra, "bias", a));
  }
  if (ctx.has_input(extra + 1)) {
    if (ctx.input(extra + 1).dtype != DType::kBool)
      return ctx.Fail("mask " + Dims(ctx.input(extra + 1)) + " must be bool");
    RETURN_IF_ERROR(CheckBroadcast(ctx, extra + 1, "mask", a));
  }
  return a;
}

// LSE's element type: Q's, except f32 for a bf16 Q (the backward needs the statistic at full
// precision, as FlashAttention keeps it).
DType LseType(DType q) { return q == DType::kBFloat16 ? DType::kFloat32 : q; }

StatusOr<std::vector<TypeInfo>> InferAttention(const InferContext& ctx) {
  ASSIGN_OR_RETURN(AttentionDims a, CheckOperands(ctx, 0, 3));
  const DType t = ctx.input(0).dtype;
  const bool known = ctx.input(0).rank_known && ctx.input(2).rank_known;
  if (!known) return std::vector<TypeInfo>{{t, {}, false}, {LseType(t), {}, false}};
  const bool ot = ctx.node.GetInt("o_transposed", 0) == 1;
  return std::vector<TypeInfo>{
      {t, ot ? Shape{a.b, a.sq, a.hq, a.dv} : Shape{a.b, a.hq, a.sq, a.dv}},
      {LseType(t), {a.b, a.hq, a.sq}}};
}

StatusOr<std::vector<TypeInfo>> InferAttentionGrad(const InferContext& ctx) {
  ASSIGN_OR_RETURN(AttentionDims a, CheckOperands(ctx, 1, 6));
  const Value& dO = ctx.input(0);
  const Value& O = ctx.input(4);
  const Value& lse = ctx.input(5);
  const DType t = ctx.input(1).dtype;
  if (dO.dtype != t || O.dtype != t || lse.dtype != LseType(t))
    return ctx.Fail("dO and O must have Q's element type, LSE Q's (f32 for a bf16 Q)");
  const Shape o_shape = ctx.node.GetInt("o_transposed", 0) == 1 ? Shape{a.b, a.sq, a.hq, a.dv}
                                                                : Shape{a.b, a.hq, a.sq, a.dv};
  for (const Value* v : {&dO, &O}) {
    if (!v->rank_known) continue;
    if (v->shape.size() != 4)
      return ctx.Fail("dO and O must be [batch, heads, query, v_dim], got " + Dims(*v));
    for (size_t k = 0; k < 4; ++k)
      if (Differ(v->shape[k], o_shape[k]))
        return ctx.Fail("dO / O " + Dims(*v) + " do not match Q and V");
  }
  if (lse.rank_known && (lse.shape.size() != 3 || Differ(lse.shape[0], a.b) ||
                         Differ(lse.shape[1], a.hq) || Differ(lse.shape[2], a.sq)))
    return ctx.Fail("LSE must be [batch, heads, query], got " + Dims(lse));
  return std::vector<TypeInfo>{SameAs(ctx.input(1)), SameAs(ctx.input(2)), SameAs(ctx.input(3))};
}

// FLOPs per (query, key) pair the kernel visits (a causal one skips the pairs above the
// diagonal, a windowed one those before the window; a softcap adds a tanh (counted 4) and two
// multiplications per pair, and the backward's 1 - tanh² two more):
//   forward   Q·Kᵀ 2D, P·V 2Dv, online softmax 5 (max, -, exp, Σ, rescale), +1 bias, +1 mask
//   backward  recomputed scores 2D (+ bias, mask) and exp(s - LSE) 2, dV 2Dv, dP 2Dv,
//             dS = P(dP - D) 3, dQ 2D, dK 2D; plus D = Σ dO·O, 2Dv per query row
// so the backward is about 2.5x the forward (D = Dv = 64: 645 vs 261 per pair). It is all
// backward work (the probabilities are never saved), not recompute.
int64_t AttentionFlops(const FlopContext& c) {
  const bool grad = c.node.op_type == "AttentionGrad";
  const size_t q = grad ? 1 : 0;
  const Value* qv = c.input(q);
  const Value* kv = c.input(q + 1);
  const Value* vv = c.input(q + 2);
  if (!qv || !kv || !vv || !qv->ShapeKnown() || !kv->ShapeKnown() || !vv->ShapeKnown() ||
      qv->shape.size() != 4 || kv->shape.size() != 4 || vv->shape.size() != 4)
    return 0;
  const int64_t b = qv->shape[0], h = qv->shape[1], sq = qv->shape[2], d = qv->shape[3];
  const int64_t sk = vv->shape[2], dv = vv->shape[3];
  int64_t pairs = sq * sk;
  if (c.node.GetInt("causal", 0) == 1) {
    const int64_t window = c.node.GetInt("window", 0);
    pairs = 0;
    for (int64_t i = 0; i < sq; ++i) {
      const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
      pairs += std::max<int64_t>(0, std::min(i + 1, sk) - first);
    }
  }
  const bool cap = c.node.GetFloat("softcap", 0.0f) > 0;
  const int64_t extra = (c.node.HasInput(q + 3) ? 1 : 0) + (c.node.HasInput(q + 4) ? 1 : 0);
  if (!grad) return b * h * pairs * (2 * d + 2 * dv + 5 + extra + (cap ? 6 : 0));
  return b * h * (pairs * (6 * d + 4 * dv + 5 + extra + (cap ? 8 : 0)) + sq * 2 * dv);
}

}  // namespace

void RegisterAttentionSchemas(OpSchemaTable& table) {
  table.Add({kFoundry, "Attention", 3, 5, 2, 2, InferAttention, AttentionFlops});
  table.Add({kFoundry, "AttentionGrad", 6, 8, 3, 3, InferAttentionGrad, AttentionFlops});
}

}  // namespace foundry
