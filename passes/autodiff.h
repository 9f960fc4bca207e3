// Builds the training graph: appends the loss when the model has none, then the backward graph
// (reverse-mode, one gradient rule per op from passes/grad/), producing the gradient of the loss
// with respect to every trainable parameter.
//
// Algorithm:
//  1. Loss: the model's scalar float output (preferring one named "loss"); otherwise
//     SoftmaxCrossEntropyLoss(ignore_index=-100, mean) over the logits output and a new int64
//     input `labels` shaped like the logits without their last dimension (no shift: the labels
//     are taken as already aligned with the logits).
//  2. Trainable set: graph.parameters, as ParametersPass (passes/parameters.h) left them, before
//     folding. Nothing else gets a gradient: a buffer never does.
//  3. Ops whose gradient needs a saved statistic get that optional output made explicit
//     (LayerNormalization's Mean/InvStdDev, Dropout's mask, SoftmaxCrossEntropyLoss's log_prob).
//  4. Only nodes on a path from a trainable parameter to the loss are differentiated; a node on
//     such a path without a gradient rule is an error naming it. Non-differentiable ops
//     (IsNonDifferentiable) and ops without float outputs stop the path.
//  5. Walking those nodes in reverse, each rule turns output gradients into input gradients.
//     Several contributions to one value are summed explicitly by a Sum node named `<x>_grad`
//     (contributions `<x>_grad_0`, `<x>_grad_1`, ...); a single contribution is renamed `<x>_grad`
//     when the rule produced it, and is used as is when a rule passed its input through.
//     A Gather (axis 0) that looks rows up in a parameter named in the model metadata
//     `foundry.padding_idx` (compiler/padding_rows.h) has that row of its gradient contribution
//     set to zero by a ScatterND, as torch's embedding backward does; other uses of the
//     parameter (a tied LM head) still contribute to the row. Without the key the row gets the
//     lookup's gradient.
//  6. Graph outputs become: the loss, then `<p>_grad` for every trainable parameter p (in
//     parameter order); Graph::metadata["foundry.loss"] names the loss.
// Backward nodes keep the forward node's scope and are named `<fwd name>_Grad/<Op>_<i>`.
#pragma once

#include <string>
#include <vector>

#include "passes/parameters.h"
#include "passes/pass.h"

namespace foundry {

// What one run built; ToString() is the pipeline's line.
struct AutodiffStats {
  int trainable = 0;            // parameters that got a gradient
  int forward_nodes = 0;        // nodes the pass was given (before any loss it appends)
  int backward_nodes = 0;       // gradient nodes added
  int padding_rows_zeroed = 0;  // lookups whose padding row's gradient contribution is zeroed
  std::string ToString() const;
};

class AutodiffPass : public Pass {
 public:
  struct Options {
    std::string labels_input = "labels";
  };
  explicit AutodiffPass(Options options) : options_(std::move(options)) {}

  std::string_view name() const override { return "autodiff"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const AutodiffStats& stats() const { return stats_; }

 private:
  Options options_;
  AutodiffStats stats_;
};

// Ops through which no gradient flows: piecewise constant (Floor, Ceil, Round, Sign) or random
// draws shaped like their input. Their outputs never require a gradient, as ops with only
// non-float outputs (comparisons, ArgMax, Shape) never do; both stop the gradient.
bool IsNonDifferentiable(const Node& node);

// Inputs that only lend their type or shape: CastLike's `target_type` (input 1). No gradient
// flows into them, whatever they depend on.
bool IsNonDifferentiableInput(const Node& node, size_t input);

// Every gradient output of a training graph has its parameter's shape and type (the outputs are
// the loss, then one gradient per parameter in order). Autodiff runs it before returning.
Status CheckGradientShapes(const Graph& graph);

// The name of the gradient of `value` in a training graph ("<value>_grad").
inline std::string GradName(const std::string& value) { return value + "_grad"; }

// Whether `name` is a name autodiff gives the gradient of parameter `p`: GradName(p), or
// GradName(p) + "_<n>" when the model already had a value of that name. Every parameter's
// gradient output has such a name; foundry-run refuses a plan that pairs them otherwise
// (runtime/loaded_plan.cc repeats the rule: the runtime does not link the passes).
inline bool IsGradNameOf(const std::string& name, const std::string& p) {
  const std::string base = GradName(p);
  if (name == base) return true;
  if (name.size() <= base.size() + 1 || name.compare(0, base.size() + 1, base + "_") != 0)
    return false;
  for (size_t i = base.size() + 1; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

}  // namespace foundry
