#include "passes/loss_backward.h"

#include <utility>
#include <vector>

#include "compiler/op_schema.h"

namespace foundry {

std::string_view LossFnName(LossFn loss_fn) {
  return loss_fn == LossFn::kTorchCrossEntropy ? "torch_crossentropy" : "fused_crossentropy";
}

std::optional<LossFn> ParseLossFn(std::string_view name) {
  if (name == "fused_crossentropy") return LossFn::kFusedCrossEntropy;
  if (name == "torch_crossentropy") return LossFn::kTorchCrossEntropy;
  return std::nullopt;
}

std::string LossBackwardStats::ToString() const {
  return std::to_string(rewritten) +
         " cross-entropy backward as torch_crossentropy (nll_loss's gradient, then "
         "log_softmax's)";
}

StatusOr<bool> LossBackwardPass::Run(Graph& graph) {
  stats_ = {};
  if (options_.loss_fn == LossFn::kFusedCrossEntropy) return false;
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size() + 1);
  for (Node& n : graph.nodes) {
    if (n.domain != "com.microsoft" || n.op_type != "SoftmaxCrossEntropyLossGrad") {
      nodes.push_back(std::move(n));
      continue;
    }
    Node nll = n;  // same inputs, attributes, scope and phase
    nll.domain = "foundry";
    nll.op_type = "NegativeLogLikelihoodLossGrad";
    nll.name = graph.UniqueNodeName(n.name + "/nll");
    const std::string d_log_prob = graph.UniqueValueName(n.inputs[1] + "_grad");
    graph.GetOrAddValue(d_log_prob);
    nll.outputs = {d_log_prob};
    RETURN_IF_ERROR(InferAndSetTypes(graph, nll));
    Node log_softmax = n;
    log_softmax.op_type = "LogSoftmaxGrad_13";
    log_softmax.name = graph.UniqueNodeName(n.name + "/log_softmax");
    log_softmax.inputs = {d_log_prob, n.inputs[1]};
    log_softmax.attrs = {{"axis", Attribute::Int(1)}};  // the marks (phase, ...) stay
    nodes.push_back(std::move(nll));
    nodes.push_back(std::move(log_softmax));
    ++stats_.rewritten;
  }
  graph.nodes = std::move(nodes);
  return stats_.rewritten > 0;
}

}  // namespace foundry
