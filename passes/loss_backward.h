// Which cross-entropy the training graph's backward computes, as llm-foundry's `model.loss_fn`
// names them (foundry-compile --loss-fn, or --config's model.loss_fn):
//  - fused_crossentropy (llm-foundry's default): foundry's fused loss. The backward is one node,
//    SoftmaxCrossEntropyLossGrad (dY, log_prob, labels) -> d_scores: log_prob and d_scores are
//    the only scores-sized buffers of the loss's backward.
//  - torch_crossentropy: PyTorch's nn.CrossEntropyLoss, log_softmax then nll_loss. Its backward
//    allocates nll_loss's dense gradient, then log_softmax's gradient, while the saved log_prob
//    is still live: three scores-sized f32 buffers at its start, one more than the fused form.
//    This pass rewrites the graph so that the plan holds the same buffers a PyTorch run holds:
//      before: d_scores = SoftmaxCrossEntropyLossGrad(dY, log_prob, labels[, weights])
//      after:  d_log_prob = foundry::NegativeLogLikelihoodLossGrad(dY, log_prob, labels[, weights])
//              d_scores = LogSoftmaxGrad_13(d_log_prob, log_prob)   (axis 1, the class axis)
//    (NegativeLogLikelihoodLossGrad reads only log_prob's shape). The gradient is the same
//    function; its floats may differ from the fused form's in the last bits.
//
// Order: right after autodiff (before grad_accumulate and the post-autodiff passes, so the
// checkpointing search and the plain plan see the same loss).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "passes/pass.h"

namespace foundry {

enum class LossFn { kFusedCrossEntropy, kTorchCrossEntropy };

// "fused_crossentropy" / "torch_crossentropy", as llm-foundry spells them.
std::string_view LossFnName(LossFn loss_fn);
std::optional<LossFn> ParseLossFn(std::string_view name);

struct LossBackwardStats {
  int rewritten = 0;  // SoftmaxCrossEntropyLossGrad nodes split in two
  std::string ToString() const;
};

class LossBackwardPass : public Pass {
 public:
  struct Options {
    LossFn loss_fn = LossFn::kFusedCrossEntropy;  // fused: the graph is left as it is
  };
  explicit LossBackwardPass(Options options) : options_(options) {}

  std::string_view name() const override { return "loss_backward"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const LossBackwardStats& stats() const { return stats_; }

 private:
  Options options_;
  LossBackwardStats stats_;
};

}  // namespace foundry
