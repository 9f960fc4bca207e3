#include "passes/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/op_schema.h"
#include "compiler/phase.h"
#include "passes/schedule.h"

namespace foundry {

namespace {

// More than any machine holds; keeps every sum of rounded sizes far from overflow.
constexpr int64_t kMaxBytes = int64_t{1} << 50;

int64_t RoundUp(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

std::string Q(const std::string& s) { return "'" + s + "'"; }

// What the planner and the checker need to know about the graph, built once: who produces each
// value (first producer's step), the last step that reads it, and the roles of the values that
// live outside the arena.
struct GraphIndex {
  std::unordered_map<std::string, int64_t> producer;
  std::unordered_map<std::string, int64_t> last_read;
  std::unordered_map<std::string, size_t> output_pos;
  std::unordered_set<std::string> params, inputs, initializers;

  explicit GraphIndex(const Graph& g) {
    for (size_t s = 0; s < g.nodes.size(); ++s) {
      const auto step = static_cast<int64_t>(s);
      for (const auto& in : g.nodes[s].inputs)
        if (!in.empty()) last_read[in] = step;  // steps grow: the last write is the last read
      for (const auto& o : g.nodes[s].outputs)
        if (!o.empty()) producer.emplace(o, step);
    }
    for (size_t i = 0; i < g.outputs.size(); ++i) output_pos.emplace(g.outputs[i], i);
    params.insert(g.parameters.begin(), g.parameters.end());
    inputs.insert(g.inputs.begin(), g.inputs.end());
    initializers.insert(g.initializers.begin(), g.initializers.end());
  }

  int64_t Producer(const std::string& v) const {
    auto it = producer.find(v);
    return it == producer.end() ? -1 : it->second;
  }
  int64_t LastRead(const std::string& v) const {
    auto it = last_read.find(v);
    return it == last_read.end() ? -1 : it->second;
  }

  // The class of a value as if it were no alias.
  StorageClass BaseClass(const Graph& g, const std::string& v) const {
    if (params.count(v)) return StorageClass::kParameter;
    if (inputs.count(v)) return StorageClass::kInput;
    if (auto it = output_pos.find(v); it != output_pos.end())
      return it->second >= 1 && it->second <= g.parameters.size() ? StorageClass::kGradient
                                                                  : StorageClass::kOutput;
    if (initializers.count(v)) return StorageClass::kConstant;
    // A value a node produces is computed at run time, even when folding left its payload on it
    // (the exported graph then carries no payload for it).
    const Value* value = g.FindValue(v);
    if (value && value->data && !producer.count(v)) return StorageClass::kConstant;
    return StorageClass::kArena;
  }
};

std::string RootOf(const MemoryPlan& plan, const std::string& v) {
  auto it = plan.alias.find(v);
  return it == plan.alias.end() ? v : it->second.owner;
}

std::string TypeOf(const Graph& g, const std::string& v) {
  const Value* value = g.FindValue(v);
  return value ? value->TypeString() : "?";
}

// Same shape and element size: the in-place rule's condition on the input it writes over.
bool SameShapeAndElement(const Graph& g, const std::string& a, const std::string& b) {
  const Value* va = g.FindValue(a);
  const Value* vb = g.FindValue(b);
  return va && vb && va->ShapeKnown() && vb->ShapeKnown() && va->shape == vb->shape &&
         DTypeSize(va->dtype) == DTypeSize(vb->dtype);
}

// A graph output that transients may be written into before it is made (memory_plan.h): one a node
// computes, not a parameter or feed passed through.
bool WritableOutput(const Graph& g, const GraphIndex& ix, const std::string& v) {
  if (ix.Producer(v) < 0 || !ix.output_pos.count(v)) return false;
  const StorageClass c = ix.BaseClass(g, v);
  return c == StorageClass::kGradient || c == StorageClass::kOutput;
}

// The values outside the arena and their exact bytes.
struct OutsideBytes {
  int64_t parameter = 0, gradient = 0, output = 0, input = 0, constant = 0, optimizer = 0;
};

OutsideBytes CountOutside(const Graph& g, const GraphIndex& ix) {
  OutsideBytes b;
  for (const auto& p : g.parameters) {
    b.parameter += ValueBytes(g, p);
    const Value* v = g.FindValue(p);
    if (v && v->ShapeKnown()) b.optimizer += 2 * NumElements(v->shape) * 4;  // AdamW: m and v
  }
  for (const auto& in : g.inputs) b.input += ValueBytes(g, in);
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (ix.params.count(g.outputs[i]) || ix.inputs.count(g.outputs[i])) continue;
    (i >= 1 && i <= g.parameters.size() ? b.gradient : b.output) += ValueBytes(g, g.outputs[i]);
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
    if (!ix.output_pos.count(c)) b.constant += ValueBytes(g, c);
  return b;
}

std::vector<ArenaBuffer> BuffersOf(const Graph& g, const MemoryPlan& plan, const GraphIndex& ix) {
  std::vector<ArenaBuffer> buffers;
  std::unordered_map<std::string, size_t> index;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const auto step = static_cast<int64_t>(s);
    for (const auto& o : g.nodes[s].outputs) {
      if (o.empty() || ix.Producer(o) != step || plan.alias.count(o) ||
          ix.BaseClass(g, o) != StorageClass::kArena || index.count(o))
        continue;
      index.emplace(o, buffers.size());
      buffers.push_back({o, ValueBytes(g, o), step, std::max(step, ix.LastRead(o))});
    }
  }
  for (const auto& [v, a] : plan.alias) {
    auto it = index.find(a.owner);
    if (it == index.end()) continue;
    ArenaBuffer& b = buffers[it->second];
    b.last = std::max({b.last, ix.Producer(v), ix.LastRead(v)});
  }
  return buffers;
}

// One thing to place in the arena: a buffer or a step's workspace.
struct Item {
  int64_t size = 0;  // rounded
  int64_t first = 0, last = 0;
};

// Live rounded bytes per step and the first step where they peak.
struct Bound {
  int64_t bytes = 0;
  int64_t step = -1;
  std::vector<int64_t> live;
};

Bound LowerBound(const std::vector<Item>& items, size_t steps) {
  Bound b;
  std::vector<int64_t> delta(steps + 1, 0);
  for (const Item& it : items) {
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

// Places the items in `order`: each at the gap of least waste among the already placed items whose
// intervals overlap its own, or above all of them when no gap fits. The placed items that overlap
// [first, last] are those live at `first` (a stabbing query on a segment tree over steps) and
// those that start in (first, last] (an ordered set of starts), so the cost follows the overlaps,
// not the square of the item count.
int64_t Place(const std::vector<Item>& items, const std::vector<size_t>& order, size_t steps,
              std::vector<int64_t>& offsets, int64_t* work = nullptr) {
  offsets.assign(items.size(), 0);
  const size_t n = std::max<size_t>(steps, 1);
  std::vector<std::vector<size_t>> tree(4 * n);
  std::set<std::pair<int64_t, size_t>> starts;
  auto insert = [&](auto&& self, size_t node, size_t lo, size_t hi, size_t a, size_t b,
                    size_t id) -> void {
    if (b < lo || hi < a) return;
    if (a <= lo && hi <= b) {
      tree[node].push_back(id);
      return;
    }
    size_t mid = (lo + hi) / 2;
    self(self, 2 * node, lo, mid, a, b, id);
    self(self, 2 * node + 1, mid + 1, hi, a, b, id);
  };
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t arena = 0;
  for (size_t id : order) {
    const Item& item = items[id];
    if (item.size == 0) continue;  // holds nothing: offset 0, overlaps nothing
    ranges.clear();
    for (size_t node = 1, lo = 0, hi = n - 1;;) {
      for (size_t other : tree[node])
        ranges.emplace_back(offsets[other], offsets[other] + items[other].size);
      if (lo == hi) break;
      size_t mid = (lo + hi) / 2;
      auto first = static_cast<size_t>(item.first);
      if (first <= mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    for (auto it = starts.lower_bound({item.first + 1, 0});
         it != starts.end() && it->first <= item.last; ++it)
      ranges.emplace_back(offsets[it->second], offsets[it->second] + items[it->second].size);
    std::sort(ranges.begin(), ranges.end());
    if (work) *work += static_cast<int64_t>(ranges.size()) + 1;
    int64_t best = -1, best_waste = std::numeric_limits<int64_t>::max(), top = 0;
    for (const auto& [begin, end] : ranges) {
      if (begin - top >= item.size && begin - top - item.size < best_waste) {
        best = top;
        best_waste = begin - top - item.size;
      }
      top = std::max(top, end);
    }
    offsets[id] = best >= 0 ? best : top;
    arena = std::max(arena, offsets[id] + item.size);
    insert(insert, 1, 0, n - 1, static_cast<size_t>(item.first), static_cast<size_t>(item.last),
           id);
    starts.emplace(item.first, id);
  }
  return arena;
}

// Places the items in several orders and keeps the smallest arena (the first order on ties),
// stopping early at the lower bound. Orders: biggest first; by first step; the steps by live
// bytes, most first, each placing its unplaced items biggest first (TFLite's "greedy by
// breadth"); biggest size x lifetime first. Ties: earlier first step, then name.
// The local search's budget: at most this many trials, and stop once the placements together
// have looked at this many overlapping buffers (deterministic, unlike a time limit).
constexpr size_t kMaxSearchTrials = 1000;
constexpr int64_t kSearchWork = 6'000'000;

int64_t PlaceBest(const std::vector<Item>& items, const Bound& bound, size_t steps,
                  const std::function<std::string_view(size_t)>& name,
                  std::vector<int64_t>& offsets) {
  std::vector<size_t> base(items.size());
  for (size_t i = 0; i < items.size(); ++i) base[i] = i;
  auto tie = [&](size_t a, size_t b) {
    if (items[a].first != items[b].first) return items[a].first < items[b].first;
    if (name(a) != name(b)) return name(a) < name(b);
    return a < b;
  };
  auto by_size = [&](size_t a, size_t b) {
    if (items[a].size != items[b].size) return items[a].size > items[b].size;
    return tie(a, b);
  };
  std::vector<std::function<std::vector<size_t>()>> orders = {
      [&] {
        std::vector<size_t> o = base;
        std::sort(o.begin(), o.end(), by_size);
        return o;
      },
      [&] {
        std::vector<size_t> o = base;
        std::sort(o.begin(), o.end(), [&](size_t a, size_t b) {
          if (items[a].first != items[b].first) return items[a].first < items[b].first;
          return by_size(a, b);
        });
        return o;
      },
      [&] {
        std::vector<size_t> by_live(steps);
        for (size_t s = 0; s < steps; ++s) by_live[s] = s;
        std::stable_sort(by_live.begin(), by_live.end(),
                         [&](size_t a, size_t b) { return bound.live[a] > bound.live[b]; });
        std::vector<size_t> sorted = base;
        std::sort(sorted.begin(), sorted.end(), by_size);
        std::vector<size_t> o;
        o.reserve(items.size());
        // An item joins the order at the best-ranked step of its interval.
        std::vector<int64_t> rank(steps);
        for (size_t r = 0; r < steps; ++r) rank[by_live[r]] = static_cast<int64_t>(r);
        // The best-ranked step within an item's interval, by a sparse table of range minima.
        size_t levels = 1;
        while ((size_t{1} << levels) <= steps) ++levels;
        std::vector<std::vector<int64_t>> table(levels, rank);
        for (size_t l = 1; l < levels; ++l)
          for (size_t s = 0; s + (size_t{1} << l) <= steps; ++s)
            table[l][s] = std::min(table[l - 1][s], table[l - 1][s + (size_t{1} << (l - 1))]);
        auto best_rank = [&](size_t a, size_t b) {
          size_t l = 0;
          while ((size_t{2} << l) <= b - a + 1) ++l;
          return std::min(table[l][a], table[l][b + 1 - (size_t{1} << l)]);
        };
        std::vector<std::vector<size_t>> by_rank(steps);
        for (size_t i : sorted)
          by_rank[best_rank(static_cast<size_t>(items[i].first),
                            static_cast<size_t>(items[i].last))]
              .push_back(i);
        for (auto& list : by_rank) o.insert(o.end(), list.begin(), list.end());
        return o;
      },
      [&] {
        std::vector<size_t> o = base;
        std::sort(o.begin(), o.end(), [&](size_t a, size_t b) {
          const double wa = static_cast<double>(items[a].size) *
                            static_cast<double>(items[a].last - items[a].first + 1);
          const double wb = static_cast<double>(items[b].size) *
                            static_cast<double>(items[b].last - items[b].first + 1);
          if (wa != wb) return wa > wb;
          return by_size(a, b);
        });
        return o;
      },
  };
  int64_t best = -1;
  std::vector<int64_t> trial;
  std::vector<size_t> best_order;
  for (size_t k = 0; k < orders.size() && best != bound.bytes; ++k) {
    std::vector<size_t> order = orders[k]();
    const int64_t arena = Place(items, order, steps, trial);
    if (best < 0 || arena < best) {
      best = arena;
      offsets.swap(trial);
      best_order = std::move(order);
    }
  }
  // Still above the bound: a local search over the best order. Each trial moves one item to an
  // earlier place in it: every other trial an item that ends at the top of the arena (it sets the
  // size), otherwise any item; the result is kept when the arena is no bigger. A fixed seed and
  // the generator's raw output keep it deterministic on every platform.
  const size_t n = best_order.size();
  std::mt19937_64 rng(0x5eed);
  int64_t work = 0;
  std::vector<size_t> position(n);
  for (size_t t = 0; n >= 2 && t < kMaxSearchTrials && work < kSearchWork && best != bound.bytes;
       ++t) {
    size_t from = 1 + rng() % (n - 1);
    if (t % 2 == 0) {
      for (size_t k = 0; k < n; ++k) position[best_order[k]] = k;
      std::vector<size_t> top;
      for (size_t i = 0; i < items.size(); ++i)
        if (items[i].size > 0 && offsets[i] + items[i].size == best) top.push_back(i);
      if (!top.empty()) from = position[top[rng() % top.size()]];
      if (from == 0) continue;
    }
    const size_t to = rng() % from;
    std::vector<size_t> order = best_order;
    std::rotate(order.begin() + static_cast<std::ptrdiff_t>(to),
                order.begin() + static_cast<std::ptrdiff_t>(from),
                order.begin() + static_cast<std::ptrdiff_t>(from) + 1);
    const int64_t arena = Place(items, order, steps, trial, &work);
    if (arena <= best) {
      best = arena;
      offsets.swap(trial);
      best_order.swap(order);
    }
  }
  return best;
}

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
      if (ix.BaseClass(g, v) != StorageClass::kArena)
        return Error(what + "it is not a transient value");
      if (step >= ix.Producer(a.owner))
        return Error(what + "it is made at step " + std::to_string(step) +
                     ", not before graph output " + Q(a.owner) + " (step " +
                     std::to_string(ix.Producer(a.owner)) + "), whose value it would overwrite");
      if (taken_by_writer.count(v)) continue;
    }
    if (node.outputs.empty() || node.outputs[0] != v)
      return Error(what + "it is not output 0 of " + node.Describe());
    if (ix.BaseClass(g, v) != StorageClass::kArena)
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
        (ix.BaseClass(g, a.owner) != StorageClass::kArena || ix.Producer(a.owner) < 0))
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
  const OutsideBytes b = CountOutside(g, ix);
  const std::pair<const char*, std::pair<int64_t, int64_t>> figures[] = {
      {"parameter_bytes", {plan.parameter_bytes, b.parameter}},
      {"gradient_bytes", {plan.gradient_bytes, b.gradient}},
      {"output_bytes", {plan.output_bytes, b.output}},
      {"input_bytes", {plan.input_bytes, b.input}},
      {"constant_bytes", {plan.constant_bytes, b.constant}},
      {"optimizer_state_bytes", {plan.optimizer_state_bytes, b.optimizer}}};
  for (const auto& [name, v] : figures)
    if (v.first != v.second)
      return Error("memory plan: " + std::string(name) + " is " + std::to_string(v.first) +
                   "; the graph needs " + std::to_string(v.second));
  return Status::Ok();
}

Status CheckLayoutOnly(const Graph& g, const MemoryPlan& plan, const BackendLayout& layout,
                       const WorkspaceFn* workspace, const std::vector<ArenaBuffer>& buffers) {
  const std::string what = "memory plan: layout " + Q(layout.backend) + ": ";
  const size_t steps = g.nodes.size();
  if (layout.workspace_bytes.size() != steps || layout.workspace_offsets.size() != steps)
    return Error(what + "workspace is given for " + std::to_string(layout.workspace_bytes.size()) +
                 " steps; the schedule has " + std::to_string(steps));
  std::vector<Item> items;
  std::vector<int64_t> offsets;
  std::vector<std::string> names;
  std::unordered_set<std::string> owners;
  for (const ArenaBuffer& b : buffers) {
    owners.insert(b.owner);
    auto it = layout.offsets.find(b.owner);
    if (it == layout.offsets.end())
      return Error(what + "arena buffer " + Q(b.owner) + " has no offset");
    items.push_back({RoundUp(b.bytes), b.first, b.last});
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
    if (bytes < 0 || bytes > kMaxBytes)
      return Error(what + node() + " is " + std::to_string(bytes) + " bytes");
    if (workspace && *workspace) {
      const int64_t need = (*workspace)(g, g.nodes[s]);
      if (bytes < need)
        return Error(what + node() + " is " + std::to_string(bytes) +
                     " bytes; the backend's kernel needs " + std::to_string(need));
    }
    if (bytes == 0) continue;
    items.push_back({RoundUp(bytes), static_cast<int64_t>(s), static_cast<int64_t>(s)});
    offsets.push_back(layout.workspace_offsets[s]);
    names.push_back(node());
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (offsets[i] < 0 || offsets[i] % kArenaAlignment != 0)
      return Error(what + names[i] + " is at offset " + std::to_string(offsets[i]) +
                   ", not a non-negative multiple of " + std::to_string(kArenaAlignment));
  const Bound bound = LowerBound(items, steps);
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

std::string_view StorageClassName(StorageClass c) {
  switch (c) {
    case StorageClass::kArena:
      return "arena";
    case StorageClass::kParameter:
      return "parameter";
    case StorageClass::kGradient:
      return "gradient";
    case StorageClass::kOutput:
      return "output";
    case StorageClass::kInput:
      return "input";
    case StorageClass::kConstant:
      return "constant";
  }
  return "?";
}

const BackendLayout* MemoryPlan::Layout(std::string_view backend) const {
  for (const auto& l : layouts)
    if (l.backend == backend) return &l;
  return nullptr;
}

int64_t MemoryPlan::TotalBytes(const BackendLayout& layout) const {
  return layout.arena_bytes + parameter_bytes + gradient_bytes + output_bytes + input_bytes +
         constant_bytes + optimizer_state_bytes;
}

StorageClass ClassOf(const Graph& graph, const MemoryPlan& plan, const std::string& value) {
  const std::string owner = RootOf(plan, value);
  auto has = [&](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), owner) != list.end();
  };
  if (has(graph.parameters)) return StorageClass::kParameter;
  if (has(graph.inputs)) return StorageClass::kInput;
  auto out = std::find(graph.outputs.begin(), graph.outputs.end(), owner);
  if (out != graph.outputs.end()) {
    const auto i = static_cast<size_t>(out - graph.outputs.begin());
    return i >= 1 && i <= graph.parameters.size() ? StorageClass::kGradient : StorageClass::kOutput;
  }
  if (has(graph.initializers)) return StorageClass::kConstant;
  const Value* v = graph.FindValue(owner);
  if (v && v->data) {
    for (const Node& n : graph.nodes)
      if (std::find(n.outputs.begin(), n.outputs.end(), owner) != n.outputs.end())
        return StorageClass::kArena;  // computed at run time (see GraphIndex::BaseClass)
    return StorageClass::kConstant;
  }
  return StorageClass::kArena;
}

std::vector<ArenaBuffer> ArenaBuffers(const Graph& graph, const MemoryPlan& plan) {
  return BuffersOf(graph, plan, GraphIndex(graph));
}

StatusOr<MemoryPlan> PlanMemory(const Graph& g, const std::vector<BackendSpec>& backends) {
  const GraphIndex ix(g);
  auto unknown = [&](const std::string& v, const std::string& role) {
    return Error("memory plan: " + role + Q(v) + " has no known shape (" + TypeOf(g, v) +
                 "); bind every symbolic dimension with --dim NAME=VALUE");
  };
  auto known = [&](const std::string& v) {
    const Value* value = g.FindValue(v);
    return value && value->ShapeKnown();
  };
  for (const auto& p : g.parameters)
    if (!known(p)) return unknown(p, "parameter ");
  for (const auto& in : g.inputs)
    if (!known(in)) return unknown(in, "input ");
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty() && !known(o)) return unknown(o, "output of " + n.Describe() + ", ");

  MemoryPlan plan;
  plan.schedule.reserve(g.nodes.size());
  for (const Node& n : g.nodes) plan.schedule.push_back(n.name);
  const OutsideBytes outside = CountOutside(g, ix);
  plan.parameter_bytes = outside.parameter;
  plan.gradient_bytes = outside.gradient;
  plan.output_bytes = outside.output;
  plan.input_bytes = outside.input;
  plan.constant_bytes = outside.constant;
  plan.optimizer_state_bytes = outside.optimizer;

  // Aliases, in schedule order. buffer_last: per arena owner, the last step that reads (or makes)
  // any value of its buffer so far; a value made later that joins the buffer reads it later, so
  // at step s the figure is final for the question "does the buffer die here?".
  std::unordered_map<std::string, int64_t> buffer_last;
  // Per arena owner: its aliases so far, and whether an in-place write took the owner itself (not
  // a view of it) as its input; both for moving a buffer into a graph output's storage.
  std::unordered_map<std::string, std::vector<std::string>> members;
  std::unordered_set<std::string> taken_directly;
  for (size_t s = 0; s < g.nodes.size(); ++s) {
    const Node& node = g.nodes[s];
    const auto step = static_cast<int64_t>(s);
    const OpSchema* schema = OpSchemas().Find(node.domain, node.op_type);
    std::string out0 = node.HasOutput(0) ? node.outputs[0] : "";
    bool aliased = false;
    if (schema && !out0.empty() && ix.Producer(out0) == step &&
        ix.BaseClass(g, out0) == StorageClass::kArena) {
      const int64_t out_last = std::max(step, ix.LastRead(out0));
      if (schema->view && node.HasInput(0) &&
          ValueBytes(g, out0) == ValueBytes(g, node.inputs[0])) {
        const std::string owner = RootOf(plan, node.inputs[0]);
        plan.alias[out0] = {owner, AliasKind::kView};
        if (auto it = buffer_last.find(owner); it != buffer_last.end())
          it->second = std::max(it->second, out_last);
        aliased = true;
      }
      for (int k : schema->in_place_inputs) {
        if (aliased || !node.HasInput(k)) continue;
        const std::string owner = RootOf(plan, node.inputs[k]);
        auto it = buffer_last.find(owner);
        if (it == buffer_last.end() || it->second != step) continue;
        if (!SameShapeAndElement(g, out0, node.inputs[k])) continue;
        bool shared = false;
        for (size_t j = 0; j < node.inputs.size(); ++j)
          if (static_cast<int>(j) != k && node.HasInput(j) && RootOf(plan, node.inputs[j]) == owner)
            shared = true;
        if (shared) continue;
        plan.alias[out0] = {owner, AliasKind::kInPlace};
        it->second = out_last;
        aliased = true;
      }
    }
    // A graph output written over a transient that dies here: the transient's whole buffer moves
    // into the output's storage (the accumulation of a gradient read more than once).
    if (schema && !out0.empty() && ix.Producer(out0) == step && WritableOutput(g, ix, out0)) {
      for (int k : schema->in_place_inputs) {
        if (!node.HasInput(k)) continue;
        const std::string& x = node.inputs[k];
        const std::string owner = RootOf(plan, x);
        auto it = buffer_last.find(owner);
        if (it == buffer_last.end() || it->second != step) continue;
        if (!SameShapeAndElement(g, out0, x)) continue;
        // The owner must itself be an input some writer of the storage takes in place.
        if (owner != x && !taken_directly.count(owner)) continue;
        bool shared = false;
        for (size_t j = 0; j < node.inputs.size(); ++j)
          if (static_cast<int>(j) != k && node.HasInput(j) && RootOf(plan, node.inputs[j]) == owner)
            shared = true;
        if (shared) continue;
        for (const std::string& m : members[owner]) plan.alias[m].owner = out0;
        plan.alias[owner] = {out0, AliasKind::kInPlace};
        buffer_last.erase(it);
        members.erase(owner);
        break;
      }
    }
    for (const auto& o : node.outputs)
      if (!o.empty() && !(aliased && o == out0) && ix.Producer(o) == step &&
          ix.BaseClass(g, o) == StorageClass::kArena)
        buffer_last.emplace(o, std::max(step, ix.LastRead(o)));
    if (aliased) {
      const Alias& a = plan.alias.at(out0);
      members[a.owner].push_back(out0);
      if (a.kind == AliasKind::kInPlace) {
        const std::vector<int>& slots = schema->in_place_inputs;
        for (int k : slots)
          if (node.HasInput(k) && node.inputs[k] == a.owner) taken_directly.insert(a.owner);
      }
    }
  }

  const std::vector<ArenaBuffer> buffers = BuffersOf(g, plan, ix);
  const size_t steps = g.nodes.size();
  for (const BackendSpec& spec : backends) {
    BackendLayout layout;
    layout.backend = spec.name;
    layout.workspace_bytes.assign(steps, 0);
    layout.workspace_offsets.assign(steps, -1);
    std::vector<Item> items;
    items.reserve(buffers.size() + steps);
    for (const ArenaBuffer& b : buffers) items.push_back({RoundUp(b.bytes), b.first, b.last});
    std::vector<size_t> ws_item(steps, SIZE_MAX);
    for (size_t s = 0; s < steps; ++s) {
      const int64_t bytes = spec.workspace ? spec.workspace(g, g.nodes[s]) : 0;
      if (bytes < 0)
        return Error("memory plan: the " + spec.name + " backend asks " + std::to_string(bytes) +
                     " bytes of workspace for " + g.nodes[s].Describe());
      layout.workspace_bytes[s] = bytes;
      if (bytes == 0) continue;
      ws_item[s] = items.size();
      items.push_back({RoundUp(bytes), static_cast<int64_t>(s), static_cast<int64_t>(s)});
    }
    const Bound bound = LowerBound(items, steps);
    std::vector<int64_t> offsets;
    layout.arena_bytes = PlaceBest(
        items, bound, steps,
        [&](size_t i) -> std::string_view {
          if (i < buffers.size()) return buffers[i].owner;
          return {};  // a workspace: ties go by its step
        },
        offsets);
    layout.lower_bound_bytes = bound.bytes;
    layout.peak_step = bound.step;
    for (size_t i = 0; i < buffers.size(); ++i) layout.offsets[buffers[i].owner] = offsets[i];
    for (size_t s = 0; s < steps; ++s)
      if (ws_item[s] != SIZE_MAX) layout.workspace_offsets[s] = offsets[ws_item[s]];
    Status st = CheckLayoutOnly(g, plan, layout, &spec.workspace, buffers);
    if (!st.ok())
      return Error("the memory planner made an invalid plan (a foundry bug; please report it): " +
                   st.message());
    plan.layouts.push_back(std::move(layout));
  }
  Status st = CheckCommon(g, plan, ix);
  if (st.ok()) st = CheckOutside(g, plan, ix);
  if (!st.ok())
    return Error("the memory planner made an invalid plan (a foundry bug; please report it): " +
                 st.message());
  return plan;
}

Status CheckMemoryPlan(const Graph& graph, const MemoryPlan& plan) {
  const GraphIndex ix(graph);
  RETURN_IF_ERROR(CheckCommon(graph, plan, ix));
  RETURN_IF_ERROR(CheckOutside(graph, plan, ix));
  const std::vector<ArenaBuffer> buffers = BuffersOf(graph, plan, ix);
  std::set<std::string> seen;
  for (const BackendLayout& layout : plan.layouts) {
    if (!seen.insert(layout.backend).second)
      return Error("memory plan: two layouts for backend " + Q(layout.backend));
    RETURN_IF_ERROR(CheckLayoutOnly(graph, plan, layout, nullptr, buffers));
  }
  return Status::Ok();
}

Status CheckLayout(const Graph& graph, const MemoryPlan& plan, const BackendLayout& layout,
                   const WorkspaceFn* workspace) {
  const GraphIndex ix(graph);
  RETURN_IF_ERROR(CheckCommon(graph, plan, ix));
  return CheckLayoutOnly(graph, plan, layout, workspace, BuffersOf(graph, plan, ix));
}

namespace {

// 512 B, 3.25 KiB, 1.50 MiB, 2.00 GiB.
std::string Bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  char buf[48];
  if (bytes < 1024)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (bytes < (int64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  else if (bytes < (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

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
         Q(PeakNode(plan, l)) + "; outside the arena: parameters " + Bytes(plan.parameter_bytes) +
         ", gradients " + Bytes(plan.gradient_bytes) + ", optimizer state (AdamW) " +
         Bytes(plan.optimizer_state_bytes) + ", inputs " + Bytes(plan.input_bytes) +
         ", constants " + Bytes(plan.constant_bytes) + ", outputs " + Bytes(plan.output_bytes) +
         "; total " + Bytes(plan.TotalBytes(l));
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
  const GraphIndex ix(g);
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
      const StorageClass c = ix.BaseClass(g, owner);
      out += "  out " + Q(o) + " " + TypeOf(g, o) + " " + Bytes(ValueBytes(g, o)) + " " +
             std::string(StorageClassName(c));
      if (auto a = plan.alias.find(o); a != plan.alias.end())
        out += std::string(a->second.kind == AliasKind::kView ? " view of " : " in place over ") +
               Q(owner);
      if (c == StorageClass::kArena)
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
