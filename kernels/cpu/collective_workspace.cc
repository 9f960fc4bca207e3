// The workspace of the collectives of sharded data parallelism (compiler/ops/collective.cc): the
// send, receive and gather buffers their kernels exchange through, planned in the arena like any
// kernel's scratch, so a rank's planned bytes include its communication buffers. The CPU kernels
// (kernels/cpu/collective.cc) and the CUDA kernels slice it the same way: regions in this order,
// each starting at a multiple of kArenaAlignment from the start.
//   AllGather:              per output i whose numel n_i != N * c_i, N * c_i floats (gathered
//                           there, the first n_i copied out); none for an output that divides
//                           evenly (gathered straight into it).
//   ReduceScatterGradient:  [send N*c floats][receive N*c floats]
//   AllReduceGradient:      [send N*c][receive N*c][gathered N*c]
#include "compiler/memory_liveness.h"
#include "compiler/sharding.h"
#include "kernels/cpu/collective.h"
#include "kernels/cpu/kernel.h"

namespace foundry {

namespace {

int64_t Numel(const OperandType& t) {
  if (!t.shape) return -1;
  int64_t n = 1;
  for (int64_t d : *t.shape) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

int64_t CollectiveRegionBytes(int64_t floats) { return RoundUpToArenaAlignment(floats * 4); }

int64_t CollectiveWorkspaceBytes(const Node& node, std::span<const OperandType> inputs,
                                 std::span<const OperandType> outputs) {
  const int64_t n = node.GetInt("world_size", 0);
  if (n < 1) return 0;
  if (node.op_type == "AllGather") {
    int64_t bytes = 0;
    for (const OperandType& out : outputs) {
      const int64_t numel = Numel(out);
      if (numel < 0) return 0;
      const int64_t c = ShardElements(numel, n);
      if (numel != n * c) bytes += CollectiveRegionBytes(n * c);
    }
    return bytes;
  }
  if (inputs.empty()) return 0;
  const int64_t numel = Numel(inputs[0]);
  if (numel < 0) return 0;
  const int64_t c = ShardElements(numel, n);
  const int64_t region = CollectiveRegionBytes(n * c);
  if (node.op_type == "ReduceScatterGradient") return 2 * region;
  if (node.op_type == "AllReduceGradient") return 3 * region;
  return 0;
}

void RegisterCollectiveWorkspaces(CpuWorkspaceTable& table) {
  for (const char* op : {"AllGather", "ReduceScatterGradient", "AllReduceGradient"})
    table.Add("foundry", op, CollectiveWorkspaceBytes);
}

}  // namespace foundry
