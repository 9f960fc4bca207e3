// Attention fusion (run by canonicalize): every softmax(Q·Kᵀ·scale + bias)·V that an exporter
// wrote out op by op becomes one foundry::Attention (compiler/ops/attention.cc), whose backward
// recomputes the probabilities tile by tile, so nothing of size heads x seq x seq is kept for the
// backward pass.
//
// Recognised, walking back from MatMul(P, V):
//   P       Softmax(axis=-1)(s), read only by that MatMul, or an active Dropout of it (constant
//           ratio, training_mode true, mask unread): the fused op draws the same Philox mask
//           (the Dropout's seed attribute moves to it) and redraws it in the backward

//   s       a chain applied in this order (each intermediate read only by the next step):
//             scale   Mul or Div by a one-element constant (any number, either operand order),
//                     on the product or on Q or K before it (torch's SDPA decomposition scales
//                     both by sqrt(scale))
//             bias    Add of a value that no trainable parameter reaches (ALiBi, a padding bias,
//                     a float mask); a bias that is Add(b, Where(causal, fill, 0)) or
//                     Where(causal, fill, 0) is split: the causal part becomes the attribute
//             mask    Where(m, fill, s) / Where(m, s, fill) with a one-element constant fill;
//                     a causal m becomes causal=1 (no mask input), a causal sliding window
//                     causal=1 with window=W, any other bool m is an input
//             softcap Mul(Tanh(Div(x, c)), c) (or Mul(x, 1/c) inside): softcap=c, Gemma-2's
//                     c·tanh(scores / c); nothing but the scale may come before it
//   clamp   Max(s, lowest f32) (OPT's torch.max(scores + mask, finfo.min)), after the bias: the
//           identity on finite scores, so it is dropped
//   product MatMul(Q, Kt) of rank-4 [B, H, Sq, D] x [B, H, D, Sk]; a Kt that is
//           Transpose(K, perm=[0,1,3,2]) is read as K (k_transposed=0)
//   GQA/MQA K and V widened from Hkv to Hq heads by repeat_kv (Unsqueeze, Expand, Reshape) or
//           torch.cat([x] * n, dim=2) + Reshape are read at their own Hkv heads
// Rank-3 attention ([batch, seq, dim]: one head, or [batch·heads, seq, dim]) is fused through
// Unsqueeze views to rank 4 with one head and a Squeeze of the output.
// An output read only by Transpose(perm=[0,2,1,3]) is written in that layout (o_transposed=1).
// Causal and sliding-window masks are recognised by what they compute, however they were built:
// the condition (a folded constant, or arithmetic over Range / constants with Unsqueeze, Expand,
// Sub, comparisons, And / Or / Not, Where, Trilu, Cast) is evaluated over the square grid and
// must equal (key > query) || (key <= query - W) everywhere (or its complement, the keep form);
// W is read off the last row (none: plain causal).
// Anything else (a Dropout whose mask is read, a bias a parameter reaches, another
// order of the steps) is left as it is and counted as unfused.
#pragma once

#include "compiler/ir.h"

namespace foundry {

struct AttentionFusionStats {
  int fused = 0;
  int causal = 0;    // of the fused: causal mask generated in the kernel
  int bias = 0;      // of the fused: with a bias input
  int mask = 0;      // of the fused: with a bool mask input
  int grouped = 0;   // of the fused: K/V read at fewer heads than Q (GQA/MQA)
  int dropout = 0;   // of the fused: with dropout on the probabilities
  int window = 0;    // of the fused: causal with a sliding window
  int softcap = 0;   // of the fused: with soft-capped scores
  int unfused = 0;   // Softmax(axis=-1) nodes feeding a MatMul that were left alone
};

// Rewrites `g` in place; the replaced nodes become dead (the caller removes them).
AttentionFusionStats FuseAttention(Graph& g);

}  // namespace foundry
