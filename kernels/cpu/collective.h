// What the collective kernels of both backends share on the host (docs/design.md §10): the CPU
// kernels (kernels/cpu/collective.cc) and the CUDA kernels (kernels/cuda/collective.cu) refuse
// the same operands with the same messages, each naming the node, and cut their work into the
// same buckets.
//
// Buckets. A collective never needs a buffer the size of its tensor: it runs through its shard in
// chunks of b elements per rank, b = min(c, kCollectiveBucketBytes / (N * elem)) (at least 1),
// exchanging N*b elements per call, so each region of its workspace is at most one bucket. The
// per-element arithmetic does not depend on b (each element's sum runs over the ranks in order),
// so the results are those of a single exchange, bit for bit.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "base/tensor.h"
#include "compiler/ir.h"
#include "kernels/cpu/communicator.h"

namespace foundry {

// The most bytes of one region of a collective's workspace. 8 MiB: one exchange of it costs far
// more than the call itself on any link (about 0.7 ms at 100 Gb/s against tens of microseconds),
// while two or three of them stay small next to a step's activations.
inline constexpr int64_t kCollectiveBucketBytes = int64_t{8} << 20;

// The node's world_size, which must be the communicator's size.
StatusOr<int64_t> CheckWorldSize(const Node& node, const Communicator& comm);
// foundry::AllGather: one output per input, input i an f32 or bf16 shard of
// ShardElements(numel_i, world) elements of output i's type. Checked for every input before
// anything moves.
Status CheckAllGather(const Node& node, std::span<const Tensor* const> inputs,
                      std::span<Tensor* const> outputs, int64_t world);
// foundry::ReduceScatterGradient: `grad` the f32 shard of the f32 or bf16 `partial`.
Status CheckReduceScatter(const Node& node, const Tensor& partial, const Tensor& grad,
                          int64_t world);
// foundry::AllReduceGradient: `partial` f32 or bf16, `grad` f32, of one size.
Status CheckAllReduce(const Node& node, const Tensor& partial, const Tensor& grad);

// Whether `node` is one of the three collectives. They take bf16 operands themselves on both
// backends (never staged: a bf16 reduction rounds what it sends, kernels/cpu/kernel.h).
bool IsCollectiveOp(const Node& node);

// Bytes of one element a collective moves: 2 for bf16, 4 for f32.
int64_t CollectiveElementBytes(DType t);
// Elements per rank in one exchange of a shard of c elements of `elem_bytes` over `world` ranks:
// min(c, max(1, kCollectiveBucketBytes / (world * elem_bytes))).
int64_t CollectiveChunkElements(int64_t c, int64_t world, int64_t elem_bytes);
// Bytes of one region of a collective's workspace: one exchange, world * b elements, rounded up to
// kArenaAlignment. The unit of CollectiveWorkspaceBytes (kernels/cpu/collective_workspace.cc) and
// of both backends' slicing.
int64_t CollectiveRegionBytes(int64_t c, int64_t world, int64_t elem_bytes);

}  // namespace foundry
