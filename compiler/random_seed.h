// The key of every random op's Philox stream (kernels/cpu/philox.h) is its ONNX `seed`
// attribute, assigned once, right after import, to each random op that has none. From then on
// the key travels with the node: renaming a node, giving two nodes one name, or cloning it for a
// recompute (the clone copies the attribute) can never change a mask or make two ops share one.
//
// The assigned value is FNV-1a of the node's name at import (names are unique then: the verifier
// checks it), so the masks of a model do not depend on node order; a value already taken by
// another random op is bumped until it is free.
#pragma once

#include <cstdint>

#include "compiler/ir.h"

namespace foundry {

// Dropout, RandomNormal(Like), RandomUniform(Like), Bernoulli.
bool IsRandomOp(const Node& node);

// Gives each random op without a `seed` attribute one. Returns how many were assigned.
int AssignRandomSeeds(Graph& graph);

// The stream key of a random op: its `seed` attribute, else FNV-1a of its name (for graphs built
// by hand that never went through import).
uint64_t RandomKey(const Node& node);

}  // namespace foundry
