#include "passes/grad_accumulate.h"

#include <map>
#include <vector>

#include "base/bytes.h"
#include "compiler/phase.h"

namespace foundry {

std::string GradAccumulateStats::ToString() const {
  return std::to_string(gradients) + " gradients accumulated over " + std::to_string(steps) +
         " microbatches per step (partials " + HumanBytes(partial_bytes) + " in all)";
}

std::string MicrobatchPartialName(const std::string& gradient) { return gradient + "/microbatch"; }

StatusOr<bool> GradAccumulatePass::Run(Graph& graph) {
  stats_ = {};
  stats_.steps = options_.steps;
  if (options_.steps < 1)
    return Error("grad_accumulate: " + std::to_string(options_.steps) +
                 " microbatches per step; give 1 or more");
  if (options_.steps == 1) return false;
  if (graph.outputs.size() < graph.parameters.size() + 1)
    return Error("grad_accumulate: the graph has " + std::to_string(graph.outputs.size()) +
                 " outputs for " + std::to_string(graph.parameters.size()) +
                 " parameters; run autodiff first (loss, then one gradient per parameter)");
  const UseDef use = BuildUseDef(graph);
  // Accumulators by the producer index they follow (-1: the partial is a constant).
  std::map<int, std::vector<Node>> after;
  for (size_t i = 0; i < graph.parameters.size(); ++i) {
    const std::string grad = graph.outputs[i + 1];
    Value* v = graph.FindValue(grad);
    if (!v) return Error("grad_accumulate: gradient '" + grad + "' is not a value of the graph");
    const std::string partial = graph.UniqueValueName(MicrobatchPartialName(grad));
    Value renamed = *v;
    renamed.name = partial;
    graph.GetOrAddValue(partial) = renamed;
    v->data = nullptr;  // a constant gradient's bytes stay with the partial
    const int producer = use.Producer(grad);
    for (Node& n : graph.nodes) {
      for (auto& out : n.outputs)
        if (out == grad) out = partial;
      for (auto& in : n.inputs)
        if (in == grad) in = partial;
    }
    Node acc;
    acc.name = graph.UniqueNodeName(grad + "/accumulate");
    acc.domain = "foundry";
    acc.op_type = "AccumulateGradient";
    acc.inputs = {partial};
    acc.outputs = {grad};
    if (producer >= 0) acc.scope = graph.nodes[static_cast<size_t>(producer)].scope;
    SetPhase(acc, Phase::kBackward);
    after[producer].push_back(std::move(acc));
    ++stats_.gradients;
    if (const int64_t bytes = v->NumBytes(); bytes > 0) stats_.partial_bytes += bytes;
  }
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size() + static_cast<size_t>(stats_.gradients));
  if (auto c = after.find(-1); c != after.end())
    for (Node& n : c->second) nodes.push_back(std::move(n));
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    nodes.push_back(std::move(graph.nodes[k]));
    if (auto a = after.find(static_cast<int>(k)); a != after.end())
      for (Node& n : a->second) nodes.push_back(std::move(n));
  }
  graph.nodes = std::move(nodes);
  return true;
}

}  // namespace foundry
