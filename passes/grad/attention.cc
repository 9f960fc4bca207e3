// The gradient rule of foundry::Attention (compiler/ops/attention.cc): one AttentionGrad node that
// reads Q, K, V, the output O and the row logsumexp LSE (plus the bias and mask when the forward
// had them) and recomputes the probabilities tile by tile. Nothing of size seq x seq is saved.
// The bias and the mask are never differentiated: the fusion only folds a bias that no trainable
// parameter reaches (passes/attention_fusion.cc), and a rule asked for one is an error.
#include <map>
#include <string>
#include <vector>

#include "passes/grad/grad_rule.h"

namespace foundry {

namespace {

Status AttentionGrad(GradBuilder& b) {
  const Node& fwd = b.fwd();
  if (!fwd.HasOutput(1))
    return Error("autodiff: gradient rule of " + fwd.Describe() +
                 ": the node has no LSE output (output 1), which its gradient reads");
  if (b.HasOutputGrad(1))
    return Error("autodiff: gradient rule of " + fwd.Describe() +
                 ": a gradient flows into the LSE output, which is a saved statistic only");
  for (size_t i = 3; i < 5; ++i)
    if (fwd.HasInput(i) && b.NeedsInputGrad(i))
      return Error("autodiff: gradient rule of " + fwd.Describe() + ": input " +
                   std::to_string(i) + " (" + (i == 3 ? "bias" : "mask") +
                   ") leads to a trainable parameter; fused attention does not differentiate it");
  if (!b.NeedsInputGrad(0) && !b.NeedsInputGrad(1) && !b.NeedsInputGrad(2)) return Status::Ok();
  std::vector<std::string> ins = {b.OutputGrad(0), fwd.inputs[0], fwd.inputs[1], fwd.inputs[2],
                                  fwd.outputs[0], fwd.outputs[1]};
  if (fwd.HasInput(3) || fwd.HasInput(4)) ins.push_back(fwd.HasInput(3) ? fwd.inputs[3] : "");
  if (fwd.HasInput(4)) ins.push_back(fwd.inputs[4]);
  ASSIGN_OR_RETURN(std::vector<std::string> g,
                   b.Emit("AttentionGrad", ins, fwd.attrs, 3, "foundry"));
  for (size_t i = 0; i < 3; ++i)
    if (b.NeedsInputGrad(i)) RETURN_IF_ERROR(b.SetInputGrad(i, g[i]));
  return Status::Ok();
}

}  // namespace

void RegisterAttentionGradRules(GradRuleTable& table) {
  table.Add("foundry", "Attention", AttentionGrad);
}

}  // namespace foundry
