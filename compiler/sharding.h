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

// Elements of one rank's shard of a `numel`-element tensor over `world_size` ranks (>= 1):
// ceil(numel / world_size). Rank r holds elements [r * shard, (r + 1) * shard), zero-padded past
// numel. Written without numel + world_size - 1, which overflows near INT64_MAX.
constexpr int64_t ShardElements(int64_t numel, int64_t world_size) {
  return numel / world_size + (numel % world_size > 0 ? 1 : 0);
}

}  // namespace foundry
