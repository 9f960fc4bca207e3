// The forward-only graph foundry evaluates with (the eval plan: foundry-run --eval-data):
// the nodes of a training graph that the loss depends on, in the training graph's order, with the
// loss as the only output. Recompute clones, the backward and gradient accumulation drop out (the
// loss does not depend on them); parameters keep their names, so the trainer's parameters bind to
// it as they are (the same weights, no copy). Dropout and attention dropout are switched off at
// run time (KernelContext::training = false), as model.eval() does.
//
// foundry-compile plans its memory into the plan file's "eval_memory"; foundry-run rebuilds the
// graph from the training graph it loaded with this same function, so the plan's schedule and
// offsets name the same values.
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/ir.h"

namespace foundry {

// Error when `loss` is not a value a node of `training` computes.
StatusOr<Graph> EvalGraph(const Graph& training, const std::string& loss);

}  // namespace foundry
