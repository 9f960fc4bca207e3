// What the collective kernels of both backends share on the host (docs/design.md §10): the CPU
// kernels (kernels/cpu/collective.cc) and the CUDA kernels (kernels/cuda/collective.cu) refuse
// the same operands with the same messages, each naming the node.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cpu/communicator.h"

namespace foundry {

// The node's world_size, which must be the communicator's size.
StatusOr<int64_t> CheckWorldSize(const Node& node, const Communicator& comm);
// foundry::AllGather: one output per input, input i an f32 shard of ShardElements(numel_i,
// world) elements of the f32 output i. Checked for every input before anything moves.
Status CheckAllGather(const Node& node, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs, int64_t world);
// foundry::ReduceScatterGradient: `grad` the f32 shard of the f32 `partial`.
Status CheckReduceScatter(const Node& node, const Tensor& partial, const Tensor& grad,
                          int64_t world);
// foundry::AllReduceGradient: `partial` and `grad` f32, of one size.
Status CheckAllReduce(const Node& node, const Tensor& partial, const Tensor& grad);

// Bytes of one region of `floats` f32 values in a collective's workspace, rounded up to
// kArenaAlignment: the unit of CollectiveWorkspaceBytes (kernels/cpu/collective_workspace.cc) and
// of the CPU kernels' slicing (the CUDA kernels pack their slices inside the same figure).
int64_t CollectiveRegionBytes(int64_t floats);

}  // namespace foundry
