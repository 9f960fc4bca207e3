// The pass interface (STYLE §3): a short name, options in a constructor struct, Run(Graph&)
// returning whether it changed the graph, and statistics as text the pipeline prints.
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
  // One line of statistics from the last Run ("folded 412 nodes, 0 left"); empty when none.
  virtual std::string Stats() const { return ""; }
};

}  // namespace foundry
