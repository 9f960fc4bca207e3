// The unplanned executor: runs a graph's nodes in order through a backend (the CPU one unless told
// otherwise), allocating each value as an owning host tensor when it is produced (and each node's
// workspace just for its node) and freeing it after its last consumer. Used by tests, by the
// forward-only mode of foundry-run, and to replay a failed training step with finite checks; the
// planned executor (runtime/executor.h) runs training steps. It needs a backend whose memory is
// host memory.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cpu/kernel.h"

namespace foundry {

class Backend;

struct InterpretOptions {
  KernelContext ctx;           // ctx.workspace is ignored: each node gets its own
  Backend* backend = nullptr;  // null: the CPU backend
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
