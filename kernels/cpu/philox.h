// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11): the
// counter-based generator every backend uses for random ops (docs/design.md §5.4). A draw is a pure
// function of (run seed, node key, element index), so the recompute of a Dropout in the backward
// pass, on any backend, reproduces the forward mask bit for bit without storing any generator
// state.
//
// Mapping: element e of a random op reads lane e % 4 of the Philox block with
//   counter = {lo32(e / 4), hi32(e / 4), lo32(node_key), hi32(node_key)},  key = {lo32(seed),
//   hi32(seed)}
// so one block feeds four consecutive elements (a CUDA thread per 4 elements, or per element, gets
// the same bits). Header-only and free of the standard library so nvcc can compile it for the
// device.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define FOUNDRY_HOST_DEVICE __host__ __device__
#else
#define FOUNDRY_HOST_DEVICE
#endif

namespace foundry {

struct Philox4 {
  uint32_t v[4];
};

// One Philox4x32 block after 10 rounds (Random123's philox4x32_R(10, ctr, key)).
FOUNDRY_HOST_DEVICE inline Philox4 Philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr.v[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr.v[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
  }
  return ctr;
}

// The block holding elements 4*block .. 4*block+3 of the op keyed (seed, node_key).
FOUNDRY_HOST_DEVICE inline Philox4 PhiloxBlock(uint64_t seed, uint64_t node_key, uint64_t block) {
  Philox4 ctr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
               static_cast<uint32_t>(node_key), static_cast<uint32_t>(node_key >> 32)}};
  return Philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// 32 random bits for one element.
FOUNDRY_HOST_DEVICE inline uint32_t PhiloxRandom(uint64_t seed, uint64_t node_key,
                                                 uint64_t element) {
  return PhiloxBlock(seed, node_key, element >> 2).v[element & 3];
}

// Uniform in [0, 1) with 24 bits, exactly representable in float: (bits >> 8) * 2^-24.
FOUNDRY_HOST_DEVICE inline float PhiloxBitsToUniform(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

}  // namespace foundry
