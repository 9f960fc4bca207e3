#include "passes/memory_plan.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/memory_liveness.h"
#include "compiler/op_schema.h"

namespace foundry {

namespace {

std::string Q(const std::string& s) { return "'" + s + "'"; }

// Places the items in `order`: each at the gap of least waste among the already placed items whose
// intervals overlap its own, or above all of them when no gap fits. The placed items that overlap
// [first, last] are those live at `first` (a stabbing query on a segment tree over steps) and
// those that start in (first, last] (an ordered set of starts), so the cost follows the overlaps,
// not the square of the item count.
int64_t Place(const std::vector<ArenaItem>& items, const std::vector<size_t>& order, size_t steps,
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
    const ArenaItem& item = items[id];
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

int64_t PlaceBest(const std::vector<ArenaItem>& items, const LiveBound& bound, size_t steps,
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

}  // namespace

StatusOr<MemoryPlan> PlanMemory(const Graph& g, const std::vector<BackendSpec>& backends,
                                PlanMemoryOptions options) {
  const GraphIndex ix(g, options.gradients_in_arena);
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
  plan.gradients_in_arena = options.gradients_in_arena;
  plan.schedule.reserve(g.nodes.size());
  for (const Node& n : g.nodes) plan.schedule.push_back(n.name);
  plan.outside = CountOutside(g, ix);

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
        ix.BaseClass(g, out0) == MemoryClass::kArena) {
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
          ix.BaseClass(g, o) == MemoryClass::kArena)
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
    std::vector<ArenaItem> items;
    items.reserve(buffers.size() + steps);
    for (const ArenaBuffer& b : buffers)
      items.push_back({RoundUpToArenaAlignment(b.bytes), b.first, b.last});
    std::vector<size_t> ws_item(steps, SIZE_MAX);
    for (size_t s = 0; s < steps; ++s) {
      const int64_t bytes = spec.workspace ? spec.workspace(g, g.nodes[s]) : 0;
      if (bytes < 0)
        return Error("memory plan: the " + spec.name + " backend asks " + std::to_string(bytes) +
                     " bytes of workspace for " + g.nodes[s].Describe());
      layout.workspace_bytes[s] = bytes;
      if (bytes == 0) continue;
      ws_item[s] = items.size();
      items.push_back(
          {RoundUpToArenaAlignment(bytes), static_cast<int64_t>(s), static_cast<int64_t>(s)});
    }
    const LiveBound bound = LowerBound(items, steps);
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
    plan.layouts.push_back(std::move(layout));
  }
  Status st = CheckMemoryPlan(g, plan, &backends);
  if (!st.ok())
    return Error("the memory planner made an invalid plan (a foundry bug; please report it): " +
                 st.message());
  return plan;
}

}  // namespace foundry
