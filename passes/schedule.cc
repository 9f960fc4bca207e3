#include "passes/schedule.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "base/bytes.h"
#include "compiler/phase.h"
#include "passes/shard.h"

namespace foundry {

namespace {

// The graph as the scheduler sees it, with values numbered: which node produces each value, how
// many distinct nodes read it, and each node's distinct transient inputs.
struct DepGraph {
  std::vector<size_t> producer;                  // per value
  std::vector<int> readers;                      // per value: distinct consumer nodes
  std::vector<char> kept;                        // per value: a graph output, live to the end
  std::vector<int64_t> bytes;                    // per value (0 for graph outputs)
  std::vector<std::vector<int>> inputs;          // per node: distinct transient input values
  std::vector<std::vector<int>> unread_outputs;  // per node: outputs nothing reads
  std::vector<int64_t> bytes_out;                // per node: bytes of its outputs
  // Per node: bytes of its outputs that only a foundry::AccumulateGradient reads (a microbatch's
  // partial gradient, passes/grad_accumulate.h), or a gradient collective (ReduceScatterGradient,
  // AllReduceGradient: passes/shard.h): the accumulator runs right after the node and frees them,
  // so they do not count against choosing it.
  std::vector<int64_t> accumulated_out;
  std::vector<char> accumulator;  // per node: a foundry::AccumulateGradient

  explicit DepGraph(const Graph& g)
      : inputs(g.nodes.size()),
        unread_outputs(g.nodes.size()),
        bytes_out(g.nodes.size(), 0),
        accumulated_out(g.nodes.size(), 0),
        accumulator(g.nodes.size(), 0) {
    std::unordered_map<std::string, int> id;
    const std::unordered_set<std::string> outputs(g.outputs.begin(), g.outputs.end());
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs) {
        if (o.empty() || id.count(o)) continue;
        id.emplace(o, static_cast<int>(producer.size()));
        producer.push_back(i);
        kept.push_back(outputs.count(o) ? 1 : 0);
        // Graph outputs (the loss, the gradients) have storage of their own, outside the arena,
        // for the whole step: no order changes what they hold.
        bytes.push_back(kept.back() ? 0 : ValueBytes(g, o));
        bytes_out[i] += bytes.back();
      }
    readers.assign(producer.size(), 0);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const auto& in : g.nodes[i].inputs) {
        auto it = in.empty() ? id.end() : id.find(in);
        if (it == id.end()) continue;
        if (std::find(inputs[i].begin(), inputs[i].end(), it->second) != inputs[i].end()) continue;
        inputs[i].push_back(it->second);
        ++readers[it->second];
      }
    }
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs) {
        auto it = o.empty() ? id.end() : id.find(o);
        if (it != id.end() && producer[it->second] == i && readers[it->second] == 0 &&
            !kept[it->second])
          unread_outputs[i].push_back(it->second);
      }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.domain != "foundry" || inputs[i].size() != 1 ||
          (n.op_type != "AccumulateGradient" && n.op_type != "ReduceScatterGradient" &&
           n.op_type != "AllReduceGradient"))
        continue;
      accumulator[i] = 1;
      const int partial = inputs[i][0];
      if (readers[partial] == 1) accumulated_out[producer[partial]] += bytes[partial];
    }
  }
};

// Nodes that are never chosen on their own but placed just before their first reader: recompute
// clones (passes/remat.h) and the parameter gathers of sharded training (passes/shard.h), which
// read only parameters and so would be ready, and hold their bytes, from the start of their phase.
bool IsRecompute(const Node& n) {
  return PhaseOf(n) == Phase::kRecompute || (n.domain == "foundry" && n.op_type == "AllGather") ||
         n.marks.count(kGatherInputMark) > 0;
}

// 0: forward (or no phase), 1: backward and optimizer. Recompute nodes have no rank of their own.
int Rank(const Node& n) {
  auto p = PhaseOf(n);
  return p == Phase::kBackward || p == Phase::kOptimizer ? 1 : 0;
}

// The not-yet-scheduled recompute nodes that `node` reads, directly or through other recompute
// nodes, in no particular order.
std::vector<size_t> RecomputeNeeded(const Graph& g, const DepGraph& d, size_t node,
                                    const std::vector<char>& done) {
  std::vector<size_t> needed;
  std::vector<size_t> stack = {node};
  std::unordered_set<size_t> seen;
  while (!stack.empty()) {
    size_t n = stack.back();
    stack.pop_back();
    for (int in : d.inputs[n]) {
      size_t p = d.producer[in];
      if (done[p] || !IsRecompute(g.nodes[p]) || !seen.insert(p).second) continue;
      needed.push_back(p);
      stack.push_back(p);
    }
  }
  return needed;
}

// Emits, in original order, the recompute nodes `node` needs (RecomputeNeeded), then nothing else
// (the caller emits `node`).
void PullRecompute(const Graph& g, const DepGraph& d, size_t node, std::vector<char>& done,
                   std::vector<size_t>& order) {
  std::vector<size_t> needed = RecomputeNeeded(g, d, node, done);
  // Recompute nodes were appended in a topological order; their original order is one.
  std::sort(needed.begin(), needed.end());
  for (size_t p : needed) {
    done[p] = 1;
    order.push_back(p);
  }
}

// The bytes the recompute nodes that choosing `node` would pull allocate, Casts left out: a
// weight's cast for the backward (passes/autocast.h) is pulled by its reader whenever that runs,
// whereas pulling a checkpointed region's recompute early keeps its activations live for longer
// than the reader needs.
int64_t PulledBytes(const Graph& g, const DepGraph& d, size_t node, const std::vector<char>& done) {
  int64_t bytes = 0;
  for (size_t p : RecomputeNeeded(g, d, node, done))
    if (g.nodes[p].op_type != "Cast") bytes += d.bytes_out[p];
  return bytes;
}

// The incoming order with recompute nodes moved just before their first reader.
std::vector<size_t> OriginalOrder(const Graph& g, const DepGraph& d) {
  std::vector<size_t> order;
  std::vector<char> done(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (IsRecompute(g.nodes[i])) continue;
    PullRecompute(g, d, i, done, order);
    done[i] = 1;
    order.push_back(i);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)  // recompute nodes nothing reads: at the end
    if (!done[i]) order.push_back(i);
  return order;
}

StatusOr<std::vector<size_t>> GreedyOrder(const Graph& g, const DepGraph& d) {
  const size_t n = g.nodes.size();
  // Unscheduled non-recompute producers each node waits for (recompute producers are pulled).
  // A recompute node's own inputs come from the forward phase or other recompute nodes, so a
  // node's readiness may be counted through the recompute nodes it reads.
  std::vector<int> waiting(n, 0);
  std::vector<std::vector<size_t>> dependents(n);
  auto add_wait = [&](size_t node, size_t producer) {
    ++waiting[node];
    dependents[producer].push_back(node);
  };
  for (size_t i = 0; i < n; ++i) {
    if (IsRecompute(g.nodes[i])) continue;
    std::unordered_set<size_t> deps;
    std::vector<size_t> stack = {i};
    std::unordered_set<size_t> seen_rc;
    while (!stack.empty()) {
      size_t m = stack.back();
      stack.pop_back();
      for (int in : d.inputs[m]) {
        size_t p = d.producer[in];
        if (IsRecompute(g.nodes[p])) {
          if (seen_rc.insert(p).second) stack.push_back(p);
        } else if (p != i) {
          deps.insert(p);
        }
      }
    }
    for (size_t p : deps) add_wait(i, p);
  }
  std::vector<int> remaining = d.readers;
  std::vector<char> done(n, 0);
  std::vector<size_t> order;
  order.reserve(n);
  for (int rank = 0; rank <= 1; ++rank) {
    std::vector<size_t> ready;
    for (size_t i = 0; i < n; ++i)
      if (!done[i] && !IsRecompute(g.nodes[i]) && Rank(g.nodes[i]) == rank && waiting[i] == 0)
        ready.push_back(i);
    while (!ready.empty()) {
      size_t best_k = 0;
      int64_t best_score = 0;
      for (size_t k = 0; k < ready.size(); ++k) {
        size_t c = ready[k];
        int64_t score = d.accumulated_out[c] - d.bytes_out[c] - PulledBytes(g, d, c, done);
        for (int in : d.inputs[c])
          if (remaining[in] == 1) score += d.bytes[in];  // 0 for kept values
        if (k == 0 || score > best_score || (score == best_score && c < ready[best_k])) {
          best_k = k;
          best_score = score;
        }
      }
      size_t c = ready[best_k];
      ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best_k));
      size_t first_pulled = order.size();
      PullRecompute(g, d, c, done, order);
      done[c] = 1;
      order.push_back(c);
      for (size_t k = first_pulled; k < order.size(); ++k) {
        for (int in : d.inputs[order[k]]) --remaining[in];
        for (size_t dep : dependents[order[k]])
          if (--waiting[dep] == 0 && !done[dep] && Rank(g.nodes[dep]) == rank) ready.push_back(dep);
      }
      // The accumulators of the partials just produced run next (accumulated_out).
      for (size_t k = 0; k < ready.size();) {
        const size_t a = ready[k];
        if (!d.accumulator[a] || d.producer[d.inputs[a][0]] != c) {
          ++k;
          continue;
        }
        ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(k));
        done[a] = 1;
        order.push_back(a);
        for (int in : d.inputs[a]) --remaining[in];
        for (size_t dep : dependents[a])
          if (--waiting[dep] == 0 && !done[dep] && Rank(g.nodes[dep]) == rank) ready.push_back(dep);
      }
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (!done[i] && IsRecompute(g.nodes[i])) {  // recompute nodes nothing reads
      done[i] = 1;
      order.push_back(i);
    }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (!done[i])
        return Error("schedule: " + g.nodes[i].Describe() +
                     " never becomes ready: its inputs form a cycle, or a forward node reads a "
                     "backward value");
  }
  return order;
}

}  // namespace

LiveBytes PeakLiveBytes(const Graph& g, const std::vector<size_t>& order) {
  DepGraph d(g);
  std::vector<int> remaining = d.readers;
  LiveBytes r;
  int64_t live = 0;
  for (size_t step = 0; step < order.size(); ++step) {
    live += d.bytes_out[order[step]];
    if (r.peak_step < 0 || live > r.peak) {
      r.peak = live;
      r.peak_step = static_cast<int64_t>(step);
    }
    for (int in : d.inputs[order[step]])
      if (--remaining[in] == 0) live -= d.bytes[in];  // 0 for kept values
    for (int o : d.unread_outputs[order[step]]) live -= d.bytes[o];
  }
  return r;
}

StatusOr<std::vector<size_t>> ScheduleOrder(const Graph& g) {
  DepGraph d(g);
  ASSIGN_OR_RETURN(std::vector<size_t> greedy, GreedyOrder(g, d));
  std::vector<size_t> original = OriginalOrder(g, d);
  return PeakLiveBytes(g, greedy).peak <= PeakLiveBytes(g, original).peak ? greedy : original;
}

StatusOr<bool> SchedulePass::Run(Graph& g) {
  std::vector<size_t> identity(g.nodes.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  stats_.before = PeakLiveBytes(g, OriginalOrder(g, DepGraph(g)));
  ASSIGN_OR_RETURN(std::vector<size_t> order, ScheduleOrder(g));
  stats_.after = PeakLiveBytes(g, order);
  stats_.peak_node = stats_.after.peak_step < 0 ? "" : g.nodes[order[stats_.after.peak_step]].name;
  if (order == identity) return false;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t i : order) nodes.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(nodes);
  return true;
}

std::string ScheduleStats::ToString() const {
  return "peak live " + InMiB(after.peak) + " at '" + peak_node + "' (autodiff order " +
         InMiB(before.peak) + ")";
}

}  // namespace foundry
