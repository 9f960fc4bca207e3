// The schedule: the order in which the training graph's nodes run, chosen to keep the peak of
// live transient bytes low (docs/design.md §6). The pass reorders Graph::nodes; the exported
// training graph and the runtime follow that order.
//
// Liveness model (the one the memory plan builds on): a transient value (a node output that is
// not a graph output) occupies its bytes from the step of its producer to the step of its last
// consumer; an output nothing reads is freed right after its producer. At a step, a node's inputs
// and its outputs are live together. Initializers, feeds, constants and the graph outputs (the
// loss and the gradients, which have storage of their own for the whole step) live outside the
// arena and are not counted here.
//
// Order:
//  - forward-phase nodes (and nodes without a phase) first, then backward and optimizer nodes,
//    each phase greedily: among the ready nodes, the one that frees the most bytes net of what it
//    allocates, the recompute nodes it would pull included (so a gradient is consumed as soon as
//    it exists, a big value's consumers run early, and no checkpointed region is recomputed for
//    a node that can wait), ties broken by the original order, so the result is deterministic; a
//    partial gradient that only a foundry::AccumulateGradient reads (passes/grad_accumulate.h), or
//    a gradient collective of sharded training (passes/shard.h), is not counted against its
//    producer, and the accumulator runs right after it;
//  - recompute-phase nodes, and the parameter gathers of sharded training (foundry::AllGather),
//    are never chosen on their own: when a node is chosen, the recompute
//    nodes it (transitively) reads and that have not run yet are placed just before it, in their
//    original order. This is the hook the remat pass relies on: it appends its clones anywhere,
//    marked recompute, and each lands just before its first backward consumer.
//  - the greedy order is kept only when its peak is not above the incoming order's (autodiff's);
//    otherwise the incoming order stays, with its recompute nodes moved the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/ir.h"
#include "passes/pass.h"

namespace foundry {

struct LiveBytes {
  int64_t peak = 0;        // bytes
  int64_t peak_step = -1;  // index into the order (-1: empty graph)
};

// The peak of live transient bytes when the nodes run in `order` (indices into graph.nodes, a
// topological order of all of them).
LiveBytes PeakLiveBytes(const Graph& graph, const std::vector<size_t>& order);

// The schedule as indices into graph.nodes; an error when the nodes have no topological order
// (a cycle or a value read before any node writes it).
StatusOr<std::vector<size_t>> ScheduleOrder(const Graph& graph);

// The peak live bytes of one run, in the incoming order and in the schedule; ToString() is the
// pipeline's line.
struct ScheduleStats {
  LiveBytes before;       // the incoming (autodiff's) order
  LiveBytes after;        // the schedule
  std::string peak_node;  // the node at after.peak_step; "" for an empty graph
  std::string ToString() const;
};

class SchedulePass : public Pass {
 public:
  std::string_view name() const override { return "schedule"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const ScheduleStats& stats() const { return stats_; }

 private:
  ScheduleStats stats_;
};

}  // namespace foundry
