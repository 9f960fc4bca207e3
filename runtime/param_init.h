// Values for parameters that carry no data (a --no-weights export) and the per-step seed of the
// random ops: pure functions of names, seeds and indices, the same on every machine.
#pragma once

#include <cstdint>
#include <string>

#include "base/tensor.h"

namespace foundry {

// Value of a parameter that carries no data (a --no-weights export), by name:
//   name ends with ".bias"                                  -> 0
//   rank 1 and name contains "norm" or "ln" (any case)      -> 1   (LayerNorm/RMSNorm scales)
//   otherwise                                               -> normal(0, 0.02)
// The normal draws are NormalSample(init_seed, FNV-1a(name), i): one parameter's values depend on
// its name and the seed only, never on which other parameters exist or their order.
Tensor InitParameter(const std::string& name, const Shape& shape, uint64_t init_seed);

// Standard normal sample `index` of stream (seed, key). Box-Muller written out over Philox4x32-10
// (kernels/cpu/philox.h): block index/2 gives two 53-bit uniforms u1 in (0, 1], u2 in [0, 1);
// even indices take r*cos(2 pi u2), odd ones r*sin(2 pi u2), r = sqrt(-2 ln u1), in double.
// std::normal_distribution is avoided on purpose: its algorithm is implementation-defined.
double NormalSample(uint64_t seed, uint64_t key, uint64_t index);

// Seed of the random ops (Dropout) in step `step` (1-based) of a run seeded `run_seed`.
uint64_t StepSeed(uint64_t run_seed, int64_t step);

}  // namespace foundry
