// The activation-checkpointing rewrite (docs/design.md §5), on the training graph autodiff made and before
// the schedule: for each selected module instance S (the forward-phase nodes whose scope is S or
// inside it),
//   - its boundary (values S reads from outside) and its outputs (values S makes that a forward
//     node outside S, or the graph's outputs, read) stay saved;
//   - every other value S makes that a backward node reads is no longer kept: the backward reads
//     a recompute clone of it instead;
//   - the clones are the minimal set of S's forward nodes that regenerate those values from the
//     boundary and the outputs, in forward order, each named `<original>_recompute`, producing
//     `<value>_recompute`, phase-marked recompute (the schedule places each just before its first
//     backward reader) and marked with the node it recomputes (`recompute_of`, which also keys a
//     random op to the original's bits) and the instance it belongs to (`recompute_instance`).
// Instances must not nest (compiler/ckpt_targets.h resolves nesting before).
#pragma once

#include <string>
#include <vector>

#include "passes/pass.h"

namespace foundry {

inline constexpr const char* kRecomputeOfMark = "recompute_of";              // original node name
inline constexpr const char* kRecomputeInstanceMark = "recompute_instance";  // module path

struct RematInstanceStats {
  std::string module;
  int values_freed = 0;      // values of S the backward read and now reads through clones
  int nodes_recomputed = 0;  // clones
};

class RematPass : public Pass {
 public:
  struct Options {
    std::vector<std::string>
        instances;  // module paths; an instance with no forward node is an error
  };
  explicit RematPass(Options options) : options_(std::move(options)) {}
  std::string_view name() const override { return "remat"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override;
  const std::vector<RematInstanceStats>& stats() const { return stats_; }

 private:
  Options options_;
  std::vector<RematInstanceStats> stats_;
};

// Inspection helpers (tests, the report): the recompute clones of `instance`, in graph order; and
// the values made inside `instance` or read by it from outside that a backward- or
// recompute-phase node still reads directly (its boundary and outputs after the pass), sorted.
std::vector<const Node*> RecomputeNodesOf(const Graph& graph, const std::string& instance);
std::vector<std::string> SavedValuesOf(const Graph& graph, const std::string& instance);

}  // namespace foundry
