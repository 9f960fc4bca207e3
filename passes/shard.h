// Sharded data parallelism in the plan: the training graph one rank of N runs, with
// FSDP's sharding strategies as llm-foundry configures them (fsdp_config.sharding_strategy). The
// memory plan of the result is what ONE rank holds; the collectives are nodes of the graph, so
// their buffers are planned like any other bytes (compiler/ops/collective.cc defines the ops).
//
// Units are the blocks (llm-foundry's FSDP wraps each block, compiler/module_tree.h finds them):
// a parameter belongs to the block that every forward node reading it is in; any other parameter
// (embeddings, the final norm, a tied head) belongs to the root unit.
//
// The rewrite, by strategy:
//  - NO_SHARD (DDP): parameters and optimizer state stay whole on every rank. Each gradient's
//    producer writes a transient partial, and foundry::AllReduceGradient sums every rank's scaled
//    partial, in rank order, into the gradient.
//  - SHARD_GRAD_OP (ZeRO-2) and FULL_SHARD (ZeRO-3): every trainable parameter P becomes this
//    rank's shard, a graph parameter "P" of f32 [ceil(numel / N)] without data (the full initial
//    values are kept in initial_values() for the driver to write beside the plan); gradients and
//    optimizer slots follow its shape. foundry::ReduceScatterGradient reduces each gradient into
//    the shard. The parameters are gathered per unit by foundry::AllGather:
//      SHARD_GRAD_OP: one gather per unit, its outputs read by the forward and the backward;
//      FULL_SHARD:    one gather per unit before its forward, and another before its backward
//                     (read by the backward and the recompute nodes); the root unit is gathered
//                     once, as FSDP keeps the root unsharded after its forward.
//    The schedule (passes/schedule.h) places each gather just before its first reader, so a
//    block's gathered parameters are live from just before its first use to its last.
//  - HYBRID_SHARD: FULL_SHARD inside a shard group of `shard_group` ranks, replicated across the
//    groups. Planned only: the graph is FULL_SHARD's over the group (what one rank holds); the
//    runtime refuses it.
// With gradient accumulation (passes/grad_accumulate.h) the gradient collectives replace the
// foundry::AccumulateGradient nodes: they accumulate themselves.
//
// Order: after autodiff, grad_accumulate, remat and the autocast recast (the recompute clones,
// and under amp_bf16 the backward's weight casts, must read the backward gathers), before the
// schedule. Under amp_bf16 with f32 parameters (FSDP mixed precision FULL) a gather moves f32 and
// the cast after it makes the bf16 copy. With bf16 parameters (DEFAULT, PURE: every reader of P is
// then its bf16 Cast, passes/autocast.h) the shard is cast to bf16 first (a node marked
// kGatherInputMark, FSDP's low-precision shard) and the gather moves bf16 straight into the copy
// the casts made, as FSDP does; the casts go.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/tensor.h"
#include "compiler/sharding.h"
#include "passes/pass.h"

namespace foundry {

// The mark of a Cast of a parameter shard that only a gather reads: the schedule places it just
// before the gather, as it places the gather.
inline constexpr const char* kGatherInputMark = "gather_input";

// One FSDP unit: a block (or the root) and the parameters it gathers.
struct ShardUnit {
  std::string path;                     // "transformer.blocks.3"; "" = the root unit
  std::vector<std::string> parameters;  // in graph.parameters order
  int64_t bytes = 0;                    // their full f32 bytes
};

struct ShardStats {
  int64_t world_size = 1;
  int64_t group = 1;  // ranks a parameter is sharded over (world_size, or HYBRID_SHARD's group)
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  std::vector<ShardUnit> units;
  int gathers = 0;                // AllGather nodes
  int reductions = 0;             // gradient collectives
  int64_t full_param_bytes = 0;   // every trainable parameter, whole (f32)
  int64_t shard_param_bytes = 0;  // what one rank holds of them
  std::string ToString() const;
};

// What one rank moves over its link for one optimizer step, from the collectives of a sharded
// training graph (every graph run, times the runs per step), as the ring algorithms NCCL uses
// move it: an all-gather of N shards of c elements receives (N-1)*c*4 bytes; a reduce-scatter
// sends (N-1)*c*4; an all-reduce both, 2*(N-1)*c*4. foundry's own exchange (all-to-all, then a
// sum in rank order, compiler/ops/collective.cc) moves the same bytes. HYBRID_SHARD adds the
// all-reduce of each gradient shard across the world_size / group replicas.
struct CommVolume {
  int64_t gather_bytes = 0;         // parameters gathered, per graph run
  int64_t reduce_bytes = 0;         // gradients reduced, per graph run
  int64_t runs = 1;                 // graph runs per optimizer step (the microbatches)
  int gathers = 0, reductions = 0;  // collectives per graph run
  int64_t PerStep() const { return (gather_bytes + reduce_bytes) * runs; }
  // The least time the step's communication takes over a link of `gbps` gigabits per second.
  double Seconds(double gbps) const { return static_cast<double>(PerStep()) * 8.0 / (gbps * 1e9); }
};
CommVolume CommunicationPerStep(const Graph& graph, int64_t world_size, int64_t runs);

class ShardPass : public Pass {
 public:
  struct Options {
    int64_t world_size = 1;  // N; 1 leaves the graph unchanged
    ShardingStrategy strategy = ShardingStrategy::kFullShard;
    int64_t shard_group = 8;  // HYBRID_SHARD only: ranks per shard group (a node's GPUs)
    // FSDP mixed precision's reduce_dtype (compiler/sharding.h): bf16 reduces a bf16 gradient
    // (one a Cast to f32 would widen) as it is; f32 reduces the widened f32 copy.
    DType reduce_dtype = DType::kFloat32;
    // Its param_dtype: bf16 gathers the bf16 shard that the parameter's bf16 Casts read.
    DType param_dtype = DType::kFloat32;
  };
  explicit ShardPass(Options options) : options_(options) {}

  std::string_view name() const override { return "shard"; }
  StatusOr<bool> Run(Graph& graph) override;
  std::string Stats() const override { return stats_.ToString(); }
  const ShardStats& stats() const { return stats_; }
  // Sharded parameters: their full shapes, and the full initial values of those that had data.
  const std::map<std::string, Shape>& full_shapes() const { return full_shapes_; }
  const std::map<std::string, std::shared_ptr<const Tensor>>& initial_values() const {
    return initial_values_;
  }

 private:
  Options options_;
  ShardStats stats_;
  std::map<std::string, Shape> full_shapes_;
  std::map<std::string, std::shared_ptr<const Tensor>> initial_values_;
};

}  // namespace foundry
