// FNV-1a, 64-bit: a stable hash of names, used to key random streams (dropout per node,
// initialisation per parameter) so they do not depend on graph order or run.
#pragma once

#include <cstdint>
#include <string_view>

namespace foundry {

inline uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;  // offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;  // FNV prime
  }
  return h;
}

}  // namespace foundry
