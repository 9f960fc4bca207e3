#include "compiler/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/bytes.h"
#include "base/quote.h"
#include "compiler/memory_liveness.h"
#include "compiler/op_schema.h"
#include "compiler/phase.h"

namespace foundry {

namespace {

// A name from a file, quoted; control characters escaped (a newline would split the error line).
std::string Q(const std::string& s) { return QuoteName(s); }

// The checks that do not depend on a layout: the schedule, each alias against the rules, and no
// value of a buffer read after an in-place write replaced its bytes.
Status CheckCommon(const Graph& g, const MemoryPlan& plan, const GraphIndex& ix) {
  if (plan.schedule.size() != g.nodes.size())
    return Error("memory plan: the schedule has " + std::to_string(plan.schedule.size()) +
                 " steps; the graph has " + std::to_string(g.nodes.size()) + " nodes");
  for (size_t s = 0; s < g.nodes.size(); ++s)
    if (plan.schedule[s] != g.nodes[s].name)
      return Error("memory plan: step " + std::to_string(s) + " of the schedule is " +
                   Q(plan.schedule[s]) + "; the graph runs " + Q(g.nodes[s].name) + " there");

  // The inputs that a writer of a graph output's storage takes in place: node M whose output 0 is
  // the graph output G or an in-place alias of it, slot k in M's in_place_inputs, same shape and
  // element size, no other input of M in G's storage. Such an input may itself live in G.
  std::unordered_set<std::string> taken_by_writer;
  for (const Node& m : g.nodes) {
    if (!m.HasOutput(0)) continue;
    const std::string& out0 = m.outputs[0];
    std::string storage = out0;
    if (auto a = plan.alias.find(out0); a != plan.alias.end()) {
      if (a->second.kind != AliasKind::kInPlace) continue;
      storage = a->second.owner;
    }
    if (!WritableOutput(g, ix, storage) || plan.alias.count(storage)) continue;
    const OpSchema* schema = OpSchemas().Find(m.domain, m.op_type);
    if (!schema) continue;
    for (int k : schema->in_place_inputs) {
      if (!m.HasInput(k) || !SameShapeAndElement(g, out0, m.inputs[k])) continue;
      bool shared = false;
      for (size_t j = 0; j < m.inputs.size(); ++j)
        if (static_cast<int>(j) != k && m.HasInput(j) && RootOf(plan, m.inputs[j]) == storage)
          shared = true;
      if (!shared) taken_by_writer.insert(m.inputs[k]);
    }
  }

  for (const auto& [v, a] : plan.alias) {
    const std::string what = "memory plan: alias " + Q(v) + ": ";
    const int64_t step = ix.Producer(v);
    if (step < 0) return Error(what + "no node of the graph produces it");
    if (ix.output_pos.count(v)) return Error(what + "a graph output is never an alias");
    if (plan.alias.count(a.owner))
      return Error(what + "its owner " + Q(a.owner) + " is itself an alias");
    if (a.owner == v) return Error(what + "it names itself as its owner");
    const Node& node = g.nodes[step];
    const bool into_output = a.kind == AliasKind::kInPlace && WritableOutput(g, ix, a.owner);
    if (into_output) {
      if (ix.BaseClass(g, v) != MemoryClass::kArena)
        return Error(what + "it is not a transient value");
      if (step >= ix.Producer(a.owner))
        return Error(what + "it is made at step " + std::to_string(step) +
                     ", not before graph output " + Q(a.owner) + " (step " +
                     std::to_string(ix.Producer(a.owner)) + "), whose value it would overwrite");
      if (taken_by_writer.count(v)) continue;
    }
    if (node.outputs.empty() || node.outputs[0] != v)
      return Error(what + "it is not output 0 of " + node.Describe());
    if (ix.BaseClass(g, v) != MemoryClass::kArena)
      return Error(what + "it is not a transient value");
    const OpSchema* schema = OpSchemas().Find(node.domain, node.op_type);
    if (a.kind == AliasKind::kView) {
      if (!schema || !schema->view) return Error(what + node.Describe() + " is not a view op");
      if (!node.HasInput(0) || RootOf(plan, node.inputs[0]) != a.owner)
        return Error(what + "its owner " + Q(a.owner) + " does not hold input 0 of " +
                     node.Describe());
      if (ValueBytes(g, v) != ValueBytes(g, node.inputs[0]))
        return Error(what + "a view of " + std::to_string(ValueBytes(g, node.inputs[0])) +
                     " bytes cannot hold " + std::to_string(ValueBytes(g, v)));
      continue;
    }
    int taken = -1;
    if (schema)
      for (int k : schema->in_place_inputs)
        if (node.HasInput(k) && RootOf(plan, node.inputs[k]) == a.owner) {
          taken = k;
          break;
        }
    if (taken < 0)
      return Error(what + node.Describe() + " may not write over the buffer of " + Q(a.owner));
    if (!into_output &&
        (ix.BaseClass(g, a.owner) != MemoryClass::kArena || ix.Producer(a.owner) < 0))
      return Error(what + "its owner " + Q(a.owner) +
                   " is neither in the arena nor a graph output a node computes");
    const std::string& in = node.inputs[taken];
    if (!SameShapeAndElement(g, v, in))
      return Error(what + "input " + Q(in) + " is " + TypeOf(g, in) + " but the output is " +
                   TypeOf(g, v));
    for (size_t j = 0; j < node.inputs.size(); ++j)
      if (static_cast<int>(j) != taken && node.HasInput(j) &&
          RootOf(plan, node.inputs[j]) == a.owner)
        return Error(what + "inputs " + Q(in) + " and " + Q(node.inputs[j]) + " of " +
                     node.Describe() + " share the buffer of " + Q(a.owner));
  }

  // Per buffer, the steps where an in-place output replaced its bytes; every value of the buffer
  // made before such a step must not be read after it.
  std::unordered_map<std::string, std::vector<std::pair<int64_t, std::string>>> overwrites;
  for (const auto& [v, a] : plan.alias)
    if (a.kind == AliasKind::kInPlace) overwrites[a.owner].emplace_back(ix.Producer(v), v);
  // A graph output's storage is written last by the output itself.
  for (auto& [owner, list] : overwrites)
    if (WritableOutput(g, ix, owner)) list.emplace_back(ix.Producer(owner), owner);
  for (auto& [owner, list] : overwrites) std::sort(list.begin(), list.end());
  auto check_member = [&](const std::string& m, const std::string& owner) -> Status {
    auto it = overwrites.find(owner);
    if (it == overwrites.end()) return Status::Ok();
    const int64_t made = ix.Producer(m), read = ix.LastRead(m);
    auto w = std::upper_bound(
        it->second.begin(), it->second.end(), made,
        [](int64_t step, const std::pair<int64_t, std::string>& o) { return step < o.first; });
    if (w == it->second.end() || read <= w->first) return Status::Ok();
    auto a = plan.alias.find(m);
    if (a != plan.alias.end() && a->second.kind == AliasKind::kView)
      return Error("memory plan: view " + Q(m) + " of " + Q(owner) + " is read at step " +
                   std::to_string(read) + ", after " + Q(w->second) +
                   " took the buffer in place at step " + std::to_string(w->first));
    if (w->second == owner)
      return Error("memory plan: graph output " + Q(owner) + " is written over " + Q(m) +
                   " in place at step " + std::to_string(w->first) + ", but " + Q(m) +
                   " is read later, at step " + std::to_string(read));
    return Error("memory plan: alias " + Q(w->second) + " (in place) takes the buffer of " +
                 Q(owner) + " at step " + std::to_string(w->first) + ", but " + Q(m) +
                 " is read later, at step " + std::to_string(read));
  };
  for (const auto& [owner, list] : overwrites) RETURN_IF_ERROR(check_member(owner, owner));
  for (const auto& [v, a] : plan.alias) RETURN_IF_ERROR(check_member(v, a.owner));
  return Status::Ok();
}

Status CheckOutside(const Graph& g, const MemoryPlan& plan, const GraphIndex& ix) {
  const BytesByClass need = CountOutside(g, ix);
  for (MemoryClass c : kOutsideClasses)
    if (plan.outside[c] != need[c])
      return Error("memory plan: " + std::string(MemoryClassName(c)) + "_bytes is " +
                   std::to_string(plan.outside[c]) + "; the graph needs " +
                   std::to_string(need[c]));
  return Status::Ok();
}

Status CheckLayoutOnly(const Graph& g, const MemoryPlan& plan, const BackendLayout& layout,
                       const WorkspaceFn* workspace, const std::vector<ArenaBuffer>& buffers) {
  const std::string what = "memory plan: layout " + Q(layout.backend) + ": ";
  const size_t steps = g.nodes.size();
  if (layout.workspace_bytes.size() != steps || layout.workspace_offsets.size() != steps)
    return Error(what + "workspace is given for " + std::to_string(layout.workspace_bytes.size()) +
                 " steps; the schedule has " + std::to_string(steps));
  std::vector<ArenaItem> items;
  std::vector<int64_t> offsets;
  std::vector<std::string> names;
  std::unordered_set<std::string> owners;
  for (const ArenaBuffer& b : buffers) {
    owners.insert(b.owner);
    auto it = layout.offsets.find(b.owner);
    if (it == layout.offsets.end())
      return Error(what + "arena buffer " + Q(b.owner) + " has no offset");
    items.push_back({RoundUpToArenaAlignment(b.bytes), b.first, b.last});
    offsets.push_back(it->second);
    names.push_back(Q(b.owner));
  }
  for (const auto& [v, off] : layout.offsets)
    if (!owners.count(v))
      return Error(what + "offset given for " + Q(v) + ", which is not an arena buffer");
  for (size_t s = 0; s < steps; ++s) {
    const int64_t bytes = layout.workspace_bytes[s];
    auto node = [&] {
      return "the workspace of " + Q(g.nodes[s].name) + " (step " + std::to_string(s) + ")";
    };
    // A plan file may say anything: no sum or rounding below may overflow.
    if (bytes < 0 || bytes > kMaxPlanBytes)
      return Error(what + node() + " is " + std::to_string(bytes) + " bytes");
    if (workspace && *workspace) {
      const int64_t need = (*workspace)(g, g.nodes[s]);
      if (bytes < need)
        return Error(what + node() + " is " + std::to_string(bytes) +
                     " bytes; the backend's kernel needs " + std::to_string(need));
    }
    if (bytes == 0) continue;
    items.push_back(
        {RoundUpToArenaAlignment(bytes), static_cast<int64_t>(s), static_cast<int64_t>(s)});
    offsets.push_back(layout.workspace_offsets[s]);
    names.push_back(node());
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (offsets[i] < 0 || offsets[i] % kArenaAlignment != 0)
      return Error(what + names[i] + " is at offset " + std::to_string(offsets[i]) +
                   ", not a non-negative multiple of " + std::to_string(kArenaAlignment));
  const LiveBound bound = LowerBound(items, steps);
  if (layout.lower_bound_bytes != bound.bytes)
    return Error(what + "the lower bound is " + std::to_string(layout.lower_bound_bytes) +
                 " bytes; its buffers and workspace need " + std::to_string(bound.bytes));
  if (layout.arena_bytes < layout.lower_bound_bytes)
    return Error(what + "the arena of " + std::to_string(layout.arena_bytes) +
                 " bytes is below the lower bound of " + std::to_string(layout.lower_bound_bytes));
  if (steps > 0 && (layout.peak_step < 0 || layout.peak_step >= static_cast<int64_t>(steps) ||
                    bound.live[layout.peak_step] != bound.bytes))
    return Error(what + "peak step " + std::to_string(layout.peak_step) +
                 " is not a step where the live bytes reach the lower bound (step " +
                 std::to_string(bound.step) + " is)");
  for (size_t i = 0; i < items.size(); ++i)
    if (offsets[i] > layout.arena_bytes || items[i].size > layout.arena_bytes - offsets[i])
      return Error(what + names[i] + " at [" + std::to_string(offsets[i]) + ", " +
                   std::to_string(offsets[i] + items[i].size) + ") ends past the arena of " +
                   std::to_string(layout.arena_bytes) + " bytes");
  // Sweep the steps with the live items ordered by offset: the live set never overlaps, so each
  // newcomer need only be compared with its neighbours.
  std::vector<std::vector<size_t>> starting(steps), ending(steps);
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].size == 0) continue;
    starting[items[i].first].push_back(i);
    ending[items[i].last].push_back(i);
  }
  std::set<std::pair<int64_t, size_t>> live;
  auto overlap = [&](size_t a, size_t b, size_t s) {
    return Error(what + names[a] + " at [" + std::to_string(offsets[a]) + ", " +
                 std::to_string(offsets[a] + items[a].size) + ") and " + names[b] + " at [" +
                 std::to_string(offsets[b]) + ", " + std::to_string(offsets[b] + items[b].size) +
                 ") overlap at step " + std::to_string(s));
  };
  for (size_t s = 0; s < steps; ++s) {
    for (size_t i : starting[s]) {
      auto [it, inserted] = live.emplace(offsets[i], i);
      if (it != live.begin()) {
        size_t prev = std::prev(it)->second;
        if (offsets[prev] + items[prev].size > offsets[i]) return overlap(prev, i, s);
      }
      if (auto next = std::next(it); next != live.end())
        if (offsets[i] + items[i].size > offsets[next->second]) return overlap(i, next->second, s);
    }
    for (size_t i : ending[s]) live.erase({offsets[i], i});
  }
  return Status::Ok();
}

}  // namespace

const BackendLayout* MemoryPlan::Layout(std::string_view backend) const {
  for (const auto& l : layouts)
    if (l.backend == backend) return &l;
  return nullptr;
}

int64_t MemoryPlan::TotalBytes(const BackendLayout& layout) const {
  return layout.arena_bytes + TotalOf(outside);
}

MemoryClass ClassOf(const Graph& graph, const MemoryPlan& plan, const std::string& value) {
  const std::string owner = RootOf(plan, value);
  auto has = [&](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), owner) != list.end();
  };
  if (has(graph.parameters)) return MemoryClass::kParameter;
  if (has(graph.inputs)) return MemoryClass::kInput;
  auto out = std::find(graph.outputs.begin(), graph.outputs.end(), owner);
  if (out != graph.outputs.end()) {
    const auto i = static_cast<size_t>(out - graph.outputs.begin());
    return i >= 1 && i <= graph.parameters.size() ? MemoryClass::kGradient : MemoryClass::kOutput;
  }
  if (has(graph.initializers)) return MemoryClass::kConstant;
  const Value* v = graph.FindValue(owner);
  if (v && v->data) {
    for (const Node& n : graph.nodes)
      if (std::find(n.outputs.begin(), n.outputs.end(), owner) != n.outputs.end())
        return MemoryClass::kArena;  // computed at run time (see GraphIndex::BaseClass)
    return MemoryClass::kConstant;
  }
  return MemoryClass::kArena;
}

std::vector<ArenaBuffer> ArenaBuffers(const Graph& graph, const MemoryPlan& plan) {
  return BuffersOf(graph, plan, GraphIndex(graph, plan.gradients_in_arena));
}

bool InArena(const Graph& graph, const MemoryPlan& plan, const std::string& value) {
  return GraphIndex(graph, plan.gradients_in_arena).InArena(graph, RootOf(plan, value));
}

Status CheckMemoryPlan(const Graph& graph, const MemoryPlan& plan,
                       const std::vector<BackendSpec>* backends) {
  const GraphIndex ix(graph, plan.gradients_in_arena);
  RETURN_IF_ERROR(CheckCommon(graph, plan, ix));
  RETURN_IF_ERROR(CheckOutside(graph, plan, ix));
  const std::vector<ArenaBuffer> buffers = BuffersOf(graph, plan, ix);
  std::set<std::string> seen;
  for (const BackendLayout& layout : plan.layouts) {
    if (!seen.insert(layout.backend).second)
      return Error("memory plan: two layouts for backend " + Q(layout.backend));
    const WorkspaceFn* workspace = nullptr;
    if (backends)
      for (const BackendSpec& spec : *backends)
        if (spec.name == layout.backend) workspace = &spec.workspace;
    RETURN_IF_ERROR(CheckLayoutOnly(graph, plan, layout, workspace, buffers));
  }
  return Status::Ok();
}

Status CheckLayout(const Graph& graph, const MemoryPlan& plan, const BackendLayout& layout,
                   const WorkspaceFn* workspace) {
  const GraphIndex ix(graph, plan.gradients_in_arena);
  RETURN_IF_ERROR(CheckCommon(graph, plan, ix));
  return CheckLayoutOnly(graph, plan, layout, workspace, BuffersOf(graph, plan, ix));
}

namespace {

// The plan's lines give two decimals: 512 B, 3.25 KiB, 1.50 MiB, 2.00 GiB.
std::string Bytes(int64_t bytes) { return HumanBytes(bytes, 2); }

std::string Ratio(const BackendLayout& l) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f",
                l.lower_bound_bytes > 0
                    ? static_cast<double>(l.arena_bytes) / static_cast<double>(l.lower_bound_bytes)
                    : 1.0);
  return buf;
}

std::string PeakNode(const MemoryPlan& plan, const BackendLayout& l) {
  return l.peak_step >= 0 && l.peak_step < static_cast<int64_t>(plan.schedule.size())
             ? plan.schedule[l.peak_step]
             : "";
}

}  // namespace

std::string MemorySummary(const Graph&, const MemoryPlan& plan, const BackendLayout& l) {
  return "memory: arena " + Bytes(l.arena_bytes) + " (lower bound " + Bytes(l.lower_bound_bytes) +
         ", ratio " + Ratio(l) + "), peak at step " + std::to_string(l.peak_step) + " " +
         Q(PeakNode(plan, l)) + "; outside the arena: parameters " +
         Bytes(plan.outside[MemoryClass::kParameter]) + ", gradients " +
         Bytes(plan.outside[MemoryClass::kGradient]) + ", optimizer state (AdamW) " +
         Bytes(plan.outside[MemoryClass::kOptimizerState]) + ", inputs " +
         Bytes(plan.outside[MemoryClass::kInput]) + ", constants " +
         Bytes(plan.outside[MemoryClass::kConstant]) + ", outputs " +
         Bytes(plan.outside[MemoryClass::kOutput]) + "; total " + Bytes(plan.TotalBytes(l));
}

// The dump, one block per step, then one summary per layout:
//
//   foundry memory plan: 1249 steps, 312 aliases, layouts: cpu
//   step 0 [F] Gather 'Gather_0'
//     out '/wte/Gather_output_0' f32[1,16,64] 4096 B arena @cpu 0
//     out 'v' f32[16,64] 4096 B arena view of '/wte/Gather_output_0'
//     workspace @cpu 8192 512 B
//   ...
//   layout cpu: memory: arena ... (MemorySummary)
//
// Phase marks: F forward, B backward, R recompute, O optimizer, - none. "@cpu N" is the byte
// offset in that backend's arena (an alias's is its owner's); values outside the arena name their
// class instead (parameter, gradient, output, input, constant). Workspace lines appear only for
// steps with workspace, one per layout.
std::string DumpMemoryPlan(const Graph& g, const MemoryPlan& plan) {
  std::string out = "foundry memory plan: " + std::to_string(plan.schedule.size()) + " steps, " +
                    std::to_string(plan.alias.size()) + " aliases, layouts:";
  for (const auto& l : plan.layouts) out += " " + l.backend;
  out += "\n";
  const GraphIndex ix(g, plan.gradients_in_arena);
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const Node& n = g.nodes[s];
    const auto phase = PhaseOf(n);
    const char mark = !phase                        ? '-'
                      : *phase == Phase::kForward   ? 'F'
                      : *phase == Phase::kBackward  ? 'B'
                      : *phase == Phase::kRecompute ? 'R'
                                                    : 'O';
    out += "step " + std::to_string(s) + " [" + mark + "] " +
           (n.domain.empty() ? "" : n.domain + "::") + n.op_type + " " + Q(n.name) + "\n";
    for (const auto& o : n.outputs) {
      if (o.empty() || ix.Producer(o) != static_cast<int64_t>(s)) continue;
      const std::string owner = RootOf(plan, o);
      const MemoryClass c = ix.BaseClass(g, owner);
      out += "  out " + Q(o) + " " + TypeOf(g, o) + " " + Bytes(ValueBytes(g, o)) + " " +
             std::string(MemoryClassName(c));
      if (auto a = plan.alias.find(o); a != plan.alias.end())
        out += std::string(a->second.kind == AliasKind::kView ? " view of " : " in place over ") +
               Q(owner);
      if (ix.InArena(g, owner))
        for (const auto& l : plan.layouts)
          if (auto it = l.offsets.find(owner); it != l.offsets.end())
            out += " @" + l.backend + " " + std::to_string(it->second);
      out += "\n";
    }
    for (const auto& l : plan.layouts)
      if (s < l.workspace_bytes.size() && l.workspace_bytes[s] > 0)
        out += "  workspace @" + l.backend + " " + std::to_string(l.workspace_offsets[s]) + " " +
               Bytes(l.workspace_bytes[s]) + "\n";
  }
  for (const auto& l : plan.layouts)
    out += "layout " + l.backend + ": " + MemorySummary(g, plan, l) + "\n";
  return out;
}

}  // namespace foundry
