// What every layer says about sharded data parallelism (docs/design.md §10): FSDP's sharding
// strategies, their names, and the size of one rank's shard. The shard pass (passes/shard.h)
// plans with them, the plan file (compiler/plan.h) and the training config
// (compiler/train_config.h) read them, the collective ops (compiler/ops/collective.cc) and their
// kernels size shards by them, the runtime and the CLIs check and name them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/tensor.h"

namespace foundry {

enum class ShardingStrategy { kNoShard, kShardGradOp, kFullShard, kHybridShard };

// FSDP's names: "NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD".
std::string_view ShardingName(ShardingStrategy s);
// The strategy an FSDP name names; nullopt for any other string.
std::optional<ShardingStrategy> ParseSharding(std::string_view name);
// The names of `strategies` for a message, the last two joined by `last`, the others by ", ":
// ShardingNames() is "NO_SHARD, SHARD_GRAD_OP, FULL_SHARD or HYBRID_SHARD".
std::string ShardingNames(std::string_view last = " or ",
                          std::initializer_list<ShardingStrategy> strategies = {
                              ShardingStrategy::kNoShard, ShardingStrategy::kShardGradOp,
                              ShardingStrategy::kFullShard, ShardingStrategy::kHybridShard});

// FSDP's MixedPrecision(param_dtype, reduce_dtype, buffer_dtype) as Composer builds it from
// llm-foundry's fsdp_config.mixed_precision (docs/design.md §9): parameters are gathered and the
// forward and backward compute with them in `param`; gradients come out in `param`, are reduced in
// `reduce` and land in the f32 master gradient; buffers are held in `buffer`. Master weights and
// optimizer state stay f32 whatever it says.
struct FsdpMixedPrecision {
  DType param = DType::kFloat32;
  DType reduce = DType::kFloat32;
  DType buffer = DType::kFloat32;
  std::string name = "FULL";  // "DEFAULT", "PURE", "FULL", or the dict as given
  bool LowParams() const { return param != DType::kFloat32; }
  bool operator==(const FsdpMixedPrecision& o) const {
    return param == o.param && reduce == o.reduce && buffer == o.buffer;
  }
};

// `spec` as Composer reads fsdp_config.mixed_precision, for a run whose precision computes in
// `compute` (bf16 under amp_bf16, f32 under fp32): DEFAULT = (compute, f32, compute), PURE =
// (compute, compute, compute), FULL = (f32, f32, f32), in any letter case; or a dict written
// "param_dtype=bf16,reduce_dtype=fp32,buffer_dtype=bf16" (a key left out is f32, as Composer's
// None leaves that type alone; bf16 / bfloat16 / fp32 / float32, with or without "torch.").
// fp16 is refused (no loss scaling), as is a low param_dtype under fp32 precision.
StatusOr<FsdpMixedPrecision> ParseFsdpMixedPrecision(std::string_view spec, DType compute);
// "param bf16, reduce f32, buffers bf16".
std::string MixedPrecisionDTypes(const FsdpMixedPrecision& mp);

// Elements of one rank's shard of a `numel`-element tensor over `world_size` ranks (>= 1):
// ceil(numel / world_size). Rank r holds elements [r * shard, (r + 1) * shard), zero-padded past
// numel. Written without numel + world_size - 1, which overflows near INT64_MAX.
constexpr int64_t ShardElements(int64_t numel, int64_t world_size) {
  return numel / world_size + (numel % world_size > 0 ? 1 : 0);
}

}  // namespace foundry
