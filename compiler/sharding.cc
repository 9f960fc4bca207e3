#include "compiler/sharding.h"

namespace foundry {

std::string_view ShardingName(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kNoShard:
      return "NO_SHARD";
    case ShardingStrategy::kShardGradOp:
      return "SHARD_GRAD_OP";
    case ShardingStrategy::kFullShard:
      return "FULL_SHARD";
    case ShardingStrategy::kHybridShard:
      return "HYBRID_SHARD";
  }
  return "?";
}

std::optional<ShardingStrategy> ParseSharding(std::string_view name) {
  for (ShardingStrategy s : {ShardingStrategy::kNoShard, ShardingStrategy::kShardGradOp,
                             ShardingStrategy::kFullShard, ShardingStrategy::kHybridShard})
    if (name == ShardingName(s)) return s;
  return std::nullopt;
}

std::string ShardingNames(std::string_view last,
                          std::initializer_list<ShardingStrategy> strategies) {
  std::string out;
  size_t i = 0;
  for (ShardingStrategy s : strategies) {
    if (i > 0) out += i + 1 == strategies.size() ? last : std::string_view(", ");
    out += ShardingName(s);
    ++i;
  }
  return out;
}

}  // namespace foundry
