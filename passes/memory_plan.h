// The memory planner (docs/design.md §6): the pass that decides where every byte of one scheduled
// training step lives. The plan it makes, and the rules every plan obeys, are
// compiler/memory_plan.h's.
//
// Algorithm, in stages:
//  1. Bytes outside the arena per class (parameters, gradients, outputs, inputs, constants, AdamW
//     state), counted exactly.
//  2. Aliases in schedule order: a view output takes its input's buffer; an in-place output takes
//     the buffer of an input that dies at its node; a graph output written over a transient that
//     dies there takes that transient's whole buffer (how a gradient read more than once
//     accumulates without an arena buffer).
//  3. Per backend, the arena buffers and each step's workspace become intervals over the
//     schedule; their lower bound is the most live rounded bytes at any step.
//  4. Placement: each interval at the gap of least waste among the placed ones it overlaps, in
//     several orders (biggest first; by first step; greedy by breadth; size x lifetime), then a
//     deterministic local search, stopping at the lower bound. The smallest arena wins.
//  5. The result is checked (CheckMemoryPlan, with the backends' workspace); a failure is a
//     planner bug and says so.
#pragma once

#include <vector>

#include "base/status.h"
#include "compiler/ir.h"
#include "compiler/memory_plan.h"

namespace foundry {

struct PlanMemoryOptions {
  // One graph run per optimizer step: the computed gradients live in the arena from their first
  // write to the end of the run (compiler/memory_plan.h). With accumulation over microbatches
  // they must persist across runs: false.
  bool gradients_in_arena = false;
};

// Plans the scheduled training graph for each backend. Every value must have a concrete shape.
StatusOr<MemoryPlan> PlanMemory(const Graph& graph, const std::vector<BackendSpec>& backends,
                                PlanMemoryOptions options = {});

}  // namespace foundry
