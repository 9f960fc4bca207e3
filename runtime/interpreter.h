// The simplest executor: runs a graph's nodes in order on the CPU reference kernels, allocating
// each value when it is produced and freeing it after its last consumer. Used by tests, by the
// forward-only mode of foundry-run and by constant folding; the planned-arena executor replaces it
// for training runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cpu/kernel.h"

namespace foundry {

struct InterpretOptions {
  KernelContext ctx;
  // Values to return besides the graph outputs (e.g. gradients for --dump-grads).
  std::vector<std::string> extra_fetches;
  // Check every float output for NaN/Inf and fail naming the first node that produced one.
  bool check_finite = false;
};

// Runs `graph` with `feeds` bound to its inputs (and overriding initializers of the same name).
// Every value must have a concrete shape. Returns graph outputs plus extra_fetches.
StatusOr<std::map<std::string, Tensor>> Interpret(const Graph& graph,
                                                  const std::map<std::string, Tensor>& feeds,
                                                  const InterpretOptions& options = {});

// A stable 64-bit key for a node so random ops draw the same numbers in the forward and in the
// recompute: its `seed` attribute (compiler/random_seed.h, assigned at import, copied by clones),
// else FNV-1a of its name, or of its "recompute_of" mark when it is a recompute clone.
uint64_t NodeKey(const Node& node);

}  // namespace foundry
