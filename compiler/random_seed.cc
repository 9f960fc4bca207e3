#include "compiler/random_seed.h"

#include <set>

#include "base/hash.h"

namespace foundry {

bool IsRandomOp(const Node& n) {
  if (!n.domain.empty()) return false;
  return n.op_type == "Dropout" || n.op_type == "RandomNormal" || n.op_type == "RandomUniform" ||
         n.op_type == "RandomNormalLike" || n.op_type == "RandomUniformLike" ||
         n.op_type == "Bernoulli";
}

int AssignRandomSeeds(Graph& g) {
  std::set<int64_t> taken;
  for (const Node& n : g.nodes)
    if (IsRandomOp(n) && n.HasAttr("seed")) taken.insert(n.GetInt("seed", 0));
  int assigned = 0;
  for (Node& n : g.nodes) {
    if (!IsRandomOp(n) || n.HasAttr("seed")) continue;
    uint64_t seed = Fnv1a(n.name);
    while (!taken.insert(static_cast<int64_t>(seed)).second) ++seed;  // unsigned: wraps
    n.attrs["seed"] = Attribute::Int(static_cast<int64_t>(seed));
    ++assigned;
  }
  return assigned;
}

uint64_t RandomKey(const Node& n) {
  if (n.HasAttr("seed")) return static_cast<uint64_t>(n.GetInt("seed", 0));
  return Fnv1a(n.name);
}

}  // namespace foundry
