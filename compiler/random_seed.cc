#include "compiler/random_seed.h"

#include <optional>
#include <set>

#include "base/hash.h"

namespace foundry {

bool IsRandomOp(const Node& n) {
  if (!n.domain.empty()) return false;
  return n.op_type == "Dropout" || n.op_type == "RandomNormal" || n.op_type == "RandomUniform" ||
         n.op_type == "RandomNormalLike" || n.op_type == "RandomUniformLike" ||
         n.op_type == "Bernoulli";
}

namespace {

// ONNX types `seed` as an int on Dropout and as a float on the others.
bool FloatSeed(const Node& n) { return n.op_type != "Dropout"; }

// Float seeds stay below 2^24, where every integer is exact in a float.
constexpr uint64_t kFloatSeedMask = (uint64_t{1} << 24) - 1;

std::optional<uint64_t> SeedOf(const Node& n) {
  auto it = n.attrs.find("seed");
  if (it == n.attrs.end()) return std::nullopt;
  const Attribute& a = it->second;
  if (a.kind == Attribute::Kind::kFloat) return static_cast<uint64_t>(static_cast<int64_t>(a.f));
  return static_cast<uint64_t>(a.i);
}

}  // namespace

int AssignRandomSeeds(Graph& g) {
  std::set<uint64_t> taken;
  for (const Node& n : g.nodes)
    if (IsRandomOp(n))
      if (auto seed = SeedOf(n)) taken.insert(*seed);
  int assigned = 0;
  for (Node& n : g.nodes) {
    if (!IsRandomOp(n) || SeedOf(n)) continue;
    const uint64_t mask = FloatSeed(n) ? kFloatSeedMask : ~uint64_t{0};
    uint64_t seed = Fnv1a(n.name) & mask;
    while (!taken.insert(seed).second) seed = (seed + 1) & mask;  // unsigned: wraps
    n.attrs["seed"] = FloatSeed(n) ? Attribute::Float(static_cast<float>(seed))
                                   : Attribute::Int(static_cast<int64_t>(seed));
    ++assigned;
  }
  return assigned;
}

uint64_t RandomKey(const Node& n) {
  if (auto seed = SeedOf(n)) return *seed;
  return Fnv1a(n.name);
}

}  // namespace foundry
