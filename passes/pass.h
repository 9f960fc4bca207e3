// The pass interface (STYLE §3): a short name, options in a constructor struct, Run(Graph&)
// returning whether it changed the graph, and statistics. Each pass keeps its statistics in a
// small struct of its own (FoldStats, RematInstanceStats, ...) that callers and tests read field
// by field through the pass's stats(); Stats() is the same numbers as the one line the pipeline
// prints.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual StatusOr<bool> Run(Graph& graph) = 0;
  // The last Run's statistics as one line ("folded 412 nodes, 0 remain (...)"); empty when none.
  virtual std::string Stats() const { return ""; }
};

}  // namespace foundry
