#include "compiler/memory_liveness.h"

#include <algorithm>

namespace foundry {

GraphIndex::GraphIndex(const Graph& g, bool in_arena) : gradients_in_arena(in_arena) {
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const auto step = static_cast<int64_t>(s);
    for (const auto& in : g.nodes[s].inputs)
      if (!in.empty()) last_read[in] = step;  // steps grow: the last write is the last read
    if (auto held = g.nodes[s].marks.find(kHoldsMark); held != g.nodes[s].marks.end())
      for (const std::string& v : HeldValues(held->second)) last_read[v] = step;
    for (const auto& o : g.nodes[s].outputs)
      if (!o.empty()) producer.emplace(o, step);
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) output_pos.emplace(g.outputs[i], i);
  params.insert(g.parameters.begin(), g.parameters.end());
  inputs.insert(g.inputs.begin(), g.inputs.end());
  initializers.insert(g.initializers.begin(), g.initializers.end());
}

std::vector<std::string> HeldValues(const std::string& mark) {
  std::vector<std::string> values;
  size_t begin = 0;
  while (begin <= mark.size()) {
    size_t end = mark.find('\n', begin);
    if (end == std::string::npos) end = mark.size();
    if (end > begin) values.push_back(mark.substr(begin, end - begin));
    begin = end + 1;
  }
  return values;
}

int64_t GraphIndex::Producer(const std::string& v) const {
  auto it = producer.find(v);
  return it == producer.end() ? -1 : it->second;
}

int64_t GraphIndex::LastRead(const std::string& v) const {
  auto it = last_read.find(v);
  return it == last_read.end() ? -1 : it->second;
}

MemoryClass GraphIndex::BaseClass(const Graph& g, const std::string& v) const {
  if (params.count(v)) return MemoryClass::kParameter;
  if (inputs.count(v)) return MemoryClass::kInput;
  if (auto it = output_pos.find(v); it != output_pos.end())
    return it->second >= 1 && it->second <= g.parameters.size() ? MemoryClass::kGradient
                                                                : MemoryClass::kOutput;
  if (initializers.count(v)) return MemoryClass::kConstant;
  // A value a node produces is computed at run time, even when folding left its payload on it
  // (the exported graph then carries no payload for it).
  const Value* value = g.FindValue(v);
  if (value && value->data && !producer.count(v)) return MemoryClass::kConstant;
  return MemoryClass::kArena;
}

bool GraphIndex::InArena(const Graph& g, const std::string& v) const {
  const MemoryClass c = BaseClass(g, v);
  return c == MemoryClass::kArena ||
         (gradients_in_arena && c == MemoryClass::kGradient && Producer(v) >= 0);
}

std::string RootOf(const MemoryPlan& plan, const std::string& v) {
  auto it = plan.alias.find(v);
  return it == plan.alias.end() ? v : it->second.owner;
}

std::string TypeOf(const Graph& g, const std::string& v) {
  const Value* value = g.FindValue(v);
  return value ? value->TypeString() : "?";
}

bool SameShapeAndElement(const Graph& g, const std::string& a, const std::string& b) {
  const Value* va = g.FindValue(a);
  const Value* vb = g.FindValue(b);
  return va && vb && va->ShapeKnown() && vb->ShapeKnown() && va->shape == vb->shape &&
         DTypeSize(va->dtype) == DTypeSize(vb->dtype);
}

bool WritableOutput(const Graph& g, const GraphIndex& ix, const std::string& v) {
  if (ix.Producer(v) < 0 || !ix.output_pos.count(v)) return false;
  const MemoryClass c = ix.BaseClass(g, v);
  return c == MemoryClass::kGradient || c == MemoryClass::kOutput;
}

BytesByClass CountOutside(const Graph& g, const GraphIndex& ix) {
  BytesByClass b;
  for (const auto& p : g.parameters) {
    b[MemoryClass::kParameter] += ValueBytes(g, p);
    const Value* v = g.FindValue(p);
    if (v && v->ShapeKnown())  // AdamW: m and v
      b[MemoryClass::kOptimizerState] += 2 * NumElements(v->shape) * 4;
  }
  for (const auto& in : g.inputs) b[MemoryClass::kInput] += ValueBytes(g, in);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (ix.params.count(g.outputs[i]) || ix.inputs.count(g.outputs[i])) continue;
    if (ix.gradients_in_arena && ix.InArena(g, g.outputs[i])) continue;
    b[i >= 1 && i <= g.parameters.size() ? MemoryClass::kGradient : MemoryClass::kOutput] +=
        ValueBytes(g, g.outputs[i]);
  }
  // Constants: the initializers that are not trained, and the folded constants nodes read.
  std::unordered_set<std::string> constants;
  for (const auto& init : g.initializers)
    if (!ix.params.count(init) && !ix.inputs.count(init)) constants.insert(init);
  for (const Node& n : g.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty() && !ix.producer.count(in) && !ix.params.count(in) && !ix.inputs.count(in)) {
        const Value* v = g.FindValue(in);
        if (v && v->data) constants.insert(in);
      }
  for (const auto& c : constants)
    if (!ix.output_pos.count(c)) b[MemoryClass::kConstant] += ValueBytes(g, c);
  return b;
}

std::vector<ArenaBuffer> BuffersOf(const Graph& g, const MemoryPlan& plan, const GraphIndex& ix) {
  std::vector<ArenaBuffer> buffers;
  std::unordered_map<std::string, size_t> index;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const auto step = static_cast<int64_t>(s);
    for (const auto& o : g.nodes[s].outputs) {
      if (o.empty() || ix.Producer(o) != step || plan.alias.count(o) ||
          ix.BaseClass(g, o) != MemoryClass::kArena || index.count(o))
        continue;
      index.emplace(o, buffers.size());
      buffers.push_back({o, ValueBytes(g, o), step, std::max(step, ix.LastRead(o))});
    }
  }
  // Computed gradients in the arena: from the first write into the buffer to the last step.
  const auto end = static_cast<int64_t>(g.nodes.size()) - 1;
  if (ix.gradients_in_arena)
    for (size_t i = 1; i <= g.parameters.size() && i < g.outputs.size(); ++i) {
      const std::string& o = g.outputs[i];
      if (index.count(o) || !ix.InArena(g, o) || ix.BaseClass(g, o) != MemoryClass::kGradient ||
          plan.alias.count(o))
        continue;
      index.emplace(o, buffers.size());
      buffers.push_back({o, ValueBytes(g, o), ix.Producer(o), std::max(end, ix.Producer(o))});
    }
  for (const auto& [v, a] : plan.alias) {
    auto it = index.find(a.owner);
    if (it == index.end()) continue;
    ArenaBuffer& b = buffers[it->second];
    b.first = std::min(b.first, std::max<int64_t>(ix.Producer(v), 0));
    b.last = std::max({b.last, ix.Producer(v), ix.LastRead(v)});
  }
  std::stable_sort(buffers.begin(), buffers.end(),
                   [](const ArenaBuffer& a, const ArenaBuffer& b) { return a.first < b.first; });
  return buffers;
}

LiveBound LowerBound(const std::vector<ArenaItem>& items, size_t steps) {
  LiveBound b;
  std::vector<int64_t> delta(steps + 1, 0);
  for (const ArenaItem& it : items) {
    delta[it.first] += it.size;
    delta[it.last + 1] -= it.size;
  }
  b.live.resize(steps);
  int64_t live = 0;
  for (size_t s = 0; s < steps; ++s) {
    live += delta[s];
    b.live[s] = live;
    if (b.step < 0 || live > b.bytes) {
      b.bytes = live;
      b.step = static_cast<int64_t>(s);
    }
  }
  return b;
}

}  // namespace foundry
