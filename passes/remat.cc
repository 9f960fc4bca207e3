#include "passes/remat.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/phase.h"

namespace foundry {

namespace {

// The schedule's reading: a node without a phase mark is forward.
Phase NodePhaseOrForward(const Node& n) { return PhaseOf(n).value_or(Phase::kForward); }

bool InModuleOrRoot(const std::string& scope, const std::string& module) {
  if (module.empty()) return true;
  return scope == module ||
         (scope.size() > module.size() && scope.compare(0, module.size(), module) == 0 &&
          scope[module.size()] == '.');
}

// The rewrite of one instance, computed on the incoming graph (instances do not nest, so they
// are independent: each rewires only backward readers of its own values).
struct InstancePlan {
  std::vector<size_t> clones;                            // original node indices, graph order
  std::unordered_map<std::string, std::string> renamed;  // value -> its recompute
  std::vector<std::string> stash;                        // values the backward reads, freed
  size_t insert_at = 0;  // the first backward node reading a stashed value
};

StatusOr<InstancePlan> PlanInstance(const Graph& graph, const UseDef& ud,
                                    const std::string& module) {
  std::vector<char> member(graph.nodes.size(), 0);
  bool any = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (NodePhaseOrForward(n) == Phase::kForward && InModuleOrRoot(n.scope, module)) member[i] = any = true;
  }
  if (!any)
    return Error("remat: module '" + module +
                 "' has no forward node in the training graph; nothing of it can be "
                 "checkpointed");
  const std::unordered_set<std::string> graph_outputs(graph.outputs.begin(), graph.outputs.end());

  // Values made inside: kept when a forward node outside (or the graph's outputs) reads them,
  // stashed when a backward node does.
  std::unordered_set<std::string> inside, kept;
  InstancePlan plan;
  plan.insert_at = graph.nodes.size();
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!member[i]) continue;
    for (const auto& o : graph.nodes[i].outputs)
      if (!o.empty()) inside.insert(o);
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!member[i]) continue;
    for (const auto& o : graph.nodes[i].outputs) {
      if (o.empty()) continue;
      bool keep = graph_outputs.count(o) > 0, read_back = false;
      for (int c : ud.Consumers(o)) {
        const Phase p = NodePhaseOrForward(graph.nodes[c]);
        if (p == Phase::kForward && !member[c]) keep = true;
        if (p == Phase::kBackward) {
          read_back = true;
          plan.insert_at = std::min(plan.insert_at, static_cast<size_t>(c));
        }
      }
      if (keep) kept.insert(o);
      if (read_back && !keep) plan.stash.push_back(o);
    }
  }
  if (plan.stash.empty()) return plan;

  // The minimal set of members regenerating the stash from the boundary and the kept outputs.
  std::vector<char> needed(graph.nodes.size(), 0);
  std::vector<int> work;
  for (const auto& v : plan.stash) work.push_back(ud.Producer(v));
  while (!work.empty()) {
    const int i = work.back();
    work.pop_back();
    if (i < 0 || needed[i]) continue;
    needed[i] = 1;
    for (const auto& in : graph.nodes[i].inputs)
      if (!in.empty() && inside.count(in) && !kept.count(in)) work.push_back(ud.Producer(in));
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (needed[i]) plan.clones.push_back(i);
  return plan;
}

}  // namespace

StatusOr<bool> RematPass::Run(Graph& graph) {
  stats_.clear();
  if (options_.instances.empty()) return false;
  for (size_t a = 0; a < options_.instances.size(); ++a)
    for (size_t b = 0; b < options_.instances.size(); ++b)
      if (a != b && InModuleOrRoot(options_.instances[b], options_.instances[a]))
        return Error("remat: module '" + options_.instances[b] + "' is inside '" +
                     options_.instances[a] + "'; checkpoint one of them (the outer one wins)");

  const UseDef ud = BuildUseDef(graph);
  std::vector<InstancePlan> plans;
  for (const auto& module : options_.instances) {
    ASSIGN_OR_RETURN(InstancePlan plan, PlanInstance(graph, ud, module));
    plans.push_back(std::move(plan));
  }

  // Clones, named after their originals, inserted before the first backward reader of their
  // instance (any place after the forward is topological: they read only forward values and each
  // other; the schedule then moves each just before its own first reader).
  std::map<size_t, std::vector<Node>> inserts;  // position -> clones, in instance order
  bool changed = false;
  for (size_t k = 0; k < plans.size(); ++k) {
    InstancePlan& plan = plans[k];
    RematInstanceStats s;
    s.module = options_.instances[k];
    s.values_freed = static_cast<int>(plan.stash.size());
    s.nodes_recomputed = static_cast<int>(plan.clones.size());
    stats_.push_back(s);
    if (plan.clones.empty()) continue;
    changed = true;
    std::vector<Node>& out = inserts[plan.insert_at];
    for (size_t i : plan.clones) {
      const Node& orig = graph.nodes[i];
      Node clone = orig;
      clone.name = graph.UniqueNodeName(orig.name + "_recompute");
      for (auto& in : clone.inputs) {
        auto r = plan.renamed.find(in);
        if (r != plan.renamed.end()) in = r->second;
      }
      for (auto& o : clone.outputs) {
        if (o.empty()) continue;
        const Value* typed = graph.FindValue(o);
        if (!typed)
          return Error("remat: " + orig.Describe() + " makes '" + o +
                       "', which the graph has no type for; run the pass after type inference");
        const std::string fresh = graph.UniqueValueName(o + "_recompute");
        Value copy = *typed;
        copy.name = fresh;
        copy.data = nullptr;
        graph.GetOrAddValue(fresh) = std::move(copy);
        plan.renamed[o] = fresh;
        o = fresh;
      }
      clone.marks[kRecomputeOfMark] = orig.name;
      clone.marks[kRecomputeInstanceMark] = s.module;
      SetPhase(clone, Phase::kRecompute);
      out.push_back(std::move(clone));
    }
    // Backward readers of the stash read the clones.
    for (const auto& v : plan.stash)
      for (int c : ud.Consumers(v)) {
        Node& reader = graph.nodes[c];
        if (NodePhaseOrForward(reader) != Phase::kBackward) continue;
        for (auto& in : reader.inputs)
          if (in == v) in = plan.renamed.at(v);
      }
  }
  if (!changed) return false;

  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size());
  auto next = inserts.begin();
  for (size_t i = 0; i <= graph.nodes.size(); ++i) {
    if (next != inserts.end() && next->first == i) {
      for (auto& c : next->second) nodes.push_back(std::move(c));
      ++next;
    }
    if (i < graph.nodes.size()) nodes.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(nodes);
  return true;
}

std::string RematPass::Stats() const {
  int values = 0, clones = 0;
  for (const auto& s : stats_) {
    values += s.values_freed;
    clones += s.nodes_recomputed;
  }
  return std::to_string(stats_.size()) + (stats_.size() == 1 ? " instance" : " instances") +
         " checkpointed, " + std::to_string(values) + " saved values freed, " +
         std::to_string(clones) + " nodes recomputed";
}

std::vector<const Node*> RecomputeNodesOf(const Graph& graph, const std::string& instance) {
  std::vector<const Node*> out;
  for (const Node& n : graph.nodes) {
    auto m = n.marks.find(kRecomputeInstanceMark);
    if (m != n.marks.end() && m->second == instance) out.push_back(&n);
  }
  return out;
}

std::vector<std::string> SavedValuesOf(const Graph& graph, const std::string& instance) {
  // Values of the instance: what its forward nodes make and what they read.
  std::set<std::string> of;
  for (const Node& n : graph.nodes) {
    if (NodePhaseOrForward(n) != Phase::kForward || !InModuleOrRoot(n.scope, instance)) continue;
    for (const auto& v : n.inputs)
      if (!v.empty()) of.insert(v);
    for (const auto& v : n.outputs)
      if (!v.empty()) of.insert(v);
  }
  std::set<std::string> saved;
  for (const Node& n : graph.nodes) {
    const Phase p = NodePhaseOrForward(n);
    if (p != Phase::kBackward && p != Phase::kRecompute) continue;
    for (const auto& v : n.inputs) {
      if (v.empty() || !of.count(v) || graph.IsInitializer(v)) continue;
      const Value* value = graph.FindValue(v);
      if (value && value->data) continue;  // constants are not activations
      saved.insert(v);
    }
  }
  return {saved.begin(), saved.end()};
}

}  // namespace foundry
