// Turns export idioms into the ops a trainer wants. Every rewrite is exact (the replacement
// computes the same bits; tests check it on the CPU backend) or it is not done.
//
// Patterns (torch 1.13 TorchScript export, opset 17):
//   GELU      Div(x, 1.4142135) -> Erf -> Add(_, 1) -> Mul(x, _) -> Mul(_, 0.5)
//             => com.microsoft::Gelu(x)            (one op, fused gradient GeluGrad)
//   RMSNorm   Pow(x, 2) -> ReduceMean(axes=[-1], keepdims=1) -> Add(_, eps) -> Sqrt -> Div(x, _)
//             [-> Mul(_, w)]
//             => com.microsoft::SimplifiedLayerNormalization(x, w) {axis=-1, epsilon=eps}
//   Linear    MatMul(x, Transpose(W)) with W a parameter and perm [1, 0]
//             => com.microsoft::FusedMatMul(x, W) {transB=1}: no transposed copy of a weight is
//             ever computed or saved for the backward pass
//   Dropout   ratio 0 or training_mode false => Identity
//   Identity  removed (consumers read its input), unless it produces a graph output.
// Intermediate values of a pattern must have no other consumer, or the pattern is left alone.
// Nodes left without consumers are removed afterwards. Runs after folding (constants must be
// initializers with data), before autodiff.
#pragma once

#include "passes/pass.h"

namespace foundry {

class CanonicalizePass : public Pass {
 public:
  struct Options {};
  CanonicalizePass() = default;
  explicit CanonicalizePass(Options) {}

  std::string_view name() const override { return "canonicalize"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override;

 private:
  int gelu_ = 0, rmsnorm_ = 0, matmul_ = 0, dropout_ = 0, identity_ = 0, dead_ = 0;
};

// Removes nodes none of whose outputs is consumed or a graph output. Returns how many.
int RemoveDeadNodes(Graph& graph);

}  // namespace foundry
