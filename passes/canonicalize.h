// Turns export idioms into the ops a trainer wants. Every rewrite is exact (the replacement
// computes the same bits; tests check it on the CPU backend) or it is not done.
//
// Order: first the nodes that compute their own input are bypassed, so that the fusions see
// through them; then the fusions; then dead nodes are removed.
//   Dropout   ratio 0 (torch writes Dropout(x, 0.0, true) for every p = 0 module in a training
//             export) or training_mode false/absent => Identity, its mask dropped, unless
//             something reads the mask. No ratio input means 0.5 (ONNX's default).
//   Cast      to the dtype its input already has => Identity
//   CastLike  (x, like) => Identity when x has like's dtype, else Cast(x, to=that dtype): it
//             reads only like's type, so its second operand is no real consumer
//   Identity  removed (consumers read its input), unless it produces a graph output.
// Renamed (torch >= 2.5 dynamo export, opset 20):
//   Gelu      ai.onnx Gelu {approximate="none"} => com.microsoft::Gelu(x); {approximate="tanh"}
//             => com.microsoft::FastGelu(x) {form="gelu_new"} (the ai.onnx kernel computes their
//             element functions, so the rename is exact; ai.onnx Gelu has no gradient rule of its
//             own: autodiff sees the com.microsoft ops)
// Fusions, matched by what is computed rather than by one exporter's node order (torch 1.13
// TorchScript, torch 2.6 dynamo, Hugging Face code): any operand order in each Add and Mul (IEEE
// addition and multiplication commute exactly), and the spellings listed, each the same bits:
//   GELU      0.5·x·(1 + erf(x / 1.4142135)) => com.microsoft::Gelu(x) (fused gradient GeluGrad);
//             TorchScript's Mul(Mul(x, A), 0.5) as the default form, dynamo's Mul(x, Mul(0.5, A))
//             and Hugging Face's Mul(Mul(x, 0.5), A) as {form="half_first"}: the two round
//             differently where x·2 overflows, so the kernel reproduces each.
//   tanh GELU 0.5·x·(1 + tanh(k·(x + 0.044715·x³))) => com.microsoft::FastGelu(x)
//             {form="gelu_new"|"torch_tanh"} (fused gradient FastGeluGrad): gelu_new takes the
//             cube as Pow(x, 3) with the 0.5 first (Hugging Face's gelu_new, torch 2.6 dynamo's
//             F.gelu(approximate='tanh')), torch_tanh as x*(x*x) with the 0.5 last (torch 1.13
//             TorchScript's); the form tells the kernel which rounding sequence to reproduce.
//   RMSNorm   Mul(Mul(x, R), w), R = 1/Sqrt(Add(ReduceMean(S, axes=[-1], keepdims=1), eps)),
//             R as Div(1, .) or Reciprocal, S as Pow(x, 2) or Mul(x, x), the axes an attribute
//             or a constant input; the Cast(to=float) pair of Hugging Face's and litgpt's
//             RMSNorm is a no-op Cast in f32 and is gone by then; w any [D] value, so Gemma's
//             Add(weight, 1) stays and feeds the scale
//             => com.microsoft::SimplifiedLayerNormalization(x, w) {axis=-1, epsilon=eps}
//   SiLU      Mul(x, Sigmoid(x)), either operand order (torch's F.silu, Llama/Qwen2's MLP)
//             => com.microsoft::QuickGelu(x) {alpha=1} (x·sigmoid(alpha·x), ONNX Runtime's op;
//             fused gradient QuickGeluGrad(dY, X), so the Sigmoid's output is not saved)
//   Linear    MatMul(x, Transpose(W)) with W a parameter and perm [1, 0]
//             => com.microsoft::FusedMatMul(x, W) {transB=1}: no transposed copy of a weight is
//             ever computed or saved for the backward pass
//   Attention softmax(Q·Kᵀ·scale + bias)·V in the shapes attention_fusion.h lists
//             => foundry::Attention(Q, K, V[, bias][, mask]) -> (O, LSE). Not bit-exact (the
//             fused kernel sums in another order; gradients stay within 1e-5 of PyTorch), so
//             Options::fuse_attention turns it off.
// Intermediate values of a pattern must have no other consumer, or the pattern is left alone.
// Runs after folding (constants must be initializers with data), before autodiff.
#pragma once

#include "passes/attention_fusion.h"
#include "passes/pass.h"

namespace foundry {

// Rewrites of one run, by kind; ToString() is the pipeline's line.
struct CanonicalizeStats {
  int gelu = 0;       // erf GELU fused, or ai.onnx Gelu renamed
  int fast_gelu = 0;  // tanh GELU fused, or ai.onnx Gelu {approximate="tanh"} renamed
  int rmsnorm = 0;
  int silu = 0;
  int matmul = 0;    // MatMul(x, Transpose(W)) made FusedMatMul {transB=1}
  int dropout = 0;   // inactive Dropout made Identity
  int cast = 0;      // no-op Cast made Identity
  int identity = 0;  // Identity nodes removed
  int dead = 0;      // dead nodes removed
  AttentionFusionStats attention;  // softmax(Q·Kᵀ·scale + bias)·V fused (attention_fusion.h)
  std::string ToString() const;
};

class CanonicalizePass : public Pass {
 public:
  struct Options {
    bool fuse_attention = true;  // false: attention stays as exported (benchmarks compare)
  };
  CanonicalizePass() = default;
  explicit CanonicalizePass(Options options) : options_(options) {}

  std::string_view name() const override { return "canonicalize"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const CanonicalizeStats& stats() const { return stats_; }

 private:
  Options options_;
  CanonicalizeStats stats_;
};

// Graph::metadata key holding the attention fusion's counts after canonicalize, as
// "fused=N unfused=M causal=C bias=B mask=K grouped=G dropout=D window=W softcap=S" (the compile
// report prints it).
inline constexpr char kAttentionFusionKey[] = "foundry.attention_fusion";

// Removes nodes none of whose outputs is consumed or a graph output. Returns how many.
int RemoveDeadNodes(Graph& graph);

}  // namespace foundry
