#include "passes/checkpoint_report.h"

#include <cstdio>
#include <map>
#include <set>
#include <unordered_map>

#include "base/bytes.h"
#include "compiler/phase.h"
#include "passes/memory_report.h"
#include "passes/remat.h"
#include "passes/schedule.h"

namespace foundry {
namespace {

// Index of the selected instance `scope` lies in (the instance itself or a module inside it), -1
// when none; instances never nest, so walking up the path finds at most one.
int InstanceOf(const std::unordered_map<std::string, int>& index, std::string scope) {
  while (true) {
    auto it = index.find(scope);
    if (it != index.end()) return it->second;
    const size_t dot = scope.rfind('.');
    if (scope.empty()) return -1;
    scope = dot == std::string::npos ? "" : scope.substr(0, dot);
  }
}

std::unordered_map<std::string, const Node*> Producers(const Graph& graph) {
  std::unordered_map<std::string, const Node*> producer;
  for (const Node& n : graph.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) producer[o] = &n;
  return producer;
}

std::string Percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

}  // namespace

StatusOr<CheckpointReport> BuildCheckpointReport(const Graph& plain, const MemoryPlan& plain_plan,
                                                 const Graph& checkpointed,
                                                 const MemoryPlan& checkpointed_plan,
                                                 const CkptSelection& selection) {
  CheckpointReport r;
  r.targets = selection.targets;
  r.nested = selection.nested;
  std::unordered_map<std::string, int> index;
  for (const CkptInstance& inst : selection.instances) {
    index[inst.module] = static_cast<int>(r.instances.size());
    CheckpointInstanceReport row;
    row.module = inst.module;
    row.class_name = inst.class_name;
    row.target = inst.target;
    r.instances.push_back(std::move(row));
  }

  const std::map<std::string, std::string> before = SavedBuffers(plain, plain_plan);
  const std::map<std::string, std::string> after = SavedBuffers(checkpointed, checkpointed_plan);
  for (const auto& [owner, data] : before) r.saved_before_bytes += ValueBytes(plain, owner);
  for (const auto& [owner, data] : after) r.saved_after_bytes += ValueBytes(checkpointed, owner);

  // Freed: saved before, not after; an instance's when a node inside it wrote the bytes.
  const auto plain_producer = Producers(plain);
  for (const auto& [owner, data] : before) {
    if (after.count(owner)) {
      const int64_t b = ValueBytes(plain, owner), a = ValueBytes(checkpointed, owner);
      if (a != b)
        return Error("checkpoint report: saved value '" + owner + "' has " + std::to_string(b) +
                     " bytes in the plain graph and " + std::to_string(a) +
                     " in the checkpointed one; the two graphs must come from the same model "
                     "and dims");
      continue;
    }
    const int64_t bytes = ValueBytes(plain, owner);
    ++r.values_freed;
    r.bytes_freed += bytes;
    auto p = plain_producer.find(data);
    const int i = p == plain_producer.end() ? -1 : InstanceOf(index, p->second->scope);
    if (i < 0) continue;
    ++r.instances[i].values_freed;
    r.instances[i].bytes_freed += bytes;
  }

  // Clones: nodes and FLOPs per instance; which saved buffers each instance's clones read.
  auto owner_of = [&](const std::string& v) -> const std::string& {
    auto a = checkpointed_plan.alias.find(v);
    return a == checkpointed_plan.alias.end() ? v : a->second.owner;
  };
  std::map<std::string, int> first_clone_reader;  // owner -> first instance (selection order)
  for (const Node& n : checkpointed.nodes) {
    auto m = n.marks.find(kRecomputeInstanceMark);
    if (m == n.marks.end()) continue;
    auto it = index.find(m->second);
    if (it == index.end())
      return Error("checkpoint report: " + n.Describe() + " recomputes instance '" + m->second +
                   "', which the selection does not hold; build the report from the selection "
                   "the remat pass was given");
    CheckpointInstanceReport& row = r.instances[it->second];
    const int64_t flops = NodeFlops(checkpointed, n);
    ++row.nodes_recomputed;
    row.flops_recomputed += flops;
    ++r.nodes_recomputed;
    r.flops_recomputed += flops;
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      auto [f, inserted] = first_clone_reader.emplace(owner_of(in), it->second);
      if (!inserted && it->second < f->second) f->second = it->second;
    }
  }

  // Added: saved after, not before; an instance's when its clones read it (a table every
  // instance's clones read goes to the first, so the rows still sum to at most the total).
  for (const auto& [owner, data] : after) {
    if (before.count(owner)) continue;
    const int64_t bytes = ValueBytes(checkpointed, owner);
    r.bytes_added += bytes;
    auto f = first_clone_reader.find(owner);
    if (f != first_clone_reader.end()) r.instances[f->second].bytes_added += bytes;
  }

  // What each instance still keeps saved: buffers its forward nodes write or read.
  std::vector<std::set<std::string>> kept(r.instances.size());
  for (const Node& n : checkpointed.nodes) {
    if (PhaseOf(n).value_or(Phase::kForward) != Phase::kForward) continue;
    const int i = InstanceOf(index, n.scope);
    if (i < 0) continue;
    for (const auto* values : {&n.inputs, &n.outputs})
      for (const auto& v : *values)
        if (!v.empty() && after.count(owner_of(v))) kept[i].insert(owner_of(v));
  }
  for (size_t i = 0; i < r.instances.size(); ++i) {
    CheckpointInstanceReport& row = r.instances[i];
    int64_t kept_bytes = 0;
    for (const auto& owner : kept[i]) kept_bytes += ValueBytes(checkpointed, owner);
    if (row.bytes_freed * 100 >= kept_bytes * kLowFreeingPercent && row.bytes_freed > 0) continue;
    row.note = "frees " + HumanBytes(row.bytes_freed) + ", " +
               Percent(double(row.bytes_freed), double(kept_bytes)) + " % of the " +
               HumanBytes(kept_bytes) + " its boundary and outputs keep saved (under " +
               std::to_string(kLowFreeingPercent) +
               " %): checkpointing it saves almost nothing; checkpoint its enclosing module "
               "instead";
  }

  // Instances holding a fused attention: its backward recomputes the probabilities anyway, so
  // checkpointing it frees only Q, K, V and the like, which users used to unfused attention (the
  // seq x seq probabilities per head) expect to be much more. Say how much it is.
  {
    std::set<int> fused;
    for (const Node& n : plain.nodes)
      if (n.domain == "foundry" && n.op_type == "Attention")
        if (int i = InstanceOf(index, n.scope); i >= 0 && r.instances[i].module == n.scope)
          fused.insert(i);  // the attention module itself, not a block around it
    if (!fused.empty()) {
      int64_t freed = 0;
      for (int i : fused) freed += r.instances[i].bytes_freed;
      r.notes.push_back(
          std::to_string(fused.size()) + " of the " + std::to_string(r.instances.size()) +
          " instances are a fused attention (foundry::Attention keeps Q, K, V, O and one "
          "logsumexp per row, never the seq x seq probabilities; its backward recomputes "
          "them), so checkpointing them frees " + HumanBytes(freed) + ", " +
          Percent(double(freed), double(r.saved_before_bytes)) +
          " % of the saved-for-backward bytes: the projections' outputs");
    }
  }

  const FlopCounts flops = CountFlops(checkpointed);
  r.step_flops = flops.forward + flops.backward + flops.recompute;
  return r;
}

}  // namespace foundry
