#include "compiler/sharding.h"

#include <algorithm>
#include <cctype>
#include <vector>

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

namespace {

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t") - b + 1));
}

// Composer's dtype spellings.
StatusOr<DType> MixedPrecisionDType(const std::string& key, std::string name) {
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "fp32" || name == "float32") return DType::kFloat32;
  if (name == "bf16" || name == "bfloat16" || name == "bfloat" || name == "amp_bf16")
    return DType::kBFloat16;
  if (name == "fp16" || name == "float16" || name == "half" || name == "amp_fp16")
    return Error(key + " " + name +
                 ": fp16 needs loss scaling, which foundry does not have; use bf16 or fp32");
  return Error(key + " '" + name + "': expected bf16 or fp32");
}

}  // namespace

StatusOr<FsdpMixedPrecision> ParseFsdpMixedPrecision(std::string_view spec, DType compute) {
  FsdpMixedPrecision mp;
  const std::string word = Upper(Trim(spec));
  if (word == "FULL") return mp;
  if (word == "DEFAULT" || word == "PURE") {
    mp.param = mp.buffer = compute;
    mp.reduce = word == "PURE" ? compute : DType::kFloat32;
    mp.name = word;
    return mp;
  }
  if (spec.find('=') == std::string_view::npos)
    return Error("mixed precision '" + std::string(spec) +
                 "': expected DEFAULT, PURE, FULL or "
                 "param_dtype=T,reduce_dtype=T,buffer_dtype=T with T bf16 or fp32");
  std::vector<std::string> seen;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = Trim(spec.substr(at, comma - at));
    at = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = Trim(item.substr(0, eq));
    if (eq == std::string::npos ||
        (key != "param_dtype" && key != "reduce_dtype" && key != "buffer_dtype"))
      return Error("mixed precision '" + std::string(spec) + "': '" + item +
                   "' is not param_dtype=T, reduce_dtype=T or buffer_dtype=T");
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      return Error("mixed precision '" + std::string(spec) + "': " + key + " given twice");
    seen.push_back(key);
    ASSIGN_OR_RETURN(const DType t, MixedPrecisionDType(key, Trim(item.substr(eq + 1))));
    (key == "param_dtype" ? mp.param : key == "reduce_dtype" ? mp.reduce : mp.buffer) = t;
  }
  if (mp.param != DType::kFloat32 && compute == DType::kFloat32)
    return Error("mixed precision '" + std::string(spec) +
                 "': param_dtype bf16 under fp32 precision; use --precision amp_bf16 "
                 "(llm-foundry's precision: amp_bf16)");
  mp.name = std::string(Trim(spec));
  return mp;
}

std::string MixedPrecisionDTypes(const FsdpMixedPrecision& mp) {
  return "param " + std::string(DTypeName(mp.param)) + ", reduce " +
         std::string(DTypeName(mp.reduce)) + ", buffers " + std::string(DTypeName(mp.buffer));
}

}  // namespace foundry
