// The workspace of the collectives of sharded data parallelism (compiler/ops/collective.cc): the
// send, receive and gather buffers their kernels exchange through, planned in the arena like any
// kernel's scratch, so a rank's planned bytes include its communication buffers. The CPU kernels
// (kernels/cpu/collective.cc) and the CUDA kernels slice it the same way. The kernels run through
// their shards in buckets (kernels/cpu/collective.h): with e the element's bytes (2 bf16, 4 f32)
// and b = CollectiveChunkElements(c, N, e), a region is R = N*b*e bytes rounded up to
// kArenaAlignment, never more than kCollectiveBucketBytes; regions in this order:
//   AllGather:              one region, the largest R_i over the outputs whose numel n_i != N*c_i
//                           (each gathered there chunk by chunk, the elements below n_i copied
//                           out); none when every output divides evenly (gathered straight into
//                           it).
//   ReduceScatterGradient:  [send R][receive R]
//   AllReduceGradient:      [send R][receive R][gathered R]
// e is the partial's (shard's) element type; an operand whose type is not known yet counts as f32.
#include <algorithm>

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

int64_t CollectiveElementBytes(DType t) { return t == DType::kBFloat16 ? 2 : 4; }

int64_t CollectiveChunkElements(int64_t c, int64_t world, int64_t elem_bytes) {
  const int64_t fit = kCollectiveBucketBytes / std::max<int64_t>(world * elem_bytes, 1);
  return std::min(c, std::max<int64_t>(fit, 1));
}

int64_t CollectiveRegionBytes(int64_t c, int64_t world, int64_t elem_bytes) {
  return RoundUpToArenaAlignment(world * CollectiveChunkElements(c, world, elem_bytes) *
                                 elem_bytes);
}

int64_t CollectiveWorkspaceBytes(const Node& node, std::span<const OperandType> inputs,
                                 std::span<const OperandType> outputs) {
  const int64_t n = node.GetInt("world_size", 0);
  if (n < 1) return 0;
  if (node.op_type == "AllGather") {
    int64_t bytes = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const int64_t numel = Numel(outputs[i]);
      if (numel < 0) return 0;
      const int64_t c = ShardElements(numel, n);
      const DType t = i < inputs.size() ? inputs[i].dtype : outputs[i].dtype;
      if (numel != n * c)
        bytes = std::max(bytes, CollectiveRegionBytes(c, n, CollectiveElementBytes(t)));
    }
    return bytes;
  }
  if (inputs.empty()) return 0;
  const int64_t numel = Numel(inputs[0]);
  if (numel < 0) return 0;
  const int64_t region =
      CollectiveRegionBytes(ShardElements(numel, n), n, CollectiveElementBytes(inputs[0].dtype));
  if (node.op_type == "ReduceScatterGradient") return 2 * region;
  if (node.op_type == "AllReduceGradient") return 3 * region;
  return 0;
}

void RegisterCollectiveWorkspaces(CpuWorkspaceTable& table) {
  for (const char* op : {"AllGather", "ReduceScatterGradient", "AllReduceGradient"})
    table.Add("foundry", op, CollectiveWorkspaceBytes);
}

}  // namespace foundry
