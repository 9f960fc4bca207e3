#include "compiler/eval_graph.h"

#include <set>

namespace foundry {

StatusOr<Graph> EvalGraph(const Graph& training, const std::string& loss) {
  bool produced = false;
  for (const Node& n : training.nodes)
    for (const auto& o : n.outputs) produced |= o == loss;
  if (!produced) return Error("the loss '" + loss + "' is not computed by a node of the graph");
  Graph g = training;
  std::set<std::string> needed = {loss};
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    bool used = false;
    for (const auto& o : n.outputs) used |= !o.empty() && needed.count(o);
    if (!used) continue;
    keep[i] = true;
    for (const auto& in : n.inputs)
      if (!in.empty()) needed.insert(in);
  }
  std::vector<Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  auto only_needed = [&](std::vector<std::string>& names) {
    std::vector<std::string> kept;
    for (auto& name : names)
      if (needed.count(name)) kept.push_back(std::move(name));
    names = std::move(kept);
  };
  only_needed(g.inputs);
  only_needed(g.initializers);
  only_needed(g.parameters);
  g.outputs = {loss};
  g.PruneUnusedValues();
  return g;
}

}  // namespace foundry
